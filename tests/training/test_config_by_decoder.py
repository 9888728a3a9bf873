"""What captioning/conf/train.yaml composes per decoder: recipe/<decoder>.yaml (optimiser settings) and
scoring/decoder/<data>_<decoder>.yaml (one decoder's checkpoint selection on one data set)."""

from pathlib import Path

import pytest

from captioning.data.vocab import Vocab
from captioning.training.build import build_model

from support import TINY, compose_train

CONF = Path(__file__).resolve().parents[2] / "captioning" / "conf"
DECODERS = sorted(p.stem for p in (CONF / "model" / "decoder").glob("*.yaml"))
DATA = sorted(p.stem for p in (CONF / "data").glob("*.yaml"))


@pytest.mark.parametrize("decoder", DECODERS)
def test_each_decoder_on_scenes_monitors_and_optimises_as_its_files_say(decoder):
    cfg = compose_train([f"model/decoder={decoder}"])
    transformer = decoder == "transformer"
    # the Transformer's overlay is a head average, not what picks its words: it keeps the most objects right
    assert cfg.callbacks.model_checkpoint.monitor == ("val/objects" if transformer else "val/scene_score")
    assert list(cfg.model.val_metrics) == ["Bleu_4", "CIDEr", "objects", "grounding", "scene_score"]
    assert cfg.model.optimizer.get("betas") == ([0.9, 0.98] if transformer else None)


@pytest.mark.parametrize("decoder", DECODERS)
def test_photo_runs_keep_cider_whatever_the_decoder(decoder):
    cfg = compose_train(["data=flickr8k", f"model/decoder={decoder}"])
    assert cfg.callbacks.model_checkpoint.monitor == "val/CIDEr"


def test_the_built_optimizer_gets_the_recipe_betas():
    vocab = Vocab.build([["a", "red", "circle"]], min_count=1)
    for overrides, betas in (
        (["model/decoder=transformer"], (0.9, 0.98)),
        (["model/decoder=soft"], (0.9, 0.999)),  # AdamW's default
    ):
        model = build_model(compose_train([*overrides, *TINY]).model, vocab)
        optimizer = model.optimizer_factory(list(model.net.parameters()))  # what configure_optimizers builds
        assert tuple(optimizer.param_groups[0]["betas"]) == betas


def test_the_zoo_transformer_experiment_keeps_the_betas_it_was_trained_with():
    for objective in ("xe", "scst"):
        cfg = compose_train(["experiment=flickr8k_transformer", f"objective={objective}"])
        assert list(cfg.model.optimizer.betas) == [0.9, 0.999]


def test_every_per_decoder_file_is_named_after_configs_that_exist():
    # a misspelt file would never be composed, silently
    for path in (CONF / "recipe").glob("*.yaml"):
        assert path.stem in DECODERS, f"{path}: no model/decoder/{path.stem}.yaml"
    pairs = [path.stem for path in (CONF / "scoring" / "decoder").glob("*.yaml")]
    assert pairs, "captioning/conf/scoring/decoder holds no file"
    for pair in pairs:
        assert any(pair == f"{data}_{decoder}" for data in DATA for decoder in DECODERS), (
            f"captioning/conf/scoring/decoder/{pair}.yaml is not <data>_<decoder> of existing configs"
        )
