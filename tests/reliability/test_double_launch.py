"""One trainer per run, even when two are started for it at once.

Two `cemctl launch` of the same grid started at the same moment both select
every run (neither has recorded its jobs yet), so two trainers start on one
run directory. The trainer holds RUN_DIR/.lock while it trains: the second
waits, then finds the result and stops (or resumes if the first was killed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import subprocess_env as env, read_jsonl, tiny_grid
from .test_orchestrator_kill import check_history, launch_env, run_dirs

STEPS = 8


@pytest.mark.slow
def test_two_trainers_on_one_run_dir_train_it_once(tmp_path: Path):
    grid = tmp_path / "one.toml"
    grid.write_text(tiny_grid("one", steps=STEPS, ckpt=2, seeds="[0]"))
    fast = launch_env(tmp_path)
    plan = subprocess.run([sys.executable, "-m", "cemctl.cli", "plan", str(grid)], cwd=tmp_path, env=fast,
                          capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr
    (run_dir,) = run_dirs(tmp_path)
    cmd = [sys.executable, "-m", "cem_core.train", str(run_dir), "--device", "cpu"]
    slow_env = env(CEMCTL_TEST_SLEEP_PER_STEP_S="0.2")
    first = subprocess.Popen(cmd, env=slow_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while not any(e.get("state") == "running" for e in read_jsonl(run_dir / "events.jsonl")):
        assert time.time() < deadline and first.poll() is None
        time.sleep(0.05)
    second = subprocess.Popen(cmd, env=slow_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert first.wait(timeout=300) == 0 and second.wait(timeout=300) == 0
    states = [e["state"] for e in read_jsonl(run_dir / "events.jsonl")]
    assert states == ["running", "done"], states
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl") if m["kind"] == "train"] == list(range(1, STEPS + 1))


@pytest.mark.slow
def test_two_launches_of_one_grid_at_the_same_moment_run_each_run_once(tmp_path: Path):
    grid = tmp_path / "twice.toml"
    grid.write_text(tiny_grid("twice", steps=STEPS, ckpt=2, seeds="[0, 1]"))
    fast = launch_env(tmp_path)
    plan = subprocess.run([sys.executable, "-m", "cemctl.cli", "plan", str(grid)], cwd=tmp_path, env=fast,
                          capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr
    cmd = [sys.executable, "-m", "cemctl.cli", "launch", str(grid), "--workers", "2"]
    a = subprocess.Popen(cmd, cwd=tmp_path, env=fast, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    b = subprocess.Popen(cmd, cwd=tmp_path, env=fast, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out_a, out_b = a.communicate(timeout=600)[0], b.communicate(timeout=600)[0]
    assert a.returncode == 0 and b.returncode == 0, out_a + out_b
    for run_dir in run_dirs(tmp_path):
        history = check_history(run_dir)  # one done, attempts 1, 2, ... never two alive at once
        assert history["attempts"] == 1, (run_dir.name, history)
    print("\ndouble launch:", json.dumps({d.name: [e["state"] for e in read_jsonl(d / "events.jsonl")] for d in run_dirs(tmp_path)}))


@pytest.mark.slow
def test_two_launches_at_once_start_one_trainer_and_cancel_stops_it(tmp_path: Path):
    """Two launches of one grid at the same moment: one trainer per run ever starts (the other launch skips the
    run and says so), and `cancel` stops that trainer (before: both started a trainer, the second waited on the
    run's lock, cancel signalled the waiting duplicate and said "cancelled", and the real one trained on to done)."""
    grid = tmp_path / "held.toml"
    grid.write_text(tiny_grid("held", steps=60, ckpt=10, seeds="[0]"))
    plan = subprocess.run([sys.executable, "-m", "cemctl.cli", "plan", str(grid)], cwd=tmp_path,
                          env=launch_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr
    (run_dir,) = run_dirs(tmp_path)
    slow = launch_env(tmp_path, CEMCTL_TEST_SLEEP_PER_STEP_S="0.2")
    cmd = [sys.executable, "-m", "cemctl.cli", "launch", str(grid), "--workers", "1", "--json"]
    both = [subprocess.Popen(cmd, cwd=tmp_path, env=slow, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    try:
        deadline = time.time() + 240
        while not any(e.get("state") == "running" for e in read_jsonl(run_dir / "events.jsonl")):
            assert time.time() < deadline, "no trainer started"
            time.sleep(0.1)
        time.sleep(2)  # a duplicate, if there were one, is started by now
        cancel = subprocess.run([sys.executable, "-m", "cemctl.cli", "cancel", "held"], cwd=tmp_path, env=slow,
                                capture_output=True, text=True, timeout=120)
        assert cancel.returncode == 0 and "SIGTERM" in cancel.stdout, cancel.stdout + cancel.stderr
        outs = [p.communicate(timeout=300) for p in both]
    finally:
        for p in both:
            if p.poll() is None:
                p.kill()
    rows = [json.loads(out)["runs"][0] for out, _ in outs]
    assert sorted(r["action"] for r in rows) == ["skip", "start"], rows
    states = [e["state"] for e in read_jsonl(run_dir / "events.jsonl")]
    assert "done" not in states and states[-1] == "cancelled", states
    starts = [ln for ln in (run_dir / "executor.log").read_text().splitlines() if ln.startswith("=== ")]
    assert len(starts) == 1, starts  # one trainer process ever started for the run
