"""``captioning caption IMAGE|FOLDER|GLOB ... --checkpoint CKPT [--num-beams K] [--overlay OUT.png] [--json]``.

Captions every readable image; each unreadable one is reported on stderr with its path and the reason,
and the exit status is then 1 (after the good images have been captioned and printed). Images are read
per batch and released after it, so memory stays bounded for any number of photos. Decoding options
are HF ``generate``'s (``captioning.decoding.config``); unset ones are the checkpoint's."""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from pathlib import Path

from captioning import progress
from captioning.cli.arguments import ENSEMBLE_HELP, add_checkpoints, path_arg
from captioning.cli.decoding_flags import add_decoding_arguments, decoding_options

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
GLOB_CHARS = set("*?[")


OVERLAY_SIDE = 1024  # the overlay figure is ~800 px wide: a larger copy of the photo adds nothing


def _printable(text: str) -> str:
    """One output field: tabs and line breaks in a file name or word escaped, so a line stays a record."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _say(kind: str | None, message: str) -> None:
    """One stderr line named by the command, as every other subcommand's: ``captioning caption: note: ...``
    (``kind`` None: a summary line). Stdout holds only captions, one record per image."""
    print(f"captioning caption: {kind + ': ' if kind else ''}{message}", file=sys.stderr, flush=True)


def nbest_lines(result) -> list[str]:
    """The n-best list (or the samples) under an image's line, best first: a tab, then ``k. caption
    (score S)``, so a line starting with a tab is never an image's; none for a single caption."""
    if len(result.candidates) < 2:
        return []
    return [
        f"\t{k}. {_printable(c.caption)}  (score {c.score:.3f})" for k, c in enumerate(result.candidates, 1)
    ]


def check_overlay_target(
    out: Path, inputs: list[Path], overlays: list[Path], folder: bool = False
) -> str | None:
    """Why ``--overlay`` cannot be written (unknown image format, one of its ``overlays`` would overwrite
    an input), or None."""
    from PIL import Image

    if not folder and out.suffix.lower() not in Image.registered_extensions():
        return (
            f"--overlay {out}: {out.suffix or 'no suffix'} is not an image format; expected e.g. .png or .jpg, "
            "or a folder (an existing one, or a path ending in /)"
        )
    targets = {p.resolve() for p in overlays}
    clash = next((p for p in inputs if p.resolve() in targets), None)
    if clash is not None:
        return f"--overlay {out}: would overwrite the input image {clash}; choose another path"
    from captioning.data.files import folder_problem

    for folder in dict.fromkeys(p.parent for p in overlays):  # before any image is decoded
        problem = folder_problem(folder)
        if problem:
            return f"--overlay {out}: {problem}"
    return None


