"""Every image of a data set checked before training reads it, in parallel, the verdicts cached.

Readers only check that each file exists; one unreadable image would otherwise kill a run whenever it
comes up (on COCO, hours in). ``check_images`` decodes every file once (threads: Pillow releases the
GIL while decoding) and caches each verdict in ``cache_dir/image_checks.json`` under the file's path, size
and modification time, so later runs and splits re-check only new or changed files. ``on_bad_image``:
``skip`` drops the bad images (counted, listed in a file, refused beyond ``max_bad_fraction``) or
``raise`` stops at once naming the first.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from captioning.data.files import folder_problem
from captioning.data.images import ImageError, load_rgb
from captioning.data.readers import DatasetError

POLICIES = ("skip", "raise")


def _key(path: Path) -> str:
    """What a verdict is cached under: the file's path, size and mtime (a file that cannot be stat'ed:
    its path alone, so that it is re-checked once it exists)."""
    try:
        stat = path.stat()
    except OSError:
        return f"missing|{path}"
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def _verdict(path: Path) -> str:
    """ "" for a readable image, else the one-line reason."""
    try:
        load_rgb(path)
        return ""
    except ImageError as err:
        return str(err)
    except OSError as err:  # the file vanished or cannot be stat'ed
        return f"{path}: {err}"


def check_images(
    paths: list[Path], cache_dir: str | Path | None = None, workers: int | None = None
) -> dict[int, str]:
    """index -> reason for every unreadable image of ``paths`` (readable ones are left out)."""
    cache_file = Path(cache_dir) / "image_checks.json" if cache_dir else None
    cache: dict[str, str] = {}
    if cache_file is not None and cache_file.is_file():
        try:
            cache = json.loads(cache_file.read_text())
        except (json.JSONDecodeError, OSError):
            cache = {}  # a damaged cache is recomputed, never trusted
    keys = [_key(Path(p)) for p in paths]
    todo = [i for i, k in enumerate(keys) if k not in cache]
    with ThreadPoolExecutor(workers or min(8, (os.cpu_count() or 1) * 2)) as pool:
        for i, verdict in zip(todo, pool.map(lambda i: _verdict(Path(paths[i])), todo)):
            cache[keys[i]] = verdict
    if cache_file is not None and todo:
        problem = folder_problem(cache_file.parent)  # a read-only cache: one line, not a traceback
        try:
            if problem:
                raise OSError(problem)
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            with open(cache_file.with_suffix(".lock"), "w") as lock:  # runs sharing a cache write in turn
                fcntl.flock(lock, fcntl.LOCK_EX)
                tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(cache))
                os.replace(tmp, cache_file)
        except OSError as err:
            raise DatasetError(
                f"data.check_cache={cache_dir}: cannot store the image checks there "
                f"({problem or err.strerror or err}); expected a writable folder (paths.cache, "
                "$CAPTIONING_CACHE)"
            ) from err
    return {i: cache[k] for i, k in enumerate(keys) if cache[k]}


def _enough(bad: int, total: int) -> str:
    """The smallest two-decimal fraction that allows ``bad`` of ``total`` (a small set: 1 of 24 is 0.05), as
    :func:`apply_policy` compares it (``0.29 * 100`` is 28.999..., so 0.29 would not allow 29 of 100)."""
    hundredths = math.ceil(100 * bad / total)
    while bad > hundredths / 100 * total:
        hundredths += 1
    return f"{hundredths / 100:g}"


def apply_policy(name: str, bad: dict[int, str], total: int, policy: str, max_bad_fraction: float,
                 listing: str | Path | None = None) -> None:  # fmt: skip
    """Raise per the policy, or write the skipped files to ``listing``; ``name`` is the split's name."""
    if policy not in POLICIES:
        raise ValueError(f"data.on_bad_image={policy!r}: expected one of {POLICIES}")
    if not bad:
        return
    first = next(iter(bad.values()))
    if policy == "raise":
        raise DatasetError(
            f"{name} split: {len(bad)} unreadable image(s), the first: {first} (data.on_bad_image=raise)"
        )
    if len(bad) > max_bad_fraction * total:
        raise DatasetError(
            f"{name} split: {len(bad)} of {total} images are unreadable, more than data.max_bad_fraction="
            f"{max_bad_fraction} allows (data.max_bad_fraction={_enough(len(bad), total)} would skip them); "
            f"the first: {first}"
        )
    if listing is not None:
        problem = folder_problem(Path(listing).parent)
        try:
            if problem:
                raise OSError(problem)
            Path(listing).parent.mkdir(parents=True, exist_ok=True)
            Path(listing).write_text("".join(f"{reason}\n" for reason in bad.values()))
        except OSError as err:
            raise DatasetError(
                f"data.skipped_list: cannot write {listing} ({problem or err.strerror or err}); expected a "
                "writable folder (paths.cache, $CAPTIONING_CACHE)"
            ) from err
    where = f", listed in {listing}" if listing else ""
    print(
        f"{name} split: skipped {len(bad)} of {total} unreadable images{where}; the first: {first}",
        flush=True,
    )
