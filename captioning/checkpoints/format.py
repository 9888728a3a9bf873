"""What a captioning checkpoint holds besides Lightning's own entries (shared by save, load and resume)."""

CHECKPOINT_KEY = "captioning"  # plain-data entry of every checkpoint: vocabulary, network config, decoding
