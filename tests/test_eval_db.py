"""The `evals` table (`cemctl eval`): schema v4 migration of a v3 file with data, ingest of evals.json, frames."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError

from cem_core.config import RunConfig, resolve
from cemctl.db import CURRENT_VERSION, ingest_run, open_db
from cemctl.db.frames import energy_frame, evals_frame
from cemctl.db.models import Eval

# The schema a version-3 cemctl (commit d4ec50b) creates, verbatim from its sqlite_master.
V3_SCHEMA = """
CREATE TABLE schema_version ( version INTEGER NOT NULL, applied_at FLOAT NOT NULL, PRIMARY KEY (version) );
CREATE TABLE experiments ( id INTEGER NOT NULL, name VARCHAR(200) NOT NULL, description TEXT NOT NULL, figure VARCHAR(64) NOT NULL, grid_path TEXT NOT NULL, grid_sha256 VARCHAR(64) NOT NULL, grid_text TEXT NOT NULL, scale VARCHAR(32) NOT NULL, overrides_json TEXT NOT NULL, created_at FLOAT NOT NULL, updated_at FLOAT NOT NULL, PRIMARY KEY (id), UNIQUE (name) );
CREATE TABLE runs ( id VARCHAR(64) NOT NULL, config_json TEXT NOT NULL, state VARCHAR(16) NOT NULL, state_reason TEXT, state_at FLOAT, attempts INTEGER NOT NULL, executor VARCHAR(32), job_id VARCHAR(128), host VARCHAR(255), pid INTEGER, run_dir TEXT, created_at FLOAT NOT NULL, started_at FLOAT, finished_at FLOAT, updated_at FLOAT NOT NULL, heartbeat_at FLOAT, error TEXT, total_steps INTEGER, last_step INTEGER, tokens BIGINT, last_train_loss FLOAT, last_val_loss FLOAT, tokens_per_s FLOAT, params_total BIGINT, params_non_embedding BIGINT, flops_per_token BIGINT, metrics_offset BIGINT NOT NULL, metrics_fingerprint VARCHAR(64) NOT NULL, events_offset BIGINT NOT NULL, events_fingerprint VARCHAR(64) NOT NULL, events_lines INTEGER NOT NULL, result_mtime FLOAT, PRIMARY KEY (id) );
CREATE INDEX ix_runs_state ON runs (state);
CREATE TABLE experiment_runs ( experiment_id INTEGER NOT NULL, run_id VARCHAR(64) NOT NULL, axes_json TEXT NOT NULL, position INTEGER NOT NULL, PRIMARY KEY (experiment_id, run_id), FOREIGN KEY(experiment_id) REFERENCES experiments (id) ON DELETE CASCADE, FOREIGN KEY(run_id) REFERENCES runs (id) );
CREATE INDEX ix_experiment_runs_run_id ON experiment_runs (run_id);
CREATE TABLE run_events ( id INTEGER NOT NULL, run_id VARCHAR(64) NOT NULL, time FLOAT NOT NULL, state VARCHAR(16) NOT NULL, reason TEXT NOT NULL, attempt INTEGER, host VARCHAR(255), pid INTEGER, source VARCHAR(16) NOT NULL, line INTEGER, PRIMARY KEY (id), CONSTRAINT uq_run_events_run_line UNIQUE (run_id, line), FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE CASCADE );
CREATE INDEX ix_run_events_run_id_time ON run_events (run_id, time);
CREATE TABLE metrics ( id INTEGER NOT NULL, run_id VARCHAR(64) NOT NULL, kind VARCHAR(16) NOT NULL, step INTEGER NOT NULL, series VARCHAR(64) NOT NULL, tokens BIGINT, time_s FLOAT, train_loss FLOAT, val_loss FLOAT, lr FLOAT, grad_norm FLOAT, tokens_per_s FLOAT, extra_json TEXT, PRIMARY KEY (id), CONSTRAINT uq_metrics_run_kind_step_series UNIQUE (run_id, kind, step, series), FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE CASCADE );
CREATE TABLE results ( run_id VARCHAR(64) NOT NULL, state VARCHAR(16) NOT NULL, test_loss FLOAT, test_ppl FLOAT, val_loss FLOAT, val_ppl FLOAT, params_total BIGINT, params_non_embedding BIGINT, flops_per_token BIGINT, train_flops FLOAT, tokens BIGINT, steps INTEGER, wall_time_s FLOAT, error TEXT, diverged_step INTEGER, result_json TEXT NOT NULL, recorded_at FLOAT NOT NULL, PRIMARY KEY (run_id), FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE CASCADE );
INSERT INTO schema_version VALUES (3, 1790000000.0);
INSERT INTO experiments VALUES (1, 'old', '', 'curves', 'old.toml', '', '', 'tiny', '{}', 1790000000.0, 1790000000.0);
INSERT INTO runs (id, config_json, state, attempts, created_at, updated_at, metrics_offset, metrics_fingerprint,
  events_offset, events_fingerprint, events_lines, last_step, result_mtime)
  VALUES ('aaaaaaaaaaaa', '{}', 'done', 1, 1790000000.0, 1790000100.0, 120, 'abc', 0, '', 0, 50, 1790000100.0);
