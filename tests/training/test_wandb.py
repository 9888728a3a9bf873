"""W&B logging, offline: metrics, the composed config and the per-validation attention-overlay table."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import wandb
from PIL import Image
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger, WandbLogger

from captioning.checkpoints.load import load_checkpoint
from captioning.data.images import image_to_tensor
from captioning.data.sources import SyntheticSource
from captioning.inference.captioner import Captioner
from captioning.inference.viz import upsample_attention
from captioning.training.build import build_net
from captioning.training.callbacks.wandb_table import COLUMNS, Example, WandbAttentionTable, caption_examples
from captioning.training.startup import instantiate_dict
from captioning.training.train import train

from support import REPO, TINY, compose_train

NUM_IMAGES = 3


@pytest.fixture
def wandb_home(tmp_path, monkeypatch):
    """Offline W&B whose caches stay inside tmp_path; artifact staging is left to the run (WandbRunSummary
    puts it in the run folder unless WANDB_DATA_DIR is set)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_DATA_DIR", "")  # recorded, so the run's own setting is undone afterwards
    monkeypatch.delenv("WANDB_DATA_DIR")
    for var in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home" / var.lower()))
    return tmp_path


def wandb_records(path: Path) -> list:
    """The protobuf records of a ``run-*.wandb`` file (a LevelDB-style log of 32 KiB blocks whose records
    are FULL, or FIRST/MIDDLE.../LAST fragments; each has a 7-byte header: crc, length, type)."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, pending, chunks = 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (kind == 0 and length == 0):  # block trailer / zero padding
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            chunks.append(pending)
    records = []
    for chunk in chunks:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        records.append(record)
    return records


def history_rows(records: list) -> list[dict]:
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in r.history.item
                }
            )
    return rows


def config_keys(records: list) -> dict:
    config = {}
    for r in records:
        if r.WhichOneof("record_type") == "config":
            config.update({item.key: json.loads(item.value_json) for item in r.config.update})
    return config


@pytest.mark.slow
def test_offline_wandb_run_holds_metrics_config_table_and_overlays(wandb_home):
    overrides = [
        *TINY,
        "logger=[csv,wandb]",
        "trainer.max_epochs=2",
        "+trainer.limit_train_batches=2",
        f"callbacks.wandb_attention_table.num_images={NUM_IMAGES}",
    ]
    cfg = compose_train(overrides, wandb_home)
    train(cfg)
    # run.finish() returns before W&B's background service has written the whole run file; shutting the
    # service down waits for it (as the end of the training process does).
    wandb.teardown()

    runs = list((wandb_home / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"expected one offline run, found {runs}"
    run = runs[0]
    records = wandb_records(next(run.glob("run-*.wandb")))
    assert records[-1].WhichOneof("record_type") == "exit"  # the complete run

    # The composed config (not only the module's hyperparameters) is the run's config.
    config = config_keys(records)
    assert config["data"]["val"]["num_images"] == 8 and config["model"]["decoding"]["max_new_tokens"] == 20
    assert config["logger"]["wandb"]["mode"] == "offline"

    # Metrics: the same validation scores as the CSV logger wrote, once per epoch.
    history = history_rows(records)
    wandb_cider = [row["val/CIDEr"] for row in history if "val/CIDEr" in row]
    csv_rows = (next((wandb_home / "csv").rglob("metrics.csv"))).read_text().splitlines()
    header = csv_rows[0].split(",")
    col = header.index("val/CIDEr")
    csv_cider = [float(r.split(",")[col]) for r in csv_rows[1:] if r.split(",")[col]]
    assert len(wandb_cider) == 2 and np.allclose(wandb_cider, csv_cider, rtol=1e-6)

    # One table per validation, with the same first NUM_IMAGES val images each time.
    tables = [row for row in history if row.get("val/attention/_type") == "table-file"]
    assert len(tables) == 2 and all(t["val/attention/nrows"] == NUM_IMAGES for t in tables)
    contents = [json.loads((run / "files" / t["val/attention/path"]).read_text()) for t in tables]
    val = SyntheticSource(8, seed=0, split="val")
    for epoch, table in enumerate(contents):
        assert table["columns"] == COLUMNS
        assert [r[0] for r in table["data"]] == list(range(NUM_IMAGES))
        assert {r[1] for r in table["data"]} == {epoch}
        assert [r[3] for r in table["data"]] == ["\n".join(val.captions(i)) for i in range(NUM_IMAGES)]

    # The last table's captions are what `captioning caption` says with the checkpoint saved after it.
    model = load_checkpoint(wandb_home / "checkpoints" / "last.ckpt")
    cli = Captioner(model).caption([val.image(i) for i in range(NUM_IMAGES)])
    assert [r[2] for r in contents[-1]["data"]] == [c.caption for c in cli]

    # The overlays as plain media files in the run directory: NUM_IMAGES per validation, real pictures.
    pngs = sorted((run / "files" / "media" / "images").rglob("*.png"))
    assert len(pngs) == 2 * NUM_IMAGES
    for png in pngs:
        pixels = np.asarray(Image.open(png).convert("RGB"))
        assert pixels.shape[0] >= 100 and pixels.shape[1] >= 150 and pixels.std() > 5
    overlay_rows = [row for row in history if "val/attention_overlays/filenames" in row]
    assert [len(r["val/attention_overlays/filenames"]) for r in overlay_rows] == [NUM_IMAGES, NUM_IMAGES]
    assert len({Image.open(png).size for png in pngs}) == 1  # one size, whatever the caption's length

    # The summary holds the best monitored value and the parameter counts.
    summary = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in r.summary.update
                }
            )
    # (the synthetic scenes' monitor is val/scene_score: captioning/conf/scoring/synthetic.yaml)
    monitored = header.index("val/scene_score")
    csv_scene_score = [float(r.split(",")[monitored]) for r in csv_rows[1:] if r.split(",")[monitored]]
    assert len(csv_scene_score) == 2
    assert summary["best/val/scene_score"] == pytest.approx(max(csv_scene_score), rel=1e-6, abs=1e-9)
    assert summary["params/trainable"] == sum(p.numel() for p in model.net.parameters()) > 0
    assert config_keys(records)["params"]["total"] == summary["params/total"]

    # Everything `wandb sync` needs is inside the run folder: the staged table files too.
    staged = list((wandb_home / "wandb" / "data").rglob("*"))
    assert any(p.is_file() for p in staged), "no artifact staged inside the run folder"
    text = b"".join(r.SerializeToString() for r in records)
    for path in re.findall(rb"(/[^\x00-\x1f\"]*?/artifacts/staging/[^\x00-\x1f\"]+)", text):
        assert path.decode().startswith(str(wandb_home)), path


def test_logger_configs_compose_into_one_mapping(tmp_path):
    cfg = compose_train(["logger=[csv,wandb,tensorboard]"], tmp_path)
    assert list(cfg.logger) == ["csv", "wandb", "tensorboard"]
    loggers = instantiate_dict(cfg.logger)  # instantiating starts no W&B run: it is created lazily
    assert [type(lg) for lg in loggers] == [CSVLogger, WandbLogger, TensorBoardLogger]
    assert all(Path(lg.save_dir) == tmp_path for lg in loggers)
    assert compose_train(["logger=wandb"]).logger.wandb.project == os.environ.get(
        "WANDB_PROJECT", "captioning"
    )


def test_wandb_mode_defaults_to_offline_but_respects_the_user():
    code = "import os, captioning.training.train; print(os.environ['WANDB_MODE'])"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    # Both interpreters at once: each spends its time importing Lightning.
    procs = {
        expected: subprocess.Popen(
            [sys.executable, "-c", code],
            env=extra,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for expected, extra in (("offline", env), ("disabled", {**env, "WANDB_MODE": "disabled"}))
    }
    for expected, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert out.strip() == expected, err


def test_table_callback_is_inert_without_a_wandb_logger(tmp_path):
    callback = WandbAttentionTable(num_images=2)
    trainer = SimpleNamespace(loggers=[CSVLogger(tmp_path)], sanity_checking=False, is_global_zero=True)
    callback.on_validation_epoch_end(trainer, pl_module=None)  # would fail on the module if it did anything
    assert callback._examples is None
    with pytest.raises(ValueError, match="num_images must be >= 1"):
        WandbAttentionTable(num_images=0)


def test_hard_attention_overlay_marks_the_selected_cell(tmp_path):

    from captioning.training.lit_module import CaptionLitModule

    torch.manual_seed(0)
    cfg = compose_train(["model/decoder=hard_gumbel", *TINY, "model.decoder.vocab_size=12"])
    net = build_net(cfg.model, 12).eval()
    vocab = {"itos": ["<pad>", "<start>", "<end>", "<unk>", *(f"w{i}" for i in range(8))]}
    module = CaptionLitModule(
        encoder=net.encoder, decoder=net.decoder, vocab=vocab, decoding={"max_new_tokens": 4}
    ).eval()
    val = SyntheticSource(2, seed=0, split="val")
    examples = [Example(i, image_to_tensor(val.image(i), 96), []) for i in range(2)]
    captioned = caption_examples(module, examples)
    assert sum(len(cap.tokens) for cap in captioned) > 0, "nothing to check: every caption is empty"
    for cap in captioned:
        assert cap.attention.shape == (len(cap.tokens), 9)
        for row in cap.attention:  # one selected cell per word: a one-hot row
            assert sorted(row.tolist())[-2:] == [0.0, 1.0] and row.sum() == 1.0
            cell = int(row.argmax())
            up = upsample_attention(row, (3, 3), (96, 96))  # (96, 96): a crisp 32x32 square, nothing else
            assert set(np.unique(up).tolist()) == {0.0, 1.0}
            r, c = divmod(cell, 3)
            assert up[r * 32 : (r + 1) * 32, c * 32 : (c + 1) * 32].all() and up.sum() == 32 * 32
