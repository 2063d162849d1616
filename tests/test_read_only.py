"""Read-only means read-only (issue 46): a command that only reads changes nothing on disk: no plugin copy, no
database, no run folder. The whole project (grid files, plugin sources, the runs folder with its `.plugins/` copy,
the database and its journal files) is hashed, names, bytes and modification times, before and after each
command that only reads and a series of dashboard page loads.

Before: `resolve_runs_root` refreshed `runs/.plugins/` from an edited plugin source on every call, so `status
--no-sync`, `keys`-free reads, `compare`, `claims` and every dashboard page rewrote the jobs' copy."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.helpers import cli
from tests.test_records import build_project

PLUGIN = '''from cem_core.spec import PreconditionerSpec, register

SCALE = 1
register(PreconditionerSpec(name="myscalar", module="myplug:Scalar", description="P = c I", label="scalar",
                            params=lambda n, width, rank: n * SCALE))
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The project of `test_records` (a run in every state), plus a grid whose plugin source was edited after its
    plan copied it for the jobs: any command that refreshed the copy would rewrite it."""
    where = tmp_path_factory.mktemp("readonly")
    built = build_project(where)
    (where / "myplug.py").write_text(PLUGIN)
    (where / "p.toml").write_text('[experiment]\nname = "p"\nplugins = ["myplug"]\n[base]\n"model.size" = "nano"\n'
                                  '"model.attention" = "cem"\n"data.tokenizer" = "byte"\n"train.max_steps" = 2\n'
                                  '[axes]\n"model.attn_precond" = ["diag", "myscalar"]\n'
                                  # a claim, so that `claims` has a page to show (and, before, wrote reports/claims)
                                  '[[claim]]\nid = "S"\nstatement = "A scalar preconditioner is worse"\n'
                                  '[[claim.part]]\nname = "scalar - diag"\nexpect = "higher"\n'
                                  'arms = [{ "model.attn_precond" = "myscalar" }, { "model.attn_precond" = "diag" }]\n')
    res = cli(where, "plan", str(where / "p.toml"), subprocess=True, cwd=where)
    assert res.returncode == 0, res.stderr
    assert (where / "runs" / ".plugins" / "myplug.py").is_file()
    (where / "myplug.py").write_text(PLUGIN.replace("SCALE = 1", "SCALE = 2"))  # edited beside the grid
    from cemctl.db import engine

    for e in engine._ENGINES.values():  # the fixture's own writers close now (a checkpoint), not during a test
        e.dispose()
    engine._ENGINES.clear()
    return built


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root`: (kind, size, mtime in ns, sha256 of a file's bytes). SQLite's `-shm` file is left
    out: it is the shared-memory index every reader of a WAL database marks its reads in (no data of the database
    is in it); the database file and its `-wal` journal are in, except an empty `-wal`: SQLite makes one when a
    reader opens a WAL database whose last writer closed (no data; a reader cannot remove it again)."""
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + [f for f in files if not f.endswith("-shm")]:
            path = Path(folder) / name
            st = os.lstat(path)
            if name.endswith("-wal") and st.st_size == 0:
                continue
            rel = str(path.relative_to(root))
            if os.path.islink(path) or not path.is_file():
                out[rel] = ("dir" if path.is_dir() else "other", st.st_mtime_ns)
            else:
                out[rel] = ("file", st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def _changed(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def test_commands_that_only_read_change_nothing_on_disk(project, tmp_path):
    import cemctl.api as cem

    where = project["where"]
    ids = project["ids"]
    db = str(where / "results.db")
    commands = [
        ("status", "--no-sync"), ("status", "own", "--no-sync", "--json"), ("status", "--no-sync", "--arms"),
        ("status", "--no-sync", "--where", "state=done", "--sort", "-test_loss"),
        ("compare", ids["Da"], ids["Db"], "--no-sync"),
        ("claims", "--no-sync"),
        ("export", "own", "--no-sync", "-o", str(tmp_path / "out.csv")),
    ]
    before = snapshot(where)
    for args in commands:
        res = cli(where, *args, subprocess=True, cwd=where)
        assert res.returncode == 0, (args, res.stderr)
        assert _changed(before, snapshot(where)) == [], args
    for args in (("keys",), ("keys", "--json"), ("keys", "attn")):  # no database at all
        res = cli(None, *args, subprocess=True, cwd=where)
        assert res.returncode == 0, res.stderr
        assert _changed(before, snapshot(where)) == [], args
    cem.runs("own", db=db, where=["state=done"])
    cem.arms("own", db=db)
    cem.curves("own", db=db)
    assert _changed(before, snapshot(where)) == [], "cemctl.api"


def test_dashboard_page_loads_change_nothing_on_disk(project):
    from tests.serve_project import get, running_server

    where = project["where"]

    class Project:
        db = where / "results.db"
        runs_root = where / "runs"

    before = snapshot(where)
    rid = project["ids"]["R0"]
    pages = ["/", "/claims", "/experiments/own", "/experiments/own/live", "/experiments/own/arms",
             "/experiments/own/claims", "/experiments/own/metric.json", "/experiments/own/curves.json",
             "/experiments/own/parallel", "/experiments/own/parallel.json", "/experiments/p", f"/runs/{rid}",
             f"/runs/{rid}/curves.json", f"/runs/{rid}/system.json",
             f"/compare?items={project['ids']['Da']}&items={project['ids']['Db']}"]
    with running_server(Project) as base:  # type: ignore[arg-type]
        for _ in range(2):  # a first load and a refresh
            for page in pages:
                status, _, body = get(base, page)
                assert status == 200, (page, status, body[:300])
    assert _changed(before, snapshot(where)) == []
    assert json.loads((where / "runs" / ".plugins" / ".cemctl-manifest.json").read_text())  # the copy is as plan left it