def overlay_arg(text: str) -> str:
    """argparse ``type`` of ``--overlay``: the text itself (a trailing / names a folder), never empty."""
    path_arg(text)
    return text


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("caption", help="caption images with a trained checkpoint", description=__doc__)
    p.add_argument("images", nargs="+", help="image files, folders (their images) or quoted globs")
    add_checkpoints(
        p,
        f"a .ckpt or an exported .safetensors; {ENSEMBLE_HELP}",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument("--batch-size", type=int, default=16, help="images decoded at once (default: 16)")
    p.add_argument(
        "--overlay",
        type=overlay_arg,
        default=None,
        metavar="OUT.png|FOLDER/",
        help="write per-word attention overlays, labelled with what the map is (an LSTM's α_t, a "
        "Transformer's head-averaged cross-attention of one layer): OUT.png for one image; for several, "
        "OUT-NN-NAME.png beside it (NN the image's position from 00, NAME its file name without suffix); or "
        "a folder (an existing one, or a path ending in /): NAME.png inside it for each image",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per image")
    p.add_argument(
        "--rerank",
        type=path_arg,
        default=None,
        metavar="BANK",
        help="consensus reranking with this caption bank (built by `captioning bank`): each model's beams "
        "and samples, the caption kept by a CIDEr-D vote of the candidates and the nearest training images; "
        "--num-beams sets its beams (default 5), it draws its own samples (--do-sample and "
        "--num-return-sequences are refused with it)",
    )
    add_decoding_arguments(p)


def _is_dir(path: Path) -> bool:
    """Path.is_dir, False where the name itself cannot be looked up (too long): reported when read."""
    try:
        return path.is_dir()
    except OSError:
        return False


def expand_inputs(items: list[str]) -> list[Path]:
    """Files as given; folders as their image files (sorted); globs expanded (sorted), a folder they match
    read as a folder given. A folder or glob that matches nothing is kept as given, so that it is
    reported as an error. Files of a folder left out
    for their suffix are named on stderr, so that nothing is dropped without a word."""
    out: list[Path] = []
    for item in items:
        path = Path(item)
        if _is_dir(path):
            # every entry named like an image: a dangling link, a FIFO or a folder "x.png" is then reported
            found, other = [], []  # one pass: a camera folder can hold tens of thousands of entries
            for entry in sorted(path.iterdir()):
                if entry.suffix.lower() in IMAGE_SUFFIXES:
                    found.append(entry)
                elif not entry.name.startswith("."):
                    other.append(entry.name)
            if found and other:
                shown = ", ".join(_printable(n) for n in other[:5]) + (", ..." if len(other) > 5 else "")
                _say(
                    "note",
                    f"{_printable(str(path))}: left out {len(other)} {'entry' if len(other) == 1 else 'entries'} without an image suffix "
                    f"({shown}); images are read by suffix: {', '.join(sorted(IMAGE_SUFFIXES))}",
                )
            out += found or [path]
        elif GLOB_CHARS & set(item) and not path.exists():  # a folder it matches: its images, as given
            out += expand_inputs(sorted(glob.glob(item))) or [path]
        else:
            out.append(path)
    return out


def is_overlay_folder(text: str) -> bool:
    """``--overlay`` names a folder: an existing one, or a path written with a trailing separator."""
    return text.endswith(("/", os.sep)) or _is_dir(Path(text))


def overlay_paths(out: Path, names: list[str], folder: bool = False) -> list[Path]:
    """One overlay path per image: OUT.png itself for one image, OUT-<i>-<stem>.png for several; in a
    folder, <stem>.png, and <stem>-<i>.png for a name already given (a/x.jpg and b/x.png), again until it
    is new (c/x-01.jpg beside them). Names are compared as a case-insensitive file system would."""
    if folder:
        used: set[str] = set()
        paths = []
        for i, n in enumerate(names):
            name = f"{Path(n).stem}.png"
            while name.casefold() in used:  # each try is longer: it ends
                name = f"{Path(name).stem}-{i:02d}.png"
            used.add(name.casefold())
            paths.append(out / name)
        return paths
    if len(names) == 1:
        return [out]
    return [
        out.with_name(f"{out.stem}-{i:02d}-{Path(n).stem}{out.suffix or '.png'}") for i, n in enumerate(names)
    ]


def run(args: argparse.Namespace) -> int:
    from captioning.checkpoints.ensemble import members_label
    from captioning.checkpoints.load import CheckpointError
    from captioning.decoding.config import check_option
    from captioning.inference.captioner import Captioner

    err = lambda message: _say("error", message)  # noqa: E731
    if args.seed is not None and not 0 <= args.seed < 2**63:
        err(f"--seed {args.seed}: expected an integer in [0, 2**63)")
        return 2
    if args.batch_size < 1:
        err(f"--batch-size must be >= 1, got {args.batch_size}")
        return 2
    options = decoding_options(args)
    try:
        for name, value in options.items():
            check_option(name, value)  # each flag alone, before the checkpoint is read
        if args.rerank is not None:
            from captioning.inference.caption_bank import CaptionBank
            from captioning.inference.consensus import ConsensusReranker, RerankConfig

            config = RerankConfig(seed=args.seed or 0, num_beams=args.num_beams or RerankConfig.num_beams)
            config.check_decoding(options, "--rerank")  # --num-beams is its beams; --do-sample refused
        model = Captioner.from_checkpoint(args.checkpoint, device=args.device)
        model.generation_config(**options)  # with the checkpoint's defaults, before any image is read
        reranker = None
        if args.rerank is not None:  # a bad or mismatched bank file: one line, before any image is read
            bank = CaptionBank.load(args.rerank)
            bank.check_encoder(model.encoder_identity, members_label(args.checkpoint))
            reranker = ConsensusReranker(config, bank)
    except (CheckpointError, ValueError) as e:
        err(e)
        return 2
    # An empty argument (an unset $IMG) would be Path('') = '.', the current folder: refuse it instead.
    empty = [i for i, item in enumerate(args.images, 1) if not item.strip()]
    for i in empty:
        err(f"image argument {i} is an empty string, not an image file, folder or glob (an unset variable?)")
    paths = expand_inputs([item for item in args.images if item.strip()])
    out = Path(args.overlay) if args.overlay is not None else None
    folder = out is not None and is_overlay_folder(args.overlay)
    overlays = overlay_paths(out, [str(p) for p in paths], folder) if out else []
    problem = check_overlay_target(out, paths, overlays, folder) if out else None
    if problem:
        err(problem)
        return 2
    failures = {"images": len(empty), "uncaptioned": 0, "overlays": 0}
    fed: list[int] = []  # the position in paths of each path given to the captioner

    def files():  # a folder that expand_inputs found no image in is named here; the rest are read by the API
        for i, path in enumerate(paths):
            if GLOB_CHARS & set(str(path)) and not path.exists():  # kept as given by expand_inputs
                err(f"{_printable(str(path))}: no file or folder matches this pattern")
                failures["images"] += 1
                continue
            if _is_dir(path):
                err(
                    f"{_printable(str(path))}: is a folder, not an image file, and holds no image files "
                    f"(looked for {', '.join(sorted(IMAGE_SUFFIXES))})"
                )
                failures["images"] += 1
                continue
            fed.append(i)
            yield path

    # The paths themselves go to the API, streamed (captioning/progress.py counts them as they are read):
    # each batch is read, decoded by the one batch decoder and released before the next is read.
    nbest = (options.get("num_return_sequences") or 1) > 1  # the plain output lists them when asked for
    batches = model.iter_batches(
        progress.track(files(), "captioning", total=len(paths)), batch_size=args.batch_size, seed=args.seed,
        reranker=reranker, overlay_side=OVERLAY_SIDE if overlays else None, **options,
    )  # fmt: skip
    for batch in batches:
        if batch.note:
            _say("note", batch.note)
        for _, name, reason in batch.failures:
            err(f"{_printable(name)}: {reason}")
        failures["images"] += len(batch.failures)
        # broken weights (NaN scores), or nothing but empty captions: the images were read, not captioned
        if batch.broken is not None:
            for name in batch.names:
                err(f"{_printable(name)}: {batch.broken.reason}")
            failures["uncaptioned"] += len(batch.names)
            continue
        pictures = batch.pictures or [None] * len(batch.results)
        for k, result, picture in zip(batch.indices, batch.results, pictures):
            _report(result, picture, overlays[fed[k]] if overlays else None, args.json, failures, nbest)
        del batch
    if failures["overlays"]:
        _say(None, f"{failures['overlays']} overlays could not be written")
    total = len(paths) + len(empty)
    if failures["images"]:
        _say(None, f"{failures['images']} of {total} images could not be read")
    if failures["uncaptioned"]:
        _say(None, f"{failures['uncaptioned']} of {total} images got no caption from the network (above)")
    if failures["images"] + failures["uncaptioned"] == total:
        return 2  # nothing could be captioned
    return 1 if any(failures.values()) else 0


def _report(
    result, picture, overlay: Path | None, as_json: bool, failures: dict[str, int], nbest: bool = False
) -> None:
    """One image's line (or JSON object) on stdout, after its overlay is written: an unwritable overlay
    loses no caption (the line is printed either way, without the overlay); with ``nbest``, the plain
    output's n-best list under it (:func:`nbest_lines`)."""
    written = None
    if overlay is not None:
        try:
            result.overlay(picture, overlay)
            written = overlay
        except (OSError, ValueError) as e:
            _say("error", f"{overlay}: cannot write the overlay: {getattr(e, 'strerror', None) or e}")
            failures["overlays"] += 1
    if as_json:
        record = result.to_json()
        if written:
            record["overlay"] = str(written)
        print(json.dumps(record), flush=True)
    else:
        extra = f"\t(overlay: {_printable(str(written))})" if written else ""
        print(f"{_printable(result.image)}\t{_printable(result.caption)}{extra}", flush=True)
        for line in nbest_lines(result) if nbest else []:  # asked for: shown, not only in --json
            print(line, flush=True)
    if result.domain_notice is not None:  # stdout keeps one record per image; --json has it too
        _say("note", f"{_printable(result.image)}: {result.domain_notice}")
