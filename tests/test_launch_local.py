"""`cemctl launch` / `status` / `logs` / `cancel` with the local executor and the real trainer."""

from __future__ import annotations

import json
import re
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import CliResult, cli, wait_for

ROOT = Path(__file__).resolve().parents[1]

TINY_GRID = """
[experiment]
name = "{name}"
description = "launcher test grid"
figure = "curves"

[base]
"model.size" = "nano"
"model.n_layers" = 1
"data.tokenizer" = "byte"
"train.max_steps" = {steps}
"train.batch_seqs" = 4
"train.micro_batch_seqs" = 4
"train.val_tokens" = 1024
"train.test_tokens" = 2048
"train.ckpt_every_steps" = {ckpt}
"train.eval_every_steps" = {steps}

[axes]
"model.attention" = {attention}
"""


def write_grid(tmp_path: Path, name: str = "tiny", steps: int = 6, ckpt: int = 3, attention: str = '["llama", "cem"]') -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(TINY_GRID.format(name=name, steps=steps, ckpt=ckpt, attention=attention))
    return path


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["CEMCTL_DB"] = str(tmp_path / "results.db")
    env["CEMCTL_RUNS"] = str(tmp_path / "runs")
    env.update(extra)
    return env


def cemctl(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> CliResult:
    """`cemctl ARGS` in a subprocess with CEMCTL_DB / CEMCTL_RUNS under tmp_path (tests.helpers.cli)."""
    return cli(None, *args, subprocess=True, cwd=tmp_path, env=env or cli_env(tmp_path), timeout=timeout)


def status_json(tmp_path: Path, env: dict[str, str] | None = None) -> dict:
    out = cemctl(tmp_path, "status", "--json", env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def run_states(status: dict, name: str) -> dict[str, dict]:
    exp = next(e for e in status["experiments"] if e["name"] == name)
    return {r["run_id"]: r for r in exp["runs"]}


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def test_dry_run_starts_nothing_and_bad_names_are_one_line_errors(tmp_path):
    grid = write_grid(tmp_path)
    out = cemctl(tmp_path, "launch", str(grid), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "would launch 2 of 2" in out.stdout and out.stdout.count(" start ") == 2
    # A dry run writes nothing: no database, no run directory (it used to record the experiment).
    assert not (tmp_path / "results.db").exists() and not (tmp_path / "runs").exists()
    assert cemctl(tmp_path, "plan", str(grid)).returncode == 0
    runs = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    assert len(runs) == 2 and not any((p / "job.json").exists() for p in runs)
    first = runs[0].name
    one = cemctl(tmp_path, "launch", "tiny", "--run", first, "--dry-run")
    assert one.returncode == 0 and "would launch 1 of 1" in one.stdout and first in one.stdout, one.stdout + one.stderr
    notarun = cemctl(tmp_path, "launch", "tiny", "--run", "0123456789ab", "--dry-run")
    assert notarun.returncode == 2 and "0123456789ab" in notarun.stderr
    bad = cemctl(tmp_path, "launch", str(grid), "--executor", "kubernetes")
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "kubernetes" in bad.stderr and "local, slurm" in bad.stderr
    bad_gpus = cemctl(tmp_path, "launch", str(grid), "--gpus", "0,zero")
    assert bad_gpus.returncode == 2 and "--gpus" in bad_gpus.stderr
    unknown = cemctl(tmp_path, "launch", "no-such-experiment")
    assert unknown.returncode == 2 and "tiny" in unknown.stderr  # lists the known experiments


def test_slurm_table_of_the_grid_file_is_checked(tmp_path):
    grid = write_grid(tmp_path, name="withslurm")
    grid.write_text(grid.read_text() + '\n[slurm]\npartition = "debug"\nwalltime = 5\n')
    out = cemctl(tmp_path, "launch", str(grid), "--executor", "slurm", "--dry-run")
    assert out.returncode == 2
    assert "withslurm.toml" in out.stderr and "slurm.walltime" in out.stderr and "timeout_min" in out.stderr
    grid.write_text(grid.read_text().replace("walltime = 5", "timeout_min = 5"))
    out = cemctl(tmp_path, "launch", str(grid), "--executor", "slurm", "--dry-run")
    assert out.returncode == 0 and "would launch 2 of 2 runs with the slurm executor" in out.stdout, out.stderr


@pytest.mark.slow
def test_launch_completes_and_relaunch_starts_nothing(tmp_path):
    grid = write_grid(tmp_path)
    out = cemctl(tmp_path, "launch", str(grid), "--workers", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "done 2" in out.stdout
    st = run_states(status_json(tmp_path), "tiny")
    assert [r["state"] for r in st.values()] == ["done", "done"]
    for r in st.values():
        assert r["progress"] == 1.0 and r["step"] == r["total_steps"] == 6
        assert r["test_loss"] is not None and 0 < r["test_loss"] < 10
        assert r["executor"] == "local" and r["attempts"] == 1
    # Results are in the database.
    con = sqlite3.connect(tmp_path / "results.db")
    rows = con.execute("select run_id, state, test_loss from results").fetchall()
    assert {r[0] for r in rows} == set(st) and all(r[1] == "done" and r[2] > 0 for r in rows)
    # The jobs ran the snapshot of the code, recorded per run.
    snaps = list((tmp_path / "runs" / ".snapshots").iterdir())
    assert len(snaps) == 1 and (snaps[0] / "cem_core" / "train" / "loop.py").exists()
    run_dir = tmp_path / "runs" / next(iter(st))
    assert json.loads((run_dir / "job.json").read_text())["snapshot"] == snaps[0].name
    n_events = {rid: len(events(tmp_path / "runs" / rid)) for rid in st}
    again = cemctl(tmp_path, "launch", str(grid))
    assert again.returncode == 0, again.stderr
    assert "launched 0 of 2" in again.stdout
    assert {rid: len(events(tmp_path / "runs" / rid)) for rid in st} == n_events  # nothing ran twice
    # The experiment can be launched by name too, and logs show the trainer's log.
    assert "launched 0 of 2" in cemctl(tmp_path, "launch", "tiny").stdout
    logs = cemctl(tmp_path, "logs", next(iter(st))[:6], "-n", "5")
    assert logs.returncode == 0 and "train.log" in logs.stdout and "test loss" in logs.stdout
    table = cemctl(tmp_path, "status", "tiny")
    assert table.returncode == 0 and "2 runs: 2 done" in table.stdout and "attention" in table.stdout


def heartbeat_step(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "heartbeat.json").read_text()).get("step") or 0)
    except (OSError, ValueError):
        return 0


def checkpoint_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in (run_dir / "checkpoints").glob("step_*.pt")) if (run_dir / "checkpoints").exists() else []


@pytest.mark.slow
def test_kill_9_is_detected_by_heartbeat_and_relaunch_resumes(tmp_path):
    """kill -9 of the orchestrator and the trainer (a lost node): stale within the timeout, then resumed."""
    grid = write_grid(tmp_path, name="killme", steps=16, ckpt=4, attention='["llama"]')
    env = cli_env(tmp_path, CEMCTL_TEST_SLEEP_PER_STEP_S="0.4", CEMCTL_HEARTBEAT_TIMEOUT_S="3", CEMCTL_HEARTBEAT_S="0.5")
    orch = subprocess.Popen([sys.executable, "-m", "cemctl.cli", "launch", str(grid)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        runs = tmp_path / "runs"
        run_dir = wait_for(lambda: next((p for p in runs.iterdir() if not p.name.startswith(".")), None) if runs.exists() else None, timeout_s=60, what="run dir")
        wait_for(lambda: checkpoint_steps(run_dir) and heartbeat_step(run_dir) >= 6, timeout_s=120, what="a checkpoint and step 6")
        trainer_pid = int(json.loads((run_dir / "heartbeat.json").read_text())["pid"])
        os.kill(orch.pid, signal.SIGKILL)
        orch.wait(timeout=10)
        os.kill(trainer_pid, signal.SIGKILL)
    finally:
        if orch.poll() is None:
            orch.kill()
    killed_at = max(checkpoint_steps(run_dir))
    assert killed_at < 16 and not (run_dir / "result.json").exists()
    # Within the heartbeat timeout (3 s) status no longer says running.
    time.sleep(3.5)
    st = run_states(status_json(tmp_path, env), "killme")[run_dir.name]
    assert st["state"] == "stale", st
    assert "heartbeat" in st["reason"]
    # Relaunch: resumes from the checkpoint (attempt 2 starts after it) and finishes.
    env.pop("CEMCTL_TEST_SLEEP_PER_STEP_S")
    dry = cemctl(tmp_path, "launch", "killme", "--dry-run", env=env)
    assert f"resume from checkpoint step {killed_at}" in dry.stdout
    out = cemctl(tmp_path, "launch", "killme", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    st = run_states(status_json(tmp_path, env), "killme")[run_dir.name]
    assert st["state"] == "done" and st["attempts"] == 2
    assert f"resumed from checkpoint step {killed_at}" in (run_dir / "train.log").read_text()
    train_steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    assert train_steps == list(range(1, 17))  # no gap, no duplicate


@pytest.mark.slow
def test_ctrl_c_stops_children_and_restart_resumes(tmp_path):
    grid = write_grid(tmp_path, name="ctrlc", steps=12, ckpt=3, attention='["llama"]')
    env = cli_env(tmp_path, CEMCTL_TEST_SLEEP_PER_STEP_S="0.4", CEMCTL_HEARTBEAT_TIMEOUT_S="30")
    orch = subprocess.Popen([sys.executable, "-m", "cemctl.cli", "launch", str(grid)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = tmp_path / "runs"
    run_dir = wait_for(lambda: next((p for p in runs.iterdir() if not p.name.startswith(".")), None) if runs.exists() else None, timeout_s=60, what="run dir")
    wait_for(lambda: checkpoint_steps(run_dir) and heartbeat_step(run_dir) >= 4, timeout_s=120, what="a checkpoint")
    trainer_pid = int(json.loads((run_dir / "job.json").read_text())["pid"])
    orch.send_signal(signal.SIGINT)
    assert orch.wait(timeout=60) == 130
    assert not os.path.exists(f"/proc/{trainer_pid}") or "Z" in open(f"/proc/{trainer_pid}/stat").read().split()[2]
    st = run_states(status_json(tmp_path, env), "ctrlc")[run_dir.name]
    assert st["state"] == "stale" and "interrupted" in st["reason"]
    env.pop("CEMCTL_TEST_SLEEP_PER_STEP_S")
    out = cemctl(tmp_path, "launch", str(grid), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "resumed from checkpoint step" in (run_dir / "train.log").read_text()
    assert run_states(status_json(tmp_path, env), "ctrlc")[run_dir.name]["state"] == "done"


@pytest.mark.slow
def test_cancel_stops_a_running_local_job(tmp_path):
    grid = write_grid(tmp_path, name="cancelme", steps=200, ckpt=50, attention='["llama"]')
    env = cli_env(tmp_path, CEMCTL_TEST_SLEEP_PER_STEP_S="0.2")
    orch = subprocess.Popen([sys.executable, "-m", "cemctl.cli", "launch", str(grid)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        runs = tmp_path / "runs"
        run_dir = wait_for(lambda: next((p for p in runs.iterdir() if not p.name.startswith(".")), None) if runs.exists() else None, timeout_s=60, what="run dir")
        wait_for(lambda: heartbeat_step(run_dir) >= 1, timeout_s=120, what="the first step")
        out = cemctl(tmp_path, "cancel", "cancelme", env=env)
        assert out.returncode == 0 and "SIGTERM" in out.stdout, out.stdout + out.stderr
        assert orch.wait(timeout=60) == 0  # the orchestrator ends: nothing left to run
    finally:
        if orch.poll() is None:
            orch.kill()
    st = run_states(status_json(tmp_path, env), "cancelme")[run_dir.name]
    assert st["state"] == "cancelled"
    assert json.loads((run_dir / "job.json").read_text())["state"] == "cancelled"


@pytest.mark.slow
def test_detach_runs_the_orchestrator_in_the_background(tmp_path):
    grid = write_grid(tmp_path, name="detached", steps=4, ckpt=2, attention='["llama"]')
    env = cli_env(tmp_path)
    t0 = time.time()
    out = cemctl(tmp_path, "launch", str(grid), "--detach", env=env)
    assert out.returncode == 0, out.stderr
    assert time.time() - t0 < 150 and "background" in out.stdout  # the check, then at most 60 s until queued
    # it returns once the run is queued: a `status --watch` typed next finds it in flight, never 'planned' (it
    # returned before the orchestrator had queued anything, and --watch ended at once on six planned runs)
    assert "pid" in out.stdout and "1 of 1 runs queued\nlog " in out.stdout, out.stdout
    (state,) = [r["state"] for r in run_states(status_json(tmp_path, env), "detached").values()]
    assert state in ("queued", "running", "done"), state
    log = Path(out.stdout.split("log ")[-1].strip())
    assert log.parent == tmp_path / "runs" / ".launch"

    def done():
        st = run_states(status_json(tmp_path, env), "detached") if (tmp_path / "results.db").exists() else {}
        return st and all(r["state"] == "done" for r in st.values())

    wait_for(done, timeout_s=300, what="the detached launch to finish")
    wait_for(lambda: "launched 1 of 1" in log.read_text(), timeout_s=60, what="the orchestrator's summary in its log")


@pytest.mark.slow
def test_failed_run_is_recorded_and_rerun_only_with_retry_failed(tmp_path):
    grid = write_grid(tmp_path, name="crashy", steps=6, ckpt=2, attention='["llama"]')
    env = cli_env(tmp_path, CEMCTL_TEST_CRASH_AT_STEP="4")
    out = cemctl(tmp_path, "launch", str(grid), env=env)
    assert out.returncode == 1, out.stdout + out.stderr  # a failed run: non-zero exit, the orchestrator still ends cleanly
    (run_id, st), = run_states(status_json(tmp_path, env), "crashy").items()
    assert st["state"] == "failed" and "test crash at step 4" in st["error"]
    again = cemctl(tmp_path, "launch", "crashy", env=env)
    assert again.returncode == 0 and "launched 0 of 1" in again.stdout
    dry = cemctl(tmp_path, "launch", "crashy", "--retry-failed", "--dry-run", env=env)
    assert "retry" in dry.stdout and "checkpoint step 2" in dry.stdout, dry.stdout
    retry = cemctl(tmp_path, "launch", "crashy", "--retry-failed", env=env)  # the crash hook only fires on attempt 1
    assert retry.returncode == 0, retry.stdout + retry.stderr
    st = run_states(status_json(tmp_path, env), "crashy")[run_id]
    assert st["state"] == "done" and st["attempts"] == 2 and st["error"] is None
    assert "resumed from checkpoint step 2" in (tmp_path / "runs" / run_id / "train.log").read_text()


def test_detach_says_when_the_orchestrator_ended_before_queuing_its_runs(tmp_path):
    """An orchestrator that fails at its start (here: an experiment it does not know) is not reported as running in
    the background: detach returns as soon as it has ended, with its exit status and no run queued."""
    from cemctl.services.launch.launcher import detach

    run_dir = tmp_path / "runs" / "0123456789ab"
    run_dir.mkdir(parents=True)
    t0 = time.monotonic()
    started = detach(["launch", "no-such-experiment", "--db", str(tmp_path / "results.db"),
                      "--runs-dir", str(tmp_path / "runs")], tmp_path / "runs", [run_dir], wait_s=120)
    assert time.monotonic() - t0 < 100  # it did not wait out the 120 s
    assert started.exit_code == 2 and started.queued == 0 and started.total == 1
    head, why, log = started.summary().splitlines()
    assert head == "launch orchestrator ended (exit 2) after queuing 0 of 1 runs" and log == f"log {started.log}"
    assert "no-such-experiment" in why and why == started.log.read_text().strip().splitlines()[-1]  # its own line


@pytest.mark.slow
def test_until_decided_detached_fails_in_the_foreground_on_bad_input_and_runs_its_rounds_in_the_background(tmp_path):
    """--until-decided with --detach ran the whole loop in the foreground (--detach was ignored). Now: a bad
    --max-seeds is said on the terminal (exit 2, the orchestrator's own one line, its log); a good one returns once
    the grid's runs are queued, and the log shows the loop ending on its budget."""
    claim = ('[axes]\n"train.lr" = [0.01, 0.0001]\n\n[[claim]]\nid = "D"\nstatement = "a high rate learns faster"\n'
             '[[claim.part]]\nname = "lr 0.01 - lr 0.0001"\narms = [{ "train.lr" = 0.01 }, { "train.lr" = 0.0001 }]\n'
             'expect = "lower"\n')
    from tests.helpers import tiny_grid

    grid = tmp_path / "ud.toml"
    grid.write_text(tiny_grid("ud", seeds="[0, 1]", extra=claim))
    env = cli_env(tmp_path)
    bad = cemctl(tmp_path, "launch", str(grid), "--until-decided", "--max-seeds", "2", "--detach", env=env)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "--max-seeds" in bad.stdout.splitlines()[1], bad.stdout
    out = cemctl(tmp_path, "launch", str(grid), "--until-decided", "--budget-hours", "0.000001", "--detach", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"pid \d+, 4 of 4 runs queued\nlog ", out.stdout), out.stdout
    log = Path(out.stdout.split("log ")[-1].strip())
    wait_for(lambda: "budget" in log.read_text(), timeout_s=300, what="the detached loop to stop on its budget")
