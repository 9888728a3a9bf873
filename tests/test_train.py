"""Lightning runs of the real composed training config (tiny sizes)."""

import json

import pytest
import torch

from captioning.checkpoint import load_captioner
from captioning.train import train

from conftest import DECODERS, TINY, compose_train


@pytest.mark.parametrize("decoder", DECODERS)
def test_fast_dev_run_of_each_decoder(decoder, tmp_path):
    cfg = compose_train([f"model/decoder={decoder}", *TINY, "+trainer.fast_dev_run=true"], tmp_path)
    train(cfg)  # fast_dev_run: one train and one val batch, no checkpoint; asserts come from the checks below
    assert cfg.model.decoder.vocab_size > 10  # filled in from the synthetic vocabulary


def test_short_training_writes_a_self_contained_checkpoint(tmp_path):
    cfg = compose_train([*TINY, "trainer.max_epochs=2", "logger=csv"], tmp_path)
    best = train(cfg)
    assert best.endswith(".ckpt") and (tmp_path / "checkpoints" / "last.ckpt").is_file()
    raw = torch.load(best, weights_only=True)  # plain data + tensors only
    assert raw["epoch"] == 0 or raw["epoch"] == 1
    model = load_captioner(best)
    assert len(model.vocab) == cfg.model.decoder.vocab_size
    assert model.image_size == 96 and model.decoding["max_length"] == 6
    metrics = (tmp_path / "csv").rglob("metrics.csv")
    header = next(iter(metrics)).read_text().splitlines()[0].split(",")
    assert {"train/loss", "val/loss", "val/Bleu_4", "val/CIDEr"} <= set(header)
    json.dumps(raw["captioning"])  # the vocabulary and config are JSON-able
