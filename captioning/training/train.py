"""Hydra training entry point: ``captioning-train [overrides]`` or ``python -m captioning.training.train``.

Reads top to bottom: data -> model -> callbacks -> logger -> trainer -> fit -> test.
Ends by printing ``best checkpoint: PATH`` (scripts rely on that line).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path

from captioning.runtime import configure_process

configure_process()  # before torch is imported (OMP_WAIT_POLICY); WANDB_MODE offline unless set

import hydra  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
from hydra.errors import InstantiationException  # noqa: E402
from omegaconf import DictConfig, OmegaConf, open_dict  # noqa: E402
from pytorch_lightning.loggers import WandbLogger  # noqa: E402
from pytorch_lightning.utilities.exceptions import SIGTERMException  # noqa: E402

from captioning.checkpoints.save import remove_orphan_temps  # noqa: E402
from captioning.config import CONFIG_DIR  # noqa: E402
from captioning.config_safety import check_targets, command_line_problem  # noqa: E402
from captioning.errors import is_user_error, one_line  # noqa: E402
from captioning.training import sweep_stop  # noqa: E402
from captioning.training.build import build_model  # noqa: E402
from captioning.training.callbacks.progress_lines import bar_on  # noqa: E402
from captioning.training.preflight import check_init_from, check_model_config  # noqa: E402
from captioning.training.requeue import resume_requeued  # noqa: E402
from captioning.training.resume import (  # noqa: E402
    AUTO,
    averages_weights,
    check_fresh_run_dir,
    check_resume_matches,
    checkpoint_folders,
    finished_run,
    last_checkpoint_path,
    resolve_ckpt_path,
)
from captioning.training.validate import ConfigError, check_config, check_vocabulary  # noqa: E402


def instantiate_dict(cfg: DictConfig | None) -> list:
    """Instantiate every entry of a ``name: {_target_: ...}`` mapping (callbacks, loggers)."""
    return [hydra.utils.instantiate(node) for node in (cfg or {}).values() if node is not None]


def finish_runs(loggers: list) -> None:
    """End W&B runs: Lightning leaves them open, and the next job of a Hydra sweep would log into them."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.finish()  # a no-op dummy on DDP ranks other than 0


class StoppedBySignal(Exception):
    """The run was stopped by SIGTERM before it finished (exit status 143, as for a process killed by it)."""


