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
