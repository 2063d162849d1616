"""Killing `cemctl launch` (local executor) in the middle of a grid, then launching again.

A 4-run grid runs two at a time. The orchestrator is killed with SIGKILL (its
trainers run on in their own sessions, orphaned) or SIGINT (it stops them;
they stay resumable), at a checkpoint or at a random moment; then the same
`cemctl launch` is run again. Nothing may be lost or run twice: every run ends
`done` exactly once, attempt numbers count 1, 2, ... with no attempt started
while another of the same run was alive, every optimizer step is in
metrics.jsonl exactly once, and the database (run_events, runs.attempts)
agrees with events.jsonl.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import read_jsonl, tiny_grid, wait_for
from tests.helpers import subprocess_env as env

STEPS = 8
END_STATES = ("failed", "stale", "planned", "cancelled", "diverged", "done")


def launch_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return env(CEMCTL_DB=str(tmp_path / "results.db"), CEMCTL_RUNS=str(tmp_path / "runs"), CEMCTL_HEARTBEAT_S="0.5",
               CEMCTL_HEARTBEAT_TIMEOUT_S="20", **extra)


def run_dirs(tmp_path: Path) -> list[Path]:
    root = tmp_path / "runs"
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.exists() else []


def has_checkpoint(run_dir: Path) -> bool:
    return any((run_dir / "checkpoints").glob("step_*.pt")) if (run_dir / "checkpoints").exists() else False


def result_state(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "result.json").read_text()).get("state")
    except (OSError, ValueError):
        return None


def check_history(run_dir: Path) -> dict:
    """The invariants of one run's events.jsonl; returns a summary."""
    events = read_jsonl(run_dir / "events.jsonl")
    states = [e["state"] for e in events]
    assert states.count("done") == 1, (run_dir.name, states)
    assert result_state(run_dir) == "done"
    attempts = [e.get("attempt") for e in events if e["state"] == "running"]
    assert attempts == list(range(1, len(attempts) + 1)), (run_dir.name, states, attempts)
    # no attempt started while the previous one was alive: an end event lies between two starts
    starts = [i for i, s in enumerate(states) if s == "running"]
    for a, b in zip(starts, starts[1:]):
        assert any(s in END_STATES for s in states[a + 1:b]), (run_dir.name, states)
    steps = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl") if m.get("kind") == "train"]
    assert steps == list(range(1, STEPS + 1)), (run_dir.name, steps)
    return {"attempts": len(attempts), "events": states}


def scenario(tmp_path: Path, sig: signal.Signals, moment: str, seed: int) -> dict:
    grid = tmp_path / "orch.toml"
    grid.write_text(tiny_grid("orch", steps=STEPS, ckpt=2, seeds="[0, 1, 2, 3]"))
    slow = launch_env(tmp_path, CEMCTL_TEST_SLEEP_PER_STEP_S="0.3")
    log1 = open(tmp_path / "launch1.log", "wb")
    orch = subprocess.Popen([sys.executable, "-m", "cemctl.cli", "launch", str(grid), "--workers", "2"], cwd=tmp_path,
                            env=slow, stdout=log1, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len(run_dirs(tmp_path)) == 4, timeout_s=120, what="the run dirs")
        if moment == "checkpoint":
            wait_for(lambda: any(has_checkpoint(d) for d in run_dirs(tmp_path)), timeout_s=240, what="a first checkpoint")
        else:  # a random moment once the first trainers have started
            wait_for(lambda: any((d / "heartbeat.json").exists() for d in run_dirs(tmp_path)), timeout_s=240, what="a first heartbeat")
            time.sleep(random.Random(seed).uniform(0.0, 3.0))
        killed_at = {d.name: (result_state(d), has_checkpoint(d)) for d in run_dirs(tmp_path)}
        orch.send_signal(sig)
        rc = orch.wait(timeout=120)
    finally:
        if orch.poll() is None:
            orch.kill()
        log1.close()
    assert rc == (-signal.SIGKILL if sig == signal.SIGKILL else 130), (tmp_path / "launch1.log").read_text()[-2000:]
    unfinished = [rid for rid, (res, _) in killed_at.items() if res != "done"]
    assert unfinished, "the grid finished before the orchestrator was killed; nothing was tested"

    # launch again (fast now); orphans of a SIGKILLed orchestrator are left alone and finish by themselves
    fast = launch_env(tmp_path)
    again = subprocess.run([sys.executable, "-m", "cemctl.cli", "launch", str(grid), "--workers", "2"], cwd=tmp_path,
                           env=fast, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    wait_for(lambda: all(result_state(d) == "done" for d in run_dirs(tmp_path)), timeout_s=300, what="every run done (orphans included)")
    # a third launch starts nothing
    third = subprocess.run([sys.executable, "-m", "cemctl.cli", "launch", str(grid), "--dry-run"], cwd=tmp_path, env=fast,
                           capture_output=True, text=True, timeout=300)
    assert third.returncode == 0 and "would launch 0 of 4" in third.stdout, third.stdout + third.stderr

    histories = {d.name: check_history(d) for d in run_dirs(tmp_path)}
    status = subprocess.run([sys.executable, "-m", "cemctl.cli", "status", "--json"], cwd=tmp_path, env=fast,
                            capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stderr
    rows = {r["run_id"]: r for e in json.loads(status.stdout)["experiments"] if e["name"] == "orch" for r in e["runs"]}
    assert set(rows) == set(histories)
    for rid, row in rows.items():
        assert row["state"] == "done" and row["attempts"] == histories[rid]["attempts"], (rid, row, histories[rid])
        assert 1 <= row["attempts"] <= 2
    # the run_events table holds every line of events.jsonl, in order
    import sqlite3

    con = sqlite3.connect(tmp_path / "results.db")
    try:
        for rid, h in histories.items():
            db_states = [s for (s,) in con.execute(
                "SELECT state FROM run_events WHERE run_id = ? AND source = 'file' ORDER BY line", (rid,))]
            assert db_states == h["events"], (rid, db_states, h["events"])
            assert con.execute("SELECT count(*) FROM run_events WHERE run_id = ? AND state = 'done'", (rid,)).fetchone()[0] == 1
    finally:
        con.close()
    summary = {"signal": sig.name, "moment": moment, "unfinished_at_kill": len(unfinished),
               "attempts": sorted(h["attempts"] for h in histories.values())}
    print(f"\norchestrator kill: {summary}")
    return summary


@pytest.mark.slow
@pytest.mark.parametrize("sig, moment, seed", [
    (signal.SIGKILL, "checkpoint", 0),
    (signal.SIGINT, "random", 1),
    (signal.SIGKILL, "random", 2),
])
def test_killed_orchestrator_loses_nothing_and_runs_nothing_twice(tmp_path: Path, sig, moment, seed):
    scenario(tmp_path, sig, moment, seed)
