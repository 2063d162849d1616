"""No name can make cemctl write outside its folders: run dirs, report dirs, snapshot dirs, logs/cancel targets.

Names come from grid files (experiment names), the command line (run ids,
experiment names) and the database (names recorded by an older cemctl); every
path built from them must stay inside runs_root / reports/.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cem_core.errors import ConfigError
from cemctl.cli import app
from cemctl.db import list_runs, open_db, record_plan
from cemctl.grid import load_grid
from cemctl.services.plan import plan_experiment

from tests.helpers import assert_clean_error

HOSTILE_NAMES = ["../x", "/etc/x", "a/../../b", "..", ".", ".hidden", "x/y", "..\\x", "~/x", "a\x00b", "a\nb", "fig\u202e2a",
                 " padded", "", "x" * 201]
GRID = """[experiment]
name = "{name}"
[base]
"model.size" = "nano"
"data.tokenizer" = "byte"
"train.max_steps" = 3
[axes]
"train.seed" = [0, 1, 2]
"""


def inside(path: Path, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(Path(root).resolve())


def safe_grid(tmp_path: Path, name: str = "safe") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(GRID.format(name=name))
    return path


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[repr(n)[:20] for n in HOSTILE_NAMES])
def test_hostile_experiment_names_are_refused_by_grid_and_database(tmp_path: Path, name: str):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(name=json.dumps(name)[1:-1]))
    with pytest.raises(ConfigError, match="experiment.name"):
        load_grid(grid)
    # the database API refuses it too (a Plan built by other code than the grid loader)
    plan = load_grid(safe_grid(tmp_path))
    plan.name = name
    engine = open_db(f"sqlite:///{tmp_path / 'results.db'}")
    with pytest.raises(ConfigError, match="experiment.name"):
        record_plan(engine, plan, tmp_path / "runs")
    assert list_runs(engine) == []


def test_run_dirs_and_snapshot_dirs_stay_inside_runs_root(tmp_path: Path):
    from cemctl.services.launch.snapshot import take_snapshot

    runs = tmp_path / "runs"
    report = plan_experiment(safe_grid(tmp_path), db_url=f"sqlite:///{tmp_path / 'results.db'}", runs_root=runs)
    engine = open_db(f"sqlite:///{tmp_path / 'results.db'}")
    for pr in report.plan.runs:
        assert re.fullmatch(r"[0-9a-f]{12}", pr.run_id)
    for run in list_runs(engine):  # recorded relative to the database's folder (a copied project uses its own)
        assert inside(tmp_path / run.run_dir, runs) and Path(run.run_dir).name == run.id
    created = [p for p in tmp_path.rglob("*")]
    assert all(inside(p, runs) or p.name in ("results.db", "results.db-wal", "results.db-shm", "safe.toml") for p in created)
    snap = take_snapshot(runs)
    assert inside(snap.path, runs / ".snapshots") and re.fullmatch(r"[0-9a-f]{16}", snap.path.name)


@pytest.mark.parametrize("target", ["../outside", "/etc", "a/../../outside", "..", "x/y", "/"])
@pytest.mark.parametrize("command", ["logs", "cancel"])
def test_logs_and_cancel_never_touch_a_folder_outside_runs_root(tmp_path: Path, target: str, command: str, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text("{}")  # looks like a run dir
    before = sorted(p.name for p in outside.iterdir())
    r = CliRunner().invoke(app, [command, target, "--db", str(tmp_path / "results.db"), "--runs-dir", str(runs)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert_clean_error(r)
    assert sorted(p.name for p in outside.iterdir()) == before


def test_report_of_a_hostile_name_from_an_older_database_stays_in_reports(tmp_path: Path, monkeypatch):
    """A name that an older cemctl recorded without checking cannot send the default report folder elsewhere."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    plan_experiment(safe_grid(tmp_path), db_url=url, runs_root=tmp_path / "runs")
    con = sqlite3.connect(tmp_path / "results.db")
    con.execute("UPDATE experiments SET name = '../escaped' WHERE name = 'safe'")
    con.commit()
    con.close()
    r = CliRunner().invoke(app, ["report", "../escaped", "--db", url, "--runs-dir", str(tmp_path / "runs")])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert_clean_error(r)
    assert not (tmp_path.parent / "escaped").exists() and not (tmp_path / "escaped").exists()


def test_sync_ignores_hidden_and_non_run_folders(tmp_path: Path):
    """Folders that are not runs (hidden, no config.json) never become runs, whatever their names."""
    from cemctl.db import sync_runs

    runs = tmp_path / "runs"
    for name in (".snapshots", ".launch", "..hidden", "notes", " spaced"):
        (runs / name).mkdir(parents=True)
    engine = open_db(f"sqlite:///{tmp_path / 'results.db'}")
    stats = sync_runs(engine, runs)
    assert stats.runs_seen == 0 and list_runs(engine) == []
