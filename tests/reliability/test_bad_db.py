"""A results.db that is corrupt, foreign, read-only or on a full disk (`cemctl plan/status/report/sync`).

Every case: one clean error line, exit code 2, no traceback, and nothing that
was stored before is lost or changed.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cemctl.cli import app

from tests.helpers import assert_clean_error, subprocess_env as env

GRID = """seeds = [0, 1]
[experiment]
name = "keep"
[base]
"model.size" = "nano"
"data.tokenizer" = "byte"
"train.max_steps" = 3
[axes]
"train.lr" = [0.001, 0.002]
"""


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_grid(folder: Path, text: str = GRID, name: str = "keep.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def stored(db: Path) -> tuple[int, int, str]:
    """(runs, experiment links, integrity_check) read with plain sqlite3."""
    con = sqlite3.connect(db)
    try:
        runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
        links = con.execute("SELECT count(*) FROM experiment_runs").fetchone()[0]
        check = con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()
    return runs, links, check


def forget_engines() -> None:
    """Close this process's cached engines (CliRunner runs the commands in this process)."""
    from cemctl.db import engine as engine_module

    for key in list(engine_module._ENGINES):
        engine_module._ENGINES.pop(key).dispose()


def planned_db(folder: Path) -> Path:
    """A results database holding one planned experiment of 4 runs."""
    db = folder / "results.db"
    r = invoke("plan", str(write_grid(folder)), "--db", str(db), "--runs-dir", str(folder / "runs"))
    assert r.exit_code == 0, r.output
    assert stored(db) == (4, 4, "ok")
    return db


COMMANDS = [
    ("status",),
    ("status", "--json"),
    ("sync",),
    ("report", "keep"),
    ("plan", "GRID"),
]


def bad_file(kind: str, path: Path) -> None:
    if kind == "random_bytes":
        path.write_bytes(os.urandom(8192))
    elif kind == "text":
        path.write_text("these are my notes, not a database\n" * 50)
    elif kind == "other_app":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE contacts (name TEXT, phone TEXT)")
        con.execute("INSERT INTO contacts VALUES ('ada', '123')")
        con.commit()
        con.close()
    elif kind == "sqlite_header_garbage_pages":  # starts like SQLite, the rest is noise
        path.write_bytes(b"SQLite format 3\x00" + b"\x10\x00\x01\x01" + os.urandom(4 * 4096))
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["random_bytes", "text", "other_app", "sqlite_header_garbage_pages"])
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_foreign_or_corrupt_file_is_a_clean_error_and_untouched(tmp_path: Path, kind: str, command: tuple[str, ...]):
    db = tmp_path / "results.db"
    bad_file(kind, db)
    before = digest(db)
    grid = write_grid(tmp_path)
    args = [str(grid) if a == "GRID" else a for a in command]
    r = invoke(*args, "--db", str(db), "--runs-dir", str(tmp_path / "runs"))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    line = assert_clean_error(r)
    assert "results.db" in line
    assert digest(db) == before  # not a byte changed
    assert not (tmp_path / "runs").exists()
    assert {p.name for p in tmp_path.iterdir()} <= {"results.db", "keep.toml"}  # no -wal/-shm next to it either


def test_damaged_pages_of_a_real_results_db(tmp_path: Path):
    """A real results.db whose pages were overwritten (bit rot, a bad copy): one line, exit 2."""
    db = planned_db(tmp_path)
    forget_engines()
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[2 * page:] = os.urandom(len(data) - 2 * page)
    db.write_bytes(bytes(data))
    for args in (["status"], ["status", "--json"], ["plan", str(tmp_path / "keep.toml")]):
        r = invoke(*args, "--db", str(db), "--runs-dir", str(tmp_path / "runs"))
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
        assert_clean_error(r)


def test_real_process_on_random_bytes(tmp_path: Path):
    db = tmp_path / "results.db"
    bad_file("random_bytes", db)
    before = digest(db)
    proc = subprocess.run([sys.executable, "-m", "cemctl.cli", "status", "--db", str(db)], env=env(), capture_output=True,
                          text=True, timeout=120)
    assert_clean_error(proc, contains="file is not a database")
    assert digest(db) == before


