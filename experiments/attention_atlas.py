"""Where soft and hard attention look on photos: one caption's words under every model, and entropies.

    python scripts/attention_atlas.py --data flickr8k --num-images 50 --entropy-images 1000 \\
        --out docs/results/flickr8k/attention_atlas \\
        soft=docs/models/flickr8k_soft_xe.safetensors \\
        reinforce=docs/models/flickr8k_hard_reinforce.safetensors \\
        gumbel=docs/models/flickr8k_hard_gumbel.safetensors

For a fixed set of photos (every k-th image of the split by sorted id, so the set does not depend on the
models), the FIRST model captions the photo and every model reads that same caption (teacher forcing):
one figure per photo, one row of word panels per model (``photo-<id>.jpg``), so the rows differ only in
where each model attends. The maps are the attention *distributions* α_t (Xu et al. eq. 4-5); a hard
model samples (training) or takes the argmax of (inference) that distribution.

``entropy.json``: per model, the entropy H(α_t) = -Σ_i α_ti log α_ti of every word's attention over the
grid on the model's own greedy captions of ``--entropy-images`` photos (nats; mean ± std over words, and as a
fraction of log L, the entropy of uniform attention over the L cells), plus the mean mass of the largest
cell, and whether that peak moves with the words: the distinct peak cells per caption and the share of a
caption's words that peak on its most used cell (1.0: one fixed place for every word). Soft attention
spreads mass; a peaked distribution (low entropy, large top cell) is what "hard" means on photos, and a
peak that moves with the words is what makes it attention rather than a fixed place.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

from captioning import Captioner
from captioning.compose import compose_config
from captioning.data.images import image_to_tensor
from captioning.inference.evaluation import build_source
from captioning.inference.viz import render_overlay

ROW_LABEL_H = 22


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="label=checkpoint, the first one writes the shared caption")
    p.add_argument("--data", default="flickr8k")
    p.add_argument("--split", default="val", choices=("val", "test"))
    p.add_argument("--num-images", type=int, default=50, help="photos drawn (default: %(default)s)")
    p.add_argument("--entropy-images", type=int, default=1000, help="photos for the entropies (0: skip)")
    p.add_argument("--panel", type=int, default=110, help="word panel size in pixels (default: %(default)s)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--override", action="append", default=[], help="Hydra override of the data config")
    args = p.parse_args(argv)
    args.models = [m.split("=", 1) for m in args.models]
    bad = [m[0] for m in args.models if len(m) != 2 or not m[1]]
    if bad:
        p.error(f"models must be label=checkpoint, got {bad}")
    return args


@torch.no_grad()
def alphas(model: Captioner, image: Image.Image, tokens: list[str]) -> np.ndarray:
    """(T, L) attention distribution of ``model`` reading ``tokens`` (teacher forcing, eval mode)."""
    ids = model.vocab.encode(tokens)  # <start> w_1 .. w_T <end>
    x = image_to_tensor(image, model.image_size)[None].to(model.device)  # (1, 3, S, S)
    out = model.net(x, torch.tensor([ids[:-1]], device=model.device))  # inputs <start> .. w_T
    return out.alphas[0, : len(tokens)].float().cpu().numpy()  # (T, L): the rows that emitted w_1 .. w_T


def entropy_stats(maps: list[np.ndarray], cells: int) -> dict:
    """Entropy and peak mass over every word of every caption (``maps``: one (T, L) array per caption), and
    whether the peak moves with the words: a peaked map that sits on the same cell for every word is a
    location prior, not attention to what each word names."""
    a = np.concatenate(maps).astype(np.float64)  # (words, L)
    h = -(a * np.log(np.clip(a, 1e-12, None))).sum(1)  # (words,) nats
    top = a.max(1)
    peaks = [m.argmax(1) for m in maps if len(m)]  # per caption: (T,) the cell each word peaks on
    modal_share = [np.bincount(p).max() / len(p) for p in peaks]  # words on the caption's most used cell
    return {
        "words": len(a),
        "entropy_mean": float(h.mean()),
        "entropy_std": float(h.std(ddof=1)),
        "entropy_fraction_of_uniform": float(h.mean() / math.log(cells)),
        "uniform_entropy": math.log(cells),
        "top_cell_mass_mean": float(top.mean()),
        "top_cell_mass_std": float(top.std(ddof=1)),
        "distinct_peak_cells_per_caption": float(np.mean([len(set(p.tolist())) for p in peaks])),
        "words_on_the_captions_modal_cell": float(np.mean(modal_share)),
    }


def figure(
    image: Image.Image, rows: list[tuple[str, np.ndarray]], tokens: list[str], grid, panel: int
) -> Image.Image:
    """One row per model: its label above ``render_overlay`` of the shared caption (common width)."""
    drawn = []
    for label, att in rows:
        over = render_overlay(
            image, tokens, att, grid, caption=" ".join(tokens), ncols=len(tokens) + 1, panel=panel
        )
        band = Image.new("RGB", (over.width, ROW_LABEL_H), "white")
        ImageDraw.Draw(band).text((6, 4), label, fill="black")
        drawn += [band, over]
    width = max(d.width for d in drawn)
    out = Image.new("RGB", (width, sum(d.height for d in drawn)), "white")
    y = 0
    for d in drawn:
        out.paste(d, (0, y))
        y += d.height
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    models = [(label, Captioner.from_checkpoint(path)) for label, path in args.models]
    cfg, _ = compose_config("eval", [f"data={args.data}", *args.override])
    source = build_source(cfg.data, args.split)
    order = sorted(range(len(source)), key=lambda i: str(source.image_id(i)))
    step = max(1, len(order) // max(1, args.num_images))
    chosen = order[::step][: args.num_images]
    args.out.mkdir(parents=True, exist_ok=True)
    lead = models[0][1]
    index = []
    for i in chosen:
        image = source.image(i)
        result = lead.caption(image)[0]
        rows = [(label, alphas(m, image, result.tokens)) for label, m in models]
        name = f"photo-{source.image_id(i)}.jpg".replace("/", "_")
        figure(image, rows, result.tokens, lead.grid, args.panel).save(args.out / name, quality=70)
        index.append({"image_id": str(source.image_id(i)), "caption": result.caption, "figure": name})
    report: dict = {"models": dict(args.models), "photos": index, "caption_by": models[0][0]}
    if args.entropy_images > 0:
        report["entropy"] = {}
        for label, m in models:
            maps = []
            for i in order[: args.entropy_images]:
                image = source.image(i)
                tokens = m.caption(image, num_beams=1)[0].tokens
                if tokens:
                    maps.append(alphas(m, image, tokens))
            report["entropy"][label] = entropy_stats(maps, lead.grid[0] * lead.grid[1])
            print(label, json.dumps(report["entropy"][label]), flush=True)
    (args.out / "entropy.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {len(index)} figures and entropy.json to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
