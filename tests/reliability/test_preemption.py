"""Family 9 of issue 24: preemption loses no work.

On SIGTERM, SIGUSR1 or SIGUSR2 (a SLURM time limit or preemption, `scontrol requeue`, submitit's timeout
signal, `cemctl cancel`, a stopped orchestrator) the trainer finishes its step, checkpoints it, records
why, and exits so that the executor restarts it (local) or SLURM requeues it; the next attempt resumes
from that very step. Every grid here saves no periodic checkpoint before the end, so a resume from step
k > 0 can only come from the preemption checkpoint. Real processes, real signals, the real SLURM
cluster (marked `slurm`, skipped without one). Each case failed on the main of 526f40c.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cem_core import runfiles
from tests.helpers import cli, plan_ids, slurm_cluster_problem, status_rows, subprocess_env, tiny_grid, wait_for

STEPS = 16
NO_PERIODIC = 1000  # train.ckpt_every_steps beyond the run: only the final step would be saved


def _plan(tmp_path, name: str = "pre", seeds: str = "[0]") -> tuple[Path, list[str]]:
    return plan_ids(tmp_path, tiny_grid(name, seeds=seeds, steps=STEPS, ckpt=NO_PERIODIC), name)


def _step(run_dir: Path) -> int:
    return int((runfiles.read_heartbeat(run_dir) or {}).get("step") or 0)


def _ckpt_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in (run_dir / "checkpoints").glob("step_*.pt"))


def _resumed_from(run_dir: Path) -> list[int]:
    text = (run_dir / "train.log").read_text()
    return [int(line.split("resumed from checkpoint step")[1].split()[0]) for line in text.splitlines()
            if "resumed from checkpoint step" in line]


def _train_steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in runfiles.read_jsonl(run_dir / "metrics.jsonl") if r.get("kind") == "train"]


def _trainer(run_dir: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cem_core.train", str(run_dir), "--device", "cpu"],
                            env=subprocess_env(**env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


# ============================================================== the trainer itself


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2], ids=lambda s: s.name)
def test_the_trainer_checkpoints_its_step_and_exits_to_be_restarted(tmp_path, sig):
    _, (rid,) = _plan(tmp_path)
    run_dir = tmp_path / "runs" / rid
    proc = _trainer(run_dir, CEMCTL_TEST_SLEEP_PER_STEP_S="0.3")
    try:
        wait_for(lambda: _step(run_dir) >= 3, timeout_s=180, what="step 3")
        proc.send_signal(sig)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 4, proc.stderr.read()  # cem_core.runfiles.EXIT_PREEMPTED
    (k,) = _ckpt_steps(run_dir)
    assert 3 <= k < STEPS and not (run_dir / "result.json").exists()
    last = runfiles.read_jsonl(run_dir / "events.jsonl")[-1]
    assert last["state"] == "stale" and f"preempted by {sig.name} after step {k}" in last["reason"]
    if sig != signal.SIGTERM:
        return
    # Started again, it resumes from that step and ends where an uninterrupted run ends.
    assert _trainer(run_dir).wait(timeout=300) == 0
    assert _resumed_from(run_dir) == [k] and _train_steps(run_dir) == list(range(1, STEPS + 1))
    ref = tmp_path / "reference"
    ref.mkdir()
    shutil.copy(run_dir / "config.json", ref / "config.json")
    assert _trainer(ref).wait(timeout=300) == 0
    loss = json.loads((run_dir / "result.json").read_text())["test_loss"]
    assert loss == pytest.approx(json.loads((ref / "result.json").read_text())["test_loss"], rel=1e-6, abs=1e-7)


# ============================================================== the local executor


def _launch(tmp_path: Path, grid: Path, **env: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "cemctl.cli", "launch", str(grid), "--workers", "1",
            "--db", str(tmp_path / "results.db"), "--runs-dir", str(tmp_path / "runs")]
    return subprocess.Popen(argv, env=subprocess_env(**env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _trainer_pid(run_dir: Path) -> int | None:
    job = runfiles.read_job(run_dir)
    return job.pid if job is not None and job.state == "running" and _step(run_dir) >= 3 else None


@pytest.mark.slow
def test_the_local_executor_restarts_a_preempted_trainer_from_its_step(tmp_path):
    grid, (rid,) = _plan(tmp_path)
    run_dir = tmp_path / "runs" / rid
    orch = _launch(tmp_path, grid, CEMCTL_TEST_SLEEP_PER_STEP_S="0.3")
    try:
        pid = wait_for(lambda: _trainer_pid(run_dir), timeout_s=180, what="the trainer at step 3")
        os.kill(pid, signal.SIGTERM)  # the trainer alone, not the orchestrator
        out, _ = orch.communicate(timeout=300)
    finally:
        if orch.poll() is None:
            orch.kill()
    assert orch.returncode == 0, out
    row = status_rows(tmp_path)[rid]
    assert row["state"] == "done" and row["attempts"] == 2, row
    (k,) = _resumed_from(run_dir)
    assert 3 <= k < STEPS and _train_steps(run_dir) == list(range(1, STEPS + 1))


@pytest.mark.slow
def test_ctrl_c_to_the_orchestrator_keeps_the_step_each_trainer_reached(tmp_path):
    grid, (rid,) = _plan(tmp_path)
    run_dir = tmp_path / "runs" / rid
    orch = _launch(tmp_path, grid, CEMCTL_TEST_SLEEP_PER_STEP_S="0.3")
    try:
        wait_for(lambda: _trainer_pid(run_dir), timeout_s=180, what="the trainer at step 3")
        orch.send_signal(signal.SIGINT)
        orch.wait(timeout=120)
    finally:
        if orch.poll() is None:
            orch.kill()
    (k,) = _ckpt_steps(run_dir)
    assert k >= 3
    res = cli(tmp_path, "launch", str(grid), "--workers", "1", subprocess=True)
    assert res.returncode == 0, res.output
    assert _resumed_from(run_dir) == [k] and status_rows(tmp_path)[rid]["state"] == "done"


@pytest.mark.slow
def test_cancel_keeps_the_step_the_trainer_reached(tmp_path):
    grid, (rid,) = _plan(tmp_path)
    run_dir = tmp_path / "runs" / rid
    orch = _launch(tmp_path, grid, CEMCTL_TEST_SLEEP_PER_STEP_S="0.3")
    try:
        wait_for(lambda: _trainer_pid(run_dir), timeout_s=180, what="the trainer at step 3")
        res = cli(tmp_path, "cancel", rid, subprocess=True)
        assert res.returncode == 0 and "SIGTERM" in res.stdout, res.output
        orch.wait(timeout=120)
    finally:
        if orch.poll() is None:
            orch.kill()
    assert status_rows(tmp_path)[rid]["state"] == "cancelled"
    (k,) = _ckpt_steps(run_dir)
    assert k >= 3
    res = cli(tmp_path, "launch", str(grid), "--workers", "1", subprocess=True)
    assert res.returncode == 0 and _resumed_from(run_dir) == [k], res.output


# ============================================================== SLURM


_SLURM = slurm_cluster_problem()


def _release(job_id: str) -> None:
    """Wait until the requeued job is pending, then skip SLURM's two-minute requeue delay."""
    from cemctl.executors.slurm import squeue_states

    wait_for(lambda: squeue_states().get(job_id, ("",))[0] == "PENDING", timeout_s=120,
             what=f"job {job_id} to be pending again")
    time.sleep(5)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)


