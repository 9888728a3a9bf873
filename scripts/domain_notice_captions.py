"""Are the captions of the dev photos that get the out-of-domain notice worse? Caption the flagged dev
photos (docs/results/domain_notice.json) and a seeded sample of the others with a zoo model at its stored
decoding, and compare their CIDEr-D (captioning.metrics.cider, document frequencies of all 1,000 dev
photos' references; lower-cased, punctuation split off) and how often each caption's notice recurs.

    python scripts/domain_notice_captions.py --root $FLICKR8K_ROOT --model flickr8k-finetune-scst \
        --others 100 --json docs/results/domain_notice_captions.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from captioning.data.readers import read_flickr8k
from captioning.inference.captioner import Captioner
from captioning.metrics.cider import CiderD

MEASURED = Path("docs/results/domain_notice.json")


def tokens(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True)
    ap.add_argument("--model", default="flickr8k-finetune-scst")
    ap.add_argument("--others", type=int, default=100, help="unflagged dev photos compared (seeded sample)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    dev = read_flickr8k(args.root, "dev")
    flagged = {e["image"] for e in json.loads(MEASURED.read_text())["dev_examples"]}
    index = {r.path.name: i for i, r in enumerate(dev)}
    picked = sorted(index[name] for name in flagged)
    rest = [i for i in range(len(dev)) if dev[i].path.name not in flagged]
    others = sorted(np.random.default_rng(0).choice(rest, args.others, replace=False).tolist())
    cider = CiderD([[tokens(c) for c in r.captions] for r in dev])
    model = Captioner.from_pretrained(args.model)
    out = {"command": f"python scripts/domain_notice_captions.py --root $FLICKR8K_ROOT --model {args.model} "
           f"--others {args.others} --json {args.json}", "model": args.model}  # fmt: skip
    for group, ids in (("flagged", picked), ("others", others)):
        results = model.caption([str(dev[i].path) for i in ids], batch_size=25)
        scores = cider.scores([tokens(r.caption) for r in results], ids)
        noticed = sum(r.domain_notice is not None for r in results)
        dog = sum("dog" in r.caption.split() and not any("dog" in c.lower() for c in dev[i].captions)
                  for i, r in zip(ids, results))  # fmt: skip
        out[group] = {"photos": len(ids), "mean_cider_d": round(float(scores.mean()), 4),
                      "notice_through_the_captioner": noticed, "dog_no_reference_sees": dog}  # fmt: skip
        print(group, out[group])
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
