"""The hostile-but-fair user, end to end through the CLI: the cases of the issue's families that the
library-level tests elsewhere (test_report, test_grid, test_structure) check one layer down.

Each case drives `cemctl` as a user would (a real SQLite file, real run directories) and failed on
the main of 2026-11-22: it destroyed, hid or leaked something, or printed a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import assert_clean_error, cli, finish_run, plan_ids, status_rows, subprocess_env, tiny_grid

SECRET = "TOP-SECRET-7f3a9c"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ============================================================== 1. output paths


def test_report_out_at_the_runs_folder_is_refused_and_every_run_survives(tmp_path, finished):
    before = _tree(tmp_path / "runs")
    res = cli(tmp_path, "report", "exp", "--out", str(tmp_path / "runs"), "--format", "png")
    assert_clean_error(res, contains=str(tmp_path / "runs"))
    assert _tree(tmp_path / "runs") == before


def test_report_out_below_an_existing_file_is_one_line(tmp_path, finished):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    res = cli(tmp_path, "report", "exp", "--out", str(notes / "rep"), "--format", "png")
    assert_clean_error(res, contains="notes.txt")
    assert notes.read_text() == "mine"


# ============================================================== 3. confinement


def test_report_never_reads_a_result_json_symlinked_out_of_the_run(tmp_path, finished):
    _, ids = finished
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"run_id": ids[0], "state": "done", "test_loss": 9.87654, "note": SECRET}))
    result = tmp_path / "runs" / ids[0] / "result.json"
    result.unlink()
    result.symlink_to(outside)
    res = cli(tmp_path, "report", "exp", "--out", str(tmp_path / "rep"), "--format", "png", "--no-sync")
    row = status_rows(tmp_path)[ids[0]]
    assert row["state"] == "damaged" and "outside the run directory" in row["reason"]
    rep = cli(tmp_path, "report", "exp", "--out", str(tmp_path / "rep2"), "--format", "png")
    for out in (res, rep):
        assert "9.87654" not in out.output and SECRET not in out.output
    for folder in ("rep", "rep2"):
        for path in (tmp_path / folder).rglob("*"):
            if path.is_file() and path.suffix in (".md", ".csv", ".json"):
                assert "9.8765" not in path.read_text() and SECRET not in path.read_text()


def test_logs_refuses_a_run_name_with_path_parts(tmp_path, finished):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "train.log").write_text(SECRET)
    for target in ("../secret", str(secret)):
        res = cli(tmp_path, "logs", target)
        assert res.returncode == 2 and SECRET not in res.output, res.output


# ============================================================== 4. damaged run directories


def test_status_shows_a_done_run_whose_config_was_edited_as_damaged(tmp_path, finished):
    _, ids = finished
    status_rows(tmp_path)
    config = tmp_path / "runs" / ids[0] / "config.json"
    data = json.loads(config.read_text())
    data["train"]["lr"] = 0.123
    config.write_text(json.dumps(data))
    runs = status_rows(tmp_path)
    assert runs[ids[0]]["state"] == "damaged" and "hashes to run id" in runs[ids[0]]["reason"]
    assert runs[ids[1]]["state"] == "done"


# ============================================================== 5. one bad entry never stops the rest


def test_a_plain_file_named_like_a_run_is_reported_and_the_runs_are_synced(tmp_path, finished):
    _, ids = finished
    (tmp_path / "runs" / "0123456789ab").write_text("not a run directory")
    res = cli(tmp_path, "sync")
    assert res.returncode == 0 and "0123456789ab" in res.stderr and "Traceback" not in res.stderr
    runs = status_rows(tmp_path)
    assert runs[ids[0]]["state"] == runs[ids[1]]["state"] == "done"


# ============================================================== 6. special and oversized files


def test_a_config_json_over_the_size_cap_is_damaged_unread(tmp_path, finished):
    _, ids = finished
    config = tmp_path / "runs" / ids[0] / "config.json"
    with config.open("r+b") as fh:  # sparse: 64 MiB on paper, nothing on disk
        fh.truncate(64 << 20)
    res = cli(tmp_path, "sync", subprocess=True, timeout=60)
    assert res.returncode == 0 and "Traceback" not in res.stderr
    runs = status_rows(tmp_path)
    assert runs[ids[0]]["state"] == "damaged" and "more than the 16777216-byte limit" in runs[ids[0]]["reason"]
    assert runs[ids[1]]["state"] == "done"


# ============================================================== 7. read-only commands create nothing


@pytest.mark.parametrize("command", [("report", "exp"), ("logs", "0123456789ab")])
def test_read_only_commands_on_a_missing_database_create_nothing(tmp_path, command):
    db = tmp_path / "missing" / "dir" / "r.db"
    res = cli(None, *command, "--db", str(db), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.output
    assert not (tmp_path / "missing").exists() and not (tmp_path / "runs").exists()


# ============================================================== 8. options and reasons


def test_report_of_an_experiment_whose_runs_all_failed_lists_them(tmp_path):
    _, ids = plan_ids(tmp_path)
    for rid in ids:
        finish_run(tmp_path / "runs" / rid, state="failed", error="RuntimeError: CUDA out of memory")
    res = cli(tmp_path, "report", "exp", "--out", str(tmp_path / "rep"), "--format", "png")
    assert res.returncode == 0, res.output
    md = (tmp_path / "rep" / "index.md").read_text()
    assert all(rid in md for rid in ids) and "CUDA out of memory" in md


@pytest.mark.parametrize("setting, needle", [("model.size=huge", "model.size"), ("train.lrr=1", "train.lrr")])
def test_errors_caused_by_set_name_set_not_the_grid_file(tmp_path, setting, needle):
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g"))
    res = cli(tmp_path, "plan", str(grid), "--set", setting)
    line = assert_clean_error(res, contains="--set")
    assert needle in line and str(grid) not in line
    assert not (tmp_path / "runs").exists()


# ============================================================== 9. nothing escapes as a traceback


@pytest.mark.parametrize("text", ["", "\n\n   \n", "# a grid to fill in later\n"])
def test_an_empty_grid_file_is_a_one_line_error(tmp_path, text):
    grid = tmp_path / "empty.toml"
    grid.write_text(text)
    res = cli(tmp_path, "plan", str(grid))
    assert_clean_error(res, contains="empty.toml")
    assert not (tmp_path / "runs").exists()


def test_an_unexpected_error_in_report_is_one_line_naming_a_crash_log(tmp_path, finished):
    code = ("import sys; import matplotlib.figure as f; "
            "f.Figure.savefig = lambda *a, **k: (_ for _ in ()).throw(KeyError('savefig')); "
            "from cemctl.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code, "report", "exp", "--out", str(tmp_path / "rep"),
                           "--format", "png", "--db", str(tmp_path / "results.db"), "--runs-dir",
                           str(tmp_path / "runs")],
                          cwd=tmp_path, capture_output=True, text=True,
                          env=subprocess_env(CEMCTL_CRASH_DIR=str(tmp_path / "crashes")))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "KeyError" in line and str(tmp_path / "crashes") in line
    (log,) = os.listdir(tmp_path / "crashes")
    assert "Traceback" in (tmp_path / "crashes" / log).read_text()
    assert not (tmp_path / "rep").exists()  # nothing half-written
