"""Family 4 of issue 24: a process is verified before any signal, and before a run is believed alive.

A job record names a PID with the process's start time and a token in its environment
(`cem_core.runfiles.process`). After a crash the PID may belong to an unrelated process: `cancel` must not
signal it, and `status` and `launch` must both see the run as stale and restartable. Real processes, real
signals. Each case failed on the main of 526f40c.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cem_core import runfiles
from tests.helpers import cli, plan_ids, status_rows, subprocess_env, tiny_grid, wait_for


@pytest.fixture
def stranger():
    """An unrelated process of this user (what a reused PID points at after a crash)."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _start_of(pid: int) -> str:
    """'<boot id>:<start tick>' read from /proc here (the format cem_core.runfiles.process records)."""
    boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    return f"{boot}:{open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[19]}"


def _gone_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _record(run_dir, state: str, *, pid: int | None = None, orchestrator_pid: int | None = None, **fields) -> None:
    record = {"executor": "local", "job_id": f"{runfiles.hostname()}:{pid or orchestrator_pid}", "logs": [],
              "host": runfiles.hostname(), "state": state, "attempt": 1, "pid": pid,
              "orchestrator_pid": orchestrator_pid, **fields}
    runfiles.atomic_write_json(run_dir / runfiles.JOB_FILE, record)  # as an executor writes it
    if state == "running":
        runfiles.append_event(run_dir, "running", "attempt 1 on cpu", attempt=1)
        runfiles.atomic_write_json(run_dir / runfiles.HEARTBEAT_FILE,
                                   {"time": time.time(), "step": 1, "total_steps": 6, "pid": pid})
    else:
        runfiles.append_event(run_dir, "queued", "local executor", attempt=0, executor="local")


def _alive(proc) -> bool:
    return proc.poll() is None


# ============================================================== cancel


def test_cancel_never_signals_a_reused_pid_from_an_old_record(tmp_path, stranger):
    """A record of an older cemctl (PID only): the process there is not a trainer of this run."""
    _, ids = plan_ids(tmp_path)
    _record(tmp_path / "runs" / ids[0], "running", pid=stranger.pid)
    res = cli(tmp_path, "cancel", ids[0])
    assert res.returncode == 0 and "no signal sent" in res.stdout, res.output
    time.sleep(0.3)
    assert _alive(stranger)


def test_cancel_never_signals_a_process_without_the_runs_token(tmp_path, stranger):
    _, ids = plan_ids(tmp_path)
    _record(tmp_path / "runs" / ids[0], "running", pid=stranger.pid,
            pid_start=_start_of(stranger.pid), token="0123456789abcdef01234567")
    assert cli(tmp_path, "cancel", ids[0]).returncode == 0
    time.sleep(0.3)
    assert _alive(stranger)


def test_cancel_never_signals_a_process_started_at_another_time(tmp_path, stranger):
    _, ids = plan_ids(tmp_path)
    boot, tick = _start_of(stranger.pid).split(":")
    _record(tmp_path / "runs" / ids[0], "running", pid=stranger.pid, pid_start=f"{boot}:{int(tick) - 1000}", token="x")
    assert cli(tmp_path, "cancel", ids[0]).returncode == 0
    time.sleep(0.3)
    assert _alive(stranger)


# ============================================================== status and launch agree


def test_status_calls_a_run_whose_pid_was_reused_stale_at_once(tmp_path, stranger):
    _, ids = plan_ids(tmp_path)
    _record(tmp_path / "runs" / ids[0], "running", pid=stranger.pid)
    row = status_rows(tmp_path)[ids[0]]
    assert row["state"] == "stale" and f"PID {stranger.pid}" in row["reason"], row


def test_status_calls_a_run_whose_trainer_is_gone_stale_at_once(tmp_path):
    """Its last heartbeat is seconds old, but the process is gone: not running."""
    _, ids = plan_ids(tmp_path)
    pid = _gone_pid()
    _record(tmp_path / "runs" / ids[0], "running", pid=pid)
    row = status_rows(tmp_path)[ids[0]]
    assert row["state"] == "stale" and f"process {pid} is gone" in row["reason"], row


def test_launch_restarts_a_run_whose_pid_was_reused(tmp_path, stranger):
    grid, ids = plan_ids(tmp_path)
    _record(tmp_path / "runs" / ids[0], "running", pid=stranger.pid)
    res = cli(tmp_path, "launch", str(grid), "--dry-run", subprocess=True)
    assert res.returncode == 0 and "would launch 2 of 2" in res.stdout, res.output


def test_status_calls_a_queued_run_whose_orchestrator_pid_was_reused_stale(tmp_path, stranger):
    _, ids = plan_ids(tmp_path)
    _record(tmp_path / "runs" / ids[0], "queued", orchestrator_pid=stranger.pid)
    row = status_rows(tmp_path)[ids[0]]
    assert row["state"] == "stale" and "orchestrator" in row["reason"], row


def test_launch_restarts_a_queued_run_whose_orchestrator_pid_was_reused(tmp_path, stranger):
    grid, ids = plan_ids(tmp_path)
    _record(tmp_path / "runs" / ids[0], "queued", orchestrator_pid=stranger.pid,
            orchestrator_start=f"{_start_of(stranger.pid)}0")
    res = cli(tmp_path, "launch", str(grid), "--dry-run", subprocess=True)
    assert res.returncode == 0 and "would launch 2 of 2" in res.stdout, res.output


# ============================================================== the real thing


@pytest.mark.slow
def test_a_launched_trainer_carries_its_token_and_cancel_stops_it(tmp_path):
    """A real local launch records the trainer's start time and token; the trainer's environment holds the token;
    `cancel` verifies it and stops it."""
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g", seeds="[0]", steps=40, ckpt=40))
    env = subprocess_env(CEMCTL_TEST_SLEEP_PER_STEP_S="0.3")
    argv = [sys.executable, "-m", "cemctl.cli", "launch", str(grid), "--workers", "1",
            "--db", str(tmp_path / "results.db"), "--runs-dir", str(tmp_path / "runs")]
    orchestrator = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def running():
            for d in (tmp_path / "runs").glob("[0-9a-f]*"):
                job = runfiles.read_job(d)
                if job is not None and job.state == "running" and (runfiles.read_heartbeat(d) or {}).get("step", 0) >= 1:
                    return d, job
            return None

        run_dir, job = wait_for(running, timeout_s=180, what="the trainer to run")
        assert job.token and job.pid_start == _start_of(job.pid)
        environ = open(f"/proc/{job.pid}/environ", "rb").read().split(b"\0")
        assert f"{runfiles.TOKEN_ENV}={job.token}".encode() in environ
        res = cli(tmp_path, "cancel", run_dir.name, subprocess=True)
        assert res.returncode == 0 and "sent SIGTERM" in res.stdout, res.output
        wait_for(lambda: not os.path.exists(f"/proc/{job.pid}") or open(f"/proc/{job.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                 timeout_s=60, what="the trainer to stop")
        orchestrator.wait(timeout=120)
        assert status_rows(tmp_path)[run_dir.name]["state"] == "cancelled"
    finally:
        if orchestrator.poll() is None:
            os.kill(orchestrator.pid, signal.SIGKILL)
            orchestrator.wait()
