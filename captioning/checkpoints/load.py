"""Loading a trained captioner from a checkpoint alone, safely.

Checkpoints are read with ``torch.load(weights_only=True)``: only tensors and plain data, never code.
The network is rebuilt from the saved config, whose ``_target_`` entries must all be names of the closed
registry ``captioning.models.registry.MODEL_CLASSES``: a crafted checkpoint can name neither an arbitrary
callable (``os.system``, or ``captioning.training.train.os.system``, which starts like a class of the
package) nor a library object that is not a network part. Its sizes are bounded, its config holds no
interpolation and its weights must be finite. Training checkpoints and weights-only exports
(``export.py``) are read alike.
"""

from __future__ import annotations

import json
import pickle
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import torch
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.save import non_finite_tensors
from captioning.data.vocab import Vocab
from captioning.decoding.config import GenerationConfig
from captioning.errors import UserError
from captioning.models.caption_model import CaptionModel
from captioning.models.registry import (
    MODEL_CLASSES,
    SIZE_BOUNDS,
    bad_sizes,
    canonical_name,
    modernise_config,
    size_problem,
)
from captioning.writes import EXPORT_FORMAT

FORMAT = EXPORT_FORMAT
MAGIC_OFFSET = 8  # safetensors: an 8-byte header length, then the JSON header starting with "{"


class CheckpointError(ValueError, UserError):
    """A file that cannot be used as a captioning checkpoint, with the path and the reason (one line)."""

    def __init__(self, message: object):
        super().__init__(" ".join(str(message).split()))  # torch's multi-line reasons folded into one


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


def _torch_load_reason(err: BaseException) -> str:
    """The informative part of a torch.load error, minus torch's advice to retry with weights_only=False
    (which would let the file run code, and is no cure for bytes that are not a checkpoint)."""
    text = str(err)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation", 1)[0]
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    advice = ("weights_only", "Check the documentation", "trusted source")  # torch's, about unpickling anyway
    kept = [s for s in sentences if not any(a in s for a in advice)]
    return " ".join(kept)[:300] or type(err).__name__


def check_checkpoint_file(path: Path) -> None:
    """A regular file, or a CheckpointError saying what the path is instead."""
    if path.is_dir():
        raise CheckpointError(f"{path}: is a folder, not a checkpoint file")
    if path.exists() and not path.is_file():
        raise CheckpointError(
            f"{path}: is not a regular file (a pipe, device or socket); expected a checkpoint file"
        )
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: the file is empty (0 bytes); expected a checkpoint file")


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """``torch.load`` with weights_only=True, every failure turned into a CheckpointError naming the file."""
    path = Path(path)
    check_checkpoint_file(path)
    try:
        with warnings.catch_warnings():  # torch warns about legacy formats before refusing: one line is ours
            warnings.simplefilter("ignore")
            with open(path, "rb") as f:  # a file object: torch.load would pick a reader by the suffix
                checkpoint = torch.load(f, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        # The weights-only unpickler names each callable it blocks as "GLOBAL module.name"; any other
        # unpickling failure means the bytes are not a torch checkpoint at all.
        blocked = re.search(r"GLOBAL ([\w.]+)", str(err))
        if blocked is None:
            reason = _torch_load_reason(err)
            raise CheckpointError(
                f"{path}: not a readable checkpoint (truncated or not a torch file?): {reason}"
            ) from err
        raise CheckpointError(
            f"{path}: refused to load: it contains objects other than tensors and plain data (it would call "
            f"{blocked.group(1)}). Checkpoints are read with weights_only=True so that loading one can never "
            "run code; this file was not written by captioning-train, or was tampered with."
        ) from err
    except (
        RuntimeError,
        EOFError,
        OSError,
        ValueError,
        IndexError,
        KeyError,
        TypeError,
        AttributeError,
        RecursionError,
        OverflowError,
    ) as err:  # fmt: skip - what torch.load raises on bytes it cannot parse
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or not a torch file?): {_torch_load_reason(err)}"
        ) from err
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path}: not a captioning checkpoint (expected 'state_dict' and a '{CHECKPOINT_KEY}' entry "
            "with the vocabulary and network config, as written by captioning-train)"
        )
    if not isinstance(checkpoint["state_dict"], dict):
        raise CheckpointError(
            f"{path}: its 'state_dict' is a {type(checkpoint['state_dict']).__name__}, not a mapping"
        )
    return checkpoint


