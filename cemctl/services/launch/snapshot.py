"""Code snapshots: jobs run the code of launch time, not the live tree (`cemctl launch`).

`take_snapshot(runs_root)` copies the `cem_core` and `cemctl` packages (every
file but bytecode caches), and the plugin sources `plan` copied into
`<runs_root>/.plugins/`, into `<runs_root>/.snapshots/<hash>/`, where `hash`
is the first 16 hex of a sha256 over the relative paths and contents (a job
imports its plugins from the snapshot, so a plugin edited after the launch
does not change what the queued jobs run). Runs of
the same code share one snapshot; a new snapshot is written to a temporary
folder and renamed into place, so a half-copied snapshot is never used. Jobs
import from it through `PYTHONPATH` (see `cemctl.executors.base.code_env`).
An existing snapshot is reused only when its files still hash to its name: one
that was edited (or damaged) is refused with one line, never run under the
original hash, and never replaced (it is the user's to move aside).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cem_core import runfiles
from cem_core.errors import CemError

PACKAGES = ("cem_core", "cemctl")
SNAPSHOTS_DIR = ".snapshots"
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".tmp")


@dataclass(frozen=True)
class Snapshot:
    hash: str
    path: Path  # the folder to put on PYTHONPATH


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {name!r} not found")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def _files(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(_SKIP_SUFFIXES) or name.startswith("."):
                continue
            out.append(Path(dirpath) / name)
    return out


def plugin_files(runs_root: Path | None) -> list[str]:
    """The plugin sources in `<runs_root>/.plugins/` (paths relative to it)."""
    from cem_core.plugins import PLUGINS_DIR

    root = Path(runs_root) / PLUGINS_DIR if runs_root is not None else None
    if root is None or not root.is_dir() or root.is_symlink():
        return []
    return [path.relative_to(root).as_posix() for path in _files(root) if not path.is_symlink()]


def code_hash(packages: tuple[str, ...] = PACKAGES, base: Path | None = None, *,
              plugins_root: Path | None = None, plugins: list[str] | None = None) -> str:
    """Content hash of the packages' files (paths relative to their parent folder): of the installed packages,
    or of those inside `base` (a snapshot folder); plus the plugin files `plugins` (relative paths), read from
    `plugins_root` (or, with `base`, from the snapshot's top folder where they were copied)."""
    h = hashlib.sha256()
    for pkg in packages:
        root = package_dir(pkg) if base is None else Path(base) / pkg
        for path in _files(root):
            rel = f"{pkg}/{path.relative_to(root).as_posix()}"
            h.update(rel.encode() + b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    for rel in plugins or []:  # none: the hash of a snapshot without plugins is what it always was
        path = (Path(base) if base is not None else Path(plugins_root or ".")) / rel
        h.update(f"plugin:{rel}".encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"\0missing\0")
        h.update(b"\0")
    return h.hexdigest()[:16]


def take_snapshot(runs_root: Path, packages: tuple[str, ...] = PACKAGES) -> Snapshot:
    """Copy the packages (and the runs root's plugin sources) into `<runs_root>/.snapshots/<hash>/` (reused when
    it exists)."""
    from cem_core.plugins import PLUGINS_DIR

    plugins = plugin_files(runs_root)
    plugins_root = Path(runs_root) / PLUGINS_DIR
    names = {rel.split("/")[0].removesuffix(".py") for rel in plugins}
    if names & set(packages) or "SNAPSHOT" in names:
        raise CemError(f"{plugins_root}: a plugin may not be named {sorted(names & {*packages, 'SNAPSHOT'})[0]!r}")
    digest = code_hash(packages, plugins_root=plugins_root, plugins=plugins)
    base = Path(runs_root) / SNAPSHOTS_DIR
    dest = base / digest
    if dest.is_dir():
        found = code_hash(packages, dest, plugins=plugins)
        if found != digest:
            raise CemError(f"{dest}: refused: the code snapshot was edited since it was taken (its files hash to "
                           f"{found}, not {digest}); jobs never run edited code under the original hash: move it "
                           "aside and launch again")
        return Snapshot(digest, dest.resolve())
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=base))
    try:
        for pkg in packages:
            root = package_dir(pkg)
            for path in _files(root):
                target = tmp / pkg / path.relative_to(root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
        for rel in plugins:  # beside the packages: the snapshot folder is on the jobs' import path
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(plugins_root / rel, target)
        (tmp / "SNAPSHOT").write_text(digest + "\n")
        if not runfiles.publish_dir(tmp, dest) and not dest.is_dir():  # else another launcher won the race
            raise CemError(f"{dest}: refused: something that is not a code snapshot is in its place; move it aside "
                           "and launch again")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return Snapshot(digest, dest.resolve())
