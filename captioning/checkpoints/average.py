"""Uniform weight averaging of checkpoints of one network: the last checkpoints of a run averaged (Vaswani et
al. 2017 average their last 5-20; timm's ``avg_checkpoints.py``), or runs fine-tuned from one checkpoint
averaged into a "model soup" (Wortsman et al. 2022, the uniform soup). What ``captioning export`` writes
when ``--checkpoint`` is given more than once.

Averaging is only meaningful between weights that lie in one basin: checkpoints of one run, or runs that
start from one set of weights. Two runs trained from different random starts average into a broken
network; this module cannot tell (it checks that the networks are the same, not that they are related).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from captioning.checkpoints.load import network_config
from captioning.checkpoints.read import CheckpointError
from captioning.models.registry import with_defaults

# The plain-data entries that make two checkpoints the same network: averaging weights between different
# configs or vocabularies would pair unrelated rows (the word embedding's row k is word k of each vocab),
# and one input size is what the export records.
SAME_NETWORK = ("net_config", "vocab", "image_size")


def _network_entry(key: str, meta: dict, path: Path):
    """``meta[key]``; the network config as read (today's names, every default stated), so a checkpoint
    saved before defaults were written out matches a later one of the same network."""
    return with_defaults(network_config(meta, path)) if key == "net_config" else meta.get(key)


def average_states(parts: Sequence[tuple[Path, dict, dict]]) -> dict:
    """The uniform average of the networks' state dicts ``parts`` = [(path, state, meta), ...].

    Floating tensors are averaged in float64 and cast back to their dtype; integer buffers (BatchNorm's
    ``num_batches_tracked``) are the first checkpoint's. A CheckpointError names the first file whose
    config, vocabulary, tensor names or shapes differ from the first's."""
    (first_path, first, first_meta), rest = parts[0], parts[1:]
    expected = {key: _network_entry(key, first_meta, first_path) for key in SAME_NETWORK}
    for path, state, meta in rest:
        for key in SAME_NETWORK:
            if _network_entry(key, meta, path) != expected[key]:
                raise CheckpointError(
                    f"{path}: its {key} differs from {first_path}'s; only checkpoints of one network (one "
                    "config, one vocabulary) can be averaged"
                )
        if state.keys() != first.keys():
            name = sorted(state.keys() ^ first.keys())[0]
            has, lacks = (path, first_path) if name in state else (first_path, path)
            raise CheckpointError(
                f"{path}: tensor {name!r} is in {has} but not in {lacks}; expected the same tensors"
            )
        for name, tensor in state.items():
            if tensor.shape != first[name].shape:
                raise CheckpointError(
                    f"{path}: tensor {name!r} is {tuple(tensor.shape)}, {tuple(first[name].shape)} in "
                    f"{first_path}; expected the same shapes"
                )
    averaged = {}
    for name, tensor in first.items():
        if tensor.is_floating_point():
            total = torch.stack([state[name].double() for _, state, _ in parts]).sum(0)  # (*shape)
            averaged[name] = (total / len(parts)).to(tensor.dtype)
        else:
            averaged[name] = tensor  # a step counter: averaging it means nothing
    return averaged
