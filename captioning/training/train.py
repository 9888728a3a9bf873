"""Hydra training entry point: ``captioning-train [overrides]`` or ``python -m captioning.training.train``.

``train()`` reads top to bottom: start-up checks -> data -> model -> trainer -> fit -> test.
Ends by printing ``best checkpoint: PATH`` (scripts rely on that line).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from captioning.runtime import configure_process

configure_process()  # before torch is imported (OMP_WAIT_POLICY); WANDB_MODE offline unless set

import hydra  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from pytorch_lightning.loggers import WandbLogger  # noqa: E402
from pytorch_lightning.utilities.exceptions import SIGTERMException  # noqa: E402

from captioning.compose import CONFIG_DIR  # noqa: E402
from captioning.config_command_line import command_line_problem  # noqa: E402
from captioning.errors import ConfigError, is_user_error, one_line  # noqa: E402
from captioning.training import job_record, startup, sweep_stop  # noqa: E402
from captioning.training.build import build_model  # noqa: E402
from captioning.training.callbacks.progress_lines import bar_on  # noqa: E402
from captioning.training.ctrl_c import ctrl_c_stops  # noqa: E402
from captioning.training.resume import last_checkpoint_path  # noqa: E402
from captioning.training.run_log import console_copied_to_run_log  # noqa: E402
from captioning.training.startup import instantiate, instantiate_dict  # noqa: E402
from captioning.training.validate import check_config  # noqa: E402


def train(cfg: DictConfig, data: str | None = None) -> str:
    """Train ``cfg`` (a composed captioning/conf/train.yaml); returns the best checkpoint's path. ``data``:
    the name of its data config, recorded in the checkpoints (default: the Hydra job's choice)."""
    job = job_record.job_record(cfg, cfg.output_dir)  # run.json keeps it: ckpt_path=auto's check
    # A start refused in a folder of an earlier run leaves that run's .hydra/ files as they were.
    with job_record.earlier_run_kept(cfg.output_dir):
        start = startup.check_before_data(cfg, job)  # config mistakes fail here in seconds, before the data
        if start.finished:  # ckpt_path=auto in the folder of a finished run: nothing to train
            return start.finished
        pl.seed_everything(cfg.seed, workers=True)

        # Data first: the vocabulary fixes the decoder's output size.
        datamodule = instantiate(cfg.data)
        vocab = startup.read_vocabulary(cfg, datamodule)

        model = build_model(cfg.model, vocab)  # the network config travels with the checkpoint (as YAML)
        model.trained_on = data or job_record.data_choice()  # what evaluate scores without data=
        startup.check_resume(cfg, start.ckpt_path, vocab, model)

    callbacks = instantiate_dict(cfg.get("callbacks"))
    job_record.attach(callbacks, job)
    loggers = instantiate_dict(cfg.get("logger"))
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    bar = bar_on(cfg.trainer.get("enable_progress_bar"))  # a pipe or log file gets progress lines instead
    trainer: pl.Trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, enable_progress_bar=bar
    )

    fit(trainer, model, datamodule, start.ckpt_path, cfg.output_dir)
    best = best_checkpoint(trainer, cfg.output_dir)
    if cfg.get("run_test"):
        trainer.test(model, datamodule=datamodule, ckpt_path=best or None)
    finish_runs(loggers)
    return best


class StoppedBySignal(Exception):
    """The run was stopped by SIGTERM (exit status 143, as for a process killed by it) or Ctrl-C (130)
    before it finished."""

    def __init__(self, message: str, status: int = 143) -> None:
        super().__init__(message)
        self.status = status


QUIET_LIGHTNING_WARNING = (
    "You have overridden `on_before_batch_transfer` in `LightningModule` but have passed in"
)


