"""Models by name: the closed registry of the exported models in the clone's docs/models/.

    from captioning import Captioner
    model = Captioner.from_pretrained("flickr8k-soft-scst")
    captioning caption photo.jpg --checkpoint flickr8k-soft-scst

A name is spelt with hyphens or, as the files are, with underscores (``flickr8k_soft_scst``), in any case.
It resolves to a file, searched for (nothing is ever downloaded) in, first to last:

1. ``$CAPTIONING_MODELS`` (one folder, or several separated by ``os.pathsep``);
2. the clone's ``docs/models/`` when the package runs from a clone (not from an installed wheel);
3. ``~/.cache/captioning/models``.

The file found is checked against the SHA-256 recorded here before anything reads it, and the bytes checked
are the bytes loaded. A name always means the zoo's model, also where a file of that name is in the current
folder (``./NAME`` is that file).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ENV = "CAPTIONING_MODELS"
CACHE = Path("~/.cache/captioning/models")


@dataclass(frozen=True)
class ZooModel:
    name: str
    file: str  # the file name searched for in each folder (model_dirs)
    sha256: str
    data: str  # what it was trained on (data=... to evaluate it)
    description: str


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel(
            "flickr8k-wide-scst",
            "flickr8k_wide_scst.safetensors",
            "b2b387561c23e96d0ada001e6ae534f97b9c9f193810dcde6356ecddb861768b",
            "flickr8k",
            "the recommended photo model: a 1,024-unit soft-attention LSTM, Lite1's stage7 + head fine-tuned, "
            "a three-model teacher distilled, 13 SCST epochs; 61.9 dev CIDEr-D, 21.3 METEOR, 24.2 BLEU-4, "
            "stored decoding",
        ),
        ZooModel(
            "flickr8k-finetune-scst",
            "flickr8k_finetune_scst.safetensors",
            "4db2d6ab6313f258848e5c4001e471caaf0d78e5a8392ebc77c20615996be151",
            "flickr8k",
            "soft attention LSTM over Lite1 with stage7 + head fine-tuned, cross-entropy then SCST; "
            "57.2 dev CIDEr-D, 23.6 BLEU-4, stored decoding",
        ),
        ZooModel(
            "flickr8k-distilled-scst",
            "flickr8k_distilled_scst.safetensors",
            "496b35d2068f52a37348b6bfd8eb0aeceb40c22e9f1f50450578200272f623a8",
            "flickr8k",
            "flickr8k-finetune-scst's recipe with a consensus teacher's captions as extra references; "
            "59.0 dev CIDEr-D, 20.9 METEOR, 23.1 BLEU-4, stored decoding",
        ),
        ZooModel(
            "flickr8k-soft-scst",
            "flickr8k_soft_scst.safetensors",
            "9e3498a517aec7f36c8b6ecd674d4fc5b1876f2e4ac1dc7df1e0760ca07873f2",
            "flickr8k",
            "soft attention LSTM, cross-entropy then SCST (lr 2e-4); 53.8 dev CIDEr-D, stored decoding",
        ),
        ZooModel(
            "flickr8k-soft-scst-seed1",
            "flickr8k_soft_scst_seed1.safetensors",
            "175043495407bfe091d1bf1aa08fe6856091c4ce3b5132f3cc009595ddd4234d",
            "flickr8k",
            "second seed of flickr8k-soft-scst; 54.1 dev CIDEr-D, stored decoding",
        ),
        ZooModel(
            "flickr8k-soft-xe",
            "flickr8k_soft_xe.safetensors",
            "33b1a30e2414b62f34fce60b61b9df78e0bd1dd22be946fce0af28f4fa2aaf63",
            "flickr8k",
            "soft attention LSTM, cross-entropy; 52.9 dev CIDEr-D, stored decoding",
        ),
        ZooModel(
            "flickr8k-soft-xe-seed1",
            "flickr8k_soft_xe_seed1.safetensors",
            "84fe83e9545014322e20e5ef29877c0cc5d9cfd5eaa33f9fb25840a5e2b51de1",
            "flickr8k",
            "second seed of flickr8k-soft-xe (the ensemble's second member)",
        ),
        ZooModel(
            "flickr8k-hard-gumbel",
            "flickr8k_hard_gumbel.safetensors",
            "ca8b24432132ddcf9d88be9571bc19aeffdc645d32ba6b4d8c36dfce6a46f9e5",
            "flickr8k",
            "hard attention, Gumbel-softmax from soft XE, then SCST; 48.5 dev CIDEr-D, stored decoding",
        ),
        ZooModel(
            "flickr8k-hard-reinforce",
            "flickr8k_hard_reinforce.safetensors",
            "6490d37a7c139d1a33164b5662498817a21acf83de778a2a2870e100f453ddc2",
            "flickr8k",
            "hard attention, REINFORCE from soft XE; decodes with the expected context (beam 3)",
        ),
        ZooModel(
            "flickr8k-transformer",
            "flickr8k_transformer.safetensors",
            "4bca47deaa8c1a6d79127875dcdb982a9b19b05d62de2aa68ce54797a28cd2ba",
            "flickr8k",
            "Transformer decoder, cross-entropy then SCST; 53.6 dev CIDEr-D, stored decoding",
        ),
        ZooModel(
            "synthetic-soft",
            "synthetic_soft.safetensors",
            "499fa393630214aeaefec594ece3a680d8a395fc4511f359a87ea17942637612",
            "synthetic",
            "soft attention LSTM on the synthetic scenes (data=synthetic), for walkthroughs and tests",
        ),
    )
}


class ZooError(ValueError):
    """A model name that is unknown, whose file is nowhere to be found, or whose file's SHA-256 differs."""


