"""Resuming a run: ``ckpt_path=last`` -> the run's ``last.ckpt``, and a check that it fits this run.

Resuming means re-running ``captioning-train`` with the same overrides and the same ``hydra.run.dir``
(hence the same ``output_dir``) plus ``ckpt_path=last``. Lightning then restores the weights, optimizer
and scheduler state, the global step and the position in the epoch. Two things it cannot check are
checked here, before any training time is spent: the vocabulary rebuilt from the data must be the
checkpoint's (otherwise word ids silently change meaning) and the network config must be the same.

``last.ckpt`` is rewritten every ``callbacks.last_checkpoint.every_n_train_steps`` optimizer steps, so
a crash loses at most that many steps. After a mid-epoch resume the interrupted epoch runs its remaining
number of batches, drawn from a freshly shuffled loader (the sampler position is not saved).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.load import read_checkpoint
from captioning.checkpoints.save import non_finite_tensors
from captioning.data.vocab import vocabulary_difference
from captioning.errors import UserError
from captioning.models.legacy import canonical_name, modernise_config
from captioning.models.registry import constructor_defaults

LAST = "last"
AUTO = "auto"  # resume if last.ckpt exists, else start; a finished run (run.json) is not trained again


class ResumeError(ValueError, UserError):
    """The checkpoint to resume from is missing or does not belong to this run's data/config."""


