"""Family 6 of issue 24: the right state and the real reason, and one bad line never spoils a run.

Truncated and undecodable corpora name their file; a truncated result.json is not "gone"; a number too
large for the database drops that field, not the run; a result.json swapped for a link is re-read; a
read-only or unreadable database says so; an edited code snapshot never runs under the original hash.
Each case failed on the main of 526f40c.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import time

import pytest

from cem_core import runfiles
from tests.helpers import assert_clean_error, cli, finish_run, plan_ids, status_rows, tiny_grid

HUGE = 10**30


def _error_line(res, contains: str) -> str:  # noqa: ANN001
    """Exit 2 and one error line on stderr (what was printed before it, a progress line, is on stdout)."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.output, res.output
    assert lines[0].startswith("error: ") and contains in lines[0], lines[0]
    return lines[0]


def _files_grid(tmp_path, pattern: str) -> str:
    return tiny_grid("corpus", seeds="[0]", cache_dir=str(tmp_path / "cache"),
                     extra=f'"data.corpus" = "files"\n"data.path" = "{pattern}"\n')


# ============================================================== corpora


def test_a_truncated_gzip_corpus_is_one_line_naming_the_file_not_interrupted(tmp_path):
    data = gzip.compress(b"".join(json.dumps({"text": f"document {i} " * 30}).encode() + b"\n" for i in range(300)))
    (tmp_path / "c.jsonl.gz").write_bytes(data[: len(data) // 2])
    (tmp_path / "g.toml").write_text(_files_grid(tmp_path, str(tmp_path / "c.jsonl.gz")))
    res = cli(None, "data", "prepare", str(tmp_path / "g.toml"), "--workers", "1", subprocess=True)
    assert "truncated" in _error_line(res, "c.jsonl.gz")


def test_invalid_utf8_in_a_corpus_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "c.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "bad \xff\xfe bytes"}\n')
    (tmp_path / "g.toml").write_text(_files_grid(tmp_path, str(tmp_path / "c.jsonl")))
    res = cli(None, "data", "prepare", str(tmp_path / "g.toml"), "--workers", "1", subprocess=True)
    assert "UTF-8" in _error_line(res, "c.jsonl")


# ============================================================== result.json


def test_a_truncated_result_json_is_never_called_gone(tmp_path, finished):
    from cemctl.db import open_db, sync_runs

    _, ids = finished
    status_rows(tmp_path)
    path = tmp_path / "runs" / ids[0] / "result.json"
    path.write_text(path.read_text()[:20])
    row = status_rows(tmp_path)[ids[0]]
    assert "gone" not in row["reason"], row
    later = time.time() + 120  # once it is clearly no writer's half-written file
    sync_runs(open_db(f"sqlite:///{tmp_path / 'results.db'}"), tmp_path / "runs", now=later)
    row = status_rows(tmp_path, "--no-sync")[ids[0]]
    assert row["state"] == "damaged" and "not valid JSON" in row["reason"] and "gone" not in row["reason"], row


def test_a_result_json_replaced_by_a_link_is_read_again(tmp_path, finished):
    """A copy that keeps the mtime (cp -p), linked in place: the link itself is new, so the run is judged again."""
    _, ids = finished
    status_rows(tmp_path)
    path = tmp_path / "runs" / ids[0] / "result.json"
    outside = tmp_path / "elsewhere.json"
    shutil.copy2(path, outside)
    path.unlink()
    os.symlink(outside, path)
    row = status_rows(tmp_path)[ids[0]]
    assert row["state"] == "damaged" and "outside the run directory" in row["reason"], row


# ============================================================== one bad line


def _metrics_line(run_dir, **fields) -> None:
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "train", "step": 2, "tokens": 256, "train_loss": 2.0, **fields}) + "\n")


@pytest.mark.parametrize("where", ["metrics_tokens", "metrics_step", "heartbeat_pid", "event_attempt",
                                   "result_params"])
