"""Several checkpoints decoded as one captioner: their decoders averaged over one shared encoder.

``load_ensemble([A, B, ...])`` loads each file with ``load_captioner`` (every check of a single load
applies) and joins their decoders in an ``EnsembleDecoder`` behind the first file's encoder. That is
only the same model for every member when they read the same grid, so the files must agree on:

* the vocabulary (word ids index one distribution);
* the encoder: the same config (backbone, stage, grid, D) and the same weights (SHA-256 of its tensors),
  i.e. one frozen pretrained encoder, as the ``flickr8k_*`` experiments share; models that trained their
  own encoder (the synthetic scenes' SmallCNN) read different grids and cannot be ensembled here;
* the input image size.

A mismatch is one ``CheckpointError`` line naming both files and what differs. The ensemble decodes
with the first file's stored decoding defaults (options given at decode time override them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from captioning.checkpoints.load import CheckpointError, LoadedCaptioner, load_captioner
from captioning.models.captioner import CaptionModel
from captioning.models.decoders.ensemble import EnsembleDecoder
from captioning.models.registry import canonical_name

# Encoder config keys that say where weights came from, not what the encoder computes.
_WEIGHT_SOURCE_KEYS = frozenset({"pretrained", "weights_path"})


def _encoder_identity(loaded: LoadedCaptioner) -> tuple[dict, str]:
    from captioning.data.features import state_dict_hash

    cfg = loaded.net_config
    encoder_cfg = {}
    if isinstance(cfg, dict | str):
        from omegaconf import OmegaConf

        node = OmegaConf.to_container(OmegaConf.create(cfg), resolve=False)
        encoder_cfg = {k: v for k, v in dict(node.get("encoder", {})).items() if k not in _WEIGHT_SOURCE_KEYS}
        if "_target_" in encoder_cfg:  # a legacy class name is the same encoder as the one it became
            encoder_cfg["_target_"] = canonical_name(str(encoder_cfg["_target_"]))
    return encoder_cfg, state_dict_hash(loaded.net.encoder)


def load_ensemble(paths: Sequence[str | Path], map_location: str = "cpu") -> LoadedCaptioner:
    """One captioner averaging the next-word distributions of the checkpoints ``paths`` (two or more)."""
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise ValueError(f"an ensemble needs at least 2 checkpoints, got {len(paths)}")
    members = [load_captioner(p, map_location) for p in paths]
    first = members[0]
    first_encoder = _encoder_identity(first)
    for other in members[1:]:
        pair = f"{first.path} and {other.path}"
        if other.vocab != first.vocab:
            raise CheckpointError(
                f"ensemble: {pair} have different vocabularies ({len(first.vocab)} and {len(other.vocab)} "
                "words); members must be trained on the same vocabulary"
            )
        encoder_cfg, digest = _encoder_identity(other)
        if encoder_cfg != first_encoder[0]:
            raise CheckpointError(
                f"ensemble: {pair} have different encoders ({first_encoder[0]} and {encoder_cfg}); "
                "members must read the same grid"
            )
        if digest != first_encoder[1]:
            raise CheckpointError(
                f"ensemble: {pair} have different encoder weights (SHA-256 {first_encoder[1][:12]} and "
                f"{digest[:12]}); members must share one frozen encoder"
            )
        if other.image_size != first.image_size:
            raise CheckpointError(
                f"ensemble: {pair} were trained at {first.image_size} and {other.image_size} px; "
                "members must share the input size"
            )
    decoder = EnsembleDecoder([m.net.decoder for m in members])
    net = CaptionModel(first.net.encoder, decoder).eval()
    return LoadedCaptioner(
        net=net,
        vocab=first.vocab,
        decoding=first.decoding,
        image_size=first.image_size,
        path=first.path,
        provenance={"ensemble": [str(p) for p in paths], "members": [m.provenance for m in members]},
        net_config=None,  # an ensemble is assembled at load time, not built from one saved config
    )


def load_captioners(paths: Sequence[str | Path], map_location: str = "cpu") -> LoadedCaptioner:
    """One checkpoint as it is, several as their ensemble."""
    if len(paths) == 1:
        return load_captioner(paths[0], map_location)
    return load_ensemble(paths, map_location)