def _slurm_preempted_then_resumed(tmp_path: Path, preempt) -> None:  # noqa: ANN001
    grid, (rid,) = _plan(tmp_path, name="spre")
    run_dir = tmp_path / "runs" / rid
    env = {"CEMCTL_TEST_SLEEP_PER_STEP_S": "0.5", "CEMCTL_HEARTBEAT_TIMEOUT_S": "120"}
    res = cli(tmp_path, "launch", str(grid), "--executor", "slurm", "--prepare", "--timeout-min", "10",
              subprocess=True, env=env)
    assert res.returncode == 0, res.output
    job_id = runfiles.read_job(run_dir).job_id
    wait_for(lambda: _step(run_dir) >= 4, timeout_s=240, what="step 4 on the cluster")
    preempt(job_id)
    _release(job_id)

    def finished():
        row = status_rows(tmp_path, subprocess=True)[rid]
        assert row["state"] not in ("failed", "cancelled"), row
        return row if row["state"] == "done" else None

    row = wait_for(finished, timeout_s=400, poll_s=2, what="the requeued run to finish")
    assert row["attempts"] == 2
    (k,) = _resumed_from(run_dir)
    assert 4 <= k < STEPS and _train_steps(run_dir) == list(range(1, STEPS + 1))
    assert any(e["state"] == "stale" and "preempted by" in e.get("reason", "")
               for e in runfiles.read_jsonl(run_dir / "events.jsonl"))


@pytest.mark.slow  # a real trainer through SLURM
@pytest.mark.slurm
@pytest.mark.skipif(_SLURM is not None, reason=_SLURM or "")
def test_scontrol_requeue_resumes_from_the_step_the_trainer_reached(tmp_path):
    _slurm_preempted_then_resumed(tmp_path, lambda job: subprocess.run(["scontrol", "requeue", job], check=True))


@pytest.mark.slow  # a real trainer through SLURM
@pytest.mark.slurm
@pytest.mark.skipif(_SLURM is not None, reason=_SLURM or "")
def test_the_time_limit_signal_checkpoints_and_requeues(tmp_path):
    """SIGUSR2 is what SLURM sends `signal_delay_s` before the time limit (submitit's timeout signal)."""
    _slurm_preempted_then_resumed(tmp_path, lambda job: subprocess.run(["scancel", "--signal=USR2", job], check=True))
