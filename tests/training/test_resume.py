"""Crashes lose only the work since the last checkpoint: the trainer writes checkpoints atomically (the
file-level tests are tests/checkpoints/test_atomic_save.py), SIGKILL + ckpt_path=last resume."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import hydra
import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf, open_dict

from captioning.checkpoints import save as checkpoint_io
from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.save import AtomicCheckpointIO
from captioning.data.sources import SyntheticSource
from captioning.errors import ConfigError
from captioning.training.resume import ResumeError, check_resume_matches, resolve_ckpt_path
from captioning.training.train import train

from support import REPO, TINY, compose_train
from support.corpus import build_module, checkpoint_dict, write_checkpoint

EVERY = 5  # last.ckpt every EVERY optimizer steps in the killed run
# 200 scenes x 5 captions / batch 8 = 125 steps in the epoch: the kill lands well inside it.
RUN = [
    *TINY,
    "data.train.num_images=200",
    "trainer.max_epochs=1",
    f"callbacks.last_checkpoint.every_n_train_steps={EVERY}",
]


# ---------------------------------------------------------------------------------- atomic writes


def test_periodic_and_best_checkpoints_share_one_last_ckpt(tmp_path: Path) -> None:
    # 8 scenes x 5 captions / batch 8 = 5 steps: last.ckpt at steps 2 and 4, then best + last at epoch end.
    run = [
        *TINY,
        "data.train.num_images=8",
        "trainer.max_epochs=1",
        "callbacks.last_checkpoint.every_n_train_steps=2",
    ]
    best = Path(train(compose_train(run, tmp_path)))
    files = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert files == sorted([best.name, "last.ckpt"])  # overwritten in place: no last-v1.ckpt, no temp files
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 5


def test_the_trainer_config_writes_checkpoints_atomically(tmp_path: Path) -> None:
    cfg = compose_train(TINY, tmp_path)
    trainer = hydra.utils.instantiate(cfg.trainer, callbacks=[], logger=False)
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)


# ------------------------------------------------------------------------------- resume: errors


def test_ckpt_path_last_without_a_checkpoint_fails_before_reading_data(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(
        SyntheticSource, "__init__", lambda *a, **k: pytest.fail("data read before the check")
    )
    cfg = compose_train([*TINY, "ckpt_path=last"], tmp_path)
    with pytest.raises(ResumeError) as info:
        train(cfg)
    assert f"ckpt_path=last: {tmp_path / 'checkpoints' / 'last.ckpt'} does not exist" in str(info.value)
    assert "same hydra.run.dir" in str(info.value)


def test_resolve_ckpt_path(tmp_path: Path) -> None:
    last = write_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert resolve_ckpt_path(None, tmp_path) is None
    assert resolve_ckpt_path("last", tmp_path) == str(last)
    assert resolve_ckpt_path(str(last), "/elsewhere") == str(last)
    with pytest.raises(ResumeError, match="ckpt_path=nope.ckpt: no such checkpoint file"):
        resolve_ckpt_path("nope.ckpt", tmp_path)


def test_resuming_with_another_vocabulary_or_model_is_refused(tmp_path: Path) -> None:
    module = build_module(["a", "red", "circle"])
    path = tmp_path / "last.ckpt"
    torch.save(checkpoint_dict(module), path)
    check_resume_matches(path, module.vocab.to_dict(), module.net_config)  # the same run: accepted
    with pytest.raises(
        ResumeError,
        match=re.escape(
            "(7 words against this run's 8, first apart at id 6 ('circle' there, 'square' here))"
        ),
    ):
        check_resume_matches(path, {"itos": [*module.vocab.itos[:6], "square", "circle"]}, module.net_config)
    wider = build_module(["a", "red", "circle"], ["model.decoder.hidden_dim=24"])
    with pytest.raises(ResumeError, match="the network config differs .*decoder.hidden_dim: 16 -> 24"):
        check_resume_matches(path, module.vocab.to_dict(), wider.net_config)


def test_an_option_added_after_the_checkpoint_resumes_at_its_default_only(tmp_path: Path) -> None:
    """A checkpoint written before SmallCNN had ``stride`` (its config lacks the key) is this run's when
    the run leaves stride at SmallCNN's default, 8, and not when it asks for 4."""
    module = build_module(["a", "red", "circle"])
    old = checkpoint_dict(module)
    config = OmegaConf.create(old[CHECKPOINT_KEY]["net_config"])
    assert config.encoder.stride == 8
    del config.encoder["stride"]
    old[CHECKPOINT_KEY]["net_config"] = OmegaConf.to_yaml(config)
    path = tmp_path / "old.ckpt"
    torch.save(old, path)
    check_resume_matches(path, module.vocab.to_dict(), module.net_config)  # accepted
    finer = build_module(["a", "red", "circle"], ["model.encoder.stride=4", "model.encoder.grid_size=24"])
    with pytest.raises(ResumeError) as info:
        check_resume_matches(path, module.vocab.to_dict(), finer.net_config)
    assert "encoder.grid_size: 3 -> 24; encoder.stride: 8 -> 4" in str(info.value)


