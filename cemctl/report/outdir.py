"""Output folders cemctl owns (`cemctl report --out DIR`, `cemctl claims --out DIR`): replaced only if ours, by proof.

A report is built in a temporary sibling folder and swapped in as a whole, so a
failure never leaves half a report. The folder it replaces must be one an
earlier run of the same command made: it holds the manifest `.cemctl-output.json`
(`cem_core.runfiles.manifest`) listing every file written, each with its size and
sha256, and every file in it must still be exactly that. Anything else is refused
with one line and nothing is touched: an existing file, device or link, a folder
without the manifest (whatever its files look like: a docs or site folder with
an index.md and figures/ is the user's), a folder holding a file the report did
not write or one the user edited, a manifest that is a link, a FIFO or another
command's (`cemctl claims` never replaces a report folder). An empty folder is
taken over. After the swap only the files the old manifest lists are deleted.
"""

from __future__ import annotations

import os
import stat
import tempfile
import uuid
from pathlib import Path

from cem_core.errors import CemError
from cem_core.runfiles.manifest import (
    ManifestError,
    audit_folder,
    listing,
    prune_empty_folders,
    read_manifest,
    remove_owned,
    write_manifest,
)

MARKER = ".cemctl-output.json"


class OutputRefused(CemError):
    """The output path holds something cemctl did not write."""


def check_output_dir(path: Path | str, *, what: str = "report") -> Path:
    """`path` made absolute if cemctl may (re)create it there; OutputRefused (one line) otherwise."""
    if str(path) == "-":
        raise OutputRefused(f"--out: '-' (standard output) cannot take a {what} folder; give a folder name")
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
    present = listing(out)
    if not present:
        return out
    if MARKER not in present:
        raise OutputRefused(f"--out: {out}: refused: the folder holds files cemctl did not write (e.g. {present[0]}; "
                            f"no {MARKER} lists them); give a new folder")
    try:
        manifest = read_manifest(out, MARKER, what=what)
    except ManifestError as e:
        raise OutputRefused(f"--out: {out}: refused: {str(e).split(': ', 1)[-1]}; give a new folder") from None
    audit = audit_folder(out, manifest)
    if audit.kept:
        raise OutputRefused(f"--out: {out}: refused: an earlier {what} folder that now also holds "
                            f"{audit.describe_kept(1)}; move it or give a new folder")
    return out


def new_build_dir(out: Path) -> Path:
    """A temporary sibling of `out` to build the new contents in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)
    return tmp


def swap_in(tmp: Path, out: Path, *, what: str = "report") -> Path | None:
    """Write the manifest of `tmp` (every file, its size and sha256) and put `tmp` in place of `out`, which must
    pass the check again. Of the old folder only the files its manifest lists are deleted; returns the folder
    it was moved to when something else appeared in it meanwhile (kept there), else None."""
    write_manifest(tmp, what=what, name=MARKER)
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
    if old is None:
        return None
    if not os.path.lexists(old / MARKER):  # an empty folder taken over
        prune_empty_folders(old)
    else:
        try:
            remove_owned(old, read_manifest(old, MARKER, what=what))
        except ManifestError:
            pass  # replaced meanwhile: the whole old folder is kept where it was moved
    return old if os.path.lexists(old) else None
