"""`make train`'s recipe (scripts/train_and_caption.py): the overrides it passes compose into the run it says."""

from __future__ import annotations

import pytest

from experiments import train_and_caption as make_train

from support import compose_train


def test_the_default_recipe_is_hard_gumbel_attention_for_850_steps():
    cfg = compose_train(make_train.training_overrides([]))
    assert cfg.model.decoder.attention._target_.endswith("gumbel.GumbelHardAttention")
    assert cfg.model.decoder.alpha_c == 0.0
    assert (cfg.trainer.max_steps, cfg.trainer.val_check_interval, cfg.trainer.max_time) == (
        850,
        425,
        "00:00:05:15",
    )
    assert cfg.trainer.check_val_every_n_epoch is None  # validation counted in global steps: 425, 850


@pytest.mark.parametrize("choice", ["model/decoder=soft", "model/decoder=transformer"])
def test_a_decoder_given_on_the_command_line_replaces_the_default_one(choice):
    overrides = make_train.training_overrides([choice, "seed=3"])
    assert "model/decoder=hard_gumbel" not in overrides and overrides[-2:] == [choice, "seed=3"]
    cfg = compose_train(overrides)
    assert cfg.model.decoder._target_.split(".")[-1] == (
        "LSTMDecoder" if "soft" in choice else "TransformerDecoder"
    )
    assert cfg.seed == 3 and cfg.trainer.max_steps == 850
