"""scripts/scst_diagnostics.py: rewards, cut samples and entropies measured as SCST sees them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from captioning.checkpoints.load import load_checkpoint
from captioning.data.images import image_to_tensor
from captioning.data.sources import SyntheticSource
from captioning.data.tokenize import tokenize
from captioning.decoding import generate
from captioning.training.scst import scst_reward
from experiments import scst_diagnostics

ROOT = Path(__file__).resolve().parents[2]

MODEL = ROOT / "docs" / "models" / "synthetic_soft.safetensors"


def test_greedy_rewards_and_cut_shares_are_those_of_the_models_own_captions():
    model = load_checkpoint(MODEL)
    source = SyntheticSource(12, seed=4, split="val")
    reward = scst_reward(source)
    positions = scst_diagnostics.spread(len(source), 6)
    assert positions == [0, 2, 4, 6, 8, 10]
    a = scst_diagnostics.diagnose(model, source, reward, positions, num_samples=3, max_new_tokens=4)
    # Greedy: the same captions the decoder writes, scored by the split's CIDEr-D.
    assert a["greedy_reward"].shape == (6,) and a["sample_reward"].shape == (6, 3)
    expected = [reward.score(c, i) * 100 for c, i in zip(a["greedy_captions"], positions)]
    np.testing.assert_allclose(a["greedy_reward"], expected)
    # A 4-token cap cuts scene captions (they are longer): the cut flag is "no <end> within the cap".
    assert a["greedy_cut"].all() and (a["greedy_words"] == 4).all()
    assert (a["sample_cut"] == (a["sample_words"] == 4)).all()
    # Entropy per sampled token: between a certain word and the uniform distribution over the vocabulary.
    assert (a["sample_entropy"] >= 0).all() and (a["sample_entropy"] <= math.log(len(model.vocab))).all()
    refs = [np.mean([len(tokenize(c)) for c in source.captions(i)]) for i in positions]
    np.testing.assert_allclose(a["reference_words"], refs)
    s = scst_diagnostics.summary(a)
    assert s["greedy_cut_share"] == 1.0 and s["best_of_k_reward"] >= s["sample_reward"]
    assert s["within_image_reward_std"] == pytest.approx(a["sample_reward"].std(1, ddof=1).mean())


def test_samples_are_repeatable_and_uncapped_captions_end():
    model = load_checkpoint(MODEL)
    source = SyntheticSource(4, seed=4, split="val")
    reward = scst_reward(source)
    run = [scst_diagnostics.diagnose(model, source, reward, [0, 1, 2, 3], 2, 30, seed=7) for _ in range(2)]
    np.testing.assert_array_equal(run[0]["sample_reward"], run[1]["sample_reward"])
    assert not run[0]["greedy_cut"].any()  # a trained scene model ends its captions well within 30 tokens
    images = image_to_tensor(source.image(0), model.image_size).unsqueeze(0)  # (1, 3, S, S)
    greedy = generate(model.net.decoder, model.net.encode(images), num_beams=1, max_new_tokens=30)
    assert " ".join(model.vocab.decode(greedy.tokens[0].tolist())) == run[0]["greedy_captions"][0]


def test_the_command_writes_its_table_for_every_model_and_split(tmp_path):
    out = tmp_path / "diag"
    rc = scst_diagnostics.main(
        ["--data", "synthetic", "--num-images", "4", "--num-samples", "2", "--out", str(out),
         "--override", "data.train.num_images=8", "--override", "data.val.num_images=8",
         f"a={MODEL}", f"b={MODEL}"]
    )  # fmt: skip
    assert rc == 0
    report = json.loads((out / "diagnostics.json").read_text())
    assert set(report["models"]) == {"a", "b"} and set(report["models"]["a"]) == {"train", "val"}
    assert report["models"]["a"] == report["models"]["b"]  # the same model, the same seed: the same numbers
    table = (out / "diagnostics.md").read_text()
    assert "| greedy CIDEr-D |" in table and table.count("greedy reward train − val") == 2
    assert scst_diagnostics.main(["--out", str(out), "nolabel"]) == 2
