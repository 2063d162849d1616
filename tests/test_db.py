"""The results database: schema, idempotent planning, migrations, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from cemctl.db import (
    CURRENT_VERSION,
    Experiment,
    ExperimentRun,
    Metric,
    Run,
    RunEvent,
    ingest_run,
    list_runs,
    open_db,
    read_session,
    record_plan,
    set_state,
)
from cemctl.grid import load_grid
from cemctl.services.plan import write_run_configs

GRID = """
seeds = [0]
[experiment]
figure = "curves"
[base]
"train.max_steps" = 5
"model.size" = "nano"
[axes]
"model.attention" = ["llama", "cem"]
"train.lr" = [0.001, 0.002]
"""


def make_plan(tmp_path: Path, text: str = GRID, name: str = "g", **kw):
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return load_grid(path, **kw)


def count(engine, model) -> int:
    with read_session(engine) as s:
        return s.scalar(select(func.count()).select_from(model))


def test_fresh_database_is_wal_and_current(tmp_path, db_url):
    engine = open_db(db_url)
    con = sqlite3.connect(tmp_path / "results.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert max(v for (v,) in con.execute("SELECT version FROM schema_version")) == CURRENT_VERSION
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"experiments", "experiment_runs", "runs", "run_events", "metrics", "results"} <= tables
    assert list_runs(engine) == []


def test_record_plan_is_idempotent_and_adds_only_new_runs(tmp_path, engine, runs_root):
    plan = make_plan(tmp_path)
    first = record_plan(engine, plan, runs_root)
    assert len(first.created) == 4 and len(first.states) == 4
    again = record_plan(engine, plan, runs_root)
    assert again.created == set()
    assert count(engine, Run) == 4 and count(engine, ExperimentRun) == 4 and count(engine, Experiment) == 1
    # Change one value of one axis: exactly the two runs with lr=0.004 are new.
    plan2 = make_plan(tmp_path, GRID.replace("[0.001, 0.002]", "[0.001, 0.004]"))
    third = record_plan(engine, plan2, runs_root)
    assert len(third.created) == 2
    assert {r.id for r in list_runs(engine, experiment="g", in_grid_only=True)} == {p.run_id for p in plan2.runs}
    assert count(engine, Run) == 6
    # The runs the edit dropped stay linked (no longer in the grid): an experiment never loses a result.
    left = {p.run_id for p in plan.runs} - {p.run_id for p in plan2.runs}
    assert {r.id for r in list_runs(engine, experiment="g")} == {p.run_id for p in plan2.runs} | left


def test_shared_baseline_is_one_run(tmp_path, engine, runs_root):
    a = make_plan(tmp_path, GRID, name="a")
    b = make_plan(tmp_path, GRID.replace('["llama", "cem"]', '["llama", "reuse"]'), name="b")
    record_plan(engine, a, runs_root)
    created = record_plan(engine, b, runs_root).created
    assert len(created) == 2  # the two llama runs are shared
    shared = {r.id for r in list_runs(engine, "a")} & {r.id for r in list_runs(engine, "b")}
    assert len(shared) == 2


def test_known_runs_keep_their_state_when_replanned(tmp_path, engine, runs_root):
    plan = make_plan(tmp_path)
    write_run_configs(plan, runs_root)
    record_plan(engine, plan, runs_root)
    rid = plan.runs[0].run_id
    set_state(engine, rid, "queued", "submitted", executor="local", job_id="42")
    assert record_plan(engine, plan, runs_root).states[rid] == "queued"
    run = list_runs(engine, run_ids=[rid])[0]
    assert (run.state, run.executor, run.job_id) == ("queued", "local", "42")


V1_SCHEMA = """
CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at FLOAT);
INSERT INTO schema_version VALUES (1, 1700000000.0);
CREATE TABLE experiments (id INTEGER PRIMARY KEY, name VARCHAR(200) NOT NULL UNIQUE, description TEXT NOT NULL,
  figure VARCHAR(64) NOT NULL, grid_path TEXT NOT NULL, grid_sha256 VARCHAR(64) NOT NULL, grid_text TEXT NOT NULL,
  scale VARCHAR(32) NOT NULL, created_at FLOAT NOT NULL, updated_at FLOAT NOT NULL);
CREATE TABLE runs (id VARCHAR(64) PRIMARY KEY, config_json TEXT NOT NULL, state VARCHAR(16) NOT NULL,
  attempts INTEGER NOT NULL, executor VARCHAR(32), job_id VARCHAR(128), host VARCHAR(255), run_dir TEXT,
  created_at FLOAT NOT NULL, started_at FLOAT, finished_at FLOAT, updated_at FLOAT NOT NULL, error TEXT,
  total_steps INTEGER, last_step INTEGER, tokens BIGINT, last_train_loss FLOAT, last_val_loss FLOAT);
