"""Ingest of run directories: idempotent, incremental, rebuilds the database, derives states."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from cemctl.db import Metric, Result, RunEvent, ingest_run, list_runs, open_db, read_session, set_state, sync_runs
from cem_core.runfiles import append_event
from tests.helpers import write_json as atomic_write_json
from cemctl.grid import load_grid
from cemctl.services.plan import write_run_configs

GRID = """
[base]
"model.size" = "nano"
"train.max_steps" = 20
[axes]
"model.attention" = ["llama", "cem"]
"""


@pytest.fixture
def planned(tmp_path, runs_root):
    path = tmp_path / "g.toml"
    path.write_text(GRID)
    plan = load_grid(path)
    write_run_configs(plan, runs_root)
    return [runs_root / r.run_id for r in plan.runs]


def n_rows(engine, model, **where) -> int:
    with read_session(engine) as s:
        q = select(func.count()).select_from(model)
        for k, v in where.items():
            q = q.where(getattr(model, k) == v)
        return s.scalar(q)


def train_line(step: int, loss: float = 4.0) -> str:
    return json.dumps({"kind": "train", "step": step, "tokens": step * 256, "train_loss": loss, "lr": 1e-3,
                       "grad_norm": 0.5, "tokens_per_s": 1000.0, "time_s": step * 0.1}) + "\n"


def heartbeat(run_dir: Path, step: int, age_s: float = 0.0) -> None:
    t = time.time() - age_s
    atomic_write_json(run_dir / "heartbeat.json", {"time": t, "step": step, "total_steps": 20, "tokens": step * 256,
                                                   "pid": 1, "host": "node1", "attempt": 1})
    os.utime(run_dir / "heartbeat.json", (t, t))


def test_sync_creates_rows_for_unknown_run_dirs_and_is_idempotent(engine, planned, runs_root):
    run_dir = planned[0]
    with open(run_dir / "metrics.jsonl", "w") as f:
        for step in range(1, 11):
            f.write(train_line(step, 5.0 - step / 10))
        f.write(json.dumps({"kind": "val", "step": 10, "tokens": 2560, "val_loss": 4.2, "time_s": 1.0}) + "\n")
        f.write('{"kind": "train", "step": 11, "tok')  # truncated last line (the writer is mid-line)
    append_event(run_dir, "running", "started", attempt=1)
    heartbeat(run_dir, 10)
    stats = sync_runs(engine, runs_root)
    assert stats.runs_seen == 2 and stats.runs_created == 2 and stats.metric_rows == 11
    run = list_runs(engine, run_ids=[run_dir.name])[0]
    assert (run.state, run.last_step, run.last_train_loss, run.last_val_loss) == ("running", 10, 4.0, 4.2)
    assert run.host == "node1" and run.attempts == 1 and run.tokens == 2560 and run.params_total > 0
    again = sync_runs(engine, runs_root)
    assert again.metric_rows == 0 and again.event_rows == 0 and again.runs_created == 0
    assert n_rows(engine, Metric) == 11 and n_rows(engine, RunEvent, source="file") == 1
    # The writer finishes the line: now step 11 comes in, once.
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('ens": 2816, "train_loss": 3.9}\n')
    ingest_run(engine, run_dir)
    ingest_run(engine, run_dir)
    assert n_rows(engine, Metric) == 12 and list_runs(engine, run_ids=[run_dir.name])[0].last_step == 11


def test_database_can_be_rebuilt_from_the_run_dirs(tmp_path, planned, runs_root):
    run_dir = planned[1]
    (run_dir / "metrics.jsonl").write_text("".join(train_line(s) for s in range(1, 21)))
    append_event(run_dir, "running", "started", attempt=1)
    atomic_write_json(run_dir / "result.json", {
        "state": "done", "test_loss": 3.5, "test_ppl": 33.1, "val_loss": 3.6, "val_ppl": 36.6, "params_total": 600000,
        "params_non_embedding": 80000, "flops_per_token": 1000, "train_flops": 1.5e12, "tokens": 5120, "steps": 20,
        "wall_time_s": 12.5, "error": None, "diverged_step": None})
    first = open_db(f"sqlite:///{tmp_path / 'a.db'}")
    sync_runs(first, runs_root)
    rebuilt = open_db(f"sqlite:///{tmp_path / 'b.db'}")
    sync_runs(rebuilt, runs_root)
    for engine in (first, rebuilt):
        run = list_runs(engine, run_ids=[run_dir.name])[0]
        assert (run.state, run.last_step, run.finished_at is not None) == ("done", 20, True)
        with read_session(engine) as s:
            result = s.get(Result, run_dir.name)
        assert (result.state, result.test_ppl, result.steps) == ("done", 33.1, 20)
        assert n_rows(engine, Metric, run_id=run_dir.name) == 20
        assert {r.state for r in list_runs(engine)} == {"done", "planned"}


def test_old_heartbeat_is_stale_and_fresh_one_running(engine, planned, runs_root):
    a, b = planned
    heartbeat(a, 5, age_s=1000)
    heartbeat(b, 5, age_s=1)
    sync_runs(engine, runs_root, heartbeat_timeout_s=120)
    runs = {r.id: r for r in list_runs(engine)}
    assert runs[a.name].state == "stale" and runs[a.name].state_reason.startswith("no heartbeat for 1")
    assert runs[b.name].state == "running"
    # Twenty minutes later with no new heartbeat, b is stale too; a new heartbeat revives a.
    heartbeat(a, 6)
    sync_runs(engine, runs_root, heartbeat_timeout_s=120, now=time.time() + 1200)
    runs = {r.id: r for r in list_runs(engine)}
    assert runs[b.name].state == "stale" and runs[a.name].state == "stale"
    sync_runs(engine, runs_root, heartbeat_timeout_s=120)
    runs = {r.id: r for r in list_runs(engine)}
    assert runs[a.name].state == "running" and runs[a.name].last_step == 6
    derived = n_rows(engine, RunEvent, run_id=a.name, source="derived")
    assert derived >= 3  # planned (sync) -> stale -> running, each recorded


def test_rewritten_metrics_file_is_reread(engine, planned, runs_root):
    run_dir = planned[0]
    (run_dir / "metrics.jsonl").write_text("".join(train_line(s, 5.0) for s in range(1, 11)))
    ingest_run(engine, run_dir)
    # Resume from a checkpoint at step 6: the trainer drops lines > 6 and logs again.
    (run_dir / "metrics.jsonl").write_text("".join(train_line(s, 5.0) for s in range(1, 7)) + train_line(7, 1.0))
    ingest_run(engine, run_dir)
    with read_session(engine) as s:
        rows = s.execute(select(Metric.step, Metric.train_loss).where(Metric.run_id == run_dir.name).order_by(Metric.step)).all()
    assert [r.step for r in rows] == list(range(1, 8)) and rows[-1].train_loss == 1.0


def test_result_states_and_cancel(engine, planned, runs_root):
    a, b = planned
    sync_runs(engine, runs_root)
    atomic_write_json(a / "result.json", {"state": "diverged", "error": "non-finite loss nan at step 3", "diverged_step": 3})
    ingest_run(engine, a)
    run = list_runs(engine, run_ids=[a.name])[0]
    assert run.state == "diverged" and "non-finite" in run.error
    heartbeat(b, 3)
    assert ingest_run(engine, b) == "running"
    run = set_state(engine, b.name, "cancelled", "cancelled by user", executor="local")
    assert run.state == "cancelled" and run.executor == "local"
    heartbeat(b, 4)  # a last heartbeat from the dying process does not revive it
    assert ingest_run(engine, b) == "cancelled"
    lines = (b / "events.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["state"] == "cancelled"


def test_bad_lines_and_bad_run_dirs_are_skipped(engine, planned, runs_root):
    run_dir = planned[0]
    (run_dir / "metrics.jsonl").write_text(train_line(1) + "not json\n" + '{"kind": "train"}\n' + train_line(2))
    (runs_root / "garbage").mkdir()
    (runs_root / "garbage" / "config.json").write_text('{"model": {"size": "huge"}}')
    stats = sync_runs(engine, runs_root)
    assert stats.bad_lines == 2 and n_rows(engine, Metric) == 2
    assert len(stats.errors) == 1 and "garbage" in stats.errors[0]
    assert "1 run dirs skipped" in stats.summary()


def test_sync_command_prints_one_line(tmp_path, planned, runs_root):
    from typer.testing import CliRunner

    from cemctl.cli import app

    result = CliRunner().invoke(app, ["sync", "--db", str(tmp_path / "s.db"), "--runs-dir", str(runs_root)])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1 and "synced 2 run dirs (2 new" in result.stdout


def test_energy_lines_of_one_step_are_kept_apart(engine, planned, runs_root):
    run_dir = planned[1]
    lines = [json.dumps({"kind": "energy", "step": 5, "tokens": 1280, "layer": layer, "sublayer": sub, "t": t,
                         "energy": -1.0 * t, "descent_frac": 1.0}) + "\n"
             for layer in (0, 1) for sub in ("attention", "mlp") for t in (0, 1)]
    (run_dir / "metrics.jsonl").write_text(train_line(5) + "".join(lines))
    ingest_run(engine, run_dir)
    ingest_run(engine, run_dir)
    assert n_rows(engine, Metric, kind="energy") == 8 and n_rows(engine, Metric, kind="train") == 1
    with read_session(engine) as s:
        row = s.scalars(select(Metric).where(Metric.kind == "energy", Metric.series == "1/mlp/1")).one()
    assert json.loads(row.extra_json)["energy"] == -1.0
