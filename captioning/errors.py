"""Errors that are a user's mistake: the entry points report them as one line on stderr, exit status 2.

A wrong config value, data file, checkpoint or path raises one of :func:`user_errors`; Hydra wraps what
a ``_target_`` raises in an ``InstantiationException`` whose text spans lines ("Error in call to target
...", "full_key: ..."), so :func:`one_line` reports the original error with the config key it came from.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


def user_errors() -> tuple[type[BaseException], ...]:
    """The project's own error types, plus the config and file errors a user's input can cause."""
    from hydra.errors import HydraException
    from lightning_fabric.utilities.exceptions import MisconfigurationException
    from omegaconf.errors import OmegaConfBaseException

    from captioning.checkpoints.load import CheckpointError
    from captioning.checkpoints.save import CheckpointWriteError, NonFiniteWeightsError
    from captioning.data.images import ImageError
    from captioning.data.readers import DatasetError
    from captioning.training.callbacks.finite_loss import NonFiniteLossError
    from captioning.training.resume import ResumeError
    from captioning.training.validate import ConfigError

    return (
        MisconfigurationException,  # Lightning's word for a trainer setting it cannot use (accelerator=gpu)
        ConfigError,
        DatasetError,
        ImageError,
        CheckpointError,
        ResumeError,
        NonFiniteLossError,
        NonFiniteWeightsError,
        CheckpointWriteError,
        FileNotFoundError,
        PermissionError,
        HydraException,
        OmegaConfBaseException,
    )


def one_line(err: BaseException) -> str:
    """``err`` as one line; a Hydra instantiation error becomes its cause, prefixed with the config key."""
    from hydra.errors import InstantiationException

    key = ""
    while isinstance(err, InstantiationException) and err.__cause__ is not None:
        text = str(err)
        if "full_key:" in text:
            key = text.rsplit("full_key:", 1)[1].strip().splitlines()[0]
        err = err.__cause__
    message = " ".join(str(err).split()) or type(err).__name__
    message = message.split(" Config search path:")[0]  # Hydra appends its search path to "not found"
    return f"{key}: {message}" if key and key not in message else message


def is_user_error(err: BaseException) -> bool:
    """True for a user error, also when Hydra wrapped it while instantiating a ``_target_``."""
    from hydra.errors import InstantiationException

    while isinstance(err, InstantiationException) and err.__cause__ is not None:
        err = err.__cause__
    return isinstance(err, user_errors())
