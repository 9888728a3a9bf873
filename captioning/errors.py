"""Errors that are a user's mistake: the entry points report them as one line on stderr, exit status 2.

A wrong config value, data file, checkpoint or path raises one of :func:`user_errors` (the project's own
types subclass :class:`UserError`); Hydra wraps what a ``_target_`` raises in an ``InstantiationException``
whose text spans lines ("Error in call to target ...", "full_key: ..."), so :func:`one_line` reports the
original error with the config key it came from. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Base of the project's own user-error types (a bad checkpoint, data file, image, config value, resume
    point, a non-finite loss or weights, a checkpoint that could not be written): each subclasses its
    builtin kind (``ValueError``, ``OSError``, ...) and this, so this module lists them without importing
    the modules that raise them."""


class ConfigError(ValueError, UserError):
    """One or more config values that cannot work, each named with the expected value."""


def user_errors() -> tuple[type[BaseException], ...]:
    """The project's own error types (:class:`UserError`), plus the config and file errors a user's input
    can cause."""
    from hydra.errors import HydraException
    from lightning_fabric.utilities.exceptions import MisconfigurationException
    from omegaconf.errors import OmegaConfBaseException

    return (
        MisconfigurationException,  # Lightning's word for a trainer setting it cannot use (accelerator=gpu)
        UserError,
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


def reported(err: BaseException) -> BaseException:
    """The error :func:`one_line` reports: ``err``, or the cause of a Hydra instantiation error."""
    from hydra.errors import InstantiationException

    while isinstance(err, InstantiationException) and err.__cause__ is not None:
        err = err.__cause__
    return err


def is_user_error(err: BaseException) -> bool:
    """True for a user error, also when Hydra wrapped it while instantiating a ``_target_``."""
    return isinstance(reported(err), user_errors())
