"""Reading a checkpoint file: its bytes to (the network's state dict, the plain-data entry), safely.

Training checkpoints are read with ``torch.load(weights_only=True)``: only tensors and plain data, never
code; weights-only exports (``export.py``) with safetensors. A zoo model (captioning/zoo.py) is read from
the very bytes whose SHA-256 was checked, never from the file a second time (a file swapped in between
would be loaded unchecked). What is built from the entry is checked in ``load.py``.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import warnings
from pathlib import Path

import torch

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.errors import UserError
from captioning.writes import EXPORT_FORMAT

FORMAT = EXPORT_FORMAT
MAGIC_OFFSET = 8  # safetensors: an 8-byte header length, then the JSON header starting with "{"


class CheckpointError(ValueError, UserError):
    """A file that cannot be used as a captioning checkpoint, with the path and the reason (one line)."""

    def __init__(self, message: object):
        super().__init__(" ".join(str(message).split()))  # torch's multi-line reasons folded into one


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


def read_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu", data: bytes | None = None
) -> dict:
    """``torch.load`` with weights_only=True, every failure turned into a CheckpointError naming the file;
    from ``data`` (the file's bytes, already read) when given."""
    path = Path(path)
    if data is None:
        check_checkpoint_file(path)
    try:
        with warnings.catch_warnings():  # torch warns about legacy formats before refusing: one line is ours
            warnings.simplefilter("ignore")
            # a file object: torch.load would pick a reader by the suffix
            with open(path, "rb") if data is None else io.BytesIO(data) as f:
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
    from captioning.zoo import verified_bytes

    path = Path(path)
    data = verified_bytes(path)  # a zoo model: the very bytes whose SHA-256 was checked
    if data is not None:
        if is_export(path, data[: MAGIC_OFFSET + 1]):
            return read_export(path, map_location, data)
        return checkpoint_parts(read_checkpoint(path, map_location, data), path)
    if path.is_file() and is_export(path):
        return read_export(path, map_location)
    return checkpoint_parts(read_checkpoint(path, map_location), path)


def is_export(path: Path, head: bytes | None = None) -> bool:
    """A safetensors file: by its header's shape, or by suffix unless the bytes are a torch checkpoint
    (a zip archive or a pickle: a training checkpoint renamed ``.safetensors`` still loads as one)."""
    if head is None:
        with open(path, "rb") as f:
            head = f.read(MAGIC_OFFSET + 1)
    if len(head) == MAGIC_OFFSET + 1 and head[MAGIC_OFFSET : MAGIC_OFFSET + 1] == b"{":
        return True  # an 8-byte header length, then the JSON header (checked before the pickle byte below:
        # the length's low byte may be 0x80 too)
    if head[:4] == b"PK\x03\x04" or head[:1] == b"\x80":  # torch's zip format, a legacy pickle
        return False
    return path.suffix == ".safetensors"


def read_export(
    path: Path, map_location: str | torch.device = "cpu", data: bytes | None = None
) -> tuple[dict, dict]:
    """(state dict in float32, the plain-data entry) of an export, from ``data`` (its bytes, already read)
    when given; any failure is a CheckpointError."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load as load_bytes

    try:
        if data is None:
            with safe_open(str(path), framework="pt", device=str(map_location)) as f:
                metadata = f.metadata() or {}
                state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
        else:
            state = {k: v.to(map_location) for k, v in load_bytes(data).items()}  # checks the header
            length = int.from_bytes(data[:MAGIC_OFFSET], "little")  # then its JSON: the metadata
            metadata = json.loads(data[MAGIC_OFFSET : MAGIC_OFFSET + length]).get("__metadata__") or {}
    except (SafetensorError, OSError, ValueError, AttributeError) as err:
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
