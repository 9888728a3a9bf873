"""The jobs of a ``captioning-train -m`` sweep as the sweep scripts read them: found, grouped, selected.

Hydra leaves one folder per job with ``.hydra/`` (its overrides and composed config) and, when fit ends,
``run.json`` (the RunSummary callback: the best checkpoint, its validation metrics, the train time). Every
sweep script (``compare.py``, ``scst_sweep.py``, ``soft_vs_hard.py``, ``soft_vs_hard_sweep.py``,
``sweep_records.py``) reads jobs through these functions, so "a job", "its configuration" and "its seed"
mean the same thing in all of them:

* ``find_jobs``: every folder holding ``.hydra/overrides.yaml`` under a sweep, in job-number order;
* ``swept_keys`` / ``job_label``: the overrides whose values differ between jobs name the configurations
  (``seed`` and the keys of a run's place, ``RUN_KEYS``, excepted);
* ``only_filter`` / ``has_overrides``: the ``--only KEY=VALUE`` selection the scripts share.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

SEED_KEY = "seed"
RUN_KEYS = ("init_from", "ckpt_path")  # where a job starts from or resumes: per job, not a configuration


def pair(text: str, flag: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise ValueError(f"{flag} {text!r}: expected NAME=VALUE")
    return name, value


def parse_override(text: str) -> tuple[str, str]:
    """``model/decoder=soft`` -> (``model/decoder``, ``soft``); ``+key=v`` / ``++key=v`` -> (``key``, ``v``)."""
    key, _, value = text.partition("=")
    return key.lstrip("+~"), value


def with_overrides(base: list[str], extra: list[str]) -> list[str]:
    """``base`` without the keys ``extra`` sets, then ``extra``: one value per key, the later list's (a recipe
    over a job's overrides, a user's flags over a recipe)."""
    replaced = {parse_override(o)[0] for o in extra}
    return [*(o for o in base if parse_override(o)[0] not in replaced), *extra]


def finished_summary(path: Path) -> dict | None:
    """run.json of a job whose fit ended (it is also written, unfinished, after every validation)."""
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    return summary if summary.get("finished", True) else None


def find_jobs(sweep_dir: Path) -> list[dict]:
    """Every job folder under ``sweep_dir`` (one holding .hydra/overrides.yaml), in job-number order."""
    jobs = []
    for overrides_file in sweep_dir.rglob(".hydra/overrides.yaml"):
        folder = overrides_file.parent.parent
        hydra_file = folder / ".hydra" / "hydra.yaml"
        hydra_cfg = OmegaConf.load(hydra_file).hydra if hydra_file.is_file() else OmegaConf.create({})
        summary_file = folder / "run.json"
        jobs.append(
            {
                "dir": folder.resolve(),
                "name": folder.relative_to(sweep_dir).as_posix(),
                "num": OmegaConf.select(hydra_cfg, "job.num", default=None),
                "overrides": dict(parse_override(str(o)) for o in OmegaConf.load(overrides_file)),
                "choices": dict(OmegaConf.select(hydra_cfg, "runtime.choices", default={}) or {}),
                "cwd": OmegaConf.select(hydra_cfg, "runtime.cwd", default=None),
                "launcher": dict(OmegaConf.select(hydra_cfg, "launcher", default={}) or {}),
                "summary": finished_summary(summary_file),
            }
        )
    return sorted(jobs, key=lambda j: (j["num"] is None, j["num"] or 0, natural_key(j["name"])))


def natural_key(name: str) -> list[tuple[int, int, str]]:
    """``2`` before ``11``: a job launched alone (``hydra.sweep.subdir=N``) is Hydra's job 0, so its folder
    name is what orders it."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in name.split("/")]


def swept_keys(jobs: list[dict]) -> list[str]:
    """The override keys whose values are not the same in every job, in the order they were given; keys
    that name a run's inputs or place (``RUN_KEYS``: an SCST job's ``init_from`` is its own XE run) never
    make a configuration."""
    keys = list(dict.fromkeys(k for job in jobs for k in job["overrides"] if not is_run_key(k)))
    return [k for k in keys if len({job["overrides"].get(k) for job in jobs}) > 1]


def is_run_key(key: str) -> bool:
    return key in RUN_KEYS or key.startswith("hydra.")


def override_problem(text: str, reserved: tuple[str, ...] = (), per: str = "job") -> str | None:
    """Why ``text`` cannot be an override a sweep script adds to every run it starts (None when it can): not
    ``KEY=VALUE``, or a key the script sets per ``per`` itself (``reserved``, the run keys, ``hydra.*``)."""
    key, sep, _ = text.partition("=")
    if not sep or not key.lstrip("+~"):
        return "expected KEY=VALUE (a Hydra override)"
    key = parse_override(text)[0]
    if key in reserved or is_run_key(key):
        return f"{key} is set per {per} by this script"
    return None


def common_overrides(jobs: list[dict], swept: list[str]) -> list[str]:
    first = jobs[0]["overrides"] if jobs else {}
    return [f"{k}={v}" for k, v in first.items() if k not in swept and not is_run_key(k)]


def job_label(job: dict, group_keys: list[str]) -> str:
    """The configuration's name: the value of the one swept key, ``k=v k=v`` for several, else the decoder."""
    if not group_keys:
        return job["choices"].get("model/decoder") or job["overrides"].get("model/decoder", "run")
    if len(group_keys) == 1:
        return job["overrides"].get(group_keys[0], "(default)")
    return " ".join(f"{k}={job['overrides'].get(k, '(default)')}" for k in group_keys)


def job_seed(job: dict) -> int:
    seed = job["overrides"].get(SEED_KEY)
    if seed is None:  # not overridden: the config's own
        config_file = job["dir"] / ".hydra" / "config.yaml"
        seed = OmegaConf.load(config_file).get(SEED_KEY, 0) if config_file.is_file() else 0
    return int(seed)


def only_filter(texts: list[str]) -> dict[str, set[str]]:
    """``--only`` flags -> {key: accepted values}: a key given twice accepts either value (``--only seed=1
    --only seed=2``), different keys must all hold (``--only seed=1 --only experiment=flickr8k_soft``)."""
    only: dict[str, set[str]] = {}
    for key, value in (pair(text, "--only") for text in texts):
        only.setdefault(key, set()).add(value)
    return only


def describe_only(only: dict[str, set[str]]) -> str:
    return " ".join(f"--only {key}={value}" for key, values in only.items() for value in sorted(values))


def has_overrides(job: dict, only: dict[str, set[str]]) -> bool:
    """Whether the job was launched with, for every key of ``only`` (``only_filter``), one of its values."""
    return all(job["overrides"].get(key) in values for key, values in only.items())


def job_checkpoint(job: dict) -> Path | None:
    """The job's best checkpoint (run.json), found in the job's own folder if the sweep was moved."""
    recorded = (job["summary"] or {}).get("checkpoint")
    if not recorded:
        return None
    path = Path(recorded)
    if not path.is_absolute() and job["cwd"]:
        path = Path(job["cwd"]) / path
    if not path.is_file() and (job["dir"] / "checkpoints" / path.name).is_file():
        path = job["dir"] / "checkpoints" / path.name
    return path if path.is_file() else None
