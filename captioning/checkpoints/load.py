"""Loading a trained captioner from a checkpoint alone, safely.

Checkpoints are read with ``torch.load(weights_only=True)``: only tensors and plain data, never code.
The network is rebuilt from the saved config, whose ``_target_`` entries must all be names of the closed
registry ``captioning.models.registry.MODEL_CLASSES``: a crafted checkpoint can name neither an arbitrary
callable (``os.system``, or ``captioning.training.train.os.system``, which starts like a class of the
package) nor a library object that is not a network part. Its sizes are bounded, its config holds no
interpolation and its weights must be finite. Training checkpoints and weights-only exports
(``export.py``) are read alike (reading the file's bytes: ``read.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import torch
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from captioning.bounds import SIZE_BOUNDS
from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.read import (  # noqa: F401 - importers of these names find them here too
    FORMAT,
    MAGIC_OFFSET,
    CheckpointError,
    check_checkpoint_file,
    checkpoint_parts,
    is_export,
    net_state,
    read_checkpoint,
    read_export,
    read_weights_and_meta,
)
from captioning.checkpoints.save import non_finite_tensors
from captioning.data.vocab import Vocab
from captioning.decoding.config import GenerationConfig
from captioning.models.caption_model import CaptionModel
from captioning.models.legacy import canonical_name, modernise_config
from captioning.models.registry import MODEL_CLASSES
from captioning.models.size import bad_sizes, size_problem


@dataclass
class LoadedCheckpoint:
    net: CaptionModel
    vocab: Vocab
    decoding: dict[str, Any]
    image_size: int
    path: Path
    provenance: dict[str, Any] = field(default_factory=dict)  # how the weights were trained
    net_config: str | dict | None = None  # the saved network config, as stored (YAML text)


def _check_target(target: Any, path: Path, where: str) -> None:
    if canonical_name(str(target)) is None:
        raise CheckpointError(
            f"{path}: {where}._target_ is {target!r}; only the network classes of "
            f"captioning.models.registry may be built ({', '.join(sorted(MODEL_CLASSES))})"
        )


def _check_targets(node: Any, path: Path, where: str = "net_config") -> None:
    """Refuse any ``_target_`` outside the registry (legacy names are read as today's: modernise_config)."""
    if isinstance(node, dict):
        target = node.get("_target_")
        if target is not None:
            _check_target(target, path, where)
        for key, value in node.items():
            _check_targets(value, path, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_targets(value, path, f"{where}[{i}]")


MAX_CONFIG_CHARS = 100_000  # a network config is a few hundred lines at most
MAX_CONFIG_DEPTH = 32  # and nests 3 or 4 levels


def _check_plain_yaml(text: str, path: Path) -> None:
    """Refuse what could make parsing itself blow up: a huge text, or YAML anchors and aliases (a few
    hundred bytes of nested aliases expand to millions of nodes: a "billion laughs"). Scanning tokens
    is linear in the text; a config written by this project has neither."""
    if len(text) > MAX_CONFIG_CHARS:
        raise CheckpointError(
            f"{path}: net_config is {len(text):,} characters; expected at most {MAX_CONFIG_CHARS:,}"
        )
    opens = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
             yaml.FlowSequenceStartToken)  # fmt: skip
    closes = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
    depth = 0
    try:
        for token in yaml.scan(text):
            if isinstance(token, yaml.AnchorToken | yaml.AliasToken):
                raise CheckpointError(
                    f"{path}: net_config uses YAML anchors/aliases ('&'/'*'); a saved config is plain YAML"
                )
            depth += isinstance(token, opens) - isinstance(token, closes)
            if depth > MAX_CONFIG_DEPTH:  # the parsers recurse once per level
                raise CheckpointError(
                    f"{path}: net_config is nested more than {MAX_CONFIG_DEPTH} levels deep; a saved config "
                    "has a few"
                )
    except yaml.YAMLError as err:
        raise CheckpointError(
            f"{path}: net_config is not valid YAML: {' '.join(str(err).split())[:200]}"
        ) from err


def network_config(meta: dict, path: Path) -> dict:
    """A checkpoint's network config, checked (plain YAML, registered targets, sizes in bounds) and in
    today's names and defaults (``captioning.models.legacy``)."""
    text = meta.get("net_config")
    if not isinstance(text, str | dict):
        raise CheckpointError(f"{path}: '{CHECKPOINT_KEY}.net_config' is missing or not YAML text")
    try:  # a mapping (an export's JSON header) is checked as text too: its strings, keys and values
        flat = text if isinstance(text, str) else json.dumps(text, default=repr)
    except (RecursionError, ValueError):  # nested thousands of levels deep, or a circular reference
        raise CheckpointError(
            f"{path}: net_config is nested too deeply; a saved config has a few levels"
        ) from None
    if "${" in flat:  # ${oc.env:...} and friends would read the environment when the network is built
        raise CheckpointError(
            f"{path}: net_config holds an interpolation ('${{...}}'); a saved config is literal"
        )
    if isinstance(text, str):
        _check_plain_yaml(text, path)
    try:
        net_config = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    except RecursionError:  # a mapping (an export's header) nested thousands of levels deep
        raise CheckpointError(
            f"{path}: net_config is nested too deeply; a saved config has a few levels"
        ) from None
    except (OmegaConfBaseException, ValueError, TypeError, AttributeError, yaml.YAMLError) as err:
        raise CheckpointError(
            f"{path}: net_config is not a valid config: {' '.join(str(err).split())[:200]}"
        ) from err
    if not isinstance(net_config, dict) or not isinstance(net_config.get("encoder"), dict):
        raise CheckpointError(f"{path}: net_config is not a mapping with an 'encoder' and a 'decoder'")
    _check_targets(net_config, path)
    modernise_config(net_config)  # earlier versions' class names and keys, as today's
    for where, value, lowest, highest in bad_sizes(net_config, "net_config", low=0):
        raise CheckpointError(f"{path}: {where} = {value!r} is outside [{lowest}, {highest:,}]")
    return net_config


def _packaged_encoder_state(net: CaptionModel, record: Any, state: dict, path: Path) -> dict:
    """The encoder's tensors that the export left out (all of them, or a fine-tuned encoder's frozen
    ones), as built from its package, if they are the ones the export recorded."""
    from captioning.hashing import tensors_hash

    if not (isinstance(record, dict) and isinstance(record.get("sha256"), str)):
        raise CheckpointError(f"{path}: 'encoder_weights' is {record!r:.80}; expected {{source, sha256}}")
    supplied = {k: v for k, v in net.encoder.state_dict().items() if f"encoder.{k}" not in state}
    if tensors_hash(supplied) != record["sha256"]:
        raise CheckpointError(
            f"{path}: the pretrained encoder built here ({type(net.encoder).__name__}) does not have the "
            "weights this model was trained with (SHA-256 differs): install the weight package version it "
            "was exported with, or export it with the encoder included"
        )
    return {f"encoder.{k}": v for k, v in supplied.items()}


def _check_tensors(state: dict, path: Path) -> None:
    """Dense tensors with data (a meta tensor has none, a sparse one no dense layout to load into), and
    BatchNorm variances that are not negative: a finite negative variance makes every feature NaN."""
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{path}: entry {name} is a {type(tensor).__name__}, not a tensor")
        if tensor.is_meta or tensor.layout != torch.strided:
            kind = "on the meta device (no data)" if tensor.is_meta else f"{tensor.layout} (not dense)"
            raise CheckpointError(f"{path}: tensor {name} is {kind}; expected dense tensors with values")
        if name.endswith("running_var") and tensor.is_floating_point() and bool((tensor < 0).any()):
            raise CheckpointError(
                f"{path}: tensor {name} has negative values; a BatchNorm variance cannot be negative"
            )


def _check_dtypes(state: dict, net: CaptionModel, path: Path) -> None:
    """load_state_dict casts silently: refuse integer or boolean tensors where the network has floating
    point ones (and the reverse), which would load as garbage weights."""
    expected = net.state_dict()
    for name, tensor in state.items():
        want = expected.get(name)
        if not (isinstance(tensor, torch.Tensor) and isinstance(want, torch.Tensor)):
            continue
        if tensor.dtype.is_floating_point != want.dtype.is_floating_point or tensor.dtype.is_complex:
            raise CheckpointError(
                f"{path}: tensor {name} is {str(tensor.dtype).removeprefix('torch.')}; the network expects "
                f"{'a floating-point' if want.dtype.is_floating_point else 'an integer'} tensor there"
            )


def _provenance(value: Any, path: Path) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: '{CHECKPOINT_KEY}.provenance' is {value!r:.40}; expected a mapping")
    return dict(value)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> LoadedCheckpoint:
    """Rebuild the captioner of a training checkpoint (.ckpt) or a weights-only export (.safetensors).

    Every way a file can be unusable raises one :class:`CheckpointError` naming the file and the reason."""
    path = Path(path)
    return checkpoint_from_state(*read_weights_and_meta(path, map_location), path)


def checkpoint_from_state(state: dict, meta: dict, path: Path) -> LoadedCheckpoint:
    """The captioner of an already read state dict and plain-data entry; ``path`` names them in errors."""
    try:
        vocab = Vocab.from_dict(meta["vocab"])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: the '{CHECKPOINT_KEY}' entry is incomplete: {err}") from err
    net_config = network_config(meta, path)
    encoder_cfg = dict(net_config["encoder"])
    by_name = meta.get("encoder_weights")  # an export that references its pretrained encoder
    if "pretrained" in encoder_cfg and not by_name:
        encoder_cfg["pretrained"] = False  # the trained weights come from the state dict below
    image_size = meta.get("image_size")
    sized = isinstance(image_size, int) and not isinstance(image_size, bool) and 8 <= image_size <= 2048
    try:  # shapes only (the meta device): sizes each in bounds can still multiply to gigabytes
        too_large = size_problem({**net_config, "encoder": encoder_cfg}, image_size if sized else None)
    except Exception as err:  # noqa: BLE001 - a config the constructors refuse is a broken checkpoint
        reason = " ".join(str(getattr(err, "__cause__", None) or err).split())[:300]
        raise CheckpointError(f"{path}: the saved network config cannot be built: {reason}") from err
    if too_large:
        raise CheckpointError(f"{path}: refused before building it: {too_large}")
    try:
        net: CaptionModel = hydra.utils.instantiate({**net_config, "encoder": encoder_cfg})
    except Exception as err:  # noqa: BLE001 - a config the constructors refuse is a broken checkpoint
        reason = " ".join(str(getattr(err, "__cause__", None) or err).split())[:300]
        raise CheckpointError(f"{path}: the saved network config cannot be built: {reason}") from err
    if net.decoder.vocab_size != len(vocab):
        raise CheckpointError(
            f"{path}: the vocabulary has {len(vocab)} words but the decoder was built for {net.decoder.vocab_size}"
        )
    _check_tensors(state, path)
    bad = non_finite_tensors(state)
    if bad:
        raise CheckpointError(
            f"{path}: refused: non-finite weights (NaN/inf) in {', '.join(bad[:3])}"
            + (f" and {len(bad) - 3} more tensors" if len(bad) > 3 else "")
        )
    _check_dtypes(state, net, path)
    if by_name:
        state = {**_packaged_encoder_state(net, by_name, state, path), **state}
    try:  # strict, after each module's own legacy defaults (a REINFORCE layer's step counter)
        net.load_state_dict(state, strict=True)
    except RuntimeError as err:
        expected = net.state_dict()
        missing = [k for k in expected if k not in state]
        unexpected = [k for k in state if k not in expected]
        parts = [f"{len(names)} {what} (e.g. {', '.join(names[:3])})"
                 for what, names in (("missing", missing), ("unexpected", unexpected)) if names]  # fmt: skip
        reason = "; ".join(parts) or " ".join(str(err).split())[:300]  # named, a few at most: not every key
        raise CheckpointError(f"{path}: the weights do not fit the saved network config: {reason}") from err
    net.eval()
    try:  # legacy option names (beam_size, max_length) are renamed; unknown ones refused
        decoding = GenerationConfig.from_dict(meta.get("decoding"), where=f"{path}: decoding").to_dict()
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: the saved decoding settings are not valid: {err}") from err
    image_size = meta.get("image_size")  # no default: a guessed input size captions wrongly, silently
    if not isinstance(image_size, int) or not 8 <= image_size <= SIZE_BOUNDS["image_size"]:
        raise CheckpointError(
            f"{path}: image_size = {image_size!r} (the input size the model was trained at); expected an "
            "integer in [8, 2048]"
        )
    return LoadedCheckpoint(
        net=net,
        vocab=vocab,
        decoding=decoding,
        image_size=image_size,
        path=path,
        provenance=_provenance(meta.get("provenance"), path),
        net_config=meta.get("net_config"),
    )


load_captioner = load_checkpoint  # the 0.2 name (it returns a LoadedCheckpoint, not a Captioner)
