"""Config checks that need no model and no data: run first by ``captioning-train``, in well under a second.

What is checked here: rules that span several keys (a monitor must be a logged metric, scene metrics need
scene data, SCST needs init_from), values of third-party constructors that accept some silently
(Lightning's Trainer, torch's AdamW) and top-level keys. A bound on one argument of the project's own code
is declared in that argument's signature (captioning.bounds) and read from there by ``typecheck``.

Each mistake is one line naming the key, the value and what was expected, e.g.
``seed='abc': expected an integer`` or ``callbacks.model_checkpoint.monitor='val/CIDER': expected one of
val/Bleu_4, val/CIDEr, val/loss, val/xent``; a config with several mistakes lists them all. The model's own
constructors check what depends on the built network (``startup.check_model_config``); the vocabulary
is checked once the data has been read (``check_vocabulary``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from captioning.bounds import CONFIG_BOUNDS, LEARNING_RATE, LR_SCALE
from captioning.data.files import folder_problem
from captioning.data.vocab import SPECIALS
from captioning.decoding.config import GenerationConfig
from captioning.errors import ConfigError
from captioning.metrics.names import SCENE_METRICS, TEXT_METRICS
from captioning.models.size import bad_sizes
from captioning.training.typecheck import type_problems

SYNTHETIC_SOURCE = "captioning.data.sources.SyntheticSource"  # the one source with scenes (val scores)

# What captioning/conf/train.yaml composes at the top; anything else (`+foo=1`) would be silently ignored.
TOP_LEVEL_KEYS = frozenset(
    {"paths", "data", "model", "trainer", "logger", "callbacks", "seed", "run_test", "output_dir", "ckpt_path",
     "init_from", "hydra", "allowed_targets"}
)  # fmt: skip


# What captioning/conf/eval.yaml composes at the top (`captioning evaluate`).
EVAL_KEYS = frozenset(
    {
        "paths",
        "data",
        "split",
        "decoding",
        "rerank",
        "tokenizer",
        "batch_size",
        "feature_cache",
        "device",
        "hydra",
        "allowed_targets",
    }
)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, default=None)


def _unknown_keys(cfg: DictConfig, known: frozenset[str]) -> list[str]:
    unknown = sorted(set(cfg.keys()) - known)
    if not unknown:
        return []
    return [f"{', '.join(unknown)}: unknown top-level key(s); expected {', '.join(sorted(known))}"]


def _group_type_problems(cfg: DictConfig, groups: tuple[str, ...], problems: list[str]) -> list[str]:
    """Every ``_target_`` argument below ``groups`` checked against its annotation (typecheck.py), except
    keys ``problems`` already names (a range check said it)."""
    found = []
    for group in groups:
        try:
            node = OmegaConf.to_container(cfg[group], resolve=True) if cfg.get(group) is not None else None
        except Exception:  # noqa: BLE001 - an interpolation that needs the Hydra run: checked when built
            continue
        reported = {problem.split("=", 1)[0] for problem in problems + found}
        found.extend(p for p in type_problems(node, group) if p.split("=", 1)[0] not in reported)
    return found


def check_eval_config(cfg: DictConfig) -> None:
    """``captioning evaluate``'s composed config: unknown keys, its own values' types, the data's."""
    problems = _unknown_keys(cfg, EVAL_KEYS)
    for key, ok, expected in (
        ("feature_cache", isinstance(_get(cfg, "feature_cache"), bool), "a boolean"),
        ("batch_size", _is_int(_get(cfg, "batch_size")) and _get(cfg, "batch_size") >= 1, "an integer >= 1"),
        ("split", isinstance(_get(cfg, "split"), str), "a string (train, val or test)"),
        ("device", isinstance(_get(cfg, "device"), str), "a string (cpu, cuda, cuda:1, mps)"),
    ):
        if not ok:
            problems.append(f"{key}={_get(cfg, key)!r}: expected {expected}")
    problems += _group_type_problems(cfg, ("data", "rerank"), problems)
    if problems:
        raise ConfigError("; ".join(problems))