def test_one_huge_integer_never_makes_a_run_uningestible(tmp_path, where):
    _, ids = plan_ids(tmp_path)
    run_dir = tmp_path / "runs" / ids[0]
    finish_run(run_dir, test_loss=1.75)
    if where == "metrics_tokens":
        _metrics_line(run_dir, tokens=HUGE)
    elif where == "metrics_step":
        _metrics_line(run_dir, step=HUGE)
    elif where == "heartbeat_pid":
        (run_dir / "heartbeat.json").write_text(json.dumps({"time": time.time() - 5, "step": 4, "pid": HUGE}))
    elif where == "event_attempt":
        runfiles.append_event(run_dir, "done", "", attempt=HUGE)
    else:
        result = json.loads((run_dir / "result.json").read_text())
        (run_dir / "result.json").write_text(json.dumps({**result, "params_total": HUGE}))
    res = cli(tmp_path, "sync")
    assert res.returncode == 0, res.output
    row = status_rows(tmp_path)[ids[0]]
    assert row["state"] == "done" and row["test_loss"] == pytest.approx(1.75), row


# ============================================================== the database


def test_status_on_a_read_only_database_says_its_states_may_be_old(tmp_path, finished):
    _, ids = finished
    status_rows(tmp_path)
    finish_run(tmp_path / "runs" / ids[0], state="failed", error="late failure")  # the files moved on
    url = f"sqlite:///file:{tmp_path / 'results.db'}?mode=ro&uri=true"
    res = cli(None, "status", "--db", url, "--runs-dir", str(tmp_path / "runs"), subprocess=True)
    assert res.returncode == 0 and "read-only" in res.stderr and "as last recorded" in res.stderr, res.output


def test_data_clean_never_reads_an_unreadable_database_as_no_runs(tmp_path):
    from cem_core.config import DataConfig
    from cem_core.data import prepare_data

    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": f"doc {i} words"}) + "\n" for i in range(30)))
    base = prepare_data(DataConfig(corpus="files", path=str(tmp_path / "c.jsonl"), tokenizer="byte",
                                   cache_dir=str(tmp_path / "cache"))).path.parent
    db = tmp_path / "results.db"
    db.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))  # damaged beyond reading
    res = cli(None, "data", "clean", "--yes", "--include-unknown", "--cache-dir", str(tmp_path / "cache"),
              "--db", str(db), subprocess=True)
    assert_clean_error(res, contains="results.db")
    assert base.exists() and any(base.iterdir())


def test_a_newer_database_opened_read_only_names_its_version(tmp_path, finished):
    status_rows(tmp_path)
    con = sqlite3.connect(tmp_path / "results.db")
    con.execute("INSERT INTO schema_version (version, applied_at) VALUES (99, 0)")
    con.commit()
    con.close()
    url = f"sqlite:///file:{tmp_path / 'results.db'}?mode=ro&uri=true"
    res = cli(None, "status", "--db", url, "--runs-dir", str(tmp_path / "runs"), subprocess=True)
    line = assert_clean_error(res, contains="99")
    assert "upgrade cemctl" in line and "newer" in line


# ============================================================== the code snapshot


@pytest.mark.slow
def test_an_edited_code_snapshot_never_runs_under_the_original_hash(tmp_path):
    from cemctl.services.launch.snapshot import take_snapshot

    grid, ids = plan_ids(tmp_path, tiny_grid("exp", seeds="[0]", steps=2))
    snap = take_snapshot(tmp_path / "runs")
    target = snap.path / "cem_core" / "names.py"
    target.write_text(target.read_text() + "\nEDITED = True\n")
    res = cli(tmp_path, "launch", str(grid), "--workers", "1", subprocess=True)
    _error_line(res, "edited")
    assert not (tmp_path / "runs" / ids[0] / "result.json").exists()
    assert "EDITED = True" in target.read_text()  # left as the user made it
