"""Crash- and race-safe cache folders for `prepare_data` (`cemctl launch`, every training run).

Several runs (processes, SLURM jobs on a shared file system with POSIX locks)
may prepare the same data at once. Writers take an exclusive `fcntl` lock on a
`.lock` file beside the target, re-check whether another process finished the
work meanwhile, write into a temporary name in the same directory and publish
with an atomic `os.rename` (files: `cem_core.runfiles.atomic_write`; the lock:
`cem_core.runfiles.lock.file_lock`). Readers never take the lock on the fast
path: a published file or directory is always complete.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from cem_core.runfiles.files import publish_dir as runfiles_publish_dir


def make_temp_dir(parent: Path, name: str) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent))


def publish_dir(tmp_dir: Path, final: Path) -> None:
    """Atomically make `tmp_dir` visible as `final`, which must not exist yet (`cem_core.runfiles.publish_dir`: the
    one way a folder is put in place; FileExistsError when it does, the caller removes `tmp_dir`)."""
    if not runfiles_publish_dir(tmp_dir, final):
        raise FileExistsError(f"{final}: exists already (another prepare published it)")


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
