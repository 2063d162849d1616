"""Run states over time (`cemctl status --json`): every transition recorded once with a time; no stale "running".

A worker process here does what the trainer does for liveness (a `running`
event, then heartbeat.json rewritten every 0.2 s) so the test is fast; the
real trainer is killed in test_crash_safety.py and test_orchestrator_kill.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cemctl.cli import app
from cemctl.db import get_run, ingest_run, open_db, run_events, set_state
from cem_core.runfiles import append_event
from tests.helpers import write_json as atomic_write_json
from cemctl.services.plan import plan_experiment

from tests.helpers import subprocess_env as env

GRID = """[experiment]
name = "states"
[base]
"model.size" = "nano"
"data.tokenizer" = "byte"
"train.max_steps" = 5
[axes]
"train.seed" = [0, 1]
"""

WORKER = r"""
import os, sys, time, json
from cem_core.runfiles import append_event
from tests.helpers import write_json as atomic_write_json
run_dir = sys.argv[1]
append_event(run_dir, "running", "attempt 1", attempt=1)
step = 0
while True:
    step += 1
    atomic_write_json(os.path.join(run_dir, "heartbeat.json"), {"time": time.time(), "step": step, "total_steps": 5,
                      "tokens": step, "pid": os.getpid(), "host": "h", "attempt": 1}, fsync=False)
    time.sleep(0.2)
"""


@pytest.fixture
def planned(tmp_path: Path):
    grid = tmp_path / "states.toml"
    grid.write_text(GRID)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    report = plan_experiment(grid, db_url=url, runs_root=tmp_path / "runs")
    return url, tmp_path / "runs", [r.run_id for r in report.plan.runs]


def status(url: str, runs: Path, monkeypatch, timeout_s: float) -> dict[str, dict]:
    monkeypatch.setenv("CEMCTL_HEARTBEAT_TIMEOUT_S", str(timeout_s))
    r = CliRunner().invoke(app, ["status", "--json", "--db", url, "--runs-dir", str(runs)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    return {row["run_id"]: {**row, "time": doc["time"]} for e in doc["experiments"] for row in e["runs"]}


def test_every_transition_is_recorded_once_with_a_time(planned):
    url, runs, (rid, _) = planned
    engine = open_db(url)
    t0 = time.time()
    set_state(engine, rid, "queued", "submitted", executor="local", job_id="h:1", attempt=0)
    append_event(runs / rid, "running", "attempt 1", attempt=1)
    ingest_run(engine, runs / rid)
    set_state(engine, rid, "failed", "killed by SIGKILL before finishing; resumable", attempt=1)
    set_state(engine, rid, "queued", "retry", attempt=1)
    append_event(runs / rid, "running", "attempt 2", attempt=2)
    atomic_write_json(runs / rid / "result.json", {"state": "done", "test_loss": 1.0, "steps": 5})
    append_event(runs / rid, "done", "", attempt=2)
    assert ingest_run(engine, runs / rid) == "done"
    events = run_events(engine, rid)
    assert [e.state for e in events] == ["planned", "queued", "running", "failed", "queued", "running", "done"]
    times = [e.time for e in events]
    assert all(isinstance(t, float) for t in times) and times == sorted(times)
    assert t0 - 5 < times[1] and times[-1] <= time.time()
    assert get_run(engine, rid).attempts == 2


def test_result_seen_before_the_done_line_is_still_one_done_event(planned):
    """status may read result.json in the moment before the trainer appends its "done" line."""
    url, runs, (rid, _) = planned
    engine = open_db(url)
    append_event(runs / rid, "running", "attempt 1", attempt=1)
    ingest_run(engine, runs / rid)
    atomic_write_json(runs / rid / "result.json", {"state": "done", "test_loss": 1.0, "steps": 5})
    assert ingest_run(engine, runs / rid) == "done"  # derived from result.json: the line is not there yet
    append_event(runs / rid, "done", "", attempt=1)
    assert ingest_run(engine, runs / rid) == "done"
    states = [e.state for e in run_events(engine, rid)]
    assert states.count("done") == 1, states
    assert states == ["planned", "running", "done"]


def test_killed_worker_is_never_shown_running_without_a_fresh_heartbeat(planned, monkeypatch):
    url, runs, (rid, other) = planned
    timeout_s = 1.5
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(runs / rid)], env=env())
    try:
        deadline = time.time() + 60
        while not (runs / rid / "heartbeat.json").exists():
            assert time.time() < deadline and worker.poll() is None
            time.sleep(0.05)
        seen = []
        t_end = time.time() + timeout_s + 1.0  # alive for longer than the timeout: stays running
        while time.time() < t_end:
            row = status(url, runs, monkeypatch, timeout_s)[rid]
            seen.append(row["state"])
            assert row["state"] == "running", row
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        killed = time.time()
        states_after = []
        while time.time() < killed + timeout_s + 2.0:
            rows = status(url, runs, monkeypatch, timeout_s)
            row = rows[rid]
            hb_age = rows[rid]["time"] - (runs / rid / "heartbeat.json").stat().st_mtime
            states_after.append(row["state"])
            if row["state"] == "running":
                assert hb_age <= timeout_s + 0.5, (hb_age, row)  # running only with a fresh heartbeat
            assert rows[other]["state"] == "planned"
            time.sleep(0.2)
        assert states_after[-1] == "stale", states_after
        assert "no heartbeat" in (row["error"] or row["reason"])
    finally:
        if worker.poll() is None:
            worker.kill()
    engine = open_db(url)
    events = run_events(engine, rid)
    assert [e.state for e in events] == ["planned", "running", "stale"]
    assert events[-1].source == "derived" and events[-1].time >= killed
