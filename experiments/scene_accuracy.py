"""Object accuracy and grounding of checkpoints on new synthetic scenes, from three renderers.

    python scripts/scene_accuracy.py CKPT [CKPT ...] [--scenes 200] [--num-beams 1] [--hard-attention expected] [--json out.json]

Captions N scenes of each renderer and prints per checkpoint and renderer: objects named right (size,
colour, shape and position), extra objects per image, per-attribute agreement, attention grounding and
BLEU-4. The renderers:
- ``project``: the project's own (captioning.data.synthetic; a seed stream no split draws from);
- ``alt``: ``tests/alt_renderer.py``, written apart from the project's, but later used to choose a recipe,
  so no longer held out;
- ``third``: ``tests/third_renderer.py``, written from the scene spec alone by someone who had not read the
  other two, and used for no choice at all: the held-out check.
(The two test renderers are loaded from their files: they are test fixtures, not part of the package.)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from captioning import Captioner
from captioning.data.synthetic import render_scene
from captioning.decoding.config import HARD_ATTENTION_CONTEXTS
from captioning.metrics.coco import score_captions
from captioning.metrics.grounding import GroundingSample, grounding_accuracy
from captioning.metrics.objects import describe_misplaced, object_accuracy

REPO = Path(__file__).resolve().parents[1]


RENDERERS = ("project", "alt", "third")
_FILES = {"alt": "alt_renderer", "third": "third_renderer"}


def renderer_module(kind: str):
    """tests/<alt|third>_renderer.py loaded from its file."""
    name = _FILES[kind]
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scenes(kind: str, n: int) -> list[tuple[Image.Image, list[dict], list[str]]]:
    """(image, objects with shape/color/size/position/box, references) for n scenes."""
    if kind == "project":
        out = []
        for i in range(n):
            s = render_scene((4242, i))  # not a train/val/test stream
            objs = [
                {"shape": o.shape, "color": o.color, "size": o.size, "position": o.position, "box": o.box}
                for o in s.objects
            ]
            out.append((Image.fromarray(s.image), objs, list(s.captions)))
        return out
    if kind not in _FILES:
        raise ValueError(f"renderer {kind!r}: expected one of {RENDERERS}")
    other = renderer_module(kind)
    rng = np.random.default_rng(4242)
    return [
        (Image.fromarray(img), objs, other.references(objs))
        for img, objs in (other.render(rng) for _ in range(n))
    ]


def measure(model: Captioner, kind: str, n: int, num_beams: int, hard_attention: str | None = None) -> dict:
    data = scenes(kind, n)
    results = model.caption(
        [img for img, _, _ in data], batch_size=50, num_beams=num_beams, hard_attention=hard_attention
    )
    captions = [r.caption for r in results]
    objects = object_accuracy(captions, [objs for _, objs, _ in data])
    samples = [
        GroundingSample(r.tokens, r.attention.reshape(len(r.tokens), -1), model.grid, img.size, objs)
        for r, (img, objs, _) in zip(results, data)
    ]
    bleu = score_captions({i: refs for i, (_, _, refs) in enumerate(data)}, dict(enumerate(captions)),
                          metrics=("Bleu_4",), tokenizer="simple")["Bleu_4"]  # fmt: skip
    return {"renderer": kind, "scenes": n, **objects, **grounding_accuracy(samples), "Bleu_4": bleu,
            "examples": captions[:3]}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="checkpoints or exports (each measured on every renderer)")
    p.add_argument("--renderers", default=",".join(RENDERERS), help="comma-separated (default: %(default)s)")
    p.add_argument("--scenes", type=int, default=200)
    p.add_argument("--num-beams", type=int, default=None, help="default: the checkpoint's decoding")
    p.add_argument(
        "--hard-attention",
        choices=HARD_ATTENTION_CONTEXTS,
        default=None,
        help="hard-attention models: the context read at inference (default: the checkpoint's)",
    )
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    kinds = [k for k in args.renderers.split(",") if k]
    runs = []
    for checkpoint in args.checkpoints:
        model = Captioner.from_checkpoint(checkpoint)
        rows = [measure(model, kind, args.scenes, args.num_beams, args.hard_attention) for kind in kinds]
        print(Path(checkpoint).name)
        for r in rows:
            attrs = " ".join(f"{k} {v:.3f}" for k, v in r["attribute_accuracy"].items())
            looks = " ".join(f"{k} {v:.2f}" for k, v in r["attribute_grounding"].items())
            print(
                f"{r['renderer']:>8}: objects right {r['object_accuracy']:.3f} of {r['objects']}, extra/image "
                f"{r['extra_per_image']:.3f}, grounding {r['grounding']:.3f} ({looks}), BLEU-4 {r['Bleu_4']:.3f} "
                f"({attrs}); {describe_misplaced(r)}"
            )
        runs.append({"checkpoint": Path(checkpoint).name, "rows": rows})
    if args.json:
        meta = {"num_beams": args.num_beams, "hard_attention": args.hard_attention, "scenes": args.scenes}
        payload = {**runs[0], **meta} if len(runs) == 1 else {**meta, "runs": runs}  # one: the old layout
        args.json.write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
