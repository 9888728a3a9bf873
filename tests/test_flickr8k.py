"""Real data: the Flickr8k copy in ../shared/data/flickr8k (skipped when absent)."""

import pytest

from captioning.training.train import train

from conftest import SHARED_DATA, compose_train

FLICKR8K = SHARED_DATA / "flickr8k"
pytestmark = pytest.mark.skipif(
    not (FLICKR8K / "Flickr8k.token.txt").is_file(), reason="no ../shared/data/flickr8k"
)


def test_a_few_training_batches_on_flickr8k_with_the_pretrained_encoder(tmp_path):
    cfg = compose_train(
        [
            "data=flickr8k",
            f"paths.flickr8k={FLICKR8K}",
            "model/encoder=efficientnet_lite0",
            "+data.train.limit=64",
            "+data.val.limit=8",
            "data.batch_size=8",
            "data.eval_batch_size=8",
            "data.num_workers=0",
            "data.min_word_count=2",
            "model.decoding.max_new_tokens=8",
            "trainer.limit_train_batches=3",
            "trainer.max_epochs=1",
            "trainer.limit_val_batches=1",
            "trainer.log_every_n_steps=1",
            "logger=csv",
        ],
        tmp_path,
    )
    best = train(cfg)
    assert best.endswith(".ckpt")
    metrics = next(tmp_path.rglob("metrics.csv")).read_text().splitlines()
    header = metrics[0].split(",")
    col = header.index("train/xent")
    losses = [float(r.split(",")[col]) for r in metrics[1:] if r.split(",")[col]]
    assert losses and all(0 < x < 20 for x in losses)
    assert {"val/Bleu_4", "val/CIDEr"} <= set(header)


def test_compare_runs_flickr8k_experiments_on_cached_features(tmp_path):
    """scripts/compare.py --experiments on the real images: features cached once, shared by both runs."""
    import json

    from helpers import load_script

    compare = load_script("compare")
    out, cache = tmp_path / "cmp", tmp_path / "cache"
    argv = [
        "--experiments", "flickr8k_soft,flickr8k_hard_gumbel", "--seeds", "0", "--allow-few-seeds",
        "--out-dir", str(out), "--split", "val", "--tokenizer", "simple", "--metrics", "Bleu_4,CIDEr",
        f"paths.flickr8k={FLICKR8K}", f"paths.cache={cache}", "+data.train.limit=32", "+data.val.limit=8",
        "data.batch_size=8", "data.eval_batch_size=8", "data.min_word_count=2", "data.feature_cache.progress=false",
        "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.enable_progress_bar=false",
        "logger=[]", "~callbacks.lr_monitor",
    ]  # fmt: skip
    assert compare.main(argv) == 0
    runs = json.loads((out / "results.json").read_text())
    assert [r["label"] for r in runs] == ["flickr8k_soft", "flickr8k_hard_gumbel"]
    assert all(r["num_images"] == 8 and r["Bleu_4"] >= 0 and r["CIDEr"] >= 0 for r in runs)
    features = [d for d in cache.iterdir() if d.is_dir()]
    assert len(features) == 1  # one feature cache (one encoder), reused by both runs
