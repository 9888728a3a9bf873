"""callbacks=weight_average: the exponential moving average of the trained weights, checked against
its formula over a real tiny run; validation and checkpoints hold the average, resume restores both."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf, open_dict

from captioning.checkpoints.load import load_checkpoint
from captioning.training.callbacks.weight_average import WeightAverage
from captioning.training.resume import ResumeError
from captioning.training.train import train

from support import TINY, compose_train

# 24 scenes x 5 captions / batch 8 = 15 steps per epoch; validation at its end.
RUN = [*TINY, "callbacks=weight_average", "callbacks.weight_average.decay=0.9", "trainer.max_epochs=1"]


class Probe(pl.Callback):
    """Runs after WeightAverage (added last): the trained weights after each step, the weights that
    validation sees, the weights at the start of training (after a resume's restore)."""

    steps: list[dict] = []
    validated: list[dict] = []
    after_validation: list[dict] = []
    at_start: list[dict] = []

    @staticmethod
    def weights(pl_module) -> dict:
        return {n: p.detach().clone() for n, p in pl_module.net.named_parameters() if p.requires_grad}

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        Probe.steps.append(self.weights(pl_module))

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            Probe.validated.append(self.weights(pl_module))

    def on_train_batch_start(self, trainer, pl_module, *args) -> None:
        if Probe.validated and len(Probe.after_validation) < len(Probe.validated):
            Probe.after_validation.append(self.weights(pl_module))

    def on_train_start(self, trainer, pl_module) -> None:
        Probe.at_start.append(self.weights(pl_module))


def _run(overrides: list[str], run_dir: Path) -> str:
    for store in (Probe.steps, Probe.validated, Probe.after_validation, Probe.at_start):
        store.clear()
    cfg = compose_train(overrides, run_dir)
    with open_dict(cfg):
        cfg.callbacks.probe = OmegaConf.create({"_target_": f"{__name__}.Probe"})
        cfg.allowed_targets = [__name__]  # this test module's class (config_safety.py)
    return train(cfg)


def _reference_average(steps: list[dict], decay: float) -> dict:
    """The first step's weights, then θ̄ ← d_k θ̄ + (1 - d_k) θ for steps[k], k >= 1 (the k-th update after
    the first), with d_k = min(decay, (1 + k) / (10 + k)): the module docstring's formula."""
    average = {k: v.double() for k, v in steps[0].items()}
    for n, weights in enumerate(steps[1:], start=1):
        d = min(decay, (1 + n) / (10 + n))
        average = {k: d * average[k] + (1 - d) * weights[k].double() for k in average}
    return average


def _assert_close(a: dict, b: dict, atol: float = 1e-6) -> None:
    assert a.keys() == b.keys() and a
    for k in a:
        torch.testing.assert_close(a[k].double(), b[k].double(), atol=atol, rtol=0, msg=k)


def test_decay_warms_up_and_bad_values_are_refused() -> None:
    cb = WeightAverage(decay=0.999)
    assert cb.decay_at(0) == pytest.approx(0.1) and cb.decay_at(10) == pytest.approx(11 / 20)
    assert cb.decay_at(10_000) == 0.999
    for bad in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(
            ValueError, match=r"callbacks.weight_average.decay: expected a number in \(0, 1\)"
        ):
            WeightAverage(decay=bad)


def test_checkpoints_and_validation_hold_the_average_of_its_formula(tmp_path: Path) -> None:
    best = _run(RUN, tmp_path)
    steps = [dict(s) for s in Probe.steps]
    assert len(steps) == 15
    average = _reference_average(steps, 0.9)
    trained_end = steps[-1]
    # the average differs from the trained weights (else the test could not tell them apart)
    assert max((average[k] - trained_end[k].double()).abs().max().item() for k in average) > 1e-4

    # validation (after the epoch's 15 steps) saw the average; training continued from its own weights
    assert len(Probe.validated) == 1
    _assert_close(Probe.validated[0], average)
    for path in (best, tmp_path / "checkpoints" / "last.ckpt"):
        saved = torch.load(path, weights_only=True)
        net = {
            k.removeprefix("net."): v
            for k, v in saved["state_dict"].items()
            if k.removeprefix("net.") in average
        }
        _assert_close(net, average)
        _assert_close(saved["callbacks"]["WeightAverage"]["trained"], trained_end, atol=0)
        assert saved["callbacks"]["WeightAverage"]["num_updates"] == 15
    # every command that loads a checkpoint reads the average
    loaded = {n: p for n, p in load_checkpoint(best).net.named_parameters() if n in average}
    _assert_close(loaded, average)


def test_validation_swaps_the_average_back_out(tmp_path: Path) -> None:
    _run([*RUN, "trainer.max_epochs=2"], tmp_path)
    assert len(Probe.validated) == 2 and len(Probe.after_validation) == 1
    # the first step of epoch 1 starts from the trained weights of step 15 (not the average): the
    # weights seen before that step's update are those the probe recorded after step 15
    average_15 = _reference_average(Probe.steps[:15], 0.9)
    _assert_close(Probe.validated[0], average_15)
    _assert_close(Probe.after_validation[0], Probe.steps[14], atol=0)


def test_resume_puts_the_trained_weights_back_and_keeps_the_average(tmp_path: Path) -> None:
    run = [*RUN, "callbacks.last_checkpoint.every_n_train_steps=5"]
    _run([*run, "trainer.max_steps=10"], tmp_path)
    first = [dict(s) for s in Probe.steps]
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 10 and saved["callbacks"]["WeightAverage"]["num_updates"] == 10

    _run([*run, "ckpt_path=last", "trainer.max_steps=15"], tmp_path)
    _assert_close(Probe.at_start[0], first[-1], atol=0)  # training goes on from its own weights
    # and the average goes on from step 10's: five more updates give the uninterrupted formula's
    _assert_close(Probe.validated[0], _reference_average(first + Probe.steps, 0.9))


def test_a_tied_matrix_is_saved_as_the_average_under_both_names(tmp_path: Path) -> None:
    best = _run([*RUN, "model/decoder=transformer"], tmp_path)  # output layer tied to the embedding
    average = _reference_average(Probe.steps, 0.9)
    assert "decoder.out.weight" not in average  # one parameter, averaged once
    state = torch.load(best, weights_only=True)["state_dict"]
    torch.testing.assert_close(state["net.decoder.out.weight"].double(), average["decoder.embedding.weight"])
    torch.testing.assert_close(
        state["net.decoder.embedding.weight"].double(), average["decoder.embedding.weight"]
    )
    loaded = load_checkpoint(best).net.decoder
    assert loaded.out.weight is loaded.embedding.weight or torch.equal(
        loaded.out.weight, loaded.embedding.weight
    )


def test_gradient_accumulation_averages_once_per_optimizer_step(tmp_path: Path) -> None:
    best = _run([*RUN, "+trainer.accumulate_grad_batches=3"], tmp_path)  # 15 batches, 5 optimizer steps
    saved = torch.load(best, weights_only=True)
    assert saved["global_step"] == 5 and saved["callbacks"]["WeightAverage"]["num_updates"] == 5
    after_steps = Probe.steps[2::3]  # the weights after batches 3, 6, ..., 15
    net = {k.removeprefix("net."): v for k, v in saved["state_dict"].items()}
    average = _reference_average(after_steps, 0.9)
    _assert_close({k: net[k] for k in average}, average)


def test_resuming_an_averaged_checkpoint_without_the_average_is_refused(tmp_path: Path) -> None:
    _run([*RUN, "trainer.max_steps=10"], tmp_path)
    plain = [r for r in RUN if not r.startswith("callbacks")]
    with pytest.raises(ResumeError, match="resume with callbacks=weight_average"):
        train(compose_train([*plain, "ckpt_path=last", "trainer.max_steps=15"], tmp_path))