# ----------------------------------------------------------------------- resume: SIGKILL mid-epoch


class ResumeProbe(pl.Callback):
    """Records the state the resumed run starts from (instantiated by Hydra from the test's config)."""

    seen: dict = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module) -> None:
        ResumeProbe.seen.update(
            start_step=trainer.global_step,
            epoch=trainer.current_epoch,
            optimizer=copy.deepcopy(trainer.optimizers[0].state_dict()),
            scheduler=trainer.lr_scheduler_configs[0].scheduler.state_dict(),
            weights={k: v.detach().clone() for k, v in pl_module.state_dict().items()},
            vocab=list(pl_module.vocab.itos),
            net_config=pl_module.net_config,
        )

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module, batch, batch_idx: int) -> None:
        ResumeProbe.seen.setdefault("first_batch_idx", batch_idx)

    def on_train_end(self, trainer: pl.Trainer, pl_module) -> None:
        ResumeProbe.seen["end_step"] = trainer.global_step


class KillAtValidation(pl.Callback):
    """Stands for a SIGKILL during the first epoch's validation (after its last training step)."""

    def on_validation_start(self, trainer: pl.Trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            raise RuntimeError("killed during validation")


# 16 scenes x 5 captions / batch 8 = 10 steps an epoch; last.ckpt due every 5 steps: mid-epoch and at the
# epoch's last step.
EPOCH_END_RUN = [*TINY, "data.train.num_images=16", "callbacks.last_checkpoint.every_n_train_steps=5"]


def _with_callback(cfg, name: str):
    """``cfg`` with one more callback: the class ``name`` of this module."""
    with open_dict(cfg):
        cfg.callbacks[name.lower()] = OmegaConf.create({"_target_": f"{__name__}.{name}"})
        cfg.allowed_targets = [__name__]  # this test module's class (config_safety.py)
    return cfg


def test_a_kill_between_an_epochs_last_step_and_its_validation_still_validates_that_epoch(
    tmp_path: Path,
) -> None:
    run = [*EPOCH_END_RUN, "trainer.max_epochs=1"]
    cfg = _with_callback(compose_train(run, tmp_path), "KillAtValidation")
    with pytest.raises(RuntimeError, match="killed during validation"):
        train(cfg)
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    # The step-10 save waits for the validation that never ended: last.ckpt is the mid-epoch one.
    assert (saved["global_step"], saved["epoch"]) == (5, 0)

    best = Path(train(compose_train([*run, "ckpt_path=last"], tmp_path)))
    assert best.name.startswith("epoch000-step000010-scene")  # epoch 0 validated and ranked after resume
    resumed = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    monitor = cfg.callbacks.model_checkpoint.monitor  # val/scene_score on the synthetic scenes
    assert resumed["global_step"] == 10 and f"'monitor': '{monitor}'" in str(resumed["callbacks"])


def test_the_periodic_save_at_an_epochs_last_step_happens_after_its_validation(tmp_path: Path) -> None:
    cfg = _with_callback(compose_train([*EPOCH_END_RUN, "trainer.max_epochs=2"], tmp_path), "SaveOrder")
    SaveOrder.events.clear()
    train(cfg)
    # every save of last.ckpt at an epoch's last step (10, 20) comes after that epoch's validation
    assert SaveOrder.events == ["save 5", "validated 10", "save 10", "save 15", "validated 20", "save 20"]


class SaveOrder(pl.Callback):
    events: list[str] = []

    def on_validation_end(self, trainer: pl.Trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            SaveOrder.events.append(f"validated {trainer.global_step}")

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module, checkpoint) -> None:
        if not SaveOrder.events or SaveOrder.events[-1] != f"save {trainer.global_step}":
            SaveOrder.events.append(f"save {trainer.global_step}")


def _kill_once_checkpointed(run_dir: Path, timeout_s: float = 240.0) -> None:
    """Start ``python -m captioning.training.train``, SIGKILL it as soon as its first last.ckpt exists."""
    command = [sys.executable, "-m", "captioning.training.train", *RUN, f"hydra.run.dir={run_dir}"]
    command.append("trainer.enable_progress_bar=false")
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    log = (run_dir.parent / "killed_run.log").open("wb")
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    last = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + timeout_s
    try:
        while not last.exists():
            if process.poll() is not None:
                pytest.fail(
                    f"training exited ({process.returncode}) before its first checkpoint:\n"
                    + (run_dir.parent / "killed_run.log").read_text()[-3000:]
                )
            if time.monotonic() > deadline:
                pytest.fail("no checkpoint within the time limit")
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)  # no cleanup handlers, no flush: a crash
        process.wait()
        log.close()
    assert process.returncode == -signal.SIGKILL