def clone_models_dir() -> Path | None:
    """The clone's docs/models/ when this package is imported from a clone (never from an installed one)."""
    root = Path(__file__).resolve().parents[1]
    models = root / "docs" / "models"
    return models if (root / "pyproject.toml").is_file() and models.is_dir() else None


def model_dirs() -> list[Path]:
    """The folders searched for a model's file, first to last (module docstring)."""
    dirs = [Path(p).expanduser() for p in os.environ.get(ENV, "").split(os.pathsep) if p.strip()]
    clone = clone_models_dir()
    if clone is not None:
        dirs.append(clone)
    dirs.append(CACHE.expanduser())
    return dirs


def find(name: str) -> Path | None:
    """Where the file of zoo model ``name`` is (the first of ``model_dirs`` that has it), or None."""
    model = lookup(name)
    for folder in model_dirs():
        if (folder / model.file).is_file():
            return folder / model.file
    return None


def unknown_name_message(name: str) -> str:
    close = difflib.get_close_matches(canonical_name(name), list(MODELS), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"{name!r} is not a model of the zoo; {hint}the zoo has: {', '.join(MODELS)}"


def canonical_name(name: str) -> str:
    """The zoo's spelling of a model name: the files are named with underscores (flickr8k_soft_scst), the
    zoo with hyphens (flickr8k-soft-scst); either spelling, in any case, is the same model."""
    return name.strip().lower().replace("_", "-")


def lookup(name: str) -> ZooModel:
    if canonical_name(name) not in MODELS:
        raise ZooError(unknown_name_message(name))
    return MODELS[canonical_name(name)]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# The bytes of each file resolve() checked, by path: the loader reads these (checkpoints/read.py), never the
# file again, so a file swapped after the check is not what gets loaded. A zoo file is ~16 MB.
_VERIFIED: dict[Path, bytes] = {}


def verified_bytes(path: Path) -> bytes | None:
    """The bytes of ``path`` whose SHA-256 :func:`resolve` checked, or None for a file it did not resolve."""
    return _VERIFIED.get(Path(path).absolute())


def resolve(name: str) -> Path:
    """The checked file of zoo model ``name``: ZooError (one line) when the name is unknown, the file is in
    none of the folders searched, or its SHA-256 is not the recorded one. The file is read once: the bytes
    hashed are the bytes loaded (:func:`verified_bytes`)."""
    model = lookup(name)
    path = find(name)
    if path is None:
        searched = ", ".join(str(d) for d in model_dirs())
        raise ZooError(
            f"model {name!r}: {model.file} is in none of {searched} (nothing is downloaded: copy it into "
            f"one of them, or point ${ENV} at its folder)"
        )
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ZooError(f"model {name!r}: {path} cannot be read ({err.strerror or err})") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != model.sha256:
        raise ZooError(
            f"model {name!r}: {path} has SHA-256 {actual[:16]}..., not the zoo's {model.sha256[:16]}... "
            "(a different or damaged file)"
        )
    _VERIFIED[path.absolute()] = data
    return path


def zoo_file(path: str | Path) -> str | None:
    """The name of the zoo model whose file ``path`` is (in any folder searched), or None: a file the zoo
    checks by SHA-256, which nothing may rewrite in place (it would no longer pass its own check)."""
    try:
        target = Path(path).resolve()
    except OSError:
        return None
    for model in MODELS.values():
        for folder in model_dirs():
            candidate = folder / model.file
            if candidate.exists() and candidate.resolve() == target:
                return model.name
    return None


def refuse_zoo_write(path: str | Path, what: str) -> None:
    """ZooError (one line, saying where to write instead) when ``path`` is a zoo model's file."""
    name = zoo_file(path)
    if name is not None:
        copy = f"my_{MODELS[name].file}"
        raise ZooError(
            f"{what}: {path} is the file of zoo model {name!r}, checked by its SHA-256; rewritten, the name "
            f"would be refused. Copy it first (cp {path} {copy}) and use the copy ({copy})"
        )


def looks_like_name(text: str) -> bool:
    """True for text meant as a model name rather than a file: no folder separator, no dot (a zoo name has
    none, a file name has a suffix: ``last.ckpt``, ``model.pt``), and no file of that name here. Anything
    else is a path, whose problems are the file's (a missing file is named with the nearest entries of
    its folder: captioning/cli/paths.py)."""
    return "/" not in text and os.sep not in text and "." not in text and not Path(text).exists()


def checkpoint_path(text: str) -> Path:
    """A ``--checkpoint`` value as a path: a zoo name resolves to its checked file, a name that is not in
    the zoo (and no file) is an error with the nearest names, anything else is a path as given."""
    if (
        canonical_name(text) in MODELS
    ):  # the zoo's model, also when a file of that name is here (./NAME loads that file)
        if Path(text).exists():
            print(
                f"{text}: the zoo model (SHA-256 checked); the file {Path(text).absolute()} of the same name is "
                f"not used (give ./{text} to load it)",
                file=sys.stderr,
            )
        return resolve(text)
    if looks_like_name(text):
        raise ZooError(f"no file {text!r}, and {unknown_name_message(text)}")
    return Path(text)


def listing() -> list[dict[str, object]]:
    """One row per model: name, data, file (the path found, or None), size in bytes (or None), description."""
    rows = []
    for model in MODELS.values():
        path = find(model.name)
        rows.append(
            {
                "name": model.name,
                "data": model.data,
                "file": str(path) if path else None,
                "size": path.stat().st_size if path else None,
                "description": model.description,
            }
        )
    return rows
