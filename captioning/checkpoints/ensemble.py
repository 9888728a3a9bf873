"""Several checkpoints decoded as one captioner: their decoders averaged over one shared encoder.

``load_ensemble([A, B, ...])`` loads each file with ``load_checkpoint`` (every check of a single load
applies) and joins their decoders in an ``EnsembleDecoder`` behind the first file's encoder. That is
only the same model for every member when they read the same grid, so the files must agree on:

* the vocabulary (word ids index one distribution);
* the encoder and input size: the same ``encoder_identity`` as the feature cache keys on (class, layers,
  grid, D, weights by SHA-256, input size, normalisation), i.e. one frozen pretrained encoder, as the
  ``flickr8k_*`` experiments share; models that trained their own encoder (the synthetic scenes'
  SmallCNN) read different grids and cannot be ensembled here.

A mismatch is one ``CheckpointError`` line naming both files and what differs. The ensemble decodes
with the first file's stored decoding defaults (options given at decode time override them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from captioning.checkpoints.load import CheckpointError, LoadedCheckpoint, load_checkpoint
from captioning.hashing import encoder_identity
from captioning.models.caption_model import CaptionModel
from captioning.models.decoders.ensemble import EnsembleDecoder


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
    grid = encoder_identity(first.net.encoder, first.image_size)  # what the shared encoder must give
    for other in members[1:]:
        pair = f"{first.path} and {other.path}"
        if other.vocab != first.vocab:
            raise CheckpointError(
                f"ensemble: {pair} have different vocabularies ({len(first.vocab)} and {len(other.vocab)} "
                "words); members must be trained on the same vocabulary"
            )
        theirs = encoder_identity(other.net.encoder, other.image_size)
        differ = [k for k in grid if grid[k] != theirs[k]]
        if differ == ["weights_sha256"]:
            raise CheckpointError(
                f"ensemble: {pair} have different encoder weights (SHA-256 {grid['weights_sha256'][:12]} and "
                f"{theirs['weights_sha256'][:12]}); members must share one frozen encoder"
            )
        if differ == ["image_size"]:
            raise CheckpointError(
                f"ensemble: {pair} were trained at {first.image_size} and {other.image_size} px; "
                "members must share the input size"
            )
        if differ:
            shown = ", ".join(
                k if k in ("structure", "weights_sha256") else f"{k} {grid[k]} and {theirs[k]}"
                for k in differ
            )
            raise CheckpointError(
                f"ensemble: {pair} have different encoders ({shown}); members must read the same grid"
            )
    decoder = EnsembleDecoder([m.net.decoder for m in members])
    net = CaptionModel(first.net.encoder, decoder).eval()
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
