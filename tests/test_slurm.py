"""The SLURM executor on the real one-node cluster of `.ci/setup_slurm.sh` (marked `slurm`).

Skipped with the reason when `sinfo` is missing or the node is not up. The
cluster has no accounting (no sacct): state comes from the runs' files and squeue.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cem_core import runfiles
from cemctl.executors.base import Job
from cemctl.executors.slurm import SlurmExecutor, SlurmOptions, squeue_states
from tests.helpers import slurm_cluster_problem

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_launch_local import cemctl, checkpoint_steps, cli_env, events, heartbeat_step, run_states, status_json, wait_for, write_grid  # noqa: E402


_PROBLEM = slurm_cluster_problem()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")]


def wait_queue_empty(job_ids: list[str], timeout_s: float = 120) -> None:
    wait_for(lambda: not (set(job_ids) & set(squeue_states())), timeout_s=timeout_s, what=f"jobs {job_ids} to leave the queue")


def release_requeued(job_id: str) -> None:
    """Wait until a requeued job is pending, then skip SLURM's two-minute requeue delay.

    A few seconds pass first: a requeued job started again at once can be refused by
    slurmctld ("Job credential revoked") while the previous start is still being cleaned up.
    """
    wait_for(lambda: squeue_states().get(job_id, ("",))[0] == "PENDING", timeout_s=60,
             what=f"job {job_id} to be pending again")
    time.sleep(5)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)


def test_arrays_are_split_below_max_array_size_with_a_concurrency_limit(tmp_path, monkeypatch):
    import cemctl.executors.slurm.executor as slurm_executor

    monkeypatch.setattr(slurm_executor, "max_array_size", lambda: 2)  # where submit() looks it up
    jobs = []
    for i in range(3):
        d = tmp_path / f"r{i}"
        d.mkdir()
        code = f"import os; open({str(d / 'env.txt')!r}, 'w').write(os.environ.get('SLURM_JOB_ID', '') + '|' + os.environ['CEMCTL_ATTEMPT'])"
        jobs.append(Job(run_id=f"r{i}", run_dir=d, argv=[sys.executable, "-c", code]))
    ex = SlurmExecutor(SlurmOptions(timeout_min=5, array_parallelism=1, sbatch={"comment": "cemctl-test"}), folder=tmp_path / ".slurm")
    out = ex.submit(jobs)
    ids = [s.job_id for s in out]
    assert all(ids) and all(s.state == "queued" for s in out)
    arrays = {i.split("_")[0] for i in ids if i}
    assert len(arrays) == 2  # 3 jobs, at most 2 per array
    sbatch_text = "\n".join(p.read_text() for p in (tmp_path / ".slurm").rglob("*submission.sh"))
    assert "--array=0-1%1" in sbatch_text and "--requeue" in sbatch_text and "--comment=cemctl-test" in sbatch_text
    wait_queue_empty([i for i in ids if i])
    for j in jobs:
        rec = runfiles.read_job(j.run_dir)
        assert rec.executor == "slurm" and rec.state == "exited" and rec.attempt == 1
        assert (j.run_dir / "env.txt").read_text().split("|")[1] == "1"


def test_slurm_options_from_the_grid_table_are_checked():
    opts = SlurmOptions.from_mapping({"partition": "debug", "timeout_min": 30, "mem_gb": 4, "sbatch": {"constraint": "a100"}})
    p = opts.merged({"timeout_min": 45, "account": None}).submitit_parameters()
    assert p["time"] == 45 and p["partition"] == "debug" and p["mem"] == "4GB"
    assert p["additional_parameters"] == {"requeue": True, "constraint": "a100"}
    from cem_core.errors import ConfigError

    with pytest.raises(ConfigError, match="slurm.walltime.*allowed: slurm.partition"):
        SlurmOptions.from_mapping({"walltime": 3}, source="grid.toml")
    with pytest.raises(ConfigError, match="slurm.timeout_min"):
        SlurmOptions.from_mapping({"timeout_min": "ten"})


@pytest.mark.slow  # real trainers through SLURM
def test_launch_on_slurm_completes_and_relaunch_starts_nothing(tmp_path):
    grid = write_grid(tmp_path, name="slurmgrid", steps=6, ckpt=3)
    env = cli_env(tmp_path)
    # The cluster workflow: prepare the data on this (login) node, then submit; the jobs never tokenize.
    prep = cemctl(tmp_path, "data", "prepare", str(grid), "--workers", "1", env=env)
    assert prep.returncode == 0, prep.stdout + prep.stderr
    out = cemctl(tmp_path, "launch", str(grid), "--executor", "slurm", "--timeout-min", "10", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "queued 2" in out.stdout and "preparing data" not in out.stdout

    def all_done():
        st = run_states(status_json(tmp_path, env), "slurmgrid")
        bad = [r for r in st.values() if r["state"] in ("failed", "stale", "cancelled")]
        assert not bad, bad
        return st if all(r["state"] == "done" for r in st.values()) else None

    st = wait_for(all_done, timeout_s=300, what="both SLURM runs to finish")
    for r in st.values():
        assert r["executor"] == "slurm" and r["job_id"] and r["test_loss"] > 0 and r["step"] == 6
    import sqlite3

    rows = sqlite3.connect(tmp_path / "results.db").execute("select state, test_loss from results").fetchall()
    assert len(rows) == 2 and all(s == "done" and loss > 0 for s, loss in rows)
    again = cemctl(tmp_path, "launch", "slurmgrid", "--executor", "slurm", env=env)
    assert again.returncode == 0 and "launched 0 of 2" in again.stdout


@pytest.mark.slow  # real trainers through SLURM
def test_requeued_job_resumes_from_its_checkpoint_with_the_same_test_loss(tmp_path):
    grid = write_grid(tmp_path, name="requeue", steps=16, ckpt=4, attention='["llama"]')
    env = cli_env(tmp_path, CEMCTL_TEST_SLEEP_PER_STEP_S="0.4", CEMCTL_HEARTBEAT_TIMEOUT_S="60")
    out = cemctl(tmp_path, "launch", str(grid), "--executor", "slurm", "--prepare", "--timeout-min", "10", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if not p.name.startswith("."))
    job_id = runfiles.read_job(run_dir).job_id
    wait_for(lambda: checkpoint_steps(run_dir) and heartbeat_step(run_dir) >= 6, timeout_s=180,
             what="a checkpoint and step 6")
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    # Skip SLURM's two-minute delay before a requeued job may start again.
    release_requeued(job_id)

    def finished():
        st = run_states(status_json(tmp_path, env), "requeue")[run_dir.name]
        assert st["state"] not in ("failed", "cancelled"), st
        return st if st["state"] == "done" else None

    st = wait_for(finished, timeout_s=300, what="the requeued run to finish")
    assert st["attempts"] == 2 and st["job_id"] == job_id
    runs_ev = [e for e in events(run_dir) if e["state"] == "running"]
    assert [e["attempt"] for e in runs_ev] == [1, 2]
    log = (run_dir / "train.log").read_text()
    resumed = [line for line in log.splitlines() if "resumed from checkpoint step" in line]
    assert len(resumed) == 1
    resume_step = int(resumed[0].split("resumed from checkpoint step")[1].split()[0])
    assert 4 <= resume_step < 16  # attempt 2 starts at the checkpoint, not at step 0
    train_steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    assert train_steps == list(range(1, 17))
    # The same config trained without interruption gives the same test loss.
    ref = tmp_path / "reference"
    ref.mkdir()
    shutil.copy(run_dir / "config.json", ref / "config.json")
    subprocess.run([sys.executable, "-m", "cem_core.train", str(ref)], env=cli_env(tmp_path), check=True, capture_output=True, timeout=300)
    ref_loss = json.loads((ref / "result.json").read_text())["test_loss"]
    assert st["test_loss"] == pytest.approx(ref_loss, rel=1e-6, abs=1e-7)


def test_cancel_and_vanished_pending_jobs(tmp_path):
    """`cemctl cancel` scancels a pending job; a job scancelled behind cemctl's back shows stale with the reason."""
    grid = write_grid(tmp_path, name="pending", steps=6, ckpt=3)
    env = cli_env(tmp_path)
    out = cemctl(tmp_path, "launch", str(grid), "--executor", "slurm", "--prepare", "--sbatch", "begin=now+1hour",
                 env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    st = run_states(status_json(tmp_path, env), "pending")
    assert [r["state"] for r in st.values()] == ["queued", "queued"]
    (a, ja), (b, jb) = [(rid, r["job_id"]) for rid, r in st.items()]
    assert set(squeue_states()) >= {ja, jb}
    out = cemctl(tmp_path, "cancel", a, env=env)
    assert out.returncode == 0 and f"scancel {ja}" in out.stdout, out.stdout + out.stderr
    subprocess.run(["scancel", jb], check=True)  # behind cemctl's back
    wait_queue_empty([ja, jb], 60)
    st = run_states(status_json(tmp_path, env), "pending")
    assert st[a]["state"] == "cancelled"
    assert st[b]["state"] == "stale" and "no longer queued and never reported" in st[b]["reason"]
    # Both are relaunched by the next launch.
    dry = cemctl(tmp_path, "launch", "pending", "--executor", "slurm", "--dry-run", env=env)
    assert "would launch 2 of 2" in dry.stdout, dry.stdout + dry.stderr


def test_preemption_requeues_through_checkpoint_with_bounded_attempts(tmp_path):
    """SIGUSR2 (what SLURM sends before a timeout / preemption): checkpoint() stops the job's command and
    requeues it; past max_attempts the run is recorded failed instead of starting again."""
    d = tmp_path / "r0"
    d.mkdir()
    code = "import os, time; print('attempt', os.environ['CEMCTL_ATTEMPT'], flush=True); time.sleep(300)"
    ex = SlurmExecutor(SlurmOptions(timeout_min=30, max_attempts=2), folder=tmp_path / ".slurm")
    (sub,) = ex.submit([Job(run_id="r0", run_dir=d, argv=[sys.executable, "-c", code])])
    job_id = sub.job_id
    for attempt in (1, 2):
        wait_for(lambda: (runfiles.read_job(d) or runfiles.JobRecord()).state == "running" and runfiles.read_job(d).attempt == attempt,
                 timeout_s=90, what=f"attempt {attempt}")
        time.sleep(1)  # let submitit install its signal handler
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
        release_requeued(job_id)
    wait_queue_empty([job_id], 90)
    states = [(e["state"], e.get("reason", "")) for e in runfiles.read_jsonl(d / runfiles.EVENTS_FILE)]
    assert [s for s, _ in states] == ["queued", "queued", "queued", "failed"]
    assert "gave up after 2 attempts" in states[-1][1]
    assert runfiles.read_job(d).attempt == 2 and runfiles.read_job(d).state == "exited"  # two real starts