# ---------------------------------------------------------------------------
# Read-only folder


@pytest.fixture
def readonly_dir(tmp_path: Path):
    """(writable folder, the same folder read-only): chmod for users, a read-only bind mount for root."""
    src = tmp_path / "data"
    src.mkdir()
    if os.geteuid() != 0:
        yield src, src, lambda: src.chmod(0o555), lambda: src.chmod(0o755)
        src.chmod(0o755)
        return
    view = tmp_path / "ro"
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(src), str(view)], capture_output=True).returncode == 0
    if mounted:
        mounted = subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], capture_output=True).returncode == 0
        if not mounted:
            subprocess.run(["umount", str(view)], capture_output=True)
    if not mounted:
        pytest.skip("running as root without permission to mount a read-only view")
    try:
        yield src, view, (lambda: None), (lambda: None)
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True)


def test_read_only_folder(tmp_path: Path, readonly_dir):
    src, view, make_ro, make_rw = readonly_dir
    db_rw = planned_db(src)
    # plan again with the same runs folder so nothing new is written in it, then another grid (new runs)
    make_ro()
    try:
        db_ro = view / "results.db"
        grid2 = write_grid(tmp_path, GRID.replace('"keep"', '"more"').replace("0.002", "0.003"), "more.toml")
        for args in (
            ["plan", str(grid2), "--db", str(db_ro), "--runs-dir", str(tmp_path / "runs")],
            ["plan", str(grid2), "--db", str(view / "sub" / "new.db"), "--runs-dir", str(tmp_path / "runs2")],
            ["plan", str(grid2), "--db", str(tmp_path / "ok.db"), "--runs-dir", str(view / "runs")],
            ["status", "--db", str(db_ro), "--runs-dir", str(view / "runs")],
        ):
            r = invoke(*args)
            assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
            if args[0] == "status" and r.exit_code == 0:
                continue  # reading a read-only database is allowed to work
            assert_clean_error(r)
    finally:
        make_rw()
    assert stored(db_rw) == (4, 4, "ok")


# ---------------------------------------------------------------------------
# Full disk


def big_grid(folder: Path, runs: int) -> Path:
    seeds = ", ".join(str(i) for i in range(runs))
    return write_grid(folder, f"seeds = [{seeds}]\n" + GRID.split("\n", 1)[1].replace('"keep"', '"big"'), "big.toml")


def _limit_file_size(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # Python ignores SIGXFSZ: writes fail with EFBIG
    return apply


def test_full_disk_by_file_size_limit(tmp_path: Path):
    db = planned_db(tmp_path)
    grid = big_grid(tmp_path, 150)
    limit = db.stat().st_size + 16 * 1024
    proc = subprocess.run(
        [sys.executable, "-m", "cemctl.cli", "plan", str(grid), "--db", str(db), "--runs-dir", str(tmp_path / "runs")],
        env=env(), capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size(limit),
    )
    assert_clean_error(proc)
    assert stored(db) == (4, 4, "ok")  # the old experiment is intact, the failed plan left nothing half-recorded
    r = invoke("status", "--json", "--db", str(db), "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 0, r.output


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_tmpfs(tmp_path: Path, tiny_tmpfs: Path):
    db = planned_db(tiny_tmpfs)
    grid = big_grid(tmp_path, 150)
    # the database fills the disk
    r = invoke("plan", str(grid), "--db", str(db), "--runs-dir", str(tmp_path / "runs"))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert_clean_error(r)
    assert stored(db) == (4, 4, "ok")
    # the run directories fill the disk (config.json files)
    filler = tiny_tmpfs / "filler"
    free = shutil.disk_usage(tiny_tmpfs).free
    filler.write_bytes(b"\0" * max(0, free - 8 * 1024))
    r = invoke("plan", str(grid), "--db", str(tmp_path / "elsewhere.db"), "--runs-dir", str(tiny_tmpfs / "runs"))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert_clean_error(r)
    assert stored(db) == (4, 4, "ok")
