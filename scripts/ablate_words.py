"""Where do an LSTM decoder's words come from? Object accuracy on new scenes with one input path cut.

    python scripts/ablate_words.py CKPT [CKPT ...] [--scenes 200] [--json out.json]

For each checkpoint (soft, REINFORCE or Gumbel hard attention), greedy captions of N new scenes of the
project's renderer, scored by object accuracy (size, colour, shape and position all right), with:

* ``none``: the model as trained;
* ``context: random cell``: the attended context a_{s_t} (or Σ α a) replaced at every step by the vector
  of a uniformly random grid cell of the same image: what the attention *chooses* is cut;
* ``context: zero``: no context at all (as if the gate β_t were closed): the image reaches the words only
  through the initial state;
* ``init: other image``: h_0, c_0 computed from the mean grid of another image of the batch (the
  attention still reads the right image): what the initial state carries is cut;
* ``init: other image + context: random cell``: both.

If accuracy barely drops under ``context: random cell`` the words do not come from where the model
looks, and its attention maps are decorative; if it collapses under ``init: other image`` the scene is
carried by the initial state.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import torch
from scene_accuracy import scenes

from captioning.checkpoints.load import load_captioner
from captioning.data.images import image_to_tensor
from captioning.decoding import decode_captions
from captioning.metrics.objects import object_accuracy


class CutContext(torch.nn.Module):
    """Wraps an attention layer; its output's context replaced by a random cell's vector or zeros."""

    def __init__(self, inner: torch.nn.Module, mode: str, generator: torch.Generator):
        super().__init__()
        self.inner, self.mode, self.generator = inner, mode, generator

    def precompute(self, features):
        return self.inner.precompute(features)

    def forward(self, query, features, keys, mask=None):
        out = self.inner(query, features, keys, mask)
        if self.mode == "zero":
            out.context = torch.zeros_like(out.context)
        else:  # a random cell of each row's own image: (B·K, D') from features (B, L, D')
            rows = out.context.shape[0]
            cell = torch.randint(0, features.shape[1], (rows,), generator=self.generator)
            image = torch.arange(rows) * features.shape[0] // rows  # beams of an image share its features
            out.context = features[image, cell]
        return out


@contextlib.contextmanager
def ablated(decoder, context: str | None, init_other: bool, generator: torch.Generator):
    original_attention, original_init = decoder.attention, decoder.init_state
    if context:
        decoder.attention = CutContext(original_attention, context, generator)
    if init_other:

        def init_state(features, mask=None):
            state = original_init(features, mask)
            other = original_init(features.roll(1, dims=0), mask)  # the next image's mean grid
            return {**state, "h": other["h"], "c": other["c"]}

        decoder.init_state = init_state
    try:
        yield
    finally:
        decoder.attention, decoder.init_state = original_attention, original_init


ABLATIONS = {
    "none": (None, False),
    "context: random cell": ("random", False),
    "context: zero": ("zero", False),
    "init: other image": (None, True),
    "init: other image + context: random cell": ("random", True),
}


@torch.no_grad()
def measure(path: str, n: int) -> dict:
    model = load_captioner(path)
    data = scenes("project", n)
    images = torch.stack([image_to_tensor(img, model.image_size) for img, _, _ in data])  # (N, 3, S, S)
    truth = [objs for _, objs, _ in data]
    out = {}
    for name, (context, init_other) in ABLATIONS.items():
        generator = torch.Generator().manual_seed(0)
        captions = []
        with ablated(model.net.decoder, context, init_other, generator):
            for start in range(0, n, 50):
                batch = images[start : start + 50]
                captions += [
                    " ".join(c.words) for c in decode_captions(model.net, model.vocab, batch, num_beams=1)
                ]
        acc = object_accuracy(captions, truth)
        out[name] = {"objects_right": acc["object_accuracy"], "extra_per_image": acc["extra_per_image"],
                     "example": captions[0]}  # fmt: skip
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--scenes", type=int, default=200)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    report = {}
    for path in args.checkpoints:
        report[path] = measure(path, args.scenes)
        print(path)
        for name, row in report[path].items():
            print(
                f"  {name:42s} objects right {row['objects_right']:.3f}  extra/image {row['extra_per_image']:.2f}"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
