"""Write generated documentation pages, or with ``check`` say which committed ones are stale: the loop the
page generators (gen_reference.py, gen_zoo_pages.py) share."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write_or_check(pages: dict[Path, str], check: bool, script: str) -> int:
    """Each page's generated text: written where it changed, or with ``check`` a diff on stderr and exit
    status 1 naming the stale pages (``script``: the generator to run, e.g. ``scripts/gen_reference.py``)."""
    stale = []
    for path, text in pages.items():
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        if old == text:
            continue
        if check:
            stale.append(path)
            diff = difflib.unified_diff(
                old.splitlines(), text.splitlines(), str(path), "generated", lineterm=""
            )
            print("\n".join(list(diff)[:40]), file=sys.stderr)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
    if stale:
        names = ", ".join(str(p.relative_to(REPO)) for p in stale)
        print(f"stale: {names}; run python {script} and commit them", file=sys.stderr)
        return 1
    return 0
