"""The model card's "Known failure modes" for one export: caption the first 150 Flickr8k dev photos at the
stored decoding (one CPU thread) and compare each caption with the photo's five references, by the rules of
the zoo page (docs/models/index.md, "How the failure modes were measured").

    python docs/results/flickr8k/finetune_scst/failure_modes.py docs/models/flickr8k_finetune_scst.safetensors \
        ../shared/data/flickr8k > docs/results/flickr8k/finetune_scst/failure_modes.json
"""

import collections
import json
import sys
import time
from pathlib import Path

import torch

from captioning import Captioner

MALE, FEMALE = (
    {"man", "men", "boy", "boys", "male", "he", "his"},
    {"woman", "women", "girl", "girls", "female", "she", "her", "lady"},
)
COLOURS = {
    "red",
    "blue",
    "green",
    "yellow",
    "black",
    "white",
    "brown",
    "orange",
    "pink",
    "purple",
    "gray",
    "grey",
}
COUNTS = {"two", "three", "four", "five", "six", "several", "group"}


def words(text: str) -> set[str]:
    return set(text.lower().replace(".", " ").replace(",", " ").split())


def main() -> None:
    export, root = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    dev = (root / "Flickr_8k.devImages.txt").read_text().split()[:150]
    refs: dict[str, list[set[str]]] = collections.defaultdict(list)
    first: dict[str, str] = {}
    for line in (root / "Flickr8k.token.txt").read_text().splitlines():
        name, caption = line.split("\t")
        name = name.split("#")[0]
        refs[name].append(words(caption))
        first.setdefault(name, caption)
    model = Captioner.from_checkpoint(export, device="cpu")
    start = time.time()
    captions = [
        r.caption for r in model.caption([str(root / "Flicker8k_Dataset" / d) for d in dev], batch_size=25)
    ]
    seconds = (time.time() - start) / len(dev)
    found = collections.defaultdict(list)
    for name, caption in zip(dev, captions):
        said, theirs = words(caption), refs[name]
        any_ref = set().union(*theirs)
        for mine, other in ((MALE, FEMALE), (FEMALE, MALE)):
            if said & mine and not any_ref & mine and sum(bool(r & other) for r in theirs) >= 2:
                found["gender"].append((name, caption, first[name]))
        if said & COLOURS - any_ref:
            found["colour"].append((name, caption, first[name]))
        if said & COUNTS - any_ref:
            found["count"].append((name, caption, first[name]))
        if "dog" in said and not any("dog" in r or "dogs" in r for r in theirs):
            found["dog"].append((name, caption, first[name]))
    common = collections.Counter(captions).most_common(1)[0]
    print(
        json.dumps(
            {
                "export": export,
                "photos": len(dev),
                "seconds_per_photo": round(seconds, 3),
                "distinct_captions": len(set(captions)),
                "most_repeated": common,
                "counts": {k: len(v) for k, v in found.items()},
                "examples": found,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
