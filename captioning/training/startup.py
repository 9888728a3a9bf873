"""Every start-up check of a training run, in the order they run; ``train()`` calls this module only.

Before the data (seconds, nothing read or written but stale temp files): ``check_before_data``
  0. every ``_target_`` on the allow-list (``captioning.config_safety``): nothing is built before this;
  1. the config's values: types and bounds of every argument, rules across keys (``validate.check_config``,
     bounds declared in ``captioning.bounds``);
  2. what the model's constructors refuse, built once with a placeholder vocabulary (``check_model_config``);
  3. where the run starts: ``ckpt_path`` resolved (``resume.py``), a finished ``auto`` run not trained
     again, the ``init_from`` file readable, a fresh run not writing over another's checkpoints.
After the data: ``read_vocabulary`` (a vocabulary of real words) and ``check_resume`` (the checkpoint
resumed from fits this run's data and network).

A new start-up check goes here, in one of the two functions, so ``train()`` stays the same. A mistake is
a :class:`ConfigError` (or the ``UserError`` of the module that found it): one line naming the key, the
value and what was expected.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import hydra
import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig, open_dict

from captioning.checkpoints.save import remove_orphan_temps
from captioning.config_safety import check_targets
from captioning.data.vocab import SPECIALS, Vocab
from captioning.errors import ConfigError, one_line
from captioning.training.build import build_model
from captioning.training.job_record import finished_run_differences
from captioning.training.requeue import resume_requeued
from captioning.training.resume import (
    AUTO,
    ResumeError,
    averages_weights,
    check_fresh_run_dir,
    check_resume_matches,
    checkpoint_folders,
    finished_checkpoint,
    read_summary,
    resolve_ckpt_path,
)
from captioning.training.validate import check_config, check_vocabulary

PLACEHOLDER_WORDS = 4  # any size works: only the embedding and output layers depend on it


@dataclass(frozen=True)
class Start:
    """Where a run starts: ``ckpt_path`` to resume from (None: fresh), or ``finished``, the best checkpoint
    of a run that already finished in this folder (``ckpt_path=auto``: nothing to train)."""

    ckpt_path: str | None = None
    finished: str | None = None


def check_before_data(cfg: DictConfig, job: dict[str, Any]) -> Start:
    """Every check that needs no data; raises on the first kind of mistake (all its keys in one line).
    ``job``: this job's record (captioning/training/job_record.py), what a finished run must match."""
    check_targets(cfg)  # every _target_ on the allow-list (config_safety.py): nothing built before this
    check_config(cfg)  # types and ranges of every value, metric and monitor names (one line each)
    check_model_config(cfg)  # what the constructors refuse (dimensions that do not fit, ...)
    resume_requeued(cfg)  # a SLURM job started again after a requeue: ckpt_path=auto (requeue.py)
    if (
        str(cfg.get("ckpt_path")) == AUTO
    ):  # a sweep re-run after a stop: its finished jobs are not trained again
        summary = read_summary(cfg.output_dir)
        done = finished_checkpoint(summary)
        if done:
            check_finished_run_is_this_job(cfg, job, summary, done)
            print(
                f"ckpt_path=auto: {cfg.output_dir} holds a finished run (run.json); its best: {done}",
                file=sys.stderr,
            )
            return Start(finished=done)
    ckpt_path = resolve_ckpt_path(cfg.get("ckpt_path"), cfg.output_dir)  # "last" -> output_dir/checkpoints
    if ckpt_path and cfg.get("init_from"):  # the same overrides plus ckpt_path=last: the resumed weights win
        print(f"resuming from {ckpt_path}: init_from={cfg.init_from} is not loaded", file=sys.stderr)
    else:
        check_init_from(cfg.get("init_from"))  # a starting checkpoint that cannot even be read
    check_fresh_run_dir(cfg.output_dir, ckpt_path)  # a reused run folder: never overwrite its checkpoints
    note = low_precision_note(cfg)
    if note:
        print(note, file=sys.stderr)
    for folder in checkpoint_folders(cfg):  # a write a kill interrupted: its target is rewritten later
        removed = remove_orphan_temps(folder)
        if removed:
            print(
                f"removed {len(removed)} temp file(s) of checkpoint writes a kill interrupted in {folder}: "
                + ", ".join(p.name for p in removed[:3]),
                file=sys.stderr,
            )
    return Start(ckpt_path=ckpt_path)


