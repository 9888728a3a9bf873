"""Rewrite the decoding defaults stored in a checkpoint or an export (e.g. after tuning them on dev).

Everything else is kept bit for bit; the new settings are checked (``GenerationConfig``) before anything
is written, and the file is replaced atomically, so a failure leaves the old one intact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from captioning.checkpoints.export import half_floats, replace_with_partial, write_partial
from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.load import is_export, load_checkpoint, read_export
from captioning.checkpoints.save import atomic_torch_save
from captioning.decoding.config import GenerationConfig
from captioning.zoo import refuse_zoo_write


def write_decoding_defaults(path: str | Path, options: dict[str, Any]) -> dict[str, Any]:
    """Merge ``options`` into the stored decoding defaults of ``path``; returns the new defaults."""
    path = Path(path)
    refuse_zoo_write(path, "storing decoding defaults")  # its SHA-256 would no longer match
    current = load_checkpoint(path).decoding  # the file is a valid checkpoint before it is touched
    decoding = GenerationConfig.from_dict(current).replace(**options).to_dict()
    if is_export(path):
        state, meta = read_export(path)
        meta = {**meta, "decoding": decoding}
        if (meta.get("provenance") or {}).get("dtype") == "float16":  # read back as float32: store as written
            state = half_floats(state)
        tmp = write_partial(state, meta, path, path.stat().st_mode & 0o777)  # same permissions
        replace_with_partial(tmp, path, "cannot store the decoding defaults there")
    else:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        checkpoint[CHECKPOINT_KEY]["decoding"] = decoding
        atomic_torch_save(checkpoint, path)
    return decoding