CREATE TABLE experiment_runs (experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  run_id VARCHAR(64) NOT NULL REFERENCES runs(id), axes_json TEXT NOT NULL, PRIMARY KEY (experiment_id, run_id));
CREATE TABLE metrics (id INTEGER PRIMARY KEY, run_id VARCHAR(64) NOT NULL REFERENCES runs(id), kind VARCHAR(16) NOT NULL,
  step INTEGER NOT NULL, tokens BIGINT, time_s FLOAT, train_loss FLOAT, val_loss FLOAT, lr FLOAT, grad_norm FLOAT,
  tokens_per_s FLOAT, CONSTRAINT uq_metrics_run_kind_step UNIQUE (run_id, kind, step));
CREATE TABLE results (run_id VARCHAR(64) PRIMARY KEY REFERENCES runs(id), state VARCHAR(16) NOT NULL, test_loss FLOAT,
  test_ppl FLOAT, val_loss FLOAT, val_ppl FLOAT, params_total BIGINT, params_non_embedding BIGINT, tokens BIGINT,
  steps INTEGER, wall_time_s FLOAT, error TEXT, result_json TEXT NOT NULL, recorded_at FLOAT NOT NULL);
INSERT INTO experiments VALUES (1, 'old', 'an old experiment', 'curves', 'experiments/old.toml', 'abc', '', 'tiny', 1700000000, 1700000001);
INSERT INTO runs (id, config_json, state, attempts, executor, run_dir, created_at, updated_at, last_step, last_val_loss)
  VALUES ('aaaaaaaaaaaa', '{"task": "lm"}', 'done', 1, 'local', '/tmp/none', 1700000000, 1700000100, 50, 3.25);
INSERT INTO experiment_runs VALUES (1, 'aaaaaaaaaaaa', '{"model.size": "nano"}');
INSERT INTO metrics (run_id, kind, step, tokens, train_loss) VALUES ('aaaaaaaaaaaa', 'train', 1, 512, 5.5);
INSERT INTO metrics (run_id, kind, step, tokens, val_loss) VALUES ('aaaaaaaaaaaa', 'val', 50, 25600, 3.25);
INSERT INTO results (run_id, state, test_loss, test_ppl, steps, result_json, recorded_at)
  VALUES ('aaaaaaaaaaaa', 'done', 3.2, 24.5, 50, '{}', 1700000100);