def _assert_same_optimizer_state(saved: dict, live: dict) -> None:
    assert saved["state"].keys() == live["state"].keys() and len(saved["state"]) > 0
    for index, saved_state in saved["state"].items():
        for key, value in saved_state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(live["state"][index][key])), (
                index,
                key,
            )
    for saved_group, live_group in zip(saved["param_groups"], live["param_groups"]):
        assert saved_group == live_group


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_continues_from_the_saved_step(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _kill_once_checkpointed(run_dir)
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)  # intact despite the kill
    step = saved["global_step"]
    # Saved from the hook that ends batch `step - 1`: that batch counts as processed.
    processed = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"]
    assert step > 0 and step % EVERY == 0 and saved["epoch"] == 0
    assert processed == step and 0 < processed < 125  # mid-epoch

    cfg = compose_train([*RUN, "ckpt_path=last", f"trainer.max_steps={step + 3}"], run_dir)
    with open_dict(cfg):
        cfg.callbacks.resume_probe = OmegaConf.create({"_target_": f"{__name__}.ResumeProbe"})
        cfg.allowed_targets = [__name__]  # this test module's class (config_safety.py)
    ResumeProbe.seen.clear()
    train(cfg)
    seen = ResumeProbe.seen

    assert seen["start_step"] == step and seen["epoch"] == 0
    assert seen["first_batch_idx"] == processed  # continues inside the interrupted epoch
    assert seen["end_step"] == step + 3
    _assert_same_optimizer_state(saved["optimizer_states"][0], seen["optimizer"])
    assert seen["scheduler"]["last_epoch"] == saved["lr_schedulers"][0]["last_epoch"] == step
    for name, tensor in saved["state_dict"].items():
        assert torch.equal(tensor, seen["weights"][name]), name
    assert seen["vocab"] == saved[CHECKPOINT_KEY]["vocab"]["itos"]
    assert seen["net_config"] == saved[CHECKPOINT_KEY]["net_config"]


