"""Which runs a launch (re)starts, decided from the run directories alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cem_core import runfiles
from cemctl.services.launch.select import RESUME, RETRY, SKIP, START, select_runs


def make(tmp_path: Path, name: str, *, result: str | None = None, job: dict | None = None, ckpts: tuple[int, ...] = ()) -> tuple[str, Path]:
    d = tmp_path / name
    d.mkdir()
    if result:
        (d / "result.json").write_text(json.dumps({"state": result, "error": "boom" if result == "failed" else None,
                                                   "test_loss": 1.5 if result == "done" else None}))
    if job:
        runfiles.write_job(d, runfiles.JobRecord.from_dict(job))
    if ckpts:
        (d / "checkpoints").mkdir()
        for step in ckpts:
            (d / "checkpoints" / f"step_{step:08d}.pt").write_bytes(b"x")
    return name, d


def test_selection_rules(tmp_path, monkeypatch):
    host = runfiles.hostname()
    dead_pid = 2**22 + 4321
    runs = [
        make(tmp_path, "done", result="done"),
        make(tmp_path, "diverged", result="diverged"),
        make(tmp_path, "failed", result="failed", ckpts=(2,)),
        make(tmp_path, "live", job={"executor": "local", "state": "running", "host": host, "pid": os.getpid(), "job_id": "h:1",
                                    "pid_start": runfiles.process_start(os.getpid())}),  # this very process
        make(tmp_path, "orphan", job={"executor": "local", "state": "queued", "host": host, "orchestrator_pid": dead_pid}),
        make(tmp_path, "killed", job={"executor": "local", "state": "running", "host": host, "pid": dead_pid}, ckpts=(4, 8)),
        make(tmp_path, "cancelled", job={"executor": "local", "state": "cancelled", "host": host}),
        make(tmp_path, "fresh"),
    ]
    got = {s.run_id: (s.action, s.reason) for s in select_runs(runs)}
    assert got["done"] == (SKIP, "done") and got["diverged"][0] == SKIP
    assert got["failed"] == (SKIP, "failed (use --retry-failed to run it again)")
    assert got["live"][0] == SKIP and "already running" in got["live"][1]
    assert got["orphan"] == (START, "start")
    assert got["killed"] == (RESUME, "resume from checkpoint step 8")
    assert got["cancelled"][0] == START and got["fresh"][0] == START
    retry = {s.run_id: s.action for s in select_runs(runs, retry_failed=True)}
    assert retry["failed"] == RETRY and retry["done"] == SKIP and retry["diverged"] == SKIP


def test_a_done_result_without_a_test_loss_is_damaged_for_the_launcher_as_for_ingest(tmp_path):
    """One rule of what a result is (cem_core.runfiles.results): the launcher never starts such a run over (its
    result.json would be replaced), it skips it as damaged, as ingest calls it."""
    rid, d = make(tmp_path, "nan", result="done")
    (d / "result.json").write_text(json.dumps({"state": "done", "test_loss": None}))
    (sel,) = select_runs([(rid, d)])
    assert sel.action == SKIP and "damaged: result.json: state done but test_loss is None" in sel.reason
    (again,) = select_runs([(rid, d)], redo_damaged=True)
    assert again.action != SKIP


def test_slurm_job_without_squeue_is_not_started_twice(tmp_path, monkeypatch):
    runs = [make(tmp_path, "pending", job={"executor": "slurm", "state": "queued", "job_id": "12_3"})]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no squeue
    (sel,) = select_runs(runs)
    assert sel.action == SKIP and "12_3" in sel.reason
