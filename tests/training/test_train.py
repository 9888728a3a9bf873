"""Lightning runs of the real composed training config (tiny sizes)."""

import json
from pathlib import Path

import pytest
import torch

from captioning.checkpoints.load import load_checkpoint
from captioning.training.train import train

from support import DECODERS, TINY, compose_train


@pytest.mark.parametrize("decoder", DECODERS)
def test_fast_dev_run_of_each_decoder(decoder, tmp_path):
    cfg = compose_train([f"model/decoder={decoder}", *TINY, "+trainer.fast_dev_run=true"], tmp_path)
    train(cfg)  # fast_dev_run: one train and one val batch, no checkpoint; asserts come from the checks below
    assert cfg.model.decoder.vocab_size > 10  # filled in from the synthetic vocabulary


def test_a_run_logs_no_warning_about_the_feature_lookup_hook(tmp_path, recwarn):
    """The module's ``on_before_batch_transfer`` (the feature cache's lookup) with a datamodule is the
    intent; Lightning's warning about it ("... but have passed in a LightningDataModule") was noise in every
    run's log. Other warnings still show."""
    from pytorch_lightning.trainer.connectors.data_connector import warning_cache

    warning_cache.clear()  # Lightning warns once a process: another test may have had it already
    train(compose_train([*TINY, "+trainer.fast_dev_run=true"], tmp_path))
    assert not [w for w in recwarn if "on_before_batch_transfer" in str(w.message)]
    assert recwarn.list  # warnings are not silenced wholesale (Lightning has others for a tiny run)


def test_short_training_writes_a_self_contained_checkpoint(tmp_path):
    cfg = compose_train([*TINY, "trainer.max_epochs=2", "logger=csv"], tmp_path)
    best = train(cfg)
    assert best.endswith(".ckpt") and (tmp_path / "checkpoints" / "last.ckpt").is_file()
    raw = torch.load(best, weights_only=True)  # plain data + tensors only
    assert raw["epoch"] == 0 or raw["epoch"] == 1
    model = load_checkpoint(best)
    assert len(model.vocab) == cfg.model.decoder.vocab_size
    assert model.image_size == 96 and model.decoding["max_new_tokens"] == 20
    metrics = (tmp_path / "csv").rglob("metrics.csv")
    header = next(iter(metrics)).read_text().splitlines()[0].split(",")
    assert {"train/loss", "val/loss", "val/Bleu_4", "val/CIDEr"} <= set(header)
    json.dumps(raw["captioning"])  # the vocabulary and config are JSON-able


class NormRecordingAdamW(torch.optim.AdamW):
    """AdamW that records the gradient norm it is about to apply (after Lightning's clipping)."""

    norms: list[float] = []

    def step(self, closure=None):
        loss = closure() if closure is not None else None  # forward, backward, then clipping
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        NormRecordingAdamW.norms.append(
            torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()
        )
        super().step()
        return loss


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-mixed"])
def test_fused_optimizer_gradients_are_clipped(precision, tmp_path):
    """The default optimizer is fused AdamW; Lightning alone refuses to clip for it under mixed precision.
    (On CPU, Lightning's 16-mixed has no gradient scaler: the next test covers the scaler.)"""
    NormRecordingAdamW.norms.clear()
    overrides = [*TINY, "+trainer.fast_dev_run=2", f"trainer.precision={precision}", "trainer.gradient_clip_val=0.01",
                 "model.optimizer._target_=test_train.NormRecordingAdamW",
                 "allowed_targets=[test_train]"]  # fmt: skip  # this module's class (config_safety.py)
    cfg = compose_train(overrides, tmp_path)
    assert cfg.model.optimizer.fused is True
    train(cfg)
    assert len(NormRecordingAdamW.norms) == 2
    assert all(n == pytest.approx(0.01, rel=1e-3) for n in NormRecordingAdamW.norms)  # unclipped ≫ 0.01


def test_fused_clipping_under_a_gradient_scaler_clips_and_applies_the_true_gradients():
    """16-mixed (a GradScaler): the hook unscales before clipping, and the scaler's step then applies the
    clipped gradient as is (not divided by the scale a second time)."""
    from types import SimpleNamespace

    from pytorch_lightning.plugins.precision import MixedPrecision

    from captioning.training.lit_module import CaptionLitModule

    w = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.SGD([w], lr=1.0, fused=True)  # update = -gradient: shows what the step applied
    assert opt._step_supports_amp_scaling  # it unscales inside its step, like fused AdamW
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
    plugin.scaler.scale((w * 3.0).sum()).backward()  # true gradient 3 per entry (norm 6), stored ×1024
    module = SimpleNamespace(trainer=SimpleNamespace(precision_plugin=plugin))
    CaptionLitModule.configure_gradient_clipping(
        module, opt, gradient_clip_val=0.01, gradient_clip_algorithm="norm"
    )
    torch.testing.assert_close(w.grad, torch.full((4,), 0.005))  # 3 / 6 · 0.01 per entry
    plugin.scaler.step(opt)
    torch.testing.assert_close(w.detach(), torch.full((4,), -0.005))


@pytest.mark.parametrize(
    "env,zero",
    [
        ({}, True),
        ({"RANK": "1", "LOCAL_RANK": "0", "NODE_RANK": "0"}, False),  # torchrun: the global rank decides
        ({"LOCAL_RANK": "0", "GROUP_RANK": "1"}, False),  # torchrun's name for the node
        ({"SLURM_PROCID": "0", "LOCAL_RANK": "0"}, True),
        ({"LOCAL_RANK": "1", "NODE_RANK": "0"}, False),  # Lightning's own launcher
    ],
)
def test_only_the_first_process_of_the_job_prints_the_best_checkpoint(env, zero, monkeypatch):
    from captioning.training.train import is_global_zero

    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert is_global_zero() is zero


def test_every_experiment_with_early_stopping_checks_after_validation():
    """An epoch-end last.ckpt is saved after validation: a resumed run checked at the train epoch's end
    would find no val metric yet and crash."""
    from captioning.compose import CONFIG_DIR, compose_config

    names = sorted(p.stem for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml"))
    checked = 0
    for name in names:
        cfg, _ = compose_config("train", [f"experiment={name}"])
        stop = cfg.callbacks.get("early_stopping")
        if stop:
            checked += 1
            assert stop.get("check_on_train_epoch_end") is False, name
    assert checked >= 3
