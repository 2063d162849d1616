"""`cemctl status` from run-directory files (no trainer): states, progress, ETA, errors, stale detection."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from cem_core import runfiles
from cemctl.commands.views.status import status_views
from cemctl.services.status import collect_status, refresh, status_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_launch_local import cemctl, cli_env, write_grid  # noqa: E402


def plan(tmp_path: Path, db_url: str, runs_root: Path) -> list[Path]:
    from cemctl.services.plan import plan_experiment

    grid = write_grid(tmp_path, name="st", steps=100, ckpt=10, attention='["llama", "cem", "reuse"]')
    report = plan_experiment(grid, db_url=db_url, runs_root=runs_root)
    return [runs_root / r.run_id for r in report.plan.runs]


def write(path: Path, obj) -> None:
    path.write_text(json.dumps(obj))


def test_status_rows_from_files(tmp_path, db_url, engine, runs_root):
    running, failed, stale = plan(tmp_path, db_url, runs_root)
    now = time.time()
    # A running run: 40 of 100 steps, 1000 tokens/s, 64 tokens per step.
    runfiles.append_event(running, "queued", "test", executor="slurm", job_id="77_1", attempt=0)
    runfiles.append_event(running, "running", "attempt 1", attempt=1)
    write(running / "heartbeat.json", {"time": now, "step": 40, "total_steps": 100, "tokens": 2560, "pid": 1, "host": "h", "attempt": 1})
    with open(running / "metrics.jsonl", "w") as f:
        f.write(json.dumps({"kind": "train", "step": 40, "tokens": 2560, "train_loss": 3.25, "tokens_per_s": 1000.0, "time_s": 3}) + "\n")
        f.write(json.dumps({"kind": "val", "step": 40, "tokens": 2560, "val_loss": 3.5, "time_s": 3}) + "\n")
        f.write('{"kind": "train", "step": 41, "tok')  # a truncated last line is ignored
    # A failed run with a multi-line error.
    runfiles.append_event(failed, "running", "attempt 1", attempt=1)
    write(failed / "result.json", {"state": "failed", "error": "Traceback ...\n  File x\nRuntimeError: boom at step 7", "steps": 7})
    # A run whose heartbeat stopped 10 s ago (timeout 3 s).
    runfiles.append_event(stale, "running", "attempt 1", attempt=1)
    write(stale / "heartbeat.json", {"time": now - 10, "step": 5, "total_steps": 100, "tokens": 320, "pid": 2, "host": "h", "attempt": 1})
    old = now - 10
    os.utime(stale / "heartbeat.json", (old, old))
    os.utime(stale / "events.jsonl", (old, old))

    refresh(engine, runs_root, heartbeat_timeout_s=3)
    (exp,) = collect_status(engine)
    assert exp.name == "st" and exp.counts == {"running": 1, "failed": 1, "stale": 1}
    rows = {r["run_id"]: r for r in exp.runs}
    r = rows[running.name]
    assert (r["step"], r["total_steps"], r["train_loss"], r["val_loss"], r["tokens_per_s"]) == (40, 100, 3.25, 3.5, 1000.0)
    assert r["progress"] == 0.4 and r["executor"] == "slurm" and r["job_id"] == "77_1" and r["attempts"] == 1
    # 60 steps left at its pace so far, 3 s over 40 steps (not at the last step's 1000 tokens/s: 3.84 s)
    assert abs(r["eta_s"] - 60 * 3 / 40) < 1e-6
    assert r.axes == {"model.attention": "llama"}
    assert rows[failed.name]["reason"] == "RuntimeError: boom at step 7"
    assert rows[stale.name]["state"] == "stale" and "heartbeat" in rows[stale.name]["reason"]
    # JSON and table carry the same.
    data = status_json([exp])
    assert data["experiments"][0]["counts"]["failed"] == 1
    text = "\n".join(status_views([exp], width=None, now=now)[0].plain_lines())
    assert "40/100" in text and "RuntimeError: boom at step 7" in text and "slurm:77_1" in text and "3 runs:" in text
    # A limit shows unfinished runs first and says how many are hidden.
    assert "2 more runs not shown" in "\n".join(status_views([exp], width=None, now=now, limit=1)[0].plain_lines())
    # The same selection read with SQL LIMIT: counts still cover every run.
    (lim,) = collect_status(engine, limit=2)
    assert [r["state"] for r in lim.runs] == ["running", "stale"] and lim.total == 3 and lim.counts == exp.counts
    text = "\n".join(status_views([lim], width=None, now=now, limit=2)[0].plain_lines())
    assert "3 runs:" in text and "1 more run not shown" in text


def test_queued_run_whose_orchestrator_is_gone_becomes_stale(tmp_path, db_url, engine, runs_root):
    a, _, _ = plan(tmp_path, db_url, runs_root)
    runfiles.write_job(a, runfiles.JobRecord(executor="local", state="queued", host=runfiles.hostname(), orchestrator_pid=2**22 + 12345, job_id="x", attempt=0))
    runfiles.append_event(a, "queued", "local executor", executor="local", job_id="x", attempt=0)
    refresh(engine, runs_root)
    rows = {r["run_id"]: r for r in collect_status(engine, "st")[0].runs}
    assert rows[a.name]["state"] == "stale" and "orchestrator" in rows[a.name]["reason"]


def test_status_cli_unknown_experiment_and_empty_db(tmp_path):
    env = cli_env(tmp_path)
    missing = cemctl(tmp_path, "status", env=env)  # status never creates a database
    assert missing.returncode == 2 and "no results database" in missing.stderr and not (tmp_path / "results.db").exists()
    from cemctl.db import open_db

    open_db(f"sqlite:///{tmp_path / 'results.db'}")
    out = cemctl(tmp_path, "status", env=env)
    assert out.returncode == 0 and "no experiments yet" in out.stdout
    bad = cemctl(tmp_path, "status", "nope", env=env)
    assert bad.returncode == 2 and "nope" in bad.stderr


def test_status_does_not_import_torch(tmp_path):
    import subprocess

    from cemctl.db import open_db

    open_db(f"sqlite:///{tmp_path / 'x.db'}")
    code = (
        "import sys; from cemctl.cli import app; from typer.testing import CliRunner; "
        f"r = CliRunner().invoke(app, ['status', '--db', {str(tmp_path / 'x.db')!r}, '--runs-dir', {str(tmp_path)!r}]); "
        "assert r.exit_code == 0, r.output; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=cli_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
