"""Real data: the Flickr8k copy in ../shared/data/flickr8k (skipped when absent)."""

import pytest

from captioning.training.train import train

from support import SHARED_DATA, compose_train

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
            "data.train.num_images=64",
            "data.val.num_images=8",
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


def test_a_sweep_of_flickr8k_experiments_shares_the_feature_cache_and_is_aggregated(tmp_path):
    """A joblib sweep of two Flickr8k experiments on the real images (``captioning-train -m``), then
    scripts/compare.py: features cached once and shared by both runs, one row per run."""
    import json
    import subprocess
    import sys

    from support.helpers import load_script

    compare = load_script("compare")
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    cmd = [
        sys.executable, "-m", "captioning.training.train", "-m", "hydra/launcher=local", "hydra.launcher.n_jobs=2",
        "experiment=flickr8k_soft,flickr8k_hard_gumbel", "seed=0", f"hydra.sweep.dir={sweep}",
        f"paths.flickr8k={FLICKR8K}", f"paths.cache={cache}", "data.train.num_images=32", "data.val.num_images=8",
        "data.batch_size=8", "data.eval_batch_size=8", "data.min_word_count=2",
        "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.enable_progress_bar=false",
        "logger=[]", "~callbacks.lr_monitor",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    argv = [
        str(sweep),
        "--split",
        "val",
        "--allow-few-seeds",
        "--tokenizer",
        "simple",
        "--metrics",
        "Bleu_4,CIDEr",
    ]
    assert compare.main(argv) == 0
    runs = json.loads((sweep / "results.json").read_text())
    assert sorted(r["label"] for r in runs) == ["flickr8k_hard_gumbel", "flickr8k_soft"]
    assert all(r["num_images"] == 8 and r["Bleu_4"] >= 0 and r["CIDEr"] >= 0 for r in runs)
    features = [d for d in cache.iterdir() if d.is_dir()]
    assert len(features) == 1  # one feature cache (one encoder), reused by both runs