INSERT INTO experiment_runs VALUES (1, 'aaaaaaaaaaaa', '{}', 0);
INSERT INTO metrics (run_id, kind, step, series, val_loss) VALUES ('aaaaaaaaaaaa', 'val', 50, '', 3.25);
INSERT INTO metrics (run_id, kind, step, series, extra_json)
  VALUES ('aaaaaaaaaaaa', 'energy', 50, '0/attention/1', '{"layer": 0, "sublayer": "attention", "t": 1, "energy": -2.5, "descent_frac": 0.75}');
INSERT INTO results (run_id, state, test_loss, test_ppl, steps, result_json, recorded_at)
  VALUES ('aaaaaaaaaaaa', 'done', 3.2, 24.5, 50, '{}', 1790000100.0);
"""


def _columns(con: sqlite3.Connection, table: str) -> dict[str, tuple]:
    """name -> (type, not null); a primary key column is never null."""
    return {r[1]: (r[2].upper(), bool(r[3] or r[5])) for r in con.execute(f"PRAGMA table_info({table})")}


def test_v3_database_with_data_is_migrated_to_the_current_version_keeping_everything(tmp_path):
    path = tmp_path / "v3.db"
    con = sqlite3.connect(path)
    con.executescript(V3_SCHEMA)
    con.close()
    engine = open_db(f"sqlite:///{path}")
    con = sqlite3.connect(path)
    assert max(v for (v,) in con.execute("SELECT version FROM schema_version")) == CURRENT_VERSION
    # v5: the old link keeps its experiment's scale and overrides as its plan key
    assert con.execute("SELECT experiment_id, scale, overrides_json, run_id, position, marks_json FROM experiment_runs"
                       ).fetchall() == [(1, "tiny", "{}", "aaaaaaaaaaaa", 0, "[]")]
    assert con.execute("SELECT state, last_step, metrics_offset, metrics_fingerprint, evals_mtime FROM runs").fetchone() \
        == ("done", 50, 120, "abc", None)
    assert con.execute("SELECT count(*) FROM metrics").fetchone()[0] == 2
    assert con.execute("SELECT test_ppl FROM results").fetchone()[0] == 24.5
    # v8: the code that trained an old result is unknown (NULL), and such a run is never called outdated
    assert con.execute("SELECT code_fingerprint FROM results").fetchone()[0] is None
    from cemctl.db.outdated import outdated_runs

    assert outdated_runs(engine) == {}
    assert con.execute("SELECT count(*) FROM evals").fetchone()[0] == 0
    # The migrated table has the columns (types, not-null) of a freshly created one.
    fresh = tmp_path / "fresh.db"
    open_db(f"sqlite:///{fresh}")
    con2 = sqlite3.connect(fresh)
    assert _columns(con, "evals") == _columns(con2, "evals")
    assert _columns(con, "runs") == _columns(con2, "runs")
    assert _columns(con, "experiment_runs") == _columns(con2, "experiment_runs")
    assert _columns(con, "results") == _columns(con2, "results")
    assert _columns(con, "run_tags") == _columns(con2, "run_tags")
    con.close()
    con2.close()
    # It works with the current code: rows, the unique key, the frames.
    with engine.begin() as conn:
        conn.execute(Eval.__table__.insert(), [{"run_id": "aaaaaaaaaaaa", "attn_steps": t, "mlp_steps": 1, "sublayer": "attention",
                                                "test_ppl": 30.0 - t, "recorded_at": time.time()} for t in (1, 2, 4)])
    frame = evals_frame(engine, ["aaaaaaaaaaaa"])
    assert frame["attn_steps"].tolist() == [1, 2, 4] and frame["test_ppl"].tolist() == [29.0, 28.0, 26.0]
    with pytest.raises(IntegrityError):
        with engine.begin() as conn:
            conn.execute(Eval.__table__.insert(), {"run_id": "aaaaaaaaaaaa", "attn_steps": 2, "mlp_steps": 1,
                                                   "sublayer": "attention", "recorded_at": 0.0})
    energy = energy_frame(engine, ["aaaaaaaaaaaa"])
    assert energy[["layer", "sublayer", "t", "energy", "descent_frac"]].values.tolist() == [[0, "attention", 1, -2.5, 0.75]]


def _run_dir(root: Path) -> Path:
    cfg = resolve(RunConfig.from_dict({"model.size": "nano", "data.tokenizer": "byte", "model.attention": "cem",
                                       "model.mlp": "cem", "model.attn_steps": 2, "model.mlp_steps": 2,
                                       "train.max_steps": 4}))
    run_dir = root / "bbbbbbbbbbbb"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    (run_dir / "result.json").write_text(json.dumps({"state": "done", "test_loss": 3.0, "test_ppl": 20.0, "steps": 4}))
    return run_dir


def _row(attn: int, mlp: int, ppl: float) -> dict:
    return {"attn_steps": attn, "mlp_steps": mlp, "eval_steps": max(attn, mlp), "sublayer": "both",
            "test_loss": 3.0, "test_ppl": ppl, "test_tokens": 2048, "flops_per_token": 1000 * attn + mlp,
            "trained_attn_steps": 2, "trained_mlp_steps": 2, "time": 1790000000.0}


def _touch_later(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_ingest_mirrors_evals_json_idempotently_and_rereads_it_when_it_changes(engine, runs_root):
    from cem_core.train.recursion_eval import EVALS_FILE, merge_evals

    run_dir = _run_dir(runs_root)
    rid = run_dir.name
    merge_evals(run_dir, [_row(1, 1, 25.0), _row(2, 2, 20.0), _row(4, 4, 19.5)])
    ingest_run(engine, run_dir)
    first = evals_frame(engine, [rid])
    assert [(a, m) for a, m in zip(first["attn_steps"], first["mlp_steps"])] == [(1, 1), (2, 2), (4, 4)]
    assert first["test_ppl"].tolist() == [25.0, 20.0, 19.5]
    assert first["flops_per_token"].tolist() == [1001, 2002, 4004] and set(first["sublayer"]) == {"both"}
    ingest_run(engine, run_dir)  # nothing changed: no new rows
    ingest_run(engine, run_dir)
    assert evals_frame(engine, [rid])["id"].tolist() == first["id"].tolist()

    # A re-evaluation replaces its row in the file; a new depth adds one; the database follows.
    merge_evals(run_dir, [_row(4, 4, 19.0), _row(8, 8, 19.8)])
    _touch_later(run_dir / EVALS_FILE)
    ingest_run(engine, run_dir)
    second = evals_frame(engine, [rid])
    assert second["attn_steps"].tolist() == [1, 2, 4, 8]
    assert second["test_ppl"].tolist() == [25.0, 20.0, 19.0, 19.8]
    assert second["id"].tolist()[:3] == first["id"].tolist()  # updated in place

    # The run directory is the ground truth: rows removed from the file (or the file) leave the database.
    data = json.loads((run_dir / EVALS_FILE).read_text())
    data["evals"] = [r for r in data["evals"] if r["attn_steps"] != 1]
    (run_dir / EVALS_FILE).write_text(json.dumps(data))
    _touch_later(run_dir / EVALS_FILE)
    ingest_run(engine, run_dir)
    assert evals_frame(engine, [rid])["attn_steps"].tolist() == [2, 4, 8]
    (run_dir / EVALS_FILE).unlink()
    ingest_run(engine, run_dir)
    assert evals_frame(engine, [rid]).empty


def test_sync_rebuilds_the_evals_table_from_run_dirs(tmp_path, runs_root):
    from cem_core.train.recursion_eval import merge_evals
    from cemctl.db import sync_runs

    run_dir = _run_dir(runs_root)
    merge_evals(run_dir, [_row(1, 1, 25.0), _row(3, 3, 19.0)])
    engine = open_db(f"sqlite:///{tmp_path / 'rebuilt.db'}")
    stats = sync_runs(engine, runs_root)
    assert stats.eval_rows == 2 and "2 eval rows" in stats.summary()
    assert evals_frame(engine, None)["attn_steps"].tolist() == [1, 3]
    assert sync_runs(engine, runs_root).eval_rows == 0  # unchanged file: not read again


@pytest.mark.parametrize("content", ['{"evals": [{"attn_steps": "two", "mlp_steps": 1}]}', "not json",
                                     '{"evals": {"a": 1}}', '[1, 2]'])
def test_an_unreadable_evals_json_is_never_taken_for_none(engine, runs_root, content):
    """One reader (cem_core.runfiles.evals): `cemctl eval` refuses to merge into it (its rows would be lost) and
    ingest keeps the rows it mirrored, naming the file."""
    from cem_core.runfiles.evals import EvalsUnreadable
    from cem_core.train.recursion_eval import EVALS_FILE, EvalRefused, merge_evals

    run_dir = _run_dir(runs_root)
    rid = run_dir.name
    merge_evals(run_dir, [_row(1, 1, 25.0), _row(2, 2, 20.0)])
    ingest_run(engine, run_dir)
    (run_dir / EVALS_FILE).write_text(content)
    _touch_later(run_dir / EVALS_FILE)
    with pytest.raises(EvalRefused, match="evals.json"):
        merge_evals(run_dir, [_row(4, 4, 19.0)])
    assert (run_dir / EVALS_FILE).read_text() == content
    from cemctl.db import sync_runs

    stats = sync_runs(engine, runs_root, run_ids=[rid])
    assert any("evals.json" in w for w in stats.warnings)
    assert evals_frame(engine, [rid])["attn_steps"].tolist() == [1, 2]  # kept as they were
    with pytest.raises(EvalsUnreadable):
        from cem_core.runfiles.evals import read_evals

        read_evals(run_dir)
