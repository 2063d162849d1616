"""Many worker processes writing one SQLite results.db at once (what `cemctl launch` workers and `status` do).

Each process owns one run: it records `running` (`set_state`, as executors do),
appends metric lines to its run directory's metrics.jsonl in batches and ingests
them after each batch (`ingest_run`, as `cemctl status/sync` do while it runs),
then writes result.json and ingests the result. Afterwards every point and
every result must be in the database, no process may have failed (in
particular not with "database is locked"), and `PRAGMA integrity_check` is ok.
The slow variant is the issue's figure: 32 processes x 2,000 points.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
import time
import traceback
from pathlib import Path

import pytest

from cemctl.services.plan import plan_experiment

GRID = """[experiment]
name = "concurrency"
[base]
"model.size" = "nano"
"data.tokenizer" = "byte"
"train.max_steps" = {steps}
[axes]
"train.seed" = [{seeds}]
"""


def _worker(url: str, run_id: str, run_dir: str, points: int, batch: int, go, errors) -> None:
    try:
        from cemctl.db import ingest_run, open_db, set_state
        from cem_core.runfiles import append_event
        from tests.helpers import write_json as atomic_write_json

        engine = open_db(url)  # a forked child opens its own engine
        go.wait()
        set_state(engine, run_id, "running", "worker started", attempt=1)
        path = Path(run_dir) / "metrics.jsonl"
        for start in range(1, points + 1, batch):
            lines = "".join(
                json.dumps({"kind": "train", "step": s, "tokens": s * 128, "train_loss": 5.0 / s, "lr": 1e-3,
                            "grad_norm": 1.0, "tokens_per_s": 1e4, "time_s": s * 0.01}) + "\n"
                for s in range(start, min(points, start + batch - 1) + 1)
            )
            with open(path, "a") as f:
                f.write(lines)
            ingest_run(engine, run_dir)
        atomic_write_json(Path(run_dir) / "result.json", {
            "state": "done", "test_loss": 1.5, "test_ppl": 4.48, "val_loss": 1.6, "val_ppl": 4.95, "tokens": points * 128,
            "steps": points, "wall_time_s": 1.0, "error": None, "diverged_step": None,
        })
        append_event(run_dir, "done", "", attempt=1)
        ingest_run(engine, run_dir)
    except BaseException:  # noqa: BLE001 - reported to the parent
        errors.put(f"{run_id}: {traceback.format_exc()}")
        raise SystemExit(1)


def hammer(tmp_path: Path, processes: int, points: int, batch: int) -> dict:
    grid = tmp_path / "concurrency.toml"
    grid.write_text(GRID.format(steps=points, seeds=", ".join(str(i) for i in range(processes))))
    db = tmp_path / "results.db"
    url = f"sqlite:///{db}"
    report = plan_experiment(grid, db_url=url, runs_root=tmp_path / "runs")
    runs = [(r.run_id, str(tmp_path / "runs" / r.run_id)) for r in report.plan.runs]
    assert len(runs) == processes
    ctx = mp.get_context("fork")
    go, errors = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, rid, rdir, points, batch, go, errors)) for rid, rdir in runs]
    for p in procs:
        p.start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    go.set()
    for p in procs:
        p.join(timeout=600)
    wall_s = time.perf_counter() - t0
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, failures[0]
    assert [p.exitcode for p in procs] == [0] * processes
    con = sqlite3.connect(db)
    try:
        per_run = dict(con.execute("SELECT run_id, count(*) FROM metrics GROUP BY run_id").fetchall())
        steps = con.execute("SELECT min(step), max(step), count(DISTINCT run_id || ':' || step) FROM metrics").fetchone()
        results = con.execute("SELECT count(*) FROM results WHERE state = 'done'").fetchone()[0]
        states = dict(con.execute("SELECT state, count(*) FROM runs GROUP BY state").fetchall())
        done_events = con.execute("SELECT count(*) FROM run_events WHERE state = 'done' AND source = 'file'").fetchone()[0]
        check = con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()
    assert per_run == {rid: points for rid, _ in runs}
    assert steps == (1, points, processes * points)
    assert results == processes and states == {"done": processes} and done_events == processes
    assert check == "ok"
    figures = {"processes": processes, "points": processes * points, "wall_s": round(wall_s, 2),
               "points_per_s": round(processes * points / wall_s), "ingests": processes * (points // batch + 2)}
    print(f"\nconcurrency: {figures}")
    return figures


def test_eight_writers(tmp_path: Path):
    hammer(tmp_path, processes=8, points=300, batch=100)


@pytest.mark.slow
def test_thirty_two_writers_two_thousand_points_each(tmp_path: Path):
    figures = hammer(tmp_path, processes=32, points=2000, batch=100)
    assert figures["points"] == 64_000