def _raised_by_lightning(err: BaseException) -> bool:
    """True when the innermost frame of ``err`` is Lightning's own code (a setting it refuses), not ours."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"{os.sep}pytorch_lightning{os.sep}" in tb.tb_frame.f_code.co_filename


def train(cfg: DictConfig) -> str:
    check_targets(cfg)  # every _target_ on the allow-list (config_safety.py): nothing built before this
    # Config mistakes fail here in seconds, before the data is read or any training time is spent.
    check_config(cfg)  # types and ranges of every value, metric and monitor names (one line each)
    check_model_config(cfg)  # what the constructors refuse (dimensions that do not fit, ...)
    resume_requeued(cfg)  # a SLURM job started again after a requeue: ckpt_path=auto
    if (
        str(cfg.get("ckpt_path")) == AUTO
    ):  # a sweep re-run after a stop: its finished jobs are not trained again
        done = finished_run(cfg.output_dir)
        if done:
            print(
                f"ckpt_path=auto: {cfg.output_dir} holds a finished run (run.json); its best: {done}",
                file=sys.stderr,
            )
            return done
    ckpt_path = resolve_ckpt_path(cfg.get("ckpt_path"), cfg.output_dir)  # "last" -> output_dir/checkpoints
    if ckpt_path and cfg.get("init_from"):  # the same overrides plus ckpt_path=last: the resumed weights win
        print(f"resuming from {ckpt_path}: init_from={cfg.init_from} is not loaded", file=sys.stderr)
    else:
        check_init_from(cfg.get("init_from"))  # a starting checkpoint that cannot even be read
    check_fresh_run_dir(cfg.output_dir, ckpt_path)  # a reused run folder: never overwrite its checkpoints
    for folder in checkpoint_folders(cfg):  # a write a kill interrupted: its target is rewritten below
        removed = remove_orphan_temps(folder)
        if removed:
            print(
                f"removed {len(removed)} temp file(s) of checkpoint writes a kill interrupted in {folder}: "
                + ", ".join(p.name for p in removed[:3]),
                file=sys.stderr,
            )
    pl.seed_everything(cfg.seed, workers=True)

    # Data first: the vocabulary fixes the decoder's output size.
    try:  # a data source refusing its arguments (split=bogus) is a config mistake: one line with its key
        datamodule = hydra.utils.instantiate(cfg.data)
    except InstantiationException as err:
        raise ConfigError(one_line(err)) from err
    vocab = datamodule.build_vocab()
    check_vocabulary(vocab, cfg.data.min_word_count)
    with open_dict(cfg):
        cfg.model.decoder.vocab_size = len(vocab)  # logged with the rest of the config

    model = build_model(cfg.model, vocab)  # the network config travels with the checkpoint (as YAML)
    if ckpt_path:  # resuming: the data must give the same vocabulary, the model the same config
        check_resume_matches(
            ckpt_path,
            vocab.to_dict(),
            model.net_config,
            cfg.trainer.get("max_steps"),
            weight_average=averages_weights(cfg.get("callbacks")),
            self_critical=str(cfg.model.get("_target_", "")).endswith("SelfCriticalLitModule"),
        )

    try:  # a callback or logger refusing its arguments (every_n_steps=-1) is a config mistake too
        callbacks = instantiate_dict(cfg.get("callbacks"))
        loggers = instantiate_dict(cfg.get("logger"))
    except InstantiationException as err:
        raise ConfigError(one_line(err)) from err
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    # the bar on a terminal only: a pipe, a log file or a background run gets progress lines (ProgressLines)
    bar = bar_on(cfg.trainer.get("enable_progress_bar"))
    try:  # Lightning refuses settings it cannot use (precision=bogus) with a ValueError: a config mistake
        trainer: pl.Trainer = hydra.utils.instantiate(
            cfg.trainer, callbacks=callbacks, logger=loggers or False, enable_progress_bar=bar
        )
    except InstantiationException as err:
        raise ConfigError(one_line(err)) from err  # "trainer: ..." (the key comes with it)

    # weights_only: resuming never unpickles code either (the checkpoint holds tensors and plain data).
    try:
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    except SIGTERMException:
        pass  # reported below, as when Lightning stops gracefully
    except ValueError as err:  # settings Lightning checks only once the data are known
        if not _raised_by_lightning(err):
            raise
        raise ConfigError(f"trainer: {one_line(err)}") from err
    if trainer.received_sigterm:  # a stop is not a finished run: say so, with how to go on
        raise StoppedBySignal(
            f"stopped by SIGTERM at step {trainer.global_step}; resume with ckpt_path=last "
            f"(checkpoints in {Path(cfg.output_dir) / 'checkpoints'})"
        )
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    last = last_checkpoint_path(cfg.output_dir)
    if not best and last.is_file():  # no validation ran (max_steps before the first, limit_val_batches=0)
        print(
            f"no validation ran, so no checkpoint was ranked: the last one stands in ({last})",
            file=sys.stderr,
        )
        best = str(last)
    if cfg.get("run_test"):
        trainer.test(model, datamodule=datamodule, ckpt_path=best or None)
    finish_runs(loggers)
    return best


@hydra.main(config_path=CONFIG_DIR, config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        best = train(cfg)
    except StoppedBySignal as err:
        print(f"captioning-train: {err}", file=sys.stderr, flush=True)
        if sweep_stop.in_worker_process():  # a local sweep's worker ends with its job: the sweep waits for it
            sys.stdout.flush()
            os._exit(143)
        sys.exit(143)
    except Exception as err:  # a user's mistake is one line and exit status 2; a bug keeps its traceback
        if not is_user_error(err):
            raise
        print(f"captioning-train: error: {one_line(err)}", file=sys.stderr, flush=True)
        sys.exit(2)  # SystemExit passes through Hydra's error report
    if is_global_zero():
        print(f"best checkpoint: {best}", flush=True)  # once, even under DDP and on several nodes


def is_global_zero() -> bool:
    """The first process of the whole job: torchrun's RANK or SLURM's SLURM_PROCID where the launcher set
    one, else local rank 0 of node 0 (Lightning's own launcher sets LOCAL_RANK and NODE_RANK; torchrun
    names the node GROUP_RANK)."""
    for name in ("RANK", "SLURM_PROCID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name]) == 0
    node = os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0"))
    return int(os.environ.get("LOCAL_RANK", 0)) == 0 and int(node) == 0


def unknown_key_message(err: Exception, overrides: list[str]) -> str | None:
    """For an override of a key the config lacks, one line with the closest existing key ("did you mean
    trainer.max_epochs?") instead of Hydra's advice to add it with ``+`` (a key nothing would read)."""
    match = re.search(r"Could not override '([^']+)'", str(err))
    if not match:
        return None
    wrong = match.group(1)
    from captioning.config import compose_config

    try:
        cfg, _ = compose_config("train", [a for a in overrides if a.split("=", 1)[0].lstrip("+~") != wrong])
    except Exception:  # noqa: BLE001 - Hydra's own message rather than a second error
        return None
    leaves = _leaf_keys(OmegaConf.to_container(cfg, resolve=False))
    close = difflib.get_close_matches(wrong, leaves, n=1, cutoff=0.7)
    hint = f"did you mean {close[0]}?" if close else "see `captioning-train --cfg job` for the keys"
    return f"{wrong}: no such config key; {hint} (a leading + would add a key that nothing reads)"


def _leaf_keys(node: object, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix]
    return [key for k, v in node.items() for key in _leaf_keys(v, f"{prefix}.{k}" if prefix else str(k))]


def cli() -> None:
    """``captioning-train``: Hydra's ``main``, after composing the overrides once to report a mistake in
    them (an unknown key or group option, a type Hydra refuses) as one line with exit status 2. Hydra's
    own report of those spans several lines and exits 1. Command-line flags (``--multirun``, ``--cfg``,
    ...) go straight to Hydra."""
    args = sys.argv[1:]
    # as Hydra will compose it: targets, user YAML, and each job of a sweep checked as train() will
    unsafe = command_line_problem(args, CONFIG_DIR, "train", check_job=check_config)
    if unsafe:
        print(f"captioning-train: error: {unsafe}", file=sys.stderr, flush=True)
        sys.exit(2)
    if "-m" in args or "--multirun" in args:  # a local sweep's workers stop with it on SIGTERM
        sweep_stop.install()
    for arg in args:  # Hydra creates the run folder before anything else and reports a failure in many lines
        if arg.startswith("hydra.run.dir="):
            if not arg.split("=", 1)[1].strip():  # Hydra would write the run into the current folder
                print("captioning-train: error: hydra.run.dir='': expected a folder path", file=sys.stderr)
                sys.exit(2)
            try:
                Path(arg.split("=", 1)[1]).mkdir(parents=True, exist_ok=True)
            except OSError as err:
                print(
                    f"captioning-train: error: {arg}: cannot create the run folder ({err.strerror or err})",
                    file=sys.stderr,
                )
                sys.exit(2)
    if not any(a.startswith("-") for a in args):
        from captioning.config import compose_config

        # hydra.* overrides configure the run itself, not the config: Hydra checks those; but a config
        # search path changes what composes (a user's own config folder), so it is kept
        kept = [
            a
            for a in args
            if a.startswith("hydra.searchpath=") or not a.startswith(("hydra.", "hydra/", "+hydra"))
        ]
        try:
            compose_config("train", kept)
        except Exception as err:  # noqa: BLE001 - only what composition refuses lands here
            if not is_user_error(err):
                raise
            message = unknown_key_message(err, kept) or one_line(err)
            print(f"captioning-train: error: {message}", file=sys.stderr, flush=True)
            sys.exit(2)
    main()


if __name__ == "__main__":
    cli()