def net_state(checkpoint: dict) -> dict:
    """The CaptionModel's tensors of a Lightning checkpoint (its ``net.`` entries, prefix removed)."""
    return {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}


def read_weights_and_meta(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[dict, dict]:
    """(the network's state dict, the plain-data entry) of a training checkpoint or a weights-only export."""
    path = Path(path)
    if path.is_file() and is_export(path):
        return read_export(path, map_location)
    return checkpoint_parts(read_checkpoint(path, map_location), path)


def is_export(path: Path) -> bool:
    """A safetensors file: by its header's shape, or by suffix unless the bytes are a torch checkpoint
    (a zip archive or a pickle: a training checkpoint renamed ``.safetensors`` still loads as one)."""
    with open(path, "rb") as f:
        head = f.read(MAGIC_OFFSET + 1)
    if len(head) == MAGIC_OFFSET + 1 and head[MAGIC_OFFSET : MAGIC_OFFSET + 1] == b"{":
        return True  # an 8-byte header length, then the JSON header (checked before the pickle byte below:
        # the length's low byte may be 0x80 too)
    if head[:4] == b"PK\x03\x04" or head[:1] == b"\x80":  # torch's zip format, a legacy pickle
        return False
    return path.suffix == ".safetensors"


def read_export(path: Path, map_location: str | torch.device = "cpu") -> tuple[dict, dict]:
    """(state dict in float32, the plain-data entry) of an export; any failure is a CheckpointError."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device=str(map_location)) as f:
            metadata = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(
            f"{path}: not a readable safetensors export: {' '.join(str(err).split())[:200]}"
        ) from err
    if metadata.get("format") != FORMAT or CHECKPOINT_KEY not in metadata:
        raise CheckpointError(
            f"{path}: a safetensors file, but not a captioning export (expected header format {FORMAT!r}, "
            f"as written by `captioning export`)"
        )
    try:
        meta = json.loads(metadata[CHECKPOINT_KEY])
    except (json.JSONDecodeError, RecursionError) as err:  # RecursionError: nested thousands deep
        reason = err if isinstance(err, json.JSONDecodeError) else "nested too deeply"
        raise CheckpointError(
            f"{path}: the export's '{CHECKPOINT_KEY}' header is not JSON: {reason}"
        ) from err
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: the export's '{CHECKPOINT_KEY}' header is not a mapping")
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}  # fp16 exports
    return state, meta


def checkpoint_parts(checkpoint: dict, path: Path) -> tuple[dict, dict]:
    """(the network's state dict, the plain-data entry) of a checkpoint ``read_checkpoint`` returned."""
    meta = checkpoint[CHECKPOINT_KEY]
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: the '{CHECKPOINT_KEY}' entry is not a mapping")
    stray = [k for k in checkpoint["state_dict"] if not str(k).startswith("net.")]
    if stray:  # the LightningModule holds the network only: anything else was added to the file
        raise CheckpointError(
            f"{path}: state_dict entry {stray[0]!r} is not part of the network (expected 'net.' entries only)"
        )
    return net_state(checkpoint), meta


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


def _network_config(meta: dict, path: Path) -> dict:
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


def load_captioner(path: str | Path, map_location: str | torch.device = "cpu") -> LoadedCheckpoint:
    """Rebuild the captioner of a training checkpoint (.ckpt) or a weights-only export (.safetensors).

    Every way a file can be unusable raises one :class:`CheckpointError` naming the file and the reason."""
    path = Path(path)
    return build_captioner(*read_weights_and_meta(path, map_location), path)


def build_captioner(state: dict, meta: dict, path: Path) -> LoadedCheckpoint:
    """The captioner of an already read state dict and plain-data entry; ``path`` names them in errors."""
    try:
        vocab = Vocab.from_dict(meta["vocab"])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: the '{CHECKPOINT_KEY}' entry is incomplete: {err}") from err
    net_config = _network_config(meta, path)
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
