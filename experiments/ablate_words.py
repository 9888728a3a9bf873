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
* ``colour words: random cell`` / ``shape words: random cell``: the context replaced only at the steps
  that follow a size word (which emit the colour word: captions name size, colour, shape in a row) or a
  colour word (which emit the shape word); every other step reads what the model attends. If the colour
  stays right, the colour word is not read at its own step but carried in the state from an earlier one.

Besides objects right, each row reports the per-attribute accuracy (size, colour, shape, position).

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

from captioning.checkpoints.load import load_checkpoint
from captioning.data.images import image_to_tensor
from captioning.decoding import decode_captions
from captioning.metrics.objects import COLORS, SIZES, object_accuracy
from experiments.scene_accuracy import scenes


class CutContext(torch.nn.Module):
    """Wraps an attention layer; its output's context replaced by a random cell's vector or zeros."""

    def __init__(self, inner: torch.nn.Module, mode: str, generator: torch.Generator):
        super().__init__()
        self.inner, self.mode, self.generator = inner, mode, generator
        self.rows: torch.Tensor | None = None  # (B·K,) bool: the rows cut at this step (None: all)

    def precompute(self, features):
        return self.inner.precompute(features)

    def forward(self, query, features, keys, mask=None):
        out = self.inner(query, features, keys, mask)
        if self.mode == "zero":
            cut = torch.zeros_like(out.context)
        else:  # a random cell of each row's own image: (B·K, D') from features (B, L, D')
            rows = out.context.shape[0]
            cell = torch.randint(0, features.shape[1], (rows,), generator=self.generator)
            image = torch.arange(rows) * features.shape[0] // rows  # beams of an image share its features
            cut = features[image, cell]
        out.context = cut if self.rows is None else torch.where(self.rows.unsqueeze(1), cut, out.context)
        return out


@contextlib.contextmanager
def ablated(
    decoder,
    context: str | None,
    init_other: bool,
    generator: torch.Generator,
    after: torch.Tensor | None = None,
):
    """``after``: ids of the words after which the context is cut (None: every step)."""
    original_attention, original_init = decoder.attention, decoder.init_state
    own_step = vars(decoder).get("step")  # an instance attribute (a compiled step) to put back, or None
    if context:
        decoder.attention = cut = CutContext(original_attention, context, generator)
        if after is not None:
            original_step = decoder.step

            def step(tokens, state):
                cut.rows = torch.isin(tokens, after)  # (B·K,) rows whose previous word is in ``after``
                return original_step(tokens, state)

            decoder.step = step
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
        if own_step is not None:
            decoder.step = own_step
        else:
            vars(decoder).pop("step", None)  # the class's step again


# name -> (context cut, initial state of another image, cut only after words of this attribute)
ABLATIONS = {
    "none": (None, False, None),
    "context: random cell": ("random", False, None),
    "context: zero": ("zero", False, None),
    "init: other image": (None, True, None),
    "init: other image + context: random cell": ("random", True, None),
    "colour words: random cell": ("random", False, SIZES),
    "shape words: random cell": ("random", False, COLORS),
}


@torch.no_grad()
def measure(path: str, n: int) -> dict:
    model = load_checkpoint(path)
    data = scenes("project", n)
    images = torch.stack([image_to_tensor(img, model.image_size) for img, _, _ in data])  # (N, 3, S, S)
    truth = [objs for _, objs, _ in data]
    out = {}
    for name, (context, init_other, after_words) in ABLATIONS.items():
        generator = torch.Generator().manual_seed(0)
        captions = []
        after = None if after_words is None else torch.tensor([model.vocab.stoi[w] for w in after_words])
        with ablated(model.net.decoder, context, init_other, generator, after):
            for start in range(0, n, 50):
                batch = images[start : start + 50]
                captions += [
                    " ".join(c.words) for c in decode_captions(model.net, model.vocab, batch, num_beams=1)
                ]
        acc = object_accuracy(captions, truth)
        out[name] = {"objects_right": acc["object_accuracy"], "extra_per_image": acc["extra_per_image"],
                     "attribute_accuracy": acc["attribute_accuracy"], "example": captions[0]}  # fmt: skip
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
            per = " ".join(f"{a} {v:.3f}" for a, v in row["attribute_accuracy"].items())
            print(
                f"  {name:42s} objects right {row['objects_right']:.3f}  extra/image {row['extra_per_image']:.2f}"
                f"  ({per})"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