def check_finished_run_is_this_job(
    cfg: DictConfig, job: dict[str, Any], summary: dict, checkpoint: str
) -> None:
    """``ckpt_path=auto`` found a finished run in this job's folder: it stands for this job only if it was
    trained with this job's model, data, seed and starting weights (captioning/training/job_record.py).
    Otherwise one line naming the overrides and keys that differ (``train()`` then writes the folder's
    ``.hydra/`` files back as they were: ``job_record.earlier_run_kept``)."""
    differences = finished_run_differences(cfg, job, summary, checkpoint)
    if not differences:
        return
    shown = "; ".join(differences[:5]) + ("; ..." if len(differences) > 5 else "")
    raise ResumeError(
        f"ckpt_path=auto: {cfg.output_dir} holds a finished run of another config ({shown}), so its "
        f"checkpoint is not this job's; re-run the original command (a sweep's values in their original "
        f"order), or give this job a folder of its own (hydra.run.dir / hydra.sweep.dir)"
    )


HALF_WEIGHTS = {"bf16-true": 8, "16-true": 11}  # precision -> bits of the weights' significand


def low_precision_note(cfg: DictConfig) -> str | None:
    """One line for a run whose weights and optimizer state are half precision (``trainer.precision``
    ``bf16-true`` / ``16-true``): an update smaller than a weight's last bit is lost, so a small learning
    rate (SCST's 2e-5, a cosine schedule's tail) may train little or nothing, where the CPU's float32 run
    trains. Said, not refused: memory can make it the only way to fit a model."""
    precision = str(cfg.get("trainer", {}).get("precision"))
    bits = HALF_WEIGHTS.get(precision)
    if bits is None:
        return None
    lr = cfg.get("model", {}).get("optimizer", {}).get("lr")
    return (
        f"note: trainer.precision={precision} keeps the weights and the optimizer's state in "
        f"{precision.removesuffix('-true')} ({bits} significant bits): a step smaller than ~2^-{bits} of a weight "
        f"is lost, so lr={lr} may train less than in float32; trainer.precision="
        f"{'bf16' if precision.startswith('bf16') else '16'}-mixed keeps float32 weights"
    )


def check_model_config(cfg: DictConfig) -> None:
    """Build ``cfg.model`` with a placeholder vocabulary: whatever the constructors refuse (encoder/decoder
    dimensions in ``CaptionModel``, ``beam_size >= 1``, encoder weight files, ...) surfaces in seconds, in
    their own words, instead of after the data (reading it fixes the vocabulary size)."""
    vocab = Vocab([*SPECIALS, *(f"w{i}" for i in range(PLACEHOLDER_WORDS))])
    # Leave the global RNG as it was: the real model must be initialised exactly as without this check.
    with torch.random.fork_rng(devices=[]):
        try:
            build_model(cfg.model, vocab)  # built, checked, dropped
        except Exception as err:  # noqa: BLE001 - whatever a constructor refuses is a config error
            message = one_line(err)
            raise ConfigError(message if message.startswith("model:") else f"model: {message}") from err


def check_init_from(path: str | None) -> None:
    """The ``init_from`` file loads as a captioner (CheckpointError naming it otherwise), before the data
    are read: its fit with this run's vocabulary and network is checked when the weights are copied."""
    if path:
        from captioning.checkpoints.load import load_checkpoint

        load_checkpoint(path)


def instantiate(node: Any, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate``, where a constructor refusing its arguments (``split=bogus``,
    ``precision=bogus``, ``every_n_steps=-1``) is a config mistake: one line with its key."""
    try:
        return hydra.utils.instantiate(node, **kwargs)
    except InstantiationException as err:
        raise ConfigError(one_line(err)) from err


def instantiate_dict(cfg: DictConfig | None) -> list:
    """Instantiate every entry of a ``name: {_target_: ...}`` mapping (callbacks, loggers)."""
    return [instantiate(node) for node in (cfg or {}).values() if node is not None]


def read_vocabulary(cfg: DictConfig, datamodule: Any) -> Vocab:
    """The training vocabulary (refused if it holds special tokens only); its size becomes the decoder's
    ``vocab_size`` in ``cfg`` (logged with the rest of the config)."""
    vocab = datamodule.build_vocab()
    check_vocabulary(vocab, cfg.data.min_word_count)
    with open_dict(cfg):
        cfg.model.decoder.vocab_size = len(vocab)
    return vocab


def check_resume(cfg: DictConfig, ckpt_path: str | None, vocab: Vocab, model: Any) -> None:
    """Resuming: the data must give the checkpoint's vocabulary, the model its network config, the
    objective and the weight average must be the same, and steps must be left to train."""
    if ckpt_path:
        check_resume_matches(
            ckpt_path,
            vocab.to_dict(),
            model.net_config,
            cfg.trainer.get("max_steps"),
            weight_average=averages_weights(cfg.get("callbacks")),
            self_critical=str(cfg.model.get("_target_", "")).endswith("SelfCriticalLitModule"),
        )