"""


@pytest.mark.parametrize("with_version_table", [True, False])
def test_v1_database_is_migrated_in_place_keeping_data(tmp_path, db_url, runs_root, with_version_table):
    path = tmp_path / "results.db"
    con = sqlite3.connect(path)
    schema = V1_SCHEMA if with_version_table else "\n".join(ln for ln in V1_SCHEMA.splitlines() if "schema_version" not in ln)
    con.executescript(schema)
    con.close()
    engine = open_db(db_url)
    con = sqlite3.connect(path)
    assert max(v for (v,) in con.execute("SELECT version FROM schema_version")) == CURRENT_VERSION
    row = con.execute("SELECT state, executor, last_step, last_val_loss, state_at, metrics_offset FROM runs").fetchone()
    assert row == ("done", "local", 50, 3.25, 1700000100.0, 0)
    assert con.execute("SELECT count(*) FROM metrics").fetchone()[0] == 2
    assert con.execute("SELECT kind, step, series, val_loss FROM metrics WHERE kind = 'val'").fetchone() == ("val", 50, "", 3.25)
    assert con.execute("SELECT test_ppl FROM results").fetchone()[0] == 24.5
    con.close()
    # The upgraded database works with the current code: new plans, events, reads.
    (run,) = list_runs(engine, experiment="old")
    assert run.id == "aaaaaaaaaaaa" and run.state == "done"
    record_plan(engine, make_plan(tmp_path), runs_root)
    assert count(engine, Run) == 5
    assert open_db(db_url) is engine  # cached; reopening a current file is a no-op


def test_newer_schema_is_refused(tmp_path, db_url):
    from cemctl.db import DatabaseError

    con = sqlite3.connect(tmp_path / "results.db")
    con.executescript("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at FLOAT);"
                      f"INSERT INTO schema_version VALUES ({CURRENT_VERSION + 1}, 0);")
    con.close()
    with pytest.raises(DatabaseError, match="newer"):
        open_db(db_url)


def _writer(db_url: str, run_dir: str, n_steps: int, barrier) -> None:
    from cemctl.db import open_db, set_state

    engine = open_db(db_url)
    rid = Path(run_dir).name
    barrier.wait()
    set_state(engine, rid, "running", "worker started", attempt=1)
    with open(Path(run_dir) / "metrics.jsonl", "a") as f:
        for step in range(1, n_steps + 1):
            f.write(json.dumps({"kind": "train", "step": step, "tokens": step * 64, "train_loss": 5.0 - step * 0.01}) + "\n")
            f.flush()
            ingest_run(engine, run_dir)  # one write transaction per step, all workers at once
    set_state(engine, rid, "done", "worker finished", attempt=1)


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(tmp_path, db_url, runs_root):
    n_workers, n_steps = 8, 20
    text = GRID.replace('"train.lr" = [0.001, 0.002]', '"train.seed" = [0, 1, 2, 3]').replace("seeds = [0]\n", "")
    plan = make_plan(tmp_path, text)
    assert len(plan.runs) == n_workers
    engine = open_db(db_url)
    write_run_configs(plan, runs_root)
    record_plan(engine, plan, runs_root)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n_workers)
    procs = [ctx.Process(target=_writer, args=(db_url, str(runs_root / p.run_id), n_steps, barrier)) for p in plan.runs]
    t0 = time.time()
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * n_workers, "a writer failed (database is locked?)"
    assert count(engine, Metric) == n_workers * n_steps
    with read_session(engine) as s:
        file_events = s.scalar(select(func.count()).select_from(RunEvent).where(RunEvent.source == "file"))
        states = set(s.scalars(select(Run.state)))
    assert file_events == 2 * n_workers
    assert states == {"done"}
    assert time.time() - t0 < 120


def test_relative_sqlite_path_is_pinned_to_the_directory_it_was_opened_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    engine = open_db("sqlite:///rel.db")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert open_db("sqlite:///rel.db") is not engine  # a different file now
    list_runs(engine)
    assert (tmp_path / "rel.db").exists() and (tmp_path / "elsewhere" / "rel.db").exists()


def test_the_run_record_joins_configs_axes_and_results(tmp_path, engine, runs_root):
    from cemctl.db import sync_runs
    from cemctl.db.frames import metrics_frame
    from cemctl.records import load_records
    from tests.helpers import write_json as atomic_write_json

    plan = make_plan(tmp_path)
    write_run_configs(plan, runs_root)
    record_plan(engine, plan, runs_root)
    done = plan.runs[1].run_id
    atomic_write_json(runs_root / done / "result.json", {"state": "done", "test_loss": 3.0, "test_ppl": 20.1, "steps": 5})
    (runs_root / done / "metrics.jsonl").write_text(
        "".join(json.dumps({"kind": "val", "step": s, "tokens": s * 64, "val_loss": 4.0 - s / 10}) + "\n" for s in (1, 5))
    )
    sync_runs(engine, runs_root)
    recs = load_records(engine, "g")
    df = recs.frame()
    assert list(df["run_id"]) == [r.run_id for r in plan.runs]
    assert {"model.attention", "train.lr", "model.d_model", "test_ppl", "state"} <= set(df.columns)
    assert recs.experiments["g"].axes == list(plan.runs[0].axes)
    assert [r.axes for r in recs] == [r.axes for r in plan.runs]
    row = df.set_index("run_id").loc[done]
    assert row["state"] == "done" and row["test_ppl"] == 20.1
    assert df["test_ppl"].isna().sum() == 3
    curves = metrics_frame(engine, [done], kind="val")
    assert list(curves["step"]) == [1, 5] and list(curves["val_loss"]) == [3.9, 3.5]
    with pytest.raises(Exception, match="unknown experiment 'nope'.*known: g"):
        load_records(engine, "nope")


def test_checking_the_file_keeps_the_locks_this_process_holds_on_it(tmp_path):
    """Telling what the file is (`check_sqlite_file`, the fast reader) never drops the locks this process's open
    connections hold on it. main read its first bytes with open() and close(); POSIX drops every lock a process
    holds on a file when any of its descriptors closes, and a `cemctl status` run beside a launch then rewrote the
    WAL under the launch's connection: the launch ended in 'database disk image is malformed' (3 of 3 tries)."""
    import sqlite3
    import subprocess
    import sys

    from cemctl.db.engine import check_sqlite_file
    from cemctl.db.read import _fast_sqlite

    path = tmp_path / "results.db"
    con = sqlite3.connect(path, isolation_level=None)  # a rollback journal: a reader's SHARED lock keeps writers out
    con.execute("CREATE TABLE runs (id TEXT)")
    con.execute("BEGIN")
    con.execute("SELECT * FROM runs").fetchall()  # a read transaction: this process holds a SHARED lock
    check_sqlite_file(path)
    assert _fast_sqlite(f"sqlite:///{path}") is None  # not this schema: the slow way
    other = subprocess.run([sys.executable, "-c", "import sqlite3, sys\n"
                            "c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
                            "try:\n    c.execute('BEGIN EXCLUSIVE'); print('got the lock')\n"
                            "except sqlite3.OperationalError as e:\n    print(e)", str(path)],
                           capture_output=True, text=True, timeout=60)
    con.execute("COMMIT")
    assert other.stdout.strip() == "database is locked", other.stdout + other.stderr
