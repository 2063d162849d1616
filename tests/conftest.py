"""Shared fixtures: a real SQLite results database and a runs folder in tmp_path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest_plugins = ("tests.guard",)  # a test not marked slow that starts a trainer or compiles fails


@pytest.fixture(scope="session", autouse=True)
def _children_take_ctrl_c():
    """Tests send SIGINT (Ctrl-C) to the orchestrators they start. A shell without job control starts
    background commands (`pytest ... &`, `nohup .ci/run &`) with SIGINT ignored, and every child inherits
    that, so `launch` would never see the Ctrl-C. A handler (unlike SIG_IGN) is reset to the default on
    exec, so the children this session starts take Ctrl-C as a user's terminal would deliver it."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(scope="session", autouse=True)
def _private_data_cache(tmp_path_factory: pytest.TempPathFactory):
    """Every test (and every process it starts) prepares data in a cache of this session, never the user's
    ~/.cache/cemctl: a test of `cemctl data clean` must not be able to remove a real cache."""
    import os

    before = os.environ.get("CEMCTL_CACHE")
    os.environ["CEMCTL_CACHE"] = str(tmp_path_factory.mktemp("session-cache"))
    yield
    if before is None:
        os.environ.pop("CEMCTL_CACHE", None)
    else:
        os.environ["CEMCTL_CACHE"] = before


@pytest.fixture(autouse=True)
def _database_files_closed_after_each_test():
    """cemctl keeps one engine per database in a process (`cemctl.db.engine.open_db`): one for a command's process,
    but the tests' in-process CLI opens one per test's database, each holding its SQLite files open. Late in a full
    run ~1,200 descriptors were open, a pseudo-terminal's above select's limit of 1024, and a test hung. After each
    test the pooled connections of every cached engine are closed (an engine used again reopens them; one checked out
    now is closed when it is returned); an in-memory database would lose its data, so it keeps its connection."""
    yield
    engines = getattr(sys.modules.get("cemctl.db.engine"), "_ENGINES", None)
    for engine in list((engines or {}).values()):
        if engine.url.get_backend_name() == "sqlite" and (
                not engine.url.database or ":memory:" in engine.url.database or "mode=memory" in str(engine.url)):
            continue
        engine.dispose()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """URL of a results database file that does not exist yet."""
    return f"sqlite:///{tmp_path / 'results.db'}"


@pytest.fixture
def engine(db_url: str):
    """An opened (created, migrated) results database."""
    from cemctl.db import open_db

    return open_db(db_url)


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path


@pytest.fixture
def finished_project(tmp_path: Path) -> Path:
    """A project folder (results.db + runs/) holding the experiment "exp" of `tests.helpers.tiny_grid` (exp.toml,
    two seeds) with both runs finished as a trainer leaves them (`finish_run`: no training) and synced; test losses
    1.5 and 1.6. The shared stand-in for a trained project wherever a test does not need a real trainer."""
    from tests.helpers import cli, finish_run, plan_ids

    _, ids = plan_ids(tmp_path)
    for i, rid in enumerate(ids):
        finish_run(tmp_path / "runs" / rid, test_loss=1.5 + 0.1 * i)
    res = cli(tmp_path, "sync")
    assert res.returncode == 0, res.output
    return tmp_path
