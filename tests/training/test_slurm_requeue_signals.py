"""SlurmRequeue's signal handling around fit: the warning is caught during training, and after it a
warning can no longer kill the process (a finished run's test split and final writes go on)."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest

from captioning.training.callbacks.slurm_requeue import SlurmRequeue


@pytest.fixture
def usr1_default():
    before = signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGUSR1, before)


def _trainer() -> SimpleNamespace:
    return SimpleNamespace(_accelerator_connector=SimpleNamespace(cluster_environment=None))


def test_a_warning_during_fit_is_recorded_and_after_fit_it_kills_nothing(monkeypatch, usr1_default) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    callback = SlurmRequeue(signals=["SIGUSR1"])
    callback.setup(_trainer(), None, "fit")
    os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs before kill returns (a signal to this thread)
    assert callback.warned
    callback.teardown(_trainer(), None, "fit")
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN  # the default action would end the process
    os.kill(os.getpid(), signal.SIGUSR1)  # still here


def test_a_handler_installed_before_fit_gets_its_signal_back(monkeypatch, usr1_default) -> None:
    seen = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    callback = SlurmRequeue(signals=["SIGUSR1"])
    callback.setup(_trainer(), None, "fit")
    callback.teardown(_trainer(), None, "fit")
    os.kill(os.getpid(), signal.SIGUSR1)
    assert seen == [signal.SIGUSR1] and not callback.warned


def test_outside_slurm_no_handler_is_installed(monkeypatch, usr1_default) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    callback = SlurmRequeue(signals=["SIGUSR1"])
    callback.setup(_trainer(), None, "fit")
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
