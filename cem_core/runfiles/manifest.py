"""Ownership by proof: what cemctl may delete is what a manifest it wrote lists, byte for byte.

    write_manifest(folder, name=".cemctl-output.json", what="report")   # once the folder's files are written
    manifest = read_manifest(folder, name, what="report")               # ManifestError (one line) otherwise
    audit = audit_folder(folder, manifest)                              # owned / changed / foreign / missing
    audit = remove_owned(folder, manifest)                              # deletes the owned files only

Used by every command that deletes or replaces files (`cemctl report --out`,
`cemctl claims --out`, `cemctl data clean`, `cemctl data prepare` replacing an
older cache generation, `export -o` / `compare --curves` / `archive -o` replacing
one file, `plan` refreshing the plugin copies the jobs run). A manifest lists every regular file cemctl wrote into
a folder with its size and sha256. A file is removed only when it is still a
regular file of that exact size and hash; anything else in the folder (a file
the user added or edited, a link, a device, a folder) is reported and kept.
What a file's name or a folder's shape looks like proves nothing.

A manifest is read like a run file (`cem_core.runfiles.files.read_bytes`): a
regular file only (a symlink, a FIFO, a device or a folder is refused without
blocking), size-capped, and it must say it was written by cemctl for the same
purpose (a claims folder is not a report folder). Torch-free.

One shape for every record of "cemctl wrote these bytes" (a folder's manifest, the
record beside one output file `.<name>.cemctl.json`, an archive's manifest.json):

    {"written_by": "cemctl", "version": 2, "what": "report",
     "files": {"figures/a.png": {"size": 1234, "sha256": "<64 hex>"}, ...}, ...extra keys}

and one strict reader (`parse_manifest`; `read_manifest` reads the file first): any other
shape is one `ManifestError` line naming the file. The shapes older releases wrote are
still read as what they are (cemctl's): the record of one output file
(`{"by": "cemctl", "file": ..., "size": ..., "sha256": ...}`) and the archive manifest
of version 1 (`{"format": "cemctl-archive", "version": 1, "runs": {id: {"files": ...}}}`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cem_core.errors import CemError
from cem_core.runfiles.files import RunFileError, atomic_write_bytes, read_bytes

MANIFEST_VERSION = 2
DEFAULT_NAME = ".cemctl-manifest.json"
ARCHIVE_FORMAT = "cemctl-archive"  # the archive manifest of version 1 (read as `what="archive"`)
MAX_MANIFEST_BYTES = 16 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(CemError):
    """No manifest cemctl wrote (missing, not a regular file, unreadable, older, or for another purpose)."""


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str


@dataclass
class Manifest:
    what: str
    files: dict[str, FileEntry]  # relative POSIX path -> size and hash
    name: str = DEFAULT_NAME  # the manifest's own file name inside the folder
    extra: dict[str, Any] = field(default_factory=dict)

    def folders(self) -> list[str]:
        """The sub-folders the listed files live in, deepest first."""
        dirs = {str(p) for rel in self.files for p in PurePosixPath(rel).parents if str(p) != "."}
        return sorted(dirs, key=lambda d: (-d.count("/"), d))


@dataclass
class Audit:
    owned: list[str] = field(default_factory=list)  # listed, and still exactly what cemctl wrote
    changed: list[tuple[str, str]] = field(default_factory=list)  # listed, but not what cemctl wrote (why)
    foreign: list[str] = field(default_factory=list)  # not listed: the user's
    missing: list[str] = field(default_factory=list)  # listed, gone
    removed: list[str] = field(default_factory=list)  # what remove_owned deleted

    @property
    def kept(self) -> list[str]:
        """What is in the folder and is not cemctl's to remove."""
        return [p for p, _ in self.changed] + self.foreign

    def describe_kept(self, limit: int = 3) -> str:
        items = [f"{p} ({why})" for p, why in self.changed] + self.foreign
        text = ", ".join(items[:limit])
        return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _open_regular(path: str | os.PathLike[str]) -> int:
    """A descriptor of a regular file that is not a symlink, opened without blocking (RunFileError otherwise)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno in (getattr(os, "ELOOP", 40), getattr(os, "EMLINK", 31)) and os.path.islink(path):
            raise RunFileError(f"{path}: refused: a symlink") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunFileError(f"{path}: refused: not a regular file")
    return fd


def file_digest(path: str | os.PathLike[str]) -> FileEntry:
    """Size and sha256 of a regular file (a symlink or a special file is refused with RunFileError)."""
    fd = _open_regular(path)
    try:
        h = hashlib.sha256()
        size = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
        return FileEntry(size, h.hexdigest())
    finally:
        os.close(fd)


def listing(folder: str | os.PathLike[str], *, skip: tuple[str, ...] = ()) -> list[str]:
    """Every entry of `folder` that is not a folder (files, links, devices, FIFOs; links to folders too), relative
    POSIX paths, sorted; symlinks are never followed. `skip`: top-level names left out."""
    root = Path(folder)
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            rel = (rel_dir / name).as_posix()
            if rel not in skip:
                out.append(rel)
    return sorted(out)


def _safe_rel(rel: Any) -> bool:
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        return False
    parts = rel.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def manifest_doc(what: str, files: dict[str, FileEntry], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one shape of a "cemctl wrote these bytes" record (see the module docstring)."""
    reserved = {"written_by", "version", "what", "files"} & set(extra or {})
    if reserved:
        raise ValueError(f"manifest extra keys may not be {sorted(reserved)}")
    return {"written_by": "cemctl", "version": MANIFEST_VERSION, "what": what, **(extra or {}),
            "files": {rel: {"size": e.size, "sha256": e.sha256} for rel, e in sorted(files.items())}}


