"""Family 2 of issue 24: a copied project acts on itself, never on the original.

Run folders are always `<runs root>/<run id>`: the runs root the user names (--runs-dir), else the one the
database recorded (relative to a SQLite database's own folder), with a one-line notice when that is not
the current project's `./runs`. Each project here is a real folder (results.db + runs/) copied with `cp -a`.
Each case failed on the main of 526f40c.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.helpers import cli, finish_run, tiny_grid


@pytest.fixture
def original(tmp_path):
    """Project A: two runs planned from inside it (default results.db and runs/), the first finished."""
    a = tmp_path / "A"
    a.mkdir()
    (a / "exp.toml").write_text(tiny_grid("exp", seeds="[0, 1]"))
    res = cli(None, "plan", "exp.toml", "--json", cwd=a)
    assert res.returncode == 0, res.output
    ids = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    finish_run(a / "runs" / ids[0], test_loss=1.25)
    (a / "runs" / ids[0] / "train.log").write_text("the original's log\n")
    assert cli(None, "status", "--json", cwd=a).returncode == 0
    return a, ids


def _rows(where: Path, *args: str, cwd: Path | None = None) -> dict[str, dict]:
    res = cli(None, "status", "--json", *args, cwd=cwd or where)
    assert res.returncode == 0, res.output
    return {r["run_id"]: r for e in json.loads(res.stdout)["experiments"] for r in e["runs"]}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_status_in_a_copy_reads_the_copys_runs(original, copy_project):
    a, ids = original
    b = copy_project(a)
    finish_run(b / "runs" / ids[0], test_loss=2.5)  # the copy's own result changes
    assert _rows(b)[ids[0]]["test_loss"] == pytest.approx(2.5)


def test_status_with_runs_dir_reads_the_named_folder(original, copy_project, tmp_path):
    a, ids = original
    b = copy_project(a)
    finish_run(b / "runs" / ids[0], test_loss=3.5)
    rows = _rows(b, "--db", str(b / "results.db"), "--runs-dir", str(b / "runs"), cwd=tmp_path)
    assert rows[ids[0]]["test_loss"] == pytest.approx(3.5)


def test_status_json_names_the_copys_run_folders(original, copy_project):
    a, ids = original
    b = copy_project(a)
    rows = _rows(b)
    assert {Path(r["run_dir"]).parent for r in rows.values()} == {b / "runs"}


def test_cancel_in_a_copy_touches_only_the_copy(original, copy_project):
    a, ids = original
    b = copy_project(a)
    before = _tree(a)
    res = cli(None, "cancel", ids[1], cwd=b)
    assert res.returncode == 0, res.output
    assert (b / "runs" / ids[1] / "cancel").exists()
    assert _tree(a) == before


def test_logs_in_a_copy_prints_the_copys_log(original, copy_project):
    a, ids = original
    b = copy_project(a)
    (b / "runs" / ids[0] / "train.log").write_text("the copy's log\n")
    res = cli(None, "logs", ids[0], cwd=b)
    assert res.returncode == 0 and "the copy's log" in res.stdout and "original" not in res.stdout, res.output


def test_sync_in_a_copy_never_reads_the_original(original, copy_project):
    """A run folder deleted in the copy is gone there, even though the original still has it."""
    import shutil

    a, ids = original
    b = copy_project(a)
    shutil.rmtree(b / "runs" / ids[0])
    assert cli(None, "sync", cwd=b).returncode == 0
    row = _rows(b)[ids[0]]
    assert row["state"] == "damaged" and str(b / "runs") in row["reason"]


def test_launch_by_name_in_a_copy_selects_the_copys_runs(original, copy_project):
    a, ids = original
    b = copy_project(a)
    finish_run(a / "runs" / ids[1], test_loss=1.0)  # the original goes on; the copy's second run is still to do
    res = cli(None, "launch", "exp", "--dry-run", cwd=b, subprocess=True)
    assert res.returncode == 0 and "would launch 1 of 2" in res.stdout, res.output


def test_eval_in_a_copy_writes_into_the_copy(trained_project, copy_project):
    src, run_id = trained_project
    b = copy_project(src)
    res = cli(None, "eval", run_id, "--steps", "1", cwd=b, subprocess=True)
    assert res.returncode == 0, res.output
    assert (b / "runs" / run_id / "evals.json").exists()
    assert not (src / "runs" / run_id / "evals.json").exists()


def test_a_runs_folder_recorded_elsewhere_is_used_with_a_one_line_notice(original, copy_project):
    """A database written by an older cemctl records absolute folders; without --runs-dir the copy says which
    runs folder it uses instead of acting on it silently."""
    a, ids = original
    b = copy_project(a)
    con = sqlite3.connect(b / "results.db")
    con.execute("UPDATE runs SET run_dir = ? || '/' || id", (str(a / "runs"),))
    con.commit()
    con.close()
    res = cli(None, "status", "--json", cwd=b, subprocess=True)
    assert res.returncode == 0, res.output
    notes = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(notes) == 1 and str(a / "runs") in notes[0] and "--runs-dir" in notes[0], res.stderr
    json.loads(res.stdout)  # stdout stays JSON
