"""Training on your own captions in one command (data=captions_json, experiment=own_data), the line
early stopping prints when it ends a run, and the one line an unset path gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from captioning.cli.main import main
from captioning.errors import ConfigError, one_line
from captioning.training.train import train

from support import TINY, compose_train

COLORS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220)}
THINGS = ("dog", "cat", "ball")


def write_own_data(root: Path) -> tuple[Path, Path, Path]:
    """30 small JPEGs in one folder; COCO-format captions of 24 (train) and 6 (val), 2-3 captions each."""
    images = root / "images"
    images.mkdir(parents=True)

    def split(ids: range) -> dict:
        entries, anns = [], []
        for i in ids:
            color, thing = list(COLORS)[i % 3], THINGS[(i // 3) % 3]
            Image.new("RGB", (48, 40), COLORS[color]).save(images / f"im{i:02d}.jpg", quality=85)
            entries.append({"id": i, "file_name": f"im{i:02d}.jpg"})
            captions = [f"a {color} {thing} on the grass", f"the {thing} is {color}", f"A {color} {thing}."]
            anns += [
                {"id": 10 * i + k, "image_id": i, "caption": c} for k, c in enumerate(captions[: 2 + i % 2])
            ]
        return {"images": entries, "annotations": anns}

    (root / "train.json").write_text(json.dumps(split(range(24))))
    (root / "val.json").write_text(json.dumps(split(range(24, 30))))
    return root / "train.json", root / "val.json", images


# The smallest pretrained encoder at a small input and a tiny decoder: the run takes ~30 s on 2 busy cores.
SMALL = ["model/encoder=efficientnet_lite0", "data.image_size=96", "model.encoder.grid_size=3",
         "model.decoder.embed_dim=32", "model.decoder.hidden_dim=32", "model.decoder.attention.attention_dim=32",
         "trainer.enable_progress_bar=false", "data.feature_cache.progress=false"]  # fmt: skip


def test_own_captions_train_in_one_command_and_caption(tmp_path, capsys):
    train_json, val_json, images = write_own_data(tmp_path / "mine")
    run_dir = tmp_path / "run"
    command = [
        Path(sys.executable).with_name("captioning-train"),
        "experiment=own_data",
        f"paths.train_json={train_json}",
        f"paths.val_json={val_json}",
        f"paths.images={images}",
        "trainer.max_epochs=4",  # 8 steps at full rate: words before <end>, whatever the initial draws
        "model.optimizer.lr=1e-2",
        "model.scheduler.warmup_steps=0",
        f"paths.cache={tmp_path / 'cache'}",
        f"hydra.run.dir={run_dir}",
        *SMALL,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAPTIONS_")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    best = done.stdout.strip().splitlines()[-1].removeprefix("best checkpoint: ")
    assert Path(best).is_file() and Path(best).parent == run_dir / "checkpoints"
    assert "early stopping" not in done.stdout  # it ended at max_epochs: no stop line

    from captioning.checkpoints.load import load_checkpoint

    vocab = load_checkpoint(best).vocab.itos
    assert {"red", "green", "blue", "dog", "cat", "ball", "grass", "the"} <= set(vocab)  # min_word_count 2
    assert len(vocab) == 4 + 11  # the specials + every word of the train captions (each seen >= 2 times)

    # the checkpoint records its data: evaluate without data= scores the own captions, never synthetic scenes
    # (its words are colours and things, as a scene model's are)
    assert load_checkpoint(best).provenance["data"] == "captions_json"
    paths = [f"paths.train_json={train_json}", f"paths.val_json={val_json}", f"paths.images={images}"]
    out_dir = tmp_path / "eval"
    assert (
        main(["evaluate", "--checkpoint", best, *paths, "split=val", "--out-dir", str(out_dir), "--quiet"])
        == 0
    )
    assert len(json.loads((out_dir / "results.json").read_text())) == 6  # the 6 val images of the own data
    capsys.readouterr()

    image = images / "im25.jpg"
    assert main(["caption", "--checkpoint", best, str(image)]) == 0  # `captioning caption`, in-process
    out = capsys.readouterr().out
    name, caption = out.strip().splitlines()[-1].split("\t")[:2]
    assert name == str(image) and caption.split() and set(caption.split()) <= set(vocab)


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ([], "paths.train_json and paths.images are not set"),
        (["paths.train_json=t.json"], "paths.images is not set"),
    ],
)
def test_an_unset_path_is_one_line_naming_the_key_and_a_command(tmp_path, monkeypatch, given, named):
    for key in ("CAPTIONS_TRAIN_JSON", "CAPTIONS_VAL_JSON", "CAPTIONS_IMAGES"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError) as err:
        train(compose_train(["experiment=own_data", *given], tmp_path))
    message = one_line(err.value)
    assert named in message and "captioning-train experiment=own_data paths.train_json=" in message
    assert "\n" not in message


def test_early_stopping_says_why_it_ended_the_run(tmp_path, capsys):
    # min_delta 100: the first validation sets the best CIDEr-D, the second cannot beat it by that much
    stop = ("+callbacks.early_stopping={_target_: captioning.training.callbacks.early_stopping.EarlyStopping, "
            "monitor: val/CIDEr, mode: max, patience: 1, min_delta: 100}")  # fmt: skip
    ranked = "callbacks.model_checkpoint.monitor=val/CIDEr"  # the checkpoint ranked as the stopper watches
    cfg = compose_train(
        [*TINY, "trainer.max_epochs=5", "trainer.limit_train_batches=2", stop, ranked], tmp_path
    )
    train(cfg)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("early stopping")]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("early stopping ended the run in epoch 1 of max_epochs=5")
    assert "val/CIDEr did not improve by more than min_delta=100 for 1 validation (patience=1)" in line
    # the best as the kept checkpoint has it (the stopper's own best moves only on gains above min_delta)
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["monitor"] == "val/CIDEr"
    best = summary["best"]
    assert f"best val/CIDEr {best['metrics']['val/CIDEr']:.4f} in epoch {best['epoch']};" in line