def check_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` listing every value below that cannot work."""
    problems: list[str] = []

    def need(ok: bool, key: str, expected: str) -> None:
        if not ok:
            problems.append(f"{key}={_get(cfg, key)!r}: expected {expected}")

    for key, (ok, expected) in CONFIG_BOUNDS.items():  # values third-party code accepts silently
        need(ok(_get(cfg, key)), key, expected)
    for key in ("init_from", "ckpt_path"):  # `init_from=` parses as '' (an unset $CKPT), not as null
        value = _get(cfg, key)
        if isinstance(value, str) and not value.strip():
            problems.append(f"{key}='': expected a checkpoint path, or null")
    for name, node in (_get(cfg, "callbacks") or {}).items():  # a checkpoint folder that cannot exist
        try:
            dirpath = node.get("dirpath") if isinstance(node, DictConfig) else None
        except Exception:  # noqa: BLE001 - an interpolation that needs the Hydra run: checked when built
            continue
        problem = folder_problem(Path(dirpath)) if isinstance(dirpath, str) and dirpath else None
        if problem:
            problems.append(f"callbacks.{name}.dirpath={dirpath!r}: {problem}")
    run_test = _get(cfg, "run_test")  # "no" is a truthy string: it would run the test split
    need(run_test is None or isinstance(run_test, bool), "run_test", "a boolean (true or false)")
    scst = str(_get(cfg, "model._target_") or "").endswith("SelfCriticalLitModule")
    resuming = _get(cfg, "ckpt_path") not in (None, "", "auto")  # auto may start afresh: it needs init_from
    if scst and not _get(cfg, "init_from") and not resuming:  # resuming has its own weights
        problems.append(
            "init_from=None: objective=scst starts from a cross-entropy checkpoint; expected init_from=CKPT "
            "(or ckpt_path=last to resume an SCST run)"
        )
    try:
        GenerationConfig.from_dict(OmegaConf.to_container(cfg.model.decoding), where="model.decoding")
    except (ValueError, TypeError) as err:
        problems.append(str(err))
    raw_metrics = _get(cfg, "model.val_metrics")
    metrics = [] if isinstance(raw_metrics, str) else list(raw_metrics or [])  # "CIDEr" is no list
    unknown = [m for m in metrics if m not in TEXT_METRICS and m not in SCENE_METRICS]
    if unknown or not metrics:
        shown = raw_metrics if isinstance(raw_metrics, str) else metrics
        problems.append(
            f"model.val_metrics={shown!r}: expected a non-empty list of {', '.join(TEXT_METRICS)} (on synthetic "
            f"scenes also {', '.join(SCENE_METRICS)}), e.g. [CIDEr]"
        )
    val_source = _get(cfg, "data.val._target_")
    scene_named = [m for m in metrics if m in SCENE_METRICS]
    if scene_named and val_source is not None and val_source != SYNTHETIC_SOURCE:
        problems.append(
            f"model.val_metrics names {scene_named}, which score synthetic scenes, but data.val is "
            f"{val_source}; expected {SYNTHETIC_SOURCE} or val_metrics without them"
        )
    logged = sorted({f"val/{m}" for m in metrics} | {"val/loss", "val/xent"})
    for name, node in (cfg.get("callbacks") or {}).items():
        monitor = node.get("monitor") if isinstance(node, DictConfig) else None
        if monitor is not None and monitor not in logged:
            known = sorted(
                {f"val/{m}" for m in metrics if m in TEXT_METRICS or m in SCENE_METRICS}
                | {"val/loss", "val/xent"}
            )
            problems.append(f"callbacks.{name}.monitor={monitor!r}: expected one of {', '.join(known)}")
    if _get(cfg, "trainer.strategy.find_unused_parameters") is False and (
        _get(cfg, "model.decoder.attention.baseline") == "learned"
    ):  # DDP raises "Expected to have finished reduction" at the second step otherwise
        problems.append(
            "trainer.strategy.find_unused_parameters=False: model.decoder.attention.baseline=learned trains a "
            "value head that semi-sampling's soft batches (and SCST) leave without a gradient, which DDP "
            "refuses; expected trainer.strategy.find_unused_parameters=true"
        )
    problems += _unknown_keys(cfg, TOP_LEVEL_KEYS)
    problems += _group_type_problems(cfg, ("data", "model", "trainer", "callbacks", "logger"), problems)
    lr, scale = _get(cfg, "model.optimizer.lr"), _get(cfg, "model.encoder.lr_scale")
    both = _is_number(lr) and _is_number(scale) and LEARNING_RATE.holds(lr) and LR_SCALE.holds(scale)
    if both and not LEARNING_RATE.holds(lr * scale):  # the encoder's rate: held to the bound on lr
        problems.append(
            f"model.encoder.lr_scale={scale!r}: the encoder trains at lr_scale x model.optimizer.lr = "
            f"{lr * scale:g}; expected {LEARNING_RATE.describe('a rate')} (the bound on model.optimizer.lr)"
        )
    model = OmegaConf.to_container(cfg.model, resolve=True)  # feature_dim: ${..encoder.out_dim} -> 112
    network = {k: v for k, v in model.items() if k in ("encoder", "decoder")}
    for where, value, lowest, highest in bad_sizes(network, "model", skip=("vocab_size",)):
        problems.append(f"{where}={value!r}: expected an integer in [{lowest}, {highest}]")
    if problems:
        raise ConfigError("; ".join(problems))


def check_vocabulary(vocab, min_word_count: int, source: str = "the training captions") -> None:
    """A vocabulary of special tokens only cannot caption anything: refuse it naming the threshold."""
    if len(vocab) <= len(SPECIALS):
        raise ConfigError(
            f"data.min_word_count={min_word_count}: no word of {source} occurs that often, so the vocabulary "
            "has special tokens only; expected a threshold that keeps real words"
        )
