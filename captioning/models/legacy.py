"""The class names, keys and missing keys that checkpoints of earlier versions carry, read as today's.

A saved network config is modernised before its targets are checked against the closed registry
(``captioning.models.registry``), so a renamed module or option never orphans a checkpoint.
"""

from __future__ import annotations

from typing import Any

from captioning.models.registry import MODEL_CLASSES

# Names that checkpoints of earlier versions carry, and the class they now mean.
LEGACY_TARGETS: dict[str, str] = {
    "captioning.models.captioner.Captioner": "captioning.models.caption_model.CaptionModel",
    # models/captioner.py became models/caption_model.py (inference/captioner.py is the user-facing Captioner).
    "captioning.models.captioner.CaptionModel": "captioning.models.caption_model.CaptionModel",
    # Lite0-only before Lite1/2 (the same modules and defaults: variant lite0).
    "captioning.models.encoders.EfficientNetLite0Encoder": "captioning.models.encoders.EfficientNetLiteEncoder",
    # Both hard-attention layers lived in attention/hard.py before each got its own module.
    "captioning.models.attention.hard.ReinforceHardAttention": "captioning.models.attention.reinforce.ReinforceHardAttention",
    "captioning.models.attention.hard.GumbelHardAttention": "captioning.models.attention.gumbel.GumbelHardAttention",
}


# Keys that checkpoints of earlier versions carry, per class, and what they are now called.
LEGACY_KEYS: dict[str, dict[str, str]] = {
    # The Transformer's feed-forward width was "hidden_dim", the LSTM's state width's name (0.3: ff_dim).
    "captioning.models.decoders.transformer.TransformerDecoder": {"hidden_dim": "ff_dim"},
}


# Options whose constructor default changed after checkpoints were saved without the key: a saved config
# that lacks the key was built with the value it had then, which is what it must mean now. Only options
# that change what a network computes without changing its weights' shapes need an entry (a changed width
# is refused by the strict load; a training-only option does not change a loaded model).
LEGACY_DEFAULTS: dict[str, dict[str, Any]] = {
    # ALiBi came with alibi=False (b4ea8c8, 0.2); its default became True in 0.3 (the conf's value). A
    # Transformer saved before the option existed has no recency bias.
    "captioning.models.decoders.transformer.TransformerDecoder": {"alibi": False},
}


def canonical_name(target: str) -> str | None:
    """The registered name ``target`` stands for (itself, or what a legacy name became); None if neither."""
    target = LEGACY_TARGETS.get(target, target)
    return target if target in MODEL_CLASSES else None


def modernise_config(node: Any) -> None:
    """Today's class names and keys in a saved network config, in place: every ``_target_`` that
    ``LEGACY_TARGETS`` knows, the keys of ``LEGACY_KEYS`` (a node that already has the new key keeps it;
    the old one is dropped), and the values ``LEGACY_DEFAULTS`` gives a key the node lacks. Unknown targets
    are left for the caller to refuse."""
    if isinstance(node, dict):
        if "_target_" in node:
            target = canonical_name(str(node["_target_"]))
            node["_target_"] = target or node["_target_"]
            for old, new in LEGACY_KEYS.get(target or "", {}).items():
                if old in node:
                    node.setdefault(new, node.pop(old))
            for key, value in LEGACY_DEFAULTS.get(target or "", {}).items():
                node.setdefault(key, value)
        for value in node.values():
            modernise_config(value)
    elif isinstance(node, list):
        for value in node:
            modernise_config(value)
