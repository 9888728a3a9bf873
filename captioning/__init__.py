"""Show, Attend and Tell (Xu et al., 2015) image captioning.

    from captioning import Captioner
    model = Captioner.from_checkpoint("model.ckpt", device="auto")
    print(model.caption("photo.jpg", num_beams=3)[0].caption)

    run = captioning.train(["debug=tiny", "trainer.max_epochs=1"])   # captioning-train's overrides
    captioning.evaluate(run.best_checkpoint)                          # captioning evaluate's

Importing the package changes nothing in the process (no environment variables, no resolvers) and
imports nothing heavy: the names below load on first use, and the entry points apply their process
settings themselves (``captioning.runtime``).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

_EXPORTS = {
    "Captioner": "captioning.inference.captioner",
    "CaptionResult": "captioning.inference.captioner",
    "GenerationConfig": "captioning.decoding.config",
    "CheckpointError": "captioning.checkpoints.load",
    "ImageInputError": "captioning.inference.results",  # unreadable inputs; .results: the good ones' captions
    "export_checkpoint": "captioning.checkpoints.export",
    "train": "captioning.api",  # captioning.api is an entry point: loaded only when called for
    "evaluate": "captioning.api",
    "TrainingRun": "captioning.api",
    "DomainNotice": "captioning.inference.domain",
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'captioning' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
