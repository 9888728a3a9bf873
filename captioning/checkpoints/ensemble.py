"""Several checkpoints decoded as one captioner: their decoders' mean next-word distribution.

``load_ensemble([A, B, ...])`` loads each file with ``load_checkpoint`` (every check of a single load
applies) and joins their decoders in an ``EnsembleDecoder``. The files must agree on:

* the vocabulary (word ids index one distribution);
* the input size and the grid's size (L cells: the members' attention maps are averaged cell by cell).

Members that share one frozen pretrained encoder (the same ``encoder_identity`` as the feature cache keys
on: class, layers, grid, D, weights by SHA-256, input size, normalisation), as the frozen ``flickr8k_*``
experiments do, run it once. Members that trained their own encoder (its last stages fine-tuned,
``flickr8k_finetune``) or read another one (Lite2's grid beside Lite1's) each keep theirs: the distinct
encoders run side by side as one ``EnsembleEncoder`` whose grid is theirs concatenated, and each member
decoder reads its own encoder's slice (``FeatureSlice``), exactly what it reads alone.

A mismatch is one ``CheckpointError`` line naming both files and what differs. The ensemble decodes
with the first file's stored decoding defaults (options given at decode time override them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from captioning.checkpoints.load import CheckpointError, LoadedCheckpoint, load_checkpoint
from captioning.hashing import encoder_identity
from captioning.models.caption_model import CaptionModel
from captioning.models.decoders.ensemble import EnsembleDecoder, FeatureSlice
from captioning.models.encoders.ensemble import EnsembleEncoder


def members_label(paths: Sequence[str | Path]) -> str:
    """How reports name one checkpoint or an ensemble: its paths joined by ' + '."""
    return " + ".join(str(p) for p in paths)


def members_stem(paths: Sequence[Path]) -> str:
    """A folder name for one checkpoint or an ensemble: the files' stems joined by '+'."""
    return "+".join(p.stem for p in paths)


def load_ensemble(paths: Sequence[str | Path], map_location: str = "cpu") -> LoadedCheckpoint:
    """One captioner averaging the next-word distributions of the checkpoints ``paths`` (two or more)."""
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise ValueError(f"an ensemble needs at least 2 checkpoints, got {len(paths)}")
    members = [load_checkpoint(p, map_location) for p in paths]
    first = members[0]
    for other in members[1:]:
        pair = f"{first.path} and {other.path}"
        if other.vocab != first.vocab:
            raise CheckpointError(
                f"ensemble: {pair} have different vocabularies ({len(first.vocab)} and {len(other.vocab)} "
                "words); members must be trained on the same vocabulary"
            )
        if other.image_size != first.image_size:
            raise CheckpointError(
                f"ensemble: {pair} were trained at {first.image_size} and {other.image_size} px; "
                "members must share the input size"
            )
        if other.net.grid_size != first.net.grid_size:
            raise CheckpointError(
                f"ensemble: {pair} read {first.net.grid_size}x{first.net.grid_size} and "
                f"{other.net.grid_size}x{other.net.grid_size} grids; members must read grids of the same size "
                "(their attention maps are averaged cell by cell)"
            )
    # Members whose encoders give the same grid share one; the others each keep their own (module docstring).
    identities = [json.dumps(encoder_identity(m.net.encoder, m.image_size), sort_keys=True) for m in members]
    distinct = list(dict.fromkeys(identities))  # in the members' order
    decoders = [m.net.decoder for m in members]
    if len(distinct) == 1:
        encoder = first.net.encoder
    else:
        encoders = [members[identities.index(key)].net.encoder for key in distinct]
        encoder = EnsembleEncoder(encoders)
        where = encoder.slices()
        decoders = [
            FeatureSlice(d, *where[distinct.index(key)], encoder.out_dim)
            for d, key in zip(decoders, identities)
        ]
    # An ensemble only decodes: nothing of it trains, so a fine-tuned member's stages are as frozen as the
    # rest, and a feature cache can hold the whole (concatenated) grid instead of encoding every photo again.
    net = CaptionModel(encoder, EnsembleDecoder(decoders)).eval().requires_grad_(False)
    return LoadedCheckpoint(
        net=net,
        vocab=first.vocab,
        decoding=first.decoding,
        image_size=first.image_size,
        path=first.path,
        provenance={"ensemble": [str(p) for p in paths], "members": [m.provenance for m in members]},
        net_config=None,  # an ensemble is assembled at load time, not built from one saved config
    )


def load_checkpoints(paths: Sequence[str | Path], map_location: str = "cpu") -> LoadedCheckpoint:
    """One checkpoint as it is, several as their ensemble."""
    if len(paths) == 1:
        return load_checkpoint(paths[0], map_location)
    return load_ensemble(paths, map_location)


load_captioners = load_checkpoints  # the 0.2 name
