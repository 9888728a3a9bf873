"""Training and evaluation from Python, with the same overrides as ``captioning-train`` and ``captioning
evaluate``, from a clone or an installed wheel (the configs ship inside the package):

    import captioning
    run = captioning.train(["debug=tiny", "trainer.max_epochs=1"], run_dir="runs/tiny")
    run.best_checkpoint, run.metrics            # Path, {"val/CIDEr": ...} of the best validation
    scores = captioning.evaluate(run.best_checkpoint, ["data.test.num_images=8"])
    scores.report.scores                         # {"CIDEr": ..., "Bleu_4": ...}

A mistake in the overrides (an unknown key, a value the checks refuse, a data set that is not there)
raises a ``ValueError`` (:class:`captioning.errors.ConfigError` for the overrides) with the one line the command would
print; nothing calls ``sys.exit``. This module is an entry point (like the CLI): it runs
``captioning.training.train``'s ``train``, which sets the process's thread settings when first imported
(``captioning.runtime``), so importing ``captioning`` alone still changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from captioning.errors import ConfigError, UserError, is_user_error, one_line

RUN_DIR = "hydra.run.dir="


@dataclass
class TrainingRun:
    """What ``train`` leaves: the run folder, its best checkpoint, and that checkpoint's validation metrics
    (``run.json``'s ``best``; empty when no validation ran, and the checkpoint is then last.ckpt)."""

    run_dir: Path
    best_checkpoint: Path
    metrics: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict, repr=False)  # the whole run.json


def _check_overrides(overrides: Sequence[str], what: str) -> list[str]:
    if isinstance(overrides, str) or not isinstance(overrides, Sequence):
        raise TypeError(
            f"{what}: overrides={overrides!r}; expected a list of Hydra overrides such as "
            "['trainer.max_epochs=1']"
        )
    bad = [o for o in overrides if not isinstance(o, str) or "=" not in o and not o.startswith("~")]
    if bad:
        raise ConfigError(f"{what}: {bad[0]!r} is not an override; expected key=value, e.g. 'data=flickr8k'")
    return list(overrides)


def _compose(config: str, overrides: list[str]):
    """The composed config, or ConfigError with the one line the commands print."""
    from captioning.compose import compose_config

    try:
        return compose_config(config, overrides)
    except Exception as err:  # noqa: BLE001 - only what composition refuses is re-raised as one line
        if not is_user_error(err):
            raise
        raise ConfigError(one_line(err)) from err


def train(overrides: Sequence[str] = (), run_dir: str | Path | None = None) -> TrainingRun:
    """Train as ``captioning-train *overrides`` does, into ``run_dir`` (default: outputs/DATE/TIME, as the
    command; ``hydra.run.dir=...`` among the overrides is the same). Sweeps (``-m``) and other ``hydra.*``
    settings are the command's. The composed config is saved as ``.hydra/config.yaml`` and the overrides
    as ``.hydra/overrides.yaml`` in the run folder, where ``scripts/compare.py`` looks for them."""
    overrides = _check_overrides(overrides, "train")
    given = [o.split("=", 1)[1] for o in overrides if o.startswith(RUN_DIR)]
    overrides = [o for o in overrides if not o.startswith(RUN_DIR)]
    other = next((o for o in overrides if o.lstrip("+~").startswith(("hydra.", "hydra/"))), None)
    if other is not None:
        raise ConfigError(
            f"train: {other!r}: hydra settings other than hydra.run.dir configure the command "
            "(sweeps: captioning-train -m ...), not this function"
        )
    if run_dir is not None and given:
        raise ConfigError(f"train: run_dir={str(run_dir)!r} and {RUN_DIR}{given[-1]} given together")
    run = Path(run_dir or (given[-1] if given else datetime.now().strftime("outputs/%Y-%m-%d/%H-%M-%S")))
    if not str(run).strip():
        raise ConfigError("train: run_dir='': expected a folder path")
    from omegaconf import OmegaConf, open_dict

    from captioning.training.train import train as run_training

    if any(o.lstrip("+~").startswith("output_dir=") for o in overrides):
        raise ConfigError("train: output_dir is the run folder: give run_dir= instead")
    cfg, choices = _compose("train", overrides)
    with open_dict(cfg):  # what Hydra's run sets (${hydra:runtime.output_dir}); no override quoting needed
        cfg.output_dir = str(run.resolve())

    record = run / ".hydra"
    record.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, record / "config.yaml")
    (record / "overrides.yaml").write_text(OmegaConf.to_yaml(overrides), encoding="utf-8")
    try:
        best = run_training(cfg, data=choices.get("data"))
    except UserError:
        raise  # already one line, and of the kind (a bad checkpoint, data file, config value ...)
    except Exception as err:
        if not is_user_error(err):
            raise
        raise ConfigError(one_line(err)) from err
    summary_path = run / "run.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
    metrics = ((summary.get("best") or {}).get("metrics")) or {}
    return TrainingRun(run, Path(best), dict(metrics), summary)


def _chooses_data(override: str) -> bool:
    """Whether a Hydra override picks the data config (data=..., +data=..., ~data), not one of its keys."""
    return override.split("=", 1)[0].lstrip("+~").strip() == "data"


def checkpoint_data(checkpoint: Path) -> str | None:
    """The data config a checkpoint was trained on: recorded in it (or recognised from its vocabulary,
    ``trained_data``), else a zoo model's, by its file name; None when neither says."""
    from captioning.checkpoints.load import read_weights_and_meta
    from captioning.inference.captioner import zoo_data
    from captioning.inference.trained_on import trained_data

    _, meta = read_weights_and_meta(checkpoint)
    return trained_data(meta) or zoo_data(checkpoint)