@pytest.mark.parametrize("first_steps", [10, 12])  # on a periodic save and between two
def test_a_run_stopped_by_max_steps_mid_epoch_resumes_inside_that_epoch(tmp_path: Path, first_steps) -> None:
    # 24 scenes x 5 captions / batch 8 = 15 steps per epoch, validation at its end, max_epochs=1.
    run = [*TINY, "trainer.max_epochs=1", "callbacks.last_checkpoint.every_n_train_steps=5"]
    train(compose_train([*run, f"trainer.max_steps={first_steps}"], tmp_path))
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    # saved where the run stopped, not as a finished epoch (which would resume in epoch 1: nothing to do)
    assert (saved["global_step"], saved["epoch"]) == (first_steps, 0)
    assert saved["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 0

    best = Path(train(compose_train([*run, "ckpt_path=last", "trainer.max_steps=15"], tmp_path)))
    assert best.name.startswith("epoch000-step000015-scene")  # the epoch's rest trained and validated
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 15


class SigtermAtValidation(pl.Callback):
    """A real SIGTERM to this process during the first epoch's validation (Lightning's handler stops)."""

    def on_validation_batch_end(
        self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx, *args
    ) -> None:
        if not trainer.sanity_checking and trainer.current_epoch == 0 and batch_idx == 0:
            os.kill(os.getpid(), signal.SIGTERM)  # Lightning stops after this batch, the second never runs


def test_a_sigterm_during_validation_leaves_the_previous_last_ckpt_so_resume_validates(
    tmp_path: Path,
) -> None:
    run = [*EPOCH_END_RUN, "trainer.max_epochs=1", "data.eval_batch_size=4"]  # two validation batches
    cfg = _with_callback(compose_train(run, tmp_path), "SigtermAtValidation")
    with pytest.raises(Exception, match="SIGTERM"):
        train(cfg)
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert (saved["global_step"], saved["epoch"]) == (5, 0)  # not a "validated" step 10 that was not
    best = Path(train(compose_train([*run, "ckpt_path=last"], tmp_path)))
    assert best.name.startswith("epoch000-step000010-scene")  # epoch 0 validated after the resume


def test_max_steps_on_a_step_interval_validation_saves_the_validated_state(tmp_path: Path) -> None:
    run = [*TINY, "trainer.val_check_interval=5", "trainer.check_val_every_n_epoch=null"]
    run += [
        "callbacks.last_checkpoint.every_n_train_steps=100",
        "callbacks.model_checkpoint.monitor=val/loss",
    ]
    run += ["callbacks.model_checkpoint.mode=min"]
    best = Path(train(compose_train([*run, "trainer.max_steps=10"], tmp_path)))
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 10
    ranking = next(
        v for k, v in saved["callbacks"].items() if k.startswith("ModelCheckpoint") and "val/loss" in k
    )
    assert best.name.startswith("epoch000-step000010")  # the last validation is the best (val/loss falls)
    assert Path(ranking["best_model_path"]).name == best.name  # and last.ckpt's ranking state knows it


def test_a_kill_while_writing_an_epochs_best_leaves_no_temp_and_the_resume_writes_that_best(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a writer process that is gone, as after a SIGKILL
    real_save = checkpoint_io.atomic_torch_save

    def killed_writing_the_best(obj, target):
        target = Path(target)
        if target.name == "last.ckpt":
            return real_save(obj, target)
        (target.parent / f".{target.name}.{dead.pid}-0badf00d.tmp").write_bytes(b"PK\x03\x04 half")
        raise RuntimeError("killed while writing the best")

    run = [*EPOCH_END_RUN, "trainer.max_epochs=1"]
    monkeypatch.setattr(checkpoint_io, "atomic_torch_save", killed_writing_the_best)
    with pytest.raises(RuntimeError, match="killed while writing the best"):
        train(compose_train(run, tmp_path))
    monkeypatch.setattr(checkpoint_io, "atomic_torch_save", real_save)
    folder = tmp_path / "checkpoints"
    (orphan,) = folder.glob(".*.tmp")
    # last.ckpt is saved after the epoch's best: the kill left it at the periodic save before validation
    assert torch.load(folder / "last.ckpt", weights_only=True)["global_step"] == 5

    capsys.readouterr()
    best = Path(train(compose_train([*run, "ckpt_path=last"], tmp_path)))
    assert f"removed 1 temp file(s) of checkpoint writes a kill interrupted in {folder}: {orphan.name}" in (
        capsys.readouterr().err
    )
    assert best.name.startswith("epoch000-step000010-") and best.is_file()  # epoch 0's best, written
    assert not list(folder.glob(".*.tmp"))


# ------------------------------------------------------------------------------- ckpt_path=auto


def test_ckpt_path_auto_starts_resumes_and_never_trains_a_finished_run_again(tmp_path: Path) -> None:
    # 24 scenes x 5 captions / batch 8 = 15 steps per epoch; a stop after 10 steps, like a killed sweep job.
    run = [*TINY, "trainer.max_epochs=1", "callbacks.last_checkpoint.every_n_train_steps=5", "ckpt_path=auto"]
    assert resolve_ckpt_path("auto", tmp_path) is None  # nothing there: a fresh start
    train(compose_train([*run, "trainer.max_steps=10"], tmp_path))
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 10
    assert resolve_ckpt_path("auto", tmp_path) == str(tmp_path / "checkpoints" / "last.ckpt")
    # max_steps=10 ended that fit: mark it unfinished, as a kill would have left it, so auto resumes it
    summary = json.loads((tmp_path / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps({**summary, "finished": False}))

    best = train(compose_train([*run, "trainer.max_steps=15"], tmp_path))  # the same command, resumed
    assert Path(best).name.startswith("epoch000-step000015-scene")
    assert json.loads((tmp_path / "run.json").read_text())["finished"] is True
    files = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}

    assert train(compose_train([*run, "trainer.max_steps=15"], tmp_path)) == best  # finished: not trained
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == files


def test_objective_scst_with_ckpt_path_auto_still_needs_init_from(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="init_from=None: objective=scst starts from a cross-entropy"):
        train(compose_train([*TINY, "objective=scst", "ckpt_path=auto"], tmp_path))


@pytest.mark.parametrize(
    "content", ["[1, 2]", "not json", '{"finished": true}', '{"finished": "yes", "checkpoint": "x"}']
)
def test_a_run_json_that_does_not_name_a_finished_checkpoint_means_not_finished(
    tmp_path: Path, content
) -> None:
    from captioning.training.resume import finished_checkpoint, read_summary

    (tmp_path / "run.json").write_text(content)
    assert finished_checkpoint(read_summary(tmp_path)) is None
