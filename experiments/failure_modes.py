"""A model card's "Known failure modes": caption the first N Flickr8k dev photos at the checkpoint's stored
decoding (CPU, one thread, batch 25, as the zoo page's snippet does) and flag each caption by the rules of
docs/models/index.md ("How the failure modes were measured"), comparing it with the photo's five references.

    OMP_NUM_THREADS=1 python scripts/failure_modes.py --checkpoint docs/models/flickr8k_transformer.safetensors \
        --out /tmp/failure_modes.md --json /tmp/failure_modes.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import time
from pathlib import Path

# These lists reproduce the counts of the zoo cards written before this script existed (vague words such as
# "several" and "group" are not counts).
MALE = {"man", "men", "boy", "boys", "guy", "guys"}
FEMALE = {"woman", "women", "girl", "girls", "lady", "ladies"}
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
COUNTS = {"two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
DOGS = {"dog", "dogs", "puppy", "puppies"}

# Rule name -> the card's bullet text (kept verbatim so the block can be pasted into a card).
TITLES = {
    "gender": "Wrong gender: man/boy where no reference says so and two or more say woman/girl, or the reverse",
    "colour": "A colour no reference uses",
    "count": "A count (two, three, ...) no reference uses",
    "dog": "A dog where no reference sees one (the data set's most frequent subject)",
}


def words(text: str) -> set[str]:
    """Lower-cased word set; splitting on non-letters keeps "t-shirt" from hiding "shirt" and drops " ."."""
    return set(re.findall(r"[a-z]+", text.lower()))


def wrong_gender(said: set[str], refs: list[set[str]]) -> bool:
    """One gender in the caption that no reference uses, while two or more references use the other."""
    used = set().union(*refs)
    return any(
        said & mine and not used & mine and sum(bool(r & other) for r in refs) >= 2
        for mine, other in ((MALE, FEMALE), (FEMALE, MALE))
    )


def _unused(vocabulary: set[str], said: set[str], refs: list[set[str]]) -> bool:
    """A word of ``vocabulary`` in the caption that no reference uses."""
    return bool(said & vocabulary - set().union(*refs))


def wrong_colour(said: set[str], refs: list[set[str]]) -> bool:
    return _unused(COLOURS, said, refs)


def wrong_count(said: set[str], refs: list[set[str]]) -> bool:
    return _unused(COUNTS, said, refs)


def unseen_dog(said: set[str], refs: list[set[str]]) -> bool:
    return bool(said & DOGS) and not DOGS & set().union(*refs)


RULES = {"gender": wrong_gender, "colour": wrong_colour, "count": wrong_count, "dog": unseen_dog}


def classify(captions: dict[str, str], refs: dict[str, list[str]]) -> dict[str, list[str]]:
    """Rule -> flagged image ids, in the order of ``captions`` (the dev list's)."""
    flagged: dict[str, list[str]] = {rule: [] for rule in RULES}
    for name, caption in captions.items():
        theirs = [words(r) for r in refs[name]]
        for rule, test in RULES.items():
            if test(words(caption), theirs):
                flagged[rule].append(name)
    return flagged


def markdown(captions: dict[str, str], refs: dict[str, list[str]], flagged: dict[str, list[str]]) -> str:
    n = len(captions)
    top, times = collections.Counter(captions.values()).most_common(1)[0]
    lines = [
        f"The model gives **{len(set(captions.values()))} distinct captions for {n} photos**; its most repeated "
        f'caption, "{top}", is given to {times} of them.',
        "",
    ]
    for rule, names in flagged.items():
        lines.append(f"- **{TITLES[rule]}**: {len(names)} of {n} photos.")
        for name in names[:2]:  # the first two in dev-list order, with the first reference
            lines.append(f'    - `{name}`: "{captions[name]}" — reference: "{refs[name][0]}"')
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", required=True, help=".safetensors export or .ckpt")
    parser.add_argument(
        "--data-root", type=Path, default=Path(os.environ.get("FLICKR8K_ROOT", "data/flickr8k"))
    )
    parser.add_argument("--num-images", type=int, default=150)
    parser.add_argument("--out", type=Path, help="write the markdown block here")
    parser.add_argument("--json", type=Path, help="write counts, flagged ids, captions and timing here")
    args = parser.parse_args()

    import torch  # imported here so the rules can be tested without loading torch or a model

    from captioning import Captioner
    from captioning.data.readers import DatasetError, read_flickr8k

    torch.set_num_threads(1)  # the cards' timings are one CPU thread
    try:  # the project's reader: the dev list's order, captions by their #k, every file checked
        dev = read_flickr8k(args.data_root, "dev")[: args.num_images]
    except DatasetError as err:
        raise SystemExit(f"failure_modes.py: {err} (set --data-root)") from None
    start = time.time()
    model = Captioner.from_checkpoint(args.checkpoint, device="cpu")
    loaded = time.time()
    results = model.caption([str(r.path) for r in dev], batch_size=25)
    seconds = (time.time() - loaded) / len(dev)
    captions = {r.path.name: result.caption for r, result in zip(dev, results)}
    refs = {r.path.name: list(r.captions) for r in dev}
    flagged = classify(captions, refs)
    block = markdown(captions, refs, flagged)
    print(block, end="")
    print(f"\n{seconds:.3f} s per photo; load {loaded - start:.1f} s")
    if args.out:
        args.out.write_text(block)
    if args.json:
        top = collections.Counter(captions.values()).most_common(1)[0]
        report = {
            "checkpoint": str(args.checkpoint),
            "photos": len(dev),
            "distinct_captions": len(set(captions.values())),
            "most_repeated": {"caption": top[0], "photos": top[1]},
            "counts": {rule: len(names) for rule, names in flagged.items()},
            "flagged": flagged,
            "seconds_per_photo": round(seconds, 4),
            "load_seconds": round(loaded - start, 2),
            "captions": captions,
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
