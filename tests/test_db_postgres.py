"""The results database on a real PostgreSQL server (`.ci/setup_postgres.sh` prints the URL).

    export CEMCTL_TEST_PG_URL=$(.ci/setup_postgres.sh); python3 -m pytest -q tests -m postgres
"""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from sqlalchemy import create_engine, func, select, text

pytestmark = pytest.mark.postgres
PG_URL = os.environ.get("CEMCTL_TEST_PG_URL", "")
if not PG_URL:
    pytest.skip("CEMCTL_TEST_PG_URL is not set (.ci/setup_postgres.sh starts a server)", allow_module_level=True)
pytest.importorskip("psycopg")

from cemctl.db import Metric, RunEvent, list_runs, open_db, read_session, record_plan, set_state, sync_runs  # noqa: E402
from cemctl.grid import load_grid  # noqa: E402
from cemctl.services.plan import write_run_configs  # noqa: E402
from tests.test_db import GRID, V1_SCHEMA, _writer  # noqa: E402


@pytest.fixture
def pg_url():
    """The server's database, emptied (every test starts from nothing)."""
    raw = create_engine(PG_URL)
    with raw.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    raw.dispose()
    from cemctl.db import engine as engine_module

    engine_module._ENGINES.clear()
    from cemctl.db import read

    read._READERS.clear()
    return PG_URL


def test_plan_state_ingest_and_concurrent_writers_on_postgres(tmp_path, pg_url, runs_root):
    path = tmp_path / "g.toml"
    path.write_text(GRID.replace('"train.lr" = [0.001, 0.002]', '"train.seed" = [0, 1]').replace("seeds = [0]\n", ""))
    plan = load_grid(path)
    engine = open_db(pg_url)
    write_run_configs(plan, runs_root)
    assert len(record_plan(engine, plan, runs_root).created) == 4
    assert record_plan(engine, plan, runs_root).created == set()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_writer, args=(pg_url, str(runs_root / p.run_id), 15, barrier)) for p in plan.runs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * 4
    with read_session(engine) as s:
        assert s.scalar(select(func.count()).select_from(Metric)) == 4 * 15
        assert s.scalar(select(func.count()).select_from(RunEvent).where(RunEvent.source == "file")) == 8
    assert {r.state for r in list_runs(engine, experiment="g")} == {"done"}
    assert sync_runs(engine, runs_root).metric_rows == 0  # idempotent
    big = 3_000_000_000  # token counts beyond 32-bit integers
    (runs_root / plan.runs[0].run_id / "heartbeat.json").write_text(json.dumps({"time": 0, "step": 1, "tokens": big}))
    set_state(engine, plan.runs[0].run_id, "running", "again")
    assert list_runs(engine, run_ids=[plan.runs[0].run_id])[0].tokens == big


def test_v1_schema_is_migrated_on_postgres(tmp_path, pg_url, runs_root):
    raw = create_engine(pg_url)
    with raw.begin() as conn:
        for stmt in V1_SCHEMA.replace("id INTEGER PRIMARY KEY,", "id SERIAL PRIMARY KEY,").split(";"):
            if stmt.strip():
                conn.execute(text(stmt))
        conn.execute(text("SELECT setval(pg_get_serial_sequence('experiments', 'id'), 1)"))
    raw.dispose()
    engine = open_db(pg_url)
    (run,) = list_runs(engine, experiment="old")
    assert (run.state, run.last_val_loss, run.metrics_offset) == ("done", 3.25, 0)
    path = tmp_path / "g.toml"
    path.write_text(GRID)
    assert len(record_plan(engine, load_grid(path), runs_root).created) == 4


def test_the_dashboard_serves_postgres_and_its_connection_refuses_a_write(tmp_path, pg_url, runs_root):
    """`cemctl serve` on PostgreSQL (issue 34.1: "PostgreSQL through a read-only transaction"): the pages are served,
    and a write through the dashboard's engine, or through any engine on its URL (the one handed to the claims and
    compare services), is refused by the server; the database is left as it was."""
    import threading

    from sqlalchemy.exc import DBAPIError

    from cemctl.serve import start
    from cemctl.services.dashboard import open_source
    from tests.serve_project import get

    path = tmp_path / "g.toml"
    path.write_text(GRID)
    plan = load_grid(path)
    engine = open_db(pg_url)
    write_run_configs(plan, runs_root)
    assert len(record_plan(engine, plan, runs_root).created) == 4

    src = open_source(pg_url, runs_root)
    for eng in (src.engine, create_engine(src.url)):
        with eng.connect() as conn:
            assert conn.execute(text("SHOW transaction_read_only")).scalar() == "on"
        with pytest.raises(DBAPIError, match="read-only transaction"):
            with eng.begin() as conn:
                conn.execute(text("UPDATE runs SET state = 'cancelled'"))

    server = start(pg_url, runs_root, host="127.0.0.1", port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        status, _, page = get(server.url.rstrip("/"), "/experiments/g")
        assert status == 200 and page.count('data-run="') == 4, page[:500]
        assert get(server.url.rstrip("/"), "/experiments/g", method="POST")[0] == 405
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert {r.state for r in list_runs(engine, experiment="g")} == {"planned"}  # nothing was written


def test_the_run_record_reads_alike_on_postgres(tmp_path, pg_url):
    """The record's one query (SQL text run by SQLAlchemy on PostgreSQL, by sqlite3 on a SQLite file): status,
    status --json, export, the API and compare read every state, tag, note and arm on PostgreSQL too."""
    import csv

    import cemctl.api as cem
    from tests.helpers import cli, finish_run, tiny_grid

    (tmp_path / "g.toml").write_text(tiny_grid("g", seeds="[0, 1, 2]"))
    args = ("--db", pg_url, "--runs-dir", str(tmp_path / "runs"))
    res = cli(None, "plan", str(tmp_path / "g.toml"), "--json", *args)
    assert res.returncode == 0, res.output
    ids = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    finish_run(tmp_path / "runs" / ids[0], test_loss=1.4)
    finish_run(tmp_path / "runs" / ids[1], state="failed", error="RuntimeError: boom")
    assert cli(None, "tag", ids[0], "phase=b", *args).returncode == 0
    assert cli(None, "note", ids[0], "looks fine", *args).returncode == 0
    res = cli(None, "status", "g", *args)
    assert res.returncode == 0 and "1 done" in res.stdout and "1 failed" in res.stdout, res.output
    runs = {r["run_id"]: r for r in json.loads(cli(None, "status", "g", "--json", *args).stdout)["experiments"][0]["runs"]}
    assert (runs[ids[0]]["state"], runs[ids[0]]["test_loss"], runs[ids[0]]["tag.phase"], runs[ids[0]]["note"]) == \
        ("done", 1.4, "b", "looks fine")
    assert runs[ids[1]]["reason"] == "RuntimeError: boom" and runs[ids[2]]["state"] == "planned"
    frame = cem.runs("g", db=pg_url, where=["state=done"])
    assert list(frame["run_id"]) == [ids[0]] and frame["arm_label"][0] == runs[ids[0]]["arm_label"]
    out = tmp_path / "x.csv"
    assert cli(None, "export", "g", "--where", "tag.phase=b", "-o", str(out), "--no-sync", *args).returncode == 0
    with open(out) as f:
        assert [r["run_id"] for r in csv.DictReader(f)] == [ids[0]]
    assert cli(None, "compare", ids[0], ids[1], "--no-sync", *args).returncode == 0
