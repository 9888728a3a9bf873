"""Caption image files with a loaded checkpoint: the shared path of the CLI and notebooks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from captioning.checkpoint import LoadedCaptioner
from captioning.data.datamodule import image_to_tensor
from captioning.decoding import generate


@dataclass
class Caption:
    image: str
    caption: str
    tokens: list[str]  # without <start>/<end>
    grid: tuple[int, int]  # (H, W) of the attention grid
    attention: list[list[float]]  # one (H*W) row per token
    score: float  # log p(caption) / length**length_penalty

    def to_json(self) -> dict:
        return {
            "image": self.image,
            "caption": self.caption,
            "tokens": self.tokens,
            "grid": list(self.grid),
            "attention": self.attention,
            "score": self.score,
        }


@torch.no_grad()
def caption_images(
    model: LoadedCaptioner,
    images: list[Image.Image],
    names: list[str],
    beam_size: int = 1,
    max_length: int | None = None,
    length_penalty: float | None = None,
) -> list[Caption]:
    if not images:
        return []
    batch = torch.stack([image_to_tensor(img, model.image_size) for img in images])  # (B, 3, S, S)
    decoding = {**model.decoding, "beam_size": beam_size}
    if max_length is not None:
        decoding["max_length"] = max_length
    if length_penalty is not None:
        decoding["length_penalty"] = length_penalty
    out = generate(model.net.decoder, model.net.encode(batch), **decoding)
    g = model.net.grid_size
    results = []
    for i, name in enumerate(names):
        words = model.vocab.decode(out.tokens[i].tolist())
        results.append(
            Caption(
                image=name,
                caption=" ".join(words),
                tokens=words,
                grid=(g, g),
                attention=out.attention[i, : len(words)].tolist(),  # rows align with tokens
                score=float(out.score[i]),
            )
        )
    return results


def overlay_paths(out: Path, names: list[str]) -> list[Path]:
    """One overlay path per image: OUT.png itself for one image, OUT-<stem>.png for several."""
    if len(names) == 1:
        return [out]
    return [
        out.with_name(f"{out.stem}-{i:02d}-{Path(n).stem}{out.suffix or '.png'}") for i, n in enumerate(names)
    ]
