"""`make train`'s recipe (scripts/train_and_caption.py): the overrides it passes compose into the run it says."""

from __future__ import annotations

import json

import pytest

from experiments import train_and_caption as make_train

from support import compose_train


def test_the_default_recipe_is_hard_gumbel_attention_for_850_steps():
    cfg = compose_train(make_train.training_overrides([]))
    assert cfg.model.decoder.attention._target_.endswith("gumbel.GumbelHardAttention")
    assert cfg.model.decoder.alpha_c == 0.0
    # a fixed number of steps, no wall-clock cap: a loaded machine takes longer, not trains less
    assert (cfg.trainer.max_steps, cfg.trainer.val_check_interval, cfg.trainer.max_time) == (850, 425, None)
    assert cfg.trainer.check_val_every_n_epoch is None  # validation counted in global steps: 425, 850
    assert make_train.requested_steps(make_train.training_overrides([])) == 850


def _run_dir(tmp_path, global_step: int):
    (tmp_path / "run.json").write_text(json.dumps({"global_step": global_step}))
    return tmp_path


def test_a_run_cut_short_says_so_in_its_last_lines_with_what_it_costs(tmp_path):
    wanted = make_train.requested_steps(make_train.training_overrides(["trainer.max_time=00:00:01:00"]))
    message = make_train.shortfall(_run_dir(tmp_path, 521), wanted)
    assert message.startswith("warning: training stopped at step 521 of 850 (61%)")
    assert "84%" in message and "97%" in message


def test_a_run_that_trained_every_step_prints_no_warning(tmp_path):
    assert make_train.shortfall(_run_dir(tmp_path, 850), 850) is None
    # a later override of max_steps wins, as in Hydra
    assert make_train.requested_steps(make_train.training_overrides(["trainer.max_steps=4"])) == 4
    assert make_train.shortfall(_run_dir(tmp_path, 4), 4) is None


@pytest.mark.parametrize("choice", ["model/decoder=soft", "model/decoder=transformer"])
def test_a_decoder_given_on_the_command_line_replaces_the_default_one(choice):
    overrides = make_train.training_overrides([choice, "seed=3"])
    assert "model/decoder=hard_gumbel" not in overrides and overrides[-2:] == [choice, "seed=3"]
    cfg = compose_train(overrides)
    assert cfg.model.decoder._target_.split(".")[-1] == (
        "LSTMDecoder" if "soft" in choice else "TransformerDecoder"
    )
    assert cfg.seed == 3 and cfg.trainer.max_steps == 850
