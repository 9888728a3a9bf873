"""What a job was, kept in ``run.json`` (``"job"``), and the check that a finished run found by
``ckpt_path=auto`` is this job's.

``ckpt_path=auto`` re-runs a stopped sweep with the same command: a job whose folder holds a finished run is
not trained again, its best checkpoint stands. The folder is named by the job's number only, so a sweep
re-run with its values in another order (``model/decoder=soft,transformer`` where it was
``soft,hard_gumbel``), or one run re-run with another override into the same ``hydra.run.dir``, found
another config's run there and returned its checkpoint as this job's. Worse, Hydra had already rewritten the
folder's ``.hydra/`` files with this job's before the job started, so the folder said ``transformer`` over a
Gumbel LSTM's checkpoint, and ``scripts/compare.py`` labelled it so.

Now the keys that define what was trained (``RESULT_KEYS``: the model with its objective and optimizer, the
data, the seed, the starting weights) are compared with the finished run's; how a run is run (workers,
time limits, logging, callbacks, paths) may change between the two. A key the finished run's record lacks
is an option added since, left as it was then. A difference is refused in one line naming the overrides
and keys, and the folder's ``.hydra/`` files are written back as they were (``run.json`` keeps them word
for word; :func:`earlier_run_kept` does so for every refused start). A run.json from before the record is
checked by its checkpoint's network config.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from captioning.data.files import write_text_atomically

RESULT_KEYS = ("model", "data", "seed", "init_from")  # what was trained; the rest is how it was run
LOADING = ("data.num_workers", "data.eval_batch_size", "data.feature_cache")  # how data are served
HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")  # Hydra's record of the job, in .hydra/
VOLATILE_OVERRIDES = ("ckpt_path=", "+ckpt_path=", "++ckpt_path=")  # what re-running the same job adds


def job_record(cfg: DictConfig, output_dir: str | Path | None = None) -> dict[str, Any]:
    """``{"config": RESULT_KEYS of the config as composed (interpolations as written), "overrides": the
    job's command-line overrides (None outside a Hydra job), "hydra_files": output_dir/.hydra's files as
    they are now}``. Taken before the data are read (they set the decoder's vocabulary size)."""
    config = OmegaConf.to_container(cfg, resolve=False)
    folder = Path(output_dir) / ".hydra" if output_dir is not None else None
    files = {}
    for name in HYDRA_FILES if folder is not None else ():
        try:
            files[name] = (folder / name).read_text()
        except OSError:
            continue
    return {
        "config": {key: config[key] for key in RESULT_KEYS if key in config},
        "overrides": _hydra_overrides(),
        "hydra_files": files,
    }


def data_choice() -> str | None:
    """The data config this Hydra job composed (``data=flickr8k``, or an experiment's choice); None outside
    a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    choice = HydraConfig.get().runtime.choices.get("data")
    return str(choice) if choice else None


def _hydra_overrides() -> list[str] | None:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return [str(o) for o in HydraConfig.get().overrides.task]


def _result_differences(saved: dict, current: dict) -> list[str]:
    """The result-defining keys that differ; a key the saved record lacks (added since) is not one."""
    from captioning.training.resume import flat_differences, flatten

    old, new = flatten(saved), flatten(current)
    keep = [k for k in old if not k.startswith(LOADING)]
    return flat_differences({k: old[k] for k in keep}, {k: new.get(k, "<absent>") for k in keep})


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


def _overrides(record: dict[str, Any]) -> set[str] | None:
    given = record.get("overrides")
    if not isinstance(given, list):
        return None
    return {str(o) for o in given if not str(o).startswith(VOLATILE_OVERRIDES)}


def finished_run_differences(
    cfg: DictConfig, mine: dict[str, Any], summary: dict, checkpoint: str
) -> list[str]:
    """How this job (``cfg``, its :func:`job_record` ``mine``) differs from the finished run whose ``run.json``
    is ``summary``; [] when it is the same."""
    record = summary.get("job")
    if not (isinstance(record, dict) and isinstance(record.get("config"), dict)):
        return _network_differences(cfg, checkpoint)
    differences = _result_differences(record["config"], mine["config"])
    theirs, kept = _overrides(record), _overrides(mine)
    if differences and theirs is not None and kept is not None and theirs != kept:
        # the command lines' difference first: what the user typed, before the keys it changed
        differences.insert(0, f"overrides {sorted(theirs - kept)} -> {sorted(kept - theirs)}")
    return differences


def restore_hydra_files(output_dir: str | Path, record: Any) -> list[str]:
    """Write the folder's ``.hydra/`` files back as a run's job ``record`` has them (Hydra, or
    ``captioning.train``, rewrote them with this job's before it started); the names written."""
    files = record.get("hydra_files") if isinstance(record, dict) else None
    folder = Path(output_dir) / ".hydra"
    if not isinstance(files, dict) or not folder.is_dir():
        return []
    written = []
    for name, text in files.items():
        if name in HYDRA_FILES and isinstance(text, str):
            write_text_atomically(folder / name, text)
            written.append(name)
    return written


@contextlib.contextmanager
def earlier_run_kept(output_dir: str | Path) -> Iterator[None]:
    """A start refused in a folder that holds an earlier run (a fresh run over its checkpoints, a resume that
    does not fit it, ``ckpt_path=auto`` finding another config's run) leaves the folder's ``.hydra/`` files
    as that run had them: Hydra wrote this command's there before the run started, so the folder described
    a model its checkpoints are not, and lost the overrides the refusal asks to give again. The earlier
    files come from the record in its ``run.json`` (written at every validation); the refusal says so."""
    from captioning.errors import is_user_error, reported
    from captioning.training.resume import read_summary

    record = read_summary(output_dir).get("job")
    try:
        yield
    except Exception as err:
        restored = restore_hydra_files(output_dir, record) if is_user_error(err) else []
        if restored:
            said = f"the folder's .hydra/ files were written back from its run.json ({', '.join(restored)})"
            shown = reported(err)  # what the one-line report prints (a Hydra wrapper's cause)
            if type(shown).__str__ is BaseException.__str__ and [type(a) for a in shown.args] == [str]:
                shown.args = (f"{shown.args[0]}; {said}",)  # the refusal's one line says it
            else:  # an error whose text is not its one argument (OSError's errno, OmegaConf's key)
                print(f"{output_dir}: {said}", file=sys.stderr)
        raise


def attach(callbacks: list, record: dict[str, Any]) -> None:
    """Give the run's RunSummary (if it has one) this job's ``record``, for its run.json."""
    from captioning.training.callbacks.run_summary import RunSummary

    for callback in callbacks:
        if isinstance(callback, RunSummary):
            callback.job = record