def infer_data(checkpoints: Sequence[Path]) -> str:
    """The data config to score ``checkpoints`` on when no data= is given (``checkpoint_data`` of the
    first, an ensemble's members share the vocabulary); a ValueError naming the data configs otherwise."""
    from captioning.compose import CONFIG_DIR

    available = sorted(p.stem for p in (Path(CONFIG_DIR) / "data").glob("*.yaml"))
    name = checkpoint_data(checkpoints[0])
    if name is None:
        raise ValueError(
            f"{checkpoints[0]}: no data= given and the checkpoint does not record its data; name the data "
            f"it was trained on, one of {', '.join(f'data={n}' for n in available)}"
        )
    if name not in available:
        raise ValueError(
            f"{checkpoints[0]}: was trained on data {name!r}, which is not a data config here; name one of "
            f"{', '.join(f'data={n}' for n in available)}"
        )
    return name


def fewer_than_asked(cfg, available: int) -> str | None:
    """The note for ``data.<split>.num_images`` above the split's size ("the first 500" of a 40-image list:
    said, not silent); None otherwise."""
    from omegaconf import OmegaConf

    try:
        asked = OmegaConf.select(cfg.data, f"{cfg.split}.num_images", default=None)
    except Exception:  # noqa: BLE001 - a data config without that node: nothing asked
        return None
    if not isinstance(asked, int) or isinstance(asked, bool) or asked <= available:
        return None
    return (
        f"data.{cfg.split}.num_images={asked}: the split has {available} image{'s' * (available != 1)}; "
        f"{'all ' * (available != 1)}{available} {'were' if available != 1 else 'was'} decoded"
    )


def run_evaluation(
    checkpoints: Sequence[Path], overrides: Sequence[str], out_dir: Path | None = None, seed: int = 0
):
    """``captioning evaluate``'s work before the printing: compose captioning/conf/eval.yaml (with the
    checkpoint's data unless data= is given), check it, decode and score. Returns (Evaluation, config,
    data name)."""
    import hydra
    from omegaconf import OmegaConf

    from captioning.inference.captioner import resolve_device
    from captioning.inference.evaluation import build_source, evaluate_checkpoint, evaluation_outputs
    from captioning.training.validate import check_eval_config

    overrides = list(overrides)
    if not any(_chooses_data(o) for o in overrides):  # the checkpoint's data, not eval.yaml's default
        overrides.insert(0, f"data={infer_data(checkpoints)}")
    cfg, choices = _compose("eval", overrides)
    check_eval_config(cfg)  # unknown keys (+bogus=1), feature_cache=maybe, data.test.seed=abc: one line
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise ValueError(
            f"--out-dir {out_dir}: is a file; expected a folder for results.json and scores.json"
        )
    if out_dir is not None:  # before the decoding: a read-only folder, results.json a model file ...
        evaluation_outputs(out_dir, checkpoints, check_folder=True)
    # a bad device= is one line naming it, before any work; "auto" becomes the device it means
    device = str(resolve_device(cfg.device))
    source = build_source(cfg.data, cfg.split)
    short = fewer_than_asked(cfg, len(source))
    rerank = hydra.utils.instantiate(cfg.rerank) if cfg.get("rerank") is not None else None
    bank_source = build_source(cfg.data, "train") if rerank is not None else None  # whose captions vote
    evaluation = evaluate_checkpoint(
        list(checkpoints),  # one path, or several for their ensemble
        source,
        data_name=f"{choices['data']}/{cfg.split}",
        decoding=OmegaConf.to_container(cfg.decoding),
        tokenizer=cfg.tokenizer,
        batch_size=cfg.batch_size,
        cache_dir=cfg.paths.cache if cfg.feature_cache else None,
        device=device,
        rerank=rerank,
        bank_source=bank_source,
        seed=seed,
    )
    if short is not None:
        evaluation.notes.append(short)
    return evaluation, cfg, choices["data"]


def evaluate(
    checkpoint: str | Path | Sequence[str | Path],
    overrides: Sequence[str] = (),
    out_dir: str | Path | None = None,
    seed: int = 0,
):
    """Score a checkpoint (a path or a zoo name; a list of them: their ensemble) as ``captioning evaluate``
    does, with its Hydra overrides (``data=flickr8k``, ``split=test``, ``decoding.num_beams=5`` ...).
    Returns the :class:`captioning.inference.evaluation.Evaluation` (``.report.scores``: the coco-caption
    metrics on the toolkit's scale, 0-1 and CIDEr-D 0-10; ``.decoded``: the captions); with ``out_dir``, results.json and scores.json are
    also written there."""
    from captioning.inference.evaluation import write_evaluation
    from captioning.zoo import checkpoint_path

    overrides = _check_overrides(overrides, "evaluate")
    given = [checkpoint] if isinstance(checkpoint, str | Path) else list(checkpoint)
    if not given or not all(isinstance(c, str | Path) and str(c).strip() for c in given):
        raise TypeError(
            f"evaluate: checkpoint={checkpoint!r}; expected a path or zoo name, or a list of them"
        )
    paths = [checkpoint_path(str(c)) for c in given]
    out = Path(out_dir) if out_dir is not None else None
    try:
        evaluation, _, _ = run_evaluation(paths, overrides, out, seed)
    except UserError:
        raise
    except Exception as err:
        if not is_user_error(err):
            raise
        raise ConfigError(one_line(err)) from err
    if out is not None:
        write_evaluation(evaluation, out, paths)
    return evaluation