def fit(trainer: pl.Trainer, model, datamodule, ckpt_path: str | None, output_dir: str) -> None:
    """``trainer.fit``; a setting Lightning refuses once the data are known is a config mistake, a stop
    by SIGTERM a :class:`StoppedBySignal` saying how to go on."""
    try:  # weights_only: resuming never unpickles code either (the checkpoint holds tensors and plain data)
        with warnings.catch_warnings():
            # Lightning says the module's on_before_batch_transfer (the feature cache's lookup) is used though
            # a datamodule is given: as intended (the datamodule has none), so noise in every run's log
            warnings.filterwarnings("ignore", message=QUIET_LIGHTNING_WARNING)
            with ctrl_c_stops(trainer) as ctrl_c:  # Ctrl-C stops as SIGTERM does: at the step's end, saved
                trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    except SIGTERMException:
        pass  # reported below, as when Lightning stops gracefully
    except ValueError as err:  # settings Lightning checks only once the data are known
        if not _raised_by_lightning(err):
            raise
        raise ConfigError(f"trainer: {one_line(err)}") from err
    if trainer.received_sigterm:  # a stop is not a finished run: say so, with how to go on
        raise StoppedBySignal(
            f"stopped by {'Ctrl-C' if ctrl_c else 'SIGTERM'} at step {trainer.global_step}; resume with "
            f"ckpt_path=last (checkpoints in {Path(output_dir) / 'checkpoints'})",
            status=130 if ctrl_c else 143,
        )


def best_checkpoint(trainer: pl.Trainer, output_dir: str) -> str:
    """The best checkpoint by the monitored metric; the last one when no validation ranked any."""
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    last = last_checkpoint_path(output_dir)
    if not best and last.is_file():  # no validation ran (max_steps before the first, limit_val_batches=0)
        print(
            f"no validation ran, so no checkpoint was ranked: the last one stands in ({last})",
            file=sys.stderr,
        )
        best = str(last)
    return best


def finish_runs(loggers: list) -> None:
    """End W&B runs: Lightning leaves them open, and the next job of a Hydra sweep would log into them."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.finish()  # a no-op dummy on DDP ranks other than 0


def _raised_by_lightning(err: BaseException) -> bool:
    """True when the innermost frame of ``err`` is Lightning's own code (a setting it refuses), not ours."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"{os.sep}pytorch_lightning{os.sep}" in tb.tb_frame.f_code.co_filename


@hydra.main(config_path=CONFIG_DIR, config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with console_copied_to_run_log(enabled=is_global_zero()):  # <run>/train.log: what the run printed
        run(cfg)


def run(cfg: DictConfig) -> None:
    """``train(cfg)``, its outcome said as the command line says it: a stop or a user's mistake in one line
    with its exit status, else the best checkpoint."""
    try:
        best = train(cfg)
    except StoppedBySignal as err:
        print(f"captioning-train: {err}", file=sys.stderr, flush=True)
        if sweep_stop.in_worker_process():  # a local sweep's worker ends with its job: the sweep waits for it
            sys.stdout.flush()
            os._exit(err.status)
        sys.exit(err.status)
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


def run_dir_value(arg: str) -> str | None:
    """The folder of a ``hydra.run.dir=...`` override as Hydra reads it: quotes removed (Lightning's DDP
    launcher starts the other processes with ``hydra.run.dir="<dir>"``; taken literally, that made a folder
    named ``"`` in the current one), escapes undone. None for what is not one folder (a sweep ``a,b``, a
    list, ``null``) or cannot be parsed: left to Hydra, which reports it in its own words."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        value = OverridesParser.create().parse_override(arg).value()
    except Exception:  # noqa: BLE001 - Hydra reports a malformed override itself
        return None
    return str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else None


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
            folder = run_dir_value(arg)
            if folder is None or "${" in folder:  # not one folder, or an interpolation (${now:...}): Hydra's
                continue
            if not folder.strip():  # Hydra would write the run into the current folder
                print("captioning-train: error: hydra.run.dir='': expected a folder path", file=sys.stderr)
                sys.exit(2)
            try:
                Path(folder).mkdir(parents=True, exist_ok=True)
            except OSError as err:
                print(
                    f"captioning-train: error: {arg}: cannot create the run folder ({err.strerror or err})",
                    file=sys.stderr,
                )
                sys.exit(2)
    if not any(a.startswith("-") for a in args):
        from captioning.compose import compose_config

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
            print(f"captioning-train: error: {one_line(err)}", file=sys.stderr, flush=True)
            sys.exit(2)
    main()


if __name__ == "__main__":
    cli()
