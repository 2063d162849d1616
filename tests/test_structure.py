"""The shared mechanisms, tested once: target resolution, the state derivation, the registries, the
shared CLI options (every command honours the same env vars), the version and the crash line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cem_core import runfiles
from cem_core.errors import ConfigError
from cem_core.runfolder import Evidence, derive_state
from tests.helpers import ROOT, cli, finish_run, subprocess_env, tiny_grid

# ---------------------------------------------------------------- state derivation (pure, no sleeping)

NOW = 1_800_000_000.0


@pytest.mark.parametrize("evidence, expected", [
    (Evidence(), ("planned", "")),
    (Evidence(db_state="queued", db_reason="submitted"), ("queued", "submitted")),
    (Evidence(result_state="done", result_time=NOW - 5, event_state="running", event_time=NOW), ("done", "result.json: done")),
    (Evidence(result_state="failed", result_error="boom", result_time=NOW - 1, event_state="running", event_time=NOW - 9),
     ("failed", "boom")),
    (Evidence(event_state="running", event_time=NOW - 10, heartbeat_time=NOW - 2), ("running", "heartbeat")),
    (Evidence(event_state="running", event_time=NOW - 500, heartbeat_time=NOW - 300), ("stale", "no heartbeat for 300 s")),
    (Evidence(event_state="cancelled", event_time=NOW - 10, heartbeat_time=NOW - 1), ("cancelled", "")),
    (Evidence(result_state="failed", result_time=NOW - 10, heartbeat_time=NOW - 1), ("failed", "result.json: failed")),
    (Evidence(result_state="done", result_time=NOW, damage="result.json is gone"), ("damaged", "result.json is gone")),
])
def test_derive_state(evidence, expected):
    assert derive_state(evidence, NOW, timeout_s=120) == expected


def test_the_heartbeat_timeout_moves_a_run_between_running_and_stale():
    ev = Evidence(event_state="running", event_time=NOW - 100, heartbeat_time=NOW - 60)
    assert derive_state(ev, NOW, timeout_s=120)[0] == "running"
    assert derive_state(ev, NOW, timeout_s=30) == ("stale", "no heartbeat for 60 s")
    assert derive_state(ev, NOW + 100, timeout_s=120)[0] == "stale"


# ---------------------------------------------------------------- registries


def test_registries_validate_names_without_importing_their_implementations():
    code = ("import sys; from cem_core import variants as V; from cemctl.executors import EXECUTORS; "
            "from cemctl.grid.kinds import FIGURE_KINDS; "
            "[r.check(n) for r in (V.ATTENTION, V.MLPS, V.TOKENIZERS, V.CORPORA, EXECUTORS, FIGURE_KINDS) for n in r.names()]; "
            "print(sorted(m for m in ('torch', 'submitit', 'matplotlib', 'tokenizers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_unknown_name_lists_the_registered_ones_and_names_the_key():
    from cem_core import variants as V
    from cemctl.executors import EXECUTORS

    with pytest.raises(ConfigError) as info:
        V.TOKENIZERS.get("sentencepiece-v9")
    assert info.value.key == "data.tokenizer" and "byte, bpe, hf" in info.value.allowed
    with pytest.raises(ConfigError, match="--executor.*local, slurm"):
        EXECUTORS.get("kubernetes")
    assert callable(V.TOKENIZERS.get("byte")) and V.ATTENTION.get("cem").__name__ == "CEMAttention"


# ---------------------------------------------------------------- one target resolver


@pytest.fixture
def recorded(tmp_path):
    grid = tmp_path / "two.toml"
    grid.write_text(tiny_grid("two", seeds="[0, 1]"))
    plan = json.loads(cli(tmp_path, "plan", str(grid), "--json").stdout)
    from cemctl.db import open_db

    return open_db(f"sqlite:///{tmp_path / 'results.db'}"), grid, [r["run_id"] for r in plan["runs"]]


def test_resolve_runs_rules(tmp_path, recorded):
    from cemctl.services.targets import UnknownTarget, resolve_runs

    engine, grid, ids = recorded
    root = tmp_path / "runs"
    by_grid = resolve_runs(engine, str(grid), root)
    by_name = resolve_runs(engine, "two", root)
    assert by_grid.kind == by_name.kind == "experiment" and [r.run_id for r in by_grid.runs] == ids
    assert [r.run_id for r in by_name.runs] == ids and all(r.run_dir == root / r.run_id for r in by_name.runs)
    one = resolve_runs(engine, ids[0], root)
    assert one.kind == "run" and one.runs[0].run_id == ids[0]
    common = 0
    while ids[0][: common + 1] == ids[1][: common + 1]:
        common += 1
    prefix = resolve_runs(engine, ids[0][: common + 1], root)
    assert prefix.runs[0].run_id == ids[0]
    if common:
        with pytest.raises(UnknownTarget, match="matches 2 runs"):
            resolve_runs(engine, ids[0][:common], root)
    with pytest.raises(UnknownTarget, match="not a grid file, an experiment or a run"):
        resolve_runs(engine, "nothing-like-this", root)
    with pytest.raises(UnknownTarget, match="no run"):
        resolve_runs(engine, "two", root, runs_only=True)


def test_every_command_resolves_targets_the_same_way(tmp_path, recorded):
    _, grid, ids = recorded
    for rid in ids:
        finish_run(tmp_path / "runs" / rid)
    prefix = ids[0][:8]
    logs = cli(tmp_path, "logs", prefix)
    cancel = cli(tmp_path, "cancel", str(grid))
    assert logs.returncode == 0 and cancel.returncode == 0 and "cancelled 0 run(s)" in cancel.stdout  # all done
    for args in (("logs", "zz-unknown"), ("cancel", "zz-unknown"), ("eval", "zz-unknown", "--steps", "1")):
        res = cli(tmp_path, *args)
        assert res.returncode == 2 and len(res.lines) == 1 and "zz-unknown" in res.stderr, args


# ---------------------------------------------------------------- shared options: the env-var bugs


def test_sync_honours_the_heartbeat_timeout_env_var(tmp_path, recorded):
    """`cemctl sync` hard-coded 120 s: a run status called stale was stored as running."""
    _, _, ids = recorded
    run_dir = tmp_path / "runs" / ids[0]
    runfiles.append_event(run_dir, "running", "attempt 1", attempt=1, time_s=time.time() - 30)
    runfiles.atomic_write_json(run_dir / runfiles.HEARTBEAT_FILE, {"time": time.time() - 20, "step": 1})
    old = time.time() - 20
    import os

    os.utime(run_dir / runfiles.HEARTBEAT_FILE, (old, old))
    os.utime(run_dir / runfiles.EVENTS_FILE, (old, old))
    res = cli(tmp_path, "sync", subprocess=True, env={"CEMCTL_HEARTBEAT_TIMEOUT_S": "5"})
    assert res.returncode == 0, res.output
    status = cli(tmp_path, "status", "--json", "--no-sync", subprocess=True)
    runs = {r["run_id"]: r for r in json.loads(status.stdout)["experiments"][0]["runs"]}
    assert runs[ids[0]]["state"] == "stale" and "no heartbeat" in runs[ids[0]]["reason"]


def test_logs_honours_the_database_env_var(tmp_path, recorded):
    """`cemctl logs` ignored CEMCTL_DB. Run from another folder with no --runs-dir, it finds the run in the runs
    folder that database recorded (and says so in one line)."""
    _, _, ids = recorded
    (tmp_path / "runs" / ids[0] / "train.log").write_text("hello from the recorded runs folder\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = cli(None, "logs", ids[0], subprocess=True, cwd=elsewhere, env={"CEMCTL_DB": str(tmp_path / "results.db")})
    assert res.returncode == 0, res.output
    assert "hello from the recorded runs folder" in res.stdout
    assert f"using the runs folder {tmp_path / 'runs'}" in res.stderr


def test_bad_heartbeat_timeouts_are_one_line_errors(tmp_path):
    for value in ("-1", "nan", "0", "inf"):
        res = cli(tmp_path, "status", "--heartbeat-timeout-s", value)
        assert res.returncode == 2 and len(res.lines) == 1 and "--heartbeat-timeout-s" in res.stderr, value
    res = cli(tmp_path, "sync", subprocess=True, env={"CEMCTL_HEARTBEAT_TIMEOUT_S": "soon"})
    assert res.returncode == 2 and "CEMCTL_HEARTBEAT_TIMEOUT_S" in res.stderr and len(res.lines) == 1


# ---------------------------------------------------------------- the package


def test_version_and_python_dash_m(tmp_path):
    from cemctl import __version__

    res = cli(None, "--version", subprocess=True, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == f"cemctl {__version__}" and __version__ != "0+unknown"
    mod = subprocess.run([sys.executable, "-m", "cemctl", "--version"], cwd=tmp_path, env=subprocess_env(),
                         capture_output=True, text=True)
    assert mod.returncode == 0 and mod.stdout.strip() == res.stdout.strip()


def test_a_packaged_grid_plans_by_name_from_any_folder(tmp_path):
    res = cli(tmp_path, "plan", "fig2c", "--json", "--dry-run", cwd=tmp_path)
    assert res.returncode == 0, res.output
    out = json.loads(res.stdout)
    assert out["experiment"] == "fig2c" and Path(out["grid"]).read_text() == (ROOT / "experiments" / "fig2c.toml").read_text()
    res = cli(tmp_path, "plan", "fig9z", cwd=tmp_path)
    assert res.returncode == 2 and "packaged grids: demo, fig2a" in res.stderr


def test_an_unexpected_error_is_one_line_naming_a_crash_log(tmp_path):
    code = ("import sys; sys.argv = ['cemctl', 'status']; import cemctl.services.status as c; "
            "c.open_status_db = lambda *a, **k: 1 / 0; from cemctl.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env=subprocess_env(CEMCTL_CRASH_DIR=str(tmp_path / "crashes")))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith("error: internal error (ZeroDivisionError") and str(tmp_path / "crashes") in line
    (log,) = list((tmp_path / "crashes").iterdir())
    assert "ZeroDivisionError" in log.read_text() and "Traceback" in log.read_text()


def test_ingest_moves_a_run_between_running_stale_and_done_by_now_alone(tmp_path, recorded):
    """The same files read at later `now`s: running, then stale past the timeout, then done (no sleeping)."""
    import os

    from cemctl.db import ingest_run

    engine, _, ids = recorded
    run_dir = tmp_path / "runs" / ids[0]
    t0 = 1_800_000_000.0
    runfiles.append_event(run_dir, "running", "attempt 1", attempt=1, time_s=t0)
    runfiles.atomic_write_json(run_dir / runfiles.HEARTBEAT_FILE, {"time": t0, "step": 1})
    for name in (runfiles.EVENTS_FILE, runfiles.HEARTBEAT_FILE):
        os.utime(run_dir / name, (t0, t0))
    assert ingest_run(engine, run_dir, heartbeat_timeout_s=60, now=t0 + 30) == "running"
    assert ingest_run(engine, run_dir, heartbeat_timeout_s=60, now=t0 + 61) == "stale"
    assert ingest_run(engine, run_dir, heartbeat_timeout_s=600, now=t0 + 61) == "running"  # a longer timeout
    finish_run(run_dir)
    assert ingest_run(engine, run_dir, heartbeat_timeout_s=60, now=t0 + 10_000) == "done"
