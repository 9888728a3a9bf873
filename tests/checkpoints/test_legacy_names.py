"""Checkpoints of earlier versions keep loading and resuming after a rename: their class names
(``LEGACY_TARGETS``) and keys (``LEGACY_KEYS``) are read as today's (captioning.models.legacy)."""

from __future__ import annotations

import torch
import yaml

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.load import load_checkpoint
from captioning.models.legacy import modernise_config
from captioning.training.resume import _config_differences

from support.corpus import build_module, checkpoint_dict

WORDS = ["a", "red", "circle", "square", "left", "of"]


def _as_before_0_3(net_config: str) -> str:
    """The network config as 0.2 wrote it: the Transformer's feed-forward width under ``hidden_dim`` and
    the network class in ``captioning.models.captioner``."""
    node = yaml.safe_load(net_config)
    node["_target_"] = "captioning.models.captioner.CaptionModel"
    node["decoder"]["hidden_dim"] = node["decoder"].pop("ff_dim")
    return yaml.safe_dump(node)


def test_a_transformer_saved_with_hidden_dim_loads_as_ff_dim_with_the_same_outputs(tmp_path) -> None:
    module = build_module(WORDS, ["model/decoder=transformer"])
    checkpoint = checkpoint_dict(module)
    new_path, old_path = tmp_path / "new.ckpt", tmp_path / "old.ckpt"
    torch.save(checkpoint, new_path)
    old_config = _as_before_0_3(checkpoint[CHECKPOINT_KEY]["net_config"])
    assert "hidden_dim" in old_config and "ff_dim" not in old_config
    checkpoint[CHECKPOINT_KEY]["net_config"] = old_config
    torch.save(checkpoint, old_path)

    new, old = load_checkpoint(new_path).net.eval(), load_checkpoint(old_path).net.eval()
    assert old.decoder.ff_dim == new.decoder.ff_dim == 16  # debug/decoder/tiny_transformer.yaml
    images, tokens = torch.rand(2, 3, 32, 32), torch.randint(4, len(WORDS) + 4, (2, 5))
    assert torch.equal(old(images, tokens).logits, new(images, tokens).logits)


def test_resuming_an_old_config_sees_no_difference_but_a_real_change_is_named() -> None:
    current = checkpoint_dict(build_module(WORDS, ["model/decoder=transformer"]))[CHECKPOINT_KEY][
        "net_config"
    ]
    assert _config_differences(_as_before_0_3(current), current) == []
    wider = current.replace("ff_dim: 16", "ff_dim: 32")
    assert _config_differences(_as_before_0_3(current), wider) == ["decoder.ff_dim: 16 -> 32"]


def test_the_lstm_keeps_hidden_dim_and_a_node_with_both_keys_keeps_the_new_one() -> None:
    lstm = {"_target_": "captioning.models.decoders.lstm.LSTMDecoder", "hidden_dim": 16}
    both = {
        "_target_": "captioning.models.decoders.transformer.TransformerDecoder",
        "hidden_dim": 8,
        "ff_dim": 24,
    }
    modernise_config({"decoder": lstm, "other": [both]})
    assert lstm["hidden_dim"] == 16 and both == {
        "_target_": "captioning.models.decoders.transformer.TransformerDecoder",
        "ff_dim": 24,
        "alibi": False,  # saved without the key: from before ALiBi (LEGACY_DEFAULTS)
    }


def test_a_transformer_saved_before_alibi_existed_loads_without_it(tmp_path) -> None:
    # Its config has no "alibi" key and its network had no recency bias; today's default is alibi=True,
    # which changes no weight: the missing key must mean what it meant (LEGACY_DEFAULTS), not the default.
    module = build_module(WORDS, ["model/decoder=transformer", "model.decoder.alibi=false"])
    checkpoint = checkpoint_dict(module)
    node = yaml.safe_load(checkpoint[CHECKPOINT_KEY]["net_config"])
    del node["decoder"]["alibi"]
    checkpoint[CHECKPOINT_KEY]["net_config"] = yaml.safe_dump(node)
    torch.save(checkpoint, tmp_path / "before_alibi.ckpt")
    loaded = load_checkpoint(tmp_path / "before_alibi.ckpt").net.eval()
    assert loaded.decoder.alibi is False
    images, tokens = torch.rand(2, 3, 32, 32), torch.randint(4, len(WORDS) + 4, (2, 5))
    assert torch.equal(loaded(images, tokens).logits, module.net.eval()(images, tokens).logits)
    # resuming it under today's config (alibi true) is a change, named
    current = checkpoint_dict(build_module(WORDS, ["model/decoder=transformer"]))[CHECKPOINT_KEY][
        "net_config"
    ]
    assert "decoder.alibi: False -> True" in _config_differences(yaml.safe_dump(node), current)
