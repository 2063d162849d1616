"""The local executor with small real commands in place of the trainer (the executor itself)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from cem_core import runfiles
from cemctl.executors.base import pid_alive
from cemctl.executors.base import Job
from cemctl.executors.local import LocalExecutor, LocalOptions

# A fake job: records its start/end and environment, sleeps, exits with a code.
FAKE = textwrap.dedent(
    """
    import json, os, sys, time
    run_dir, sleep_s, code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    start = time.time()
    time.sleep(sleep_s)
    rec = {"start": start, "end": time.time(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "omp": os.environ.get("OMP_NUM_THREADS"), "attempt": os.environ.get("CEMCTL_ATTEMPT")}
    open(os.path.join(run_dir, "fake.json"), "w").write(json.dumps(rec))
    if code == 0:
        open(os.path.join(run_dir, "result.json"), "w").write(json.dumps({"state": "done", "test_loss": 1.0}))
    sys.exit(code)
    """
)


def make_jobs(tmp_path: Path, specs: list[tuple[float, int]]) -> list[Job]:
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    jobs = []
    for i, (sleep_s, code) in enumerate(specs):
        d = tmp_path / f"run{i}"
        d.mkdir()
        jobs.append(Job(run_id=f"run{i}", run_dir=d, argv=[sys.executable, str(script), str(d), str(sleep_s), str(code)]))
    return jobs


def test_jobs_are_queued_over_pinned_slots(tmp_path):
    jobs = make_jobs(tmp_path, [(0.6, 0)] * 4)
    ex = LocalExecutor(LocalOptions(gpus=[0, 3], poll_s=0.05, cores=4))
    out = ex.submit(jobs)
    assert [s.state for s in out] == ["done"] * 4
    recs = [json.loads((j.run_dir / "fake.json").read_text()) for j in jobs]
    # Never more than two at once (two GPU slots).
    for r in recs:
        overlapping = sum(1 for o in recs if o["start"] < r["end"] and o["end"] > r["start"])
        assert overlapping <= 2
    assert {r["cuda"] for r in recs} == {"0", "3"}
    assert {r["omp"] for r in recs} == {"2"}
    assert all(r["attempt"] == "1" for r in recs)
    job = runfiles.read_job(jobs[0].run_dir)
    assert job.executor == "local" and job.state == "exited" and job.exit_code == 0


def test_a_failing_job_is_recorded_and_the_others_go_on(tmp_path):
    jobs = make_jobs(tmp_path, [(0.1, 7), (0.1, 0)])
    ex = LocalExecutor(LocalOptions(gpus=[], workers=1, poll_s=0.05))
    out = ex.submit(jobs)
    assert [s.state for s in out] == ["failed", "done"]
    assert "exit code 7" in out[0].reason
    events = _events(jobs[0].run_dir)
    assert [e["state"] for e in events] == ["queued", "failed"]
    assert events[-1]["exit_code"] == 7 and "no checkpoint yet: `cemctl launch" in events[-1]["reason"]
    assert "attempt 1" in (jobs[0].run_dir / "executor.log").read_text()


def test_relaunch_counts_attempts(tmp_path):
    jobs = make_jobs(tmp_path, [(0.0, 5)])
    LocalExecutor(LocalOptions(gpus=[], poll_s=0.05)).submit(jobs)
    LocalExecutor(LocalOptions(gpus=[], poll_s=0.05)).submit(jobs)
    assert runfiles.read_job(jobs[0].run_dir).attempt == 2
    assert json.loads((jobs[0].run_dir / "fake.json").read_text())["attempt"] == "2"


def test_cancel_stops_a_running_job(tmp_path):
    jobs = make_jobs(tmp_path, [(60, 0), (0.0, 0)])
    ex = LocalExecutor(LocalOptions(gpus=[], workers=1, poll_s=0.05))
    cancelled: list[str] = []

    def on_tick(statuses):
        st = statuses[0]
        if st.state == "running" and not cancelled and time.time() - (st.started_time or 0) > 0.3:
            cancelled.append(LocalExecutor.cancel(st.job.run_dir, runfiles.read_job(st.job.run_dir)))

    ex.on_tick = on_tick
    t0 = time.time()
    out = ex.submit(jobs)
    assert time.time() - t0 < 30
    assert out[0].state == "cancelled" and out[1].state == "done"
    assert "SIGTERM" in cancelled[0]
    assert _events(jobs[0].run_dir)[-1]["state"] == "cancelled"


def _events(run_dir):
    return runfiles.read_jsonl(run_dir / runfiles.EVENTS_FILE)


ORCHESTRATOR = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from cemctl.executors.base import Job
    from cemctl.executors.local import LocalExecutor, LocalOptions
    tmp = Path(sys.argv[1])
    jobs = [Job(run_id=f"run{i}", run_dir=tmp / f"run{i}", argv=[sys.executable, "-c", "import time; time.sleep(120)"]) for i in range(3)]
    for j in jobs:
        j.run_dir.mkdir()
    try:
        LocalExecutor(LocalOptions(gpus=[], workers=2, poll_s=0.05, term_timeout_s=5)).submit(jobs)
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


def test_ctrl_c_terminates_children_and_leaves_runs_resumable(tmp_path):
    script = tmp_path / "orch.py"
    script.write_text(ORCHESTRATOR)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env)
    deadline = time.time() + 30
    pids: list[int] = []
    while time.time() < deadline:
        jobs = [runfiles.read_job(tmp_path / f"run{i}") for i in range(2)]
        if all(j and j.state == "running" for j in jobs):
            pids = [int(j.pid) for j in jobs]  # type: ignore[union-attr,arg-type]
            break
        time.sleep(0.1)
    assert len(pids) == 2, "two workers never started"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    for pid in pids:
        assert not pid_alive(pid)
    states = [runfiles.read_job(tmp_path / f"run{i}").state for i in range(3)]
    assert states == ["interrupted", "interrupted", "interrupted"]
    assert _events(tmp_path / "run0")[-1]["state"] == "stale"
    assert _events(tmp_path / "run2")[-1]["state"] == "planned"
    # The never-started run was not marked as having run.
    assert runfiles.read_job(tmp_path / "run2").attempt == 0
    assert LocalExecutor.alive([(tmp_path / "run0", runfiles.read_job(tmp_path / "run0"))]) == [False]
