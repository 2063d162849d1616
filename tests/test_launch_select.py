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


def test_a_result_json_that_is_not_json_is_never_started_over(tmp_path):
    """The one reader of result.json (cem_core.runfiles.results.read_result_file), as ingest reads it: a truncated
    file is damaged once it is older than the grace period, and until then the run is skipped, never started over
    (its file would be replaced). Before, the launcher read it as "no result" and started the run."""
    rid, d = make(tmp_path, "cut", result="done")
    text = (d / "result.json").read_text()
    (d / "result.json").write_text(text[: len(text) // 2])
    (sel,) = select_runs([(rid, d)])
    assert sel.action == SKIP and "result.json cannot be read yet" in sel.reason, sel.reason
    old = os.stat(d / "result.json").st_mtime - 3600
    os.utime(d / "result.json", (old, old))
    (sel,) = select_runs([(rid, d)])
    assert sel.action == SKIP and "damaged: result.json: not valid JSON" in sel.reason, sel.reason
    (again,) = select_runs([(rid, d)], redo_damaged=True)
    assert again.action == RETRY


def test_the_dry_run_tells_a_damaged_run_as_status_does(tmp_path):
    """`launch --dry-run` reads the database without syncing: the damage found in the folders is judged by the same
    rule as sync's (cemctl.db.ingest), so a result.json cut after the last sync reads damaged in the dry run, in
    status and in a real launch alike (before, the dry run said "start")."""
    from tests.helpers import cli, finish_run, plan_ids, tiny_grid

    _, ids = plan_ids(tmp_path, tiny_grid("cut", seeds="[0]"), "cut")
    run = tmp_path / "runs" / ids[0]
    finish_run(run)
    assert cli(tmp_path, "sync").returncode == 0
    text = (run / "result.json").read_text()
    (run / "result.json").write_text(text[: len(text) // 2])
    old = os.stat(run / "result.json").st_mtime - 3600
    os.utime(run / "result.json", (old, old))
    dry = cli(tmp_path, "launch", "cut", "--dry-run", "--json")
    assert dry.returncode == 0, dry.output
    (sel,) = json.loads(dry.stdout)["runs"]
    assert sel["action"] == "skip" and "damaged: result.json: not valid JSON" in sel["reason"], sel
    status = json.loads(cli(tmp_path, "status", "cut", "--json").stdout)["experiments"][0]["runs"][0]
    assert status["state"] == "damaged"


def test_cancel_leaves_a_run_whose_result_json_is_not_a_result_and_says_so(tmp_path):
    """cancel asks the same rule: a damaged result.json is not "no result" (before, the run was marked cancelled and
    got a cancel file, as an unfinished one)."""
    from tests.helpers import cli, finish_run, plan_ids, tiny_grid

    _, ids = plan_ids(tmp_path, tiny_grid("cut", seeds="[0]"), "cut")
    run = tmp_path / "runs" / ids[0]
    finish_run(run)
    text = (run / "result.json").read_text()
    (run / "result.json").write_text(text[: len(text) // 2])
    old = os.stat(run / "result.json").st_mtime - 3600
    os.utime(run / "result.json", (old, old))
    res = cli(tmp_path, "cancel", ids[0])
    assert res.returncode == 0 and "not cancelled" in res.stdout and "not valid JSON" in res.stdout, res.output
    assert "cancelled 0 run(s)" in res.stdout
    assert not (run / "cancel").exists()
    assert "cancelled" not in (run / "events.jsonl").read_text()


def test_update_job_never_replaces_a_job_json_it_cannot_read(tmp_path):
    """A job.json that is not JSON (or not an object) is refused, one line naming it, and left as it is: merging
    fields into an empty record would lose its job's PID or SLURM id (before, it was overwritten)."""
    import pytest

    for bad in ('{"executor": "slurm", "job_id": "12', "[1, 2]"):
        (tmp_path / "job.json").write_text(bad)
        with pytest.raises(runfiles.JobUnreadable, match="job.json") as e:
            runfiles.update_job(tmp_path, state="cancelled", reason="cancelled by user")
        assert "\n" not in str(e.value) and "move the file aside" in str(e.value)
        assert (tmp_path / "job.json").read_text() == bad
    (tmp_path / "job.json").unlink()
    assert runfiles.update_job(tmp_path, state="cancelled").state == "cancelled"  # none yet: a new record