def manifest_bytes(what: str, files: dict[str, FileEntry], extra: dict[str, Any] | None = None) -> bytes:
    return (json.dumps(manifest_doc(what, files, extra), indent=1, sort_keys=True) + "\n").encode()


def write_manifest(folder: str | os.PathLike[str], *, what: str, name: str = DEFAULT_NAME,
                   extra: dict[str, Any] | None = None, files: dict[str, FileEntry] | None = None,
                   durable: bool = True) -> Manifest:
    """Record in `folder/name` (written atomically) the files cemctl wrote into `folder`: `files` (relative path ->
    size and sha256), or when None every regular file under `folder` (sizes and hashes taken now).

    Listing the folder: call it when the folder holds exactly what cemctl wrote (a build folder before it is
    published).
    """
    root = Path(folder)
    if files is None:
        files = {rel: file_digest(root / rel) for rel in listing(root, skip=(name,))}
    for rel in files:
        if not _safe_rel(rel):
            raise ValueError(f"not a relative path inside the folder: {rel!r}")
    manifest = Manifest(what, dict(files), name, dict(extra or {}))
    atomic_write_bytes(root / name, manifest_bytes(what, files, extra), durable=durable)
    return manifest


def read_manifest(folder: str | os.PathLike[str], name: str = DEFAULT_NAME, *, what: str | None = None) -> Manifest:
    """The manifest cemctl wrote into `folder` (ManifestError, one line, for anything else).

    Read like a run file: a regular file only (never a link, a FIFO or a device: refused without
    blocking), at most 16 MiB. `what`: the purpose it must have been written for.
    """
    path = Path(folder) / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ManifestError(f"{path}: no cemctl manifest") from None
    except OSError as e:
        raise ManifestError(f"{path}: cannot read: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ManifestError(f"{path}: refused: the manifest is a symlink, not a file cemctl wrote")
    if not stat.S_ISREG(st.st_mode):
        raise ManifestError(f"{path}: refused: the manifest is not a regular file")
    try:
        data = read_bytes(path, max_bytes=MAX_MANIFEST_BYTES)
    except RunFileError as e:
        raise ManifestError(str(e)) from None
    except OSError as e:
        raise ManifestError(f"{path}: cannot read: {e.strerror or e}") from None
    return parse_manifest_bytes(data, str(path), what=what, name=name)


def parse_manifest_bytes(data: bytes, source: str, *, what: str | None = None, name: str = DEFAULT_NAME) -> Manifest:
    """`parse_manifest` of a manifest's bytes (read from a file or an archive member)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise ManifestError(f"{source}: not a cemctl manifest (not JSON)") from None
    return parse_manifest(doc, source, what=what, name=name)


def parse_manifest(doc: Any, source: str, *, what: str | None = None, name: str = DEFAULT_NAME) -> Manifest:
    """The one strict reader of a "cemctl wrote these bytes" record (any shape cemctl wrote, old ones included);
    `ManifestError` naming `source` for anything else. `what`: the purpose it must have been written for."""
    if isinstance(doc, dict) and doc.get("written_by") != "cemctl":
        doc = _upgraded(doc, source)
    if not isinstance(doc, dict) or doc.get("written_by") != "cemctl":
        raise ManifestError(f"{source}: not a cemctl manifest")
    files = doc.get("files")
    if isinstance(files, list):
        raise ManifestError(f"{source}: written by an older cemctl that listed no file sizes and hashes, so nothing "
                            "proves the files are still the ones it wrote")
    if not isinstance(files, dict):
        raise ManifestError(f"{source}: not a cemctl manifest (no file list)")
    entries: dict[str, FileEntry] = {}
    for rel, entry in files.items():
        ok = (_safe_rel(rel) and isinstance(entry, dict) and isinstance(entry.get("size"), int)
              and not isinstance(entry.get("size"), bool) and entry["size"] >= 0
              and isinstance(entry.get("sha256"), str) and _SHA256.fullmatch(entry["sha256"]))
        if not ok:
            raise ManifestError(f"{source}: not a cemctl manifest (bad entry {str(rel)[:80]!r})")
        entries[rel] = FileEntry(entry["size"], entry["sha256"])
    found = doc.get("what")
    if not isinstance(found, str):
        found = ""
    if what is not None and found != what:
        raise ManifestError(f"{source}: written by `cemctl {found or '?'}`, not by `cemctl {what}`")
    extra = {k: v for k, v in doc.items() if k not in ("written_by", "version", "what", "files")}
    return Manifest(found, entries, name, extra)


def _upgraded(doc: dict[str, Any], source: str) -> Any:
    """A record in a shape an older cemctl wrote, in today's shape (unchanged when it is none of them)."""
    if doc.get("by") == "cemctl" and "file" in doc and "files" not in doc:  # one output file (`.<name>.cemctl.json`)
        extra = {"written_at": doc["written_at"]} if "written_at" in doc else {}
        return {"written_by": "cemctl", "version": 1, "what": "output", **extra,
                "files": {doc.get("file"): {"size": doc.get("size"), "sha256": doc.get("sha256")}}
                if isinstance(doc.get("file"), str) else None}
    if doc.get("format") == ARCHIVE_FORMAT:  # an archive's manifest.json of version 1
        if doc.get("version") != 1:
            raise ManifestError(f"{source}: a cemctl archive of version {doc.get('version')!r}, which this cemctl "
                                "does not read (it reads version 1 and the manifest of version "
                                f"{MANIFEST_VERSION})")
        runs = doc.get("runs", {})
        if not isinstance(runs, dict):
            raise ManifestError(f"{source}: not a cemctl manifest (runs is a {type(runs).__name__}, not a table)")
        files: dict[str, Any] = {}
        for rid, run in runs.items():
            listed = run.get("files") if isinstance(run, dict) else None
            if not isinstance(listed, dict):
                raise ManifestError(f"{source}: not a cemctl manifest (bad run entry {str(rid)[:80]!r})")
            for file_name, entry in listed.items():
                rel = f"runs/{rid}/{file_name}"
                if not (_safe_rel(rel) and rel.count("/") == 2):
                    raise ManifestError(f"{source}: not a cemctl manifest (bad entry {rel[:80]!r})")
                files[rel] = entry
        extra = {k: v for k, v in doc.items() if k not in ("format", "version", "runs")}
        return {"written_by": "cemctl", "version": 1, "what": "archive", "format": ARCHIVE_FORMAT, **extra,
                "files": files}
    return doc


def audit_folder(folder: str | os.PathLike[str], manifest: Manifest) -> Audit:
    """Which entries of `folder` are still exactly what the manifest lists (sizes and sha256 checked)."""
    root = Path(folder)
    audit = Audit()
    present = listing(root, skip=(manifest.name,))
    for rel in present:
        entry = manifest.files.get(rel)
        if entry is None:
            audit.foreign.append(rel)
            continue
        try:
            found = file_digest(root / rel)
        except RunFileError as e:
            audit.changed.append((rel, str(e).rsplit(": ", 1)[-1]))
            continue
        except OSError as e:
            audit.changed.append((rel, f"unreadable: {e.strerror or e}"))
            continue
        if found.size != entry.size:
            audit.changed.append((rel, f"{found.size} bytes, cemctl wrote {entry.size}"))
        elif found.sha256 != entry.sha256:
            audit.changed.append((rel, "its content changed since cemctl wrote it"))
        else:
            audit.owned.append(rel)
    listed = set(present)
    audit.missing = sorted(rel for rel in manifest.files if rel not in listed)
    return audit


def remove_owned(folder: str | os.PathLike[str], manifest: Manifest) -> Audit:
    """Delete the files of `folder` that are exactly what the manifest lists, then the manifest and the
    sub-folders it listed once empty, then `folder` itself once empty. Everything else is kept (see `Audit.kept`)."""
    root = Path(folder)
    audit = audit_folder(root, manifest)
    for rel in audit.owned:
        try:
            os.unlink(root / rel)
            audit.removed.append(rel)
        except FileNotFoundError:
            pass
    try:
        os.unlink(root / manifest.name)
    except FileNotFoundError:
        pass
    for rel in manifest.folders():
        _rmdir_quietly(root / rel)
    _rmdir_quietly(root)
    return audit


def prune_empty_folders(folder: str | os.PathLike[str]) -> None:
    """Remove `folder` and the folders below it that hold nothing at all (never a file or a link)."""
    root = Path(folder)
    for dirpath, dirnames, _files in os.walk(root, topdown=False, followlinks=False):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                _rmdir_quietly(Path(p))
    _rmdir_quietly(root)


def _rmdir_quietly(path: Path) -> None:
    try:
        if not os.path.islink(path):
            os.rmdir(path)
    except OSError:
        pass  # not empty (kept files), or already gone
