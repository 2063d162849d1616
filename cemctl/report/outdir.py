"""Output folders cemctl owns (`cemctl report --out DIR`, `cemctl claims --out DIR`): replaced only if ours.

A report is built in a temporary sibling folder and swapped in as a whole, so a
failure never leaves half a report. The folder it replaces must be one an
earlier report made: each holds `.cemctl-output.json`, the marker listing every
file the report wrote. Anything else is refused with one line and nothing is
touched: an existing file, device or link, a folder holding a file the report
did not write (the user's notes, a checkout, the working folder of `--out .`).
An empty folder is taken over.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import uuid
from pathlib import Path

from cem_core.errors import CemError

MARKER = ".cemctl-output.json"
# Reports written before the marker existed: only these files, nothing else, count as ours.
LEGACY_REPORT = re.compile(r"(index\.md|index\.html|runs\.csv|figures/[\w.-]+\.(png|pdf|svg)|tables/[\w.-]+\.(md|csv|tex))")


class OutputRefused(CemError):
    """The output path holds something cemctl did not write."""


def _listing(folder: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            out.append(os.path.relpath(os.path.join(dirpath, name), folder))
    return sorted(out)


def check_output_dir(path: Path | str, *, what: str = "report") -> Path:
    """`path` made absolute if cemctl may (re)create it there; OutputRefused (one line) otherwise."""
    out = Path(os.path.abspath(path))
    if out == Path(out.anchor):
        raise OutputRefused(f"--out: {path}: refused: the root folder is not a {what} folder")
    if not os.path.lexists(out):
        return out
    st = os.lstat(out)
    if stat.S_ISLNK(st.st_mode):
        raise OutputRefused(f"--out: {out}: refused: a symlink (give a folder that does not exist, or an earlier {what})")
    if not stat.S_ISDIR(st.st_mode):
        kind = "file" if stat.S_ISREG(st.st_mode) else "special file"
        raise OutputRefused(f"--out: {out}: refused: an existing {kind}, not a {what} folder (give a new folder)")
    present = _listing(out)
    if not present:
        return out
    try:
        marker = json.loads((out / MARKER).read_text())
        owned = set(marker.get("files", [])) | {MARKER}
    except (OSError, ValueError, AttributeError):
        if what == "report" and all(LEGACY_REPORT.fullmatch(p) for p in present):
            return out  # a report written before the marker existed, untouched since
        raise OutputRefused(f"--out: {out}: refused: the folder holds files cemctl did not write "
                            f"(e.g. {present[0]}); give a new folder") from None
    foreign = [p for p in present if p not in owned]
    if foreign:
        raise OutputRefused(f"--out: {out}: refused: an earlier {what} folder that now also holds {foreign[0]}"
                            f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}; move them or give a new folder")
    return out


def new_build_dir(out: Path) -> Path:
    """A temporary sibling of `out` to build the new contents in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)
    return tmp


def swap_in(tmp: Path, out: Path, *, what: str = "report") -> None:
    """Mark `tmp` as cemctl's (listing its files) and put it in place of `out`, which must pass the check again."""
    files = _listing(tmp)
    (tmp / MARKER).write_text(json.dumps({"written_by": "cemctl", "what": what, "files": files}, indent=1) + "\n")
    check_output_dir(out, what=what)  # re-checked: nothing foreign may have appeared meanwhile
    old = None
    if os.path.lexists(out):
        # A name nothing else can hold: an existing path of that name is never removed to make room.
        old = out.with_name(f".{out.name}.old-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        out.rename(old)
    try:
        tmp.rename(out)
    except OSError:
        if old is not None:
            old.rename(out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
