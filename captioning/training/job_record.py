"""What a job was: its resolved config and its overrides, kept in ``run.json`` (``"job"``), and the check that
a finished run found by ``ckpt_path=auto`` is this job's.

``ckpt_path=auto`` re-runs a stopped sweep with the same command: a job whose folder holds a finished run is
not trained again, its best checkpoint stands. The folder is named by the job's number only, so a sweep
re-run with its values in another order (``model/decoder=soft,transformer`` where it was
``soft,hard_gumbel``), or one run re-run with another override into the same ``hydra.run.dir``, found
another config's run there and returned its checkpoint as this job's. Worse, Hydra had already rewritten the
folder's ``.hydra/`` files with this job's overrides before the job started, so the folder said
``transformer`` over a Gumbel LSTM's checkpoint, and ``scripts/compare.py`` labelled it so. Now the job's
config is compared with the finished run's (run.json's ``job``, or, for a run.json written before it was
kept, the checkpoint's network config); a difference is refused in one line naming the keys, and the
folder's ``.hydra/`` files are written back from the record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from captioning.data.files import write_text_atomically

# What a re-run of the same job may change: `ckpt_path=auto` itself, and the folder (a sweep moved or copied
# elsewhere is the same sweep; the paths under it are interpolations of output_dir, compared as written).
VOLATILE = ("ckpt_path", "output_dir")


def job_record(cfg: DictConfig) -> dict[str, Any]:
    """``{"config": the config as composed (interpolations as written, as Hydra's .hydra/config.yaml holds
    it) less VOLATILE, "overrides": the job's command-line overrides (None outside a Hydra job)}``. Taken
    before the data are read (they set the decoder's vocabulary size)."""
    config = OmegaConf.to_container(cfg, resolve=False)
    for key in VOLATILE:
        config.pop(key, None)
    return {"config": config, "overrides": _hydra_overrides()}


def _hydra_overrides() -> list[str] | None:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return [str(o) for o in HydraConfig.get().overrides.task]


def config_differences(saved: dict, current: dict) -> list[str]:
    """``key: saved -> current`` for every value that differs (``<absent>`` for a missing key)."""
    from captioning.training.resume import _flatten

    old, new = _flatten(saved), _flatten(current)
    return [
        f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}"
        for k in sorted(old.keys() | new.keys())
        if old.get(k, "<absent>") != new.get(k, "<absent>")
    ]


def _network_differences(cfg: DictConfig, checkpoint: str) -> list[str]:
    """A run.json without a job record: the checkpoint's network config against this job's."""
    from captioning.checkpoints.format import CHECKPOINT_KEY
    from captioning.checkpoints.load import read_checkpoint
    from captioning.training.build import net_config
    from captioning.training.resume import _config_differences

    meta = read_checkpoint(checkpoint).get(CHECKPOINT_KEY) or {}
    saved = OmegaConf.create(meta.get("net_config") or {})
    vocab_size = int(OmegaConf.select(saved, "decoder.vocab_size", default=0) or 0)
    mine = OmegaConf.to_yaml(net_config(cfg.model, vocab_size))
    return [f"model.{d}" for d in _config_differences(meta.get("net_config"), mine)]


def finished_run_differences(cfg: DictConfig, summary: dict, checkpoint: str) -> list[str]:
    """How this job differs from the finished run whose ``run.json`` is ``summary``; [] when it is the same."""
    record = summary.get("job")
    if not (isinstance(record, dict) and isinstance(record.get("config"), dict)):
        return _network_differences(cfg, checkpoint)
    mine = job_record(cfg)
    differences = config_differences(record["config"], mine["config"])
    if differences and isinstance(record.get("overrides"), list) and mine["overrides"] is not None:
        # the command lines' difference first: what the user typed, before the keys it changed
        kept = {o for o in mine["overrides"] if not o.startswith(tuple(f"{k}=" for k in VOLATILE))}
        theirs = set(record["overrides"])
        differences.insert(0, f"overrides {sorted(theirs - kept)} -> {sorted(kept - theirs)}")
    return differences


def restore_hydra_files(output_dir: str | Path, summary: dict) -> bool:
    """Write the finished run's ``.hydra/overrides.yaml`` and ``config.yaml`` back from its record (Hydra
    rewrote them with this job's before the job started); False when there is no record to write back."""
    record = summary.get("job")
    folder = Path(output_dir) / ".hydra"
    if not isinstance(record, dict) or not folder.is_dir():
        return False
    if isinstance(record.get("config"), dict):
        write_text_atomically(folder / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(record["config"])))
    if isinstance(record.get("overrides"), list):
        write_text_atomically(
            folder / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(record["overrides"]))
        )
    return True


def attach(callbacks: list, record: dict[str, Any]) -> None:
    """Give the run's RunSummary (if it has one) this job's ``record``, for its run.json."""
    from captioning.training.callbacks.run_summary import RunSummary

    for callback in callbacks:
        if isinstance(callback, RunSummary):
            callback.job = record


def read_summary(output_dir: str | Path) -> dict:
    """The run.json of ``output_dir`` as a dict ({} when missing or unreadable)."""
    try:
        summary = json.loads((Path(output_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}