def last_checkpoint_path(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints" / "last.ckpt"


def resolve_ckpt_path(ckpt_path: str | None, output_dir: str | Path) -> str | None:
    """``None`` -> ``None`` (fresh run); ``"last"`` -> ``<output_dir>/checkpoints/last.ckpt``; ``"auto"`` ->
    that file if it exists, else ``None`` (a preempted or stopped sweep job, re-run with the same command,
    goes on where it stopped); else a file."""
    if ckpt_path is None or str(ckpt_path) == "":
        return None
    if str(ckpt_path) == AUTO:
        path = last_checkpoint_path(output_dir)
        return str(path) if path.is_file() else None
    if str(ckpt_path) == LAST:
        path = last_checkpoint_path(output_dir)
        if not path.is_file():
            raise ResumeError(
                f"ckpt_path=last: {path} does not exist. To resume a run, re-run it with the same "
                f"hydra.run.dir (this run's output_dir is {output_dir}); to start afresh, drop ckpt_path."
            )
        return str(path)
    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise ResumeError(f"ckpt_path={ckpt_path}: no such checkpoint file")
    return str(path)


def read_summary(output_dir: str | Path) -> dict:
    """The ``run.json`` of ``output_dir`` as a dict ({} when missing, unreadable or not an object)."""
    try:
        summary = json.loads((Path(output_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def finished_checkpoint(summary: dict) -> str | None:
    """The best checkpoint of a finished run's ``run.json`` (``summary``: it says ``finished`` and names an
    existing file), else ``None``: what ``ckpt_path=auto`` returns instead of training again."""
    if summary.get("finished") is not True:
        return None
    checkpoint = summary.get("checkpoint")
    return checkpoint if isinstance(checkpoint, str) and Path(checkpoint).is_file() else None


def checkpoint_folders(cfg: Any) -> list[Path]:
    """The folders this run writes checkpoints to: ``output_dir/checkpoints`` and every callback's
    ``dirpath``."""
    folders = [Path(cfg.output_dir) / "checkpoints"]
    for node in (cfg.get("callbacks") or {}).values():
        dirpath = node.get("dirpath") if node is not None and hasattr(node, "get") else None
        if isinstance(dirpath, str) and dirpath and Path(dirpath) not in folders:
            folders.append(Path(dirpath))
    return folders


def check_fresh_run_dir(output_dir: str | Path, ckpt_path: str | None) -> None:
    """A fresh run (no ``ckpt_path``) must not start in a folder that already holds checkpoints: its
    ``last.ckpt`` and best checkpoints would be overwritten or mixed with the new run's (Lightning only
    warns). Resume it with ``ckpt_path=last``, or give the new run its own ``hydra.run.dir``."""
    if ckpt_path:
        return
    folder = Path(output_dir) / "checkpoints"
    found = sorted(p.name for p in folder.glob("*.ckpt")) if folder.is_dir() else []
    if found:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise ResumeError(
            f"{folder} already holds checkpoints ({shown}) of an earlier run: resume it with "
            f"ckpt_path=last (a sweep's job: the same command plus ckpt_path=auto), or start afresh in "
            f"another folder (hydra.run.dir, hydra.sweep.dir, or run_dir= in Python); nothing was overwritten"
        )


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict as ``{"a.b.c": leaf}``."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


def _default_of(config: dict[str, Any], key: str) -> Any:
    """The constructor default of the argument ``key`` names (``"encoder.stride"``: SmallCNN's ``stride``),
    looked up through the closed registry by its node's ``_target_``; ``<absent>`` when there is none."""
    node, _, name = key.rpartition(".")
    target = canonical_name(str(config.get(f"{node}._target_" if node else "_target_", "")))
    return constructor_defaults(target).get(name, "<absent>") if target else "<absent>"


def _config_differences(saved: str | dict | None, current: str) -> list[str]:
    """The keys whose values differ. A key the saved config lacks matches when this run sets it to its
    constructor default: an option added after the checkpoint was written, left as it was then."""
    as_dict = [OmegaConf.to_container(OmegaConf.create(c or {}), resolve=True) for c in (saved, current)]
    modernise_config(as_dict[0])  # an earlier version's names, read as today's
    old, new = (flatten(c) for c in as_dict)
    for key in new.keys() - old.keys():
        old[key] = _default_of(new, key)
    return flat_differences(old, new)


def flat_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every dotted key whose values differ (``<absent>`` where a side lacks it)."""
    return [
        f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}"
        for k in sorted(old.keys() | new.keys())
        if old.get(k, "<absent>") != new.get(k, "<absent>")
    ]


def averages_weights(callbacks: Any) -> bool:
    """Whether a ``callbacks`` config (name -> {_target_: ...}) includes the weight average."""
    return any(
        str((c or {}).get("_target_", "")).endswith(".WeightAverage") for c in (callbacks or {}).values()
    )


def check_resume_matches(
    ckpt_path: str | Path,
    vocab: dict,
    net_config: str,
    max_steps: int | None = None,
    weight_average: bool = False,
    self_critical: bool | None = None,
) -> None:
    """Raise :class:`ResumeError` unless ``ckpt_path`` holds this run's vocabulary and network config,
    has steps left to train under ``max_steps`` (-1 or None: no step limit), and, if its weights are a
    weight average, this run keeps averaging (``weight_average``: the run has the callback); with
    ``self_critical`` (True/False) it must have been trained with that objective too."""
    checkpoint = read_checkpoint(ckpt_path)
    saved_scst = "num_samples" in (checkpoint.get("hyper_parameters") or {})  # SelfCriticalLitModule's
    if self_critical is not None and saved_scst != self_critical:  # an optimizer state of the other loss
        kinds = ("a cross-entropy", "an SCST")
        raise ResumeError(
            f"{ckpt_path}: it is {kinds[saved_scst]} checkpoint and this run is {kinds[self_critical]} run; "
            + (
                f"start SCST from its weights with init_from={ckpt_path} (ckpt_path resumes an SCST run)"
                if self_critical
                else "resume it with objective=scst"
            )
        )
    averaged = (checkpoint.get("callbacks") or {}).get("WeightAverage") or {}
    if "trained" in averaged and not weight_average:
        raise ResumeError(  # else training would go on from the average, the trained weights dropped
            f"{ckpt_path}: its weights are a weight average (the trained ones are in its WeightAverage "
            "state); resume with callbacks=weight_average, as it was trained"
        )
    done = checkpoint.get("global_step")
    if not isinstance(done, int) or isinstance(done, bool) or done < 0:
        raise ResumeError(
            f"{ckpt_path}: its global_step is {done!r}; expected the integer step >= 0 it was saved at"
        )
    if isinstance(max_steps, int) and 0 <= max_steps <= done:
        raise ResumeError(  # Lightning would end at once, saying nothing
            f"{ckpt_path}: it is at step {done}, and trainer.max_steps={max_steps} leaves nothing to train; "
            f"raise trainer.max_steps above {done} to train further"
        )
    bad = non_finite_tensors(checkpoint["state_dict"])
    if bad:  # say which file is broken, before training blames its first step on the update
        raise ResumeError(
            f"{ckpt_path}: non-finite weights (NaN/inf) in {', '.join(bad[:3])}; resume from an earlier "
            "checkpoint of this run (checkpoints/*.ckpt) instead"
        )
    meta = checkpoint[CHECKPOINT_KEY]
    saved_words, words = list(meta.get("vocab", {}).get("itos", [])), list(vocab["itos"])
    if saved_words != words:
        raise ResumeError(
            f"{ckpt_path}: its vocabulary differs from the one built from this run's data "
            f"({vocabulary_difference(saved_words, words)}); resume with the original data config"
        )
    differences = _config_differences(meta.get("net_config"), net_config)
    if differences:
        raise ResumeError(
            f"{ckpt_path}: the network config differs from this run's ({'; '.join(differences[:5])}); "
            "resume with the model overrides of the original run"
        )
