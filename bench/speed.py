"""What the user waits for, in CPU seconds and as a multiple of the interpreter (`python -m bench --only speed`).

Issue 49's table: each command on the large results database of `bench/dbgen.py` (at scale 1: 10,000 finished
runs, 10M metric points) as CPU seconds and as a ratio to the floor, `python -c pass`, measured in the same loop;
and, when MLflow is installed (`pip install -e ".[bench]"`), the same queries through MLflow's `search_runs` on an
equal MLflow store (the same runs: 20 params and 10 metrics each; `bench/mlflow_store.py`), so the anchor is measured
in the same run.

How: every measure is a fresh process (what a user waits for: interpreter start, imports, the work, output to a
pipe). The rounds are interleaved: each round runs every measure once, in turn, so a drift of the machine's load
hits all of them alike; a row shows the median over the rounds. CPU = user + sys of the process (getrusage), which
load moves far less than wall time; a measure that times only its own part (a warm API call after a first one, a
server answering a request) reports that part's process CPU time itself (a `{"cpu_s": ...}` line on stdout).

`MEASURES` is the one list of rows: a new figure is one more `Measure` (give it a `group` to sit beside the
others of its kind), never a second table.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import dbgen
from bench.env import REPO_ROOT
from bench.settings import Settings
from bench.table import Section, Target
from bench.timing import median

FLOOR = "python -c pass (interpreter floor)"


@dataclass
class Measure:
    """One row: a cemctl command (`argv`, the database's --db/--runs-dir appended) or Python code (`code`, run as
    `python -c`, with the database in $BENCH_DB / $BENCH_RUNS and the MLflow store in $BENCH_MLFLOW)."""

    name: str
    group: str
    argv: list[str] | None = None
    code: str | None = None
    target_s: float | None = None
    needs: str = ""  # "mlflow": measured only where MLflow is installed
    db_args: bool = True  # append --db/--runs-dir to argv
    note: str = ""


# A warm API call: the first one pays the imports and the database's first read, the second is what is timed.
_API_WARM = """
import json, os, time
import cemctl.api as cem
where = {where!r}
cem.runs({experiment!r}, db=os.environ["BENCH_DB"], where=where)
t = time.process_time()
frame = cem.runs({experiment!r}, db=os.environ["BENCH_DB"], where=where)
print(json.dumps({{"cpu_s": time.process_time() - t, "rows": len(frame)}}))
"""

_API_COLD = """
import json, os
import cemctl.api as cem
frame = cem.runs({experiment!r}, db=os.environ["BENCH_DB"], where={where!r})
print(json.dumps({{"rows": len(frame)}}))
"""

# The dashboard's claims fragment of an experiment page, first view: the server's CPU for that one request (the
# server runs in this process; its start and imports come before the clock starts).
_DASHBOARD_CLAIMS = """
import json, os, threading, time, urllib.request
from cemctl.serve import start
server = start("sqlite:///" + os.environ["BENCH_DB"], os.environ["BENCH_RUNS"], port=0)
threading.Thread(target=server.serve_forever, kwargs={{"poll_interval": 0.05}}, daemon=True).start()
t, w = time.process_time(), time.perf_counter()
with urllib.request.urlopen(server.url.rstrip("/") + "/experiments/{experiment}/claims", timeout=600) as resp:
    status, body = resp.status, resp.read()
print(json.dumps({{"cpu_s": time.process_time() - t, "wall_s": time.perf_counter() - w, "status": status,
                  "bytes": len(body)}}))
server.shutdown()
"""

_MLFLOW = """
import json, os, time
import mlflow
mlflow.set_tracking_uri("sqlite:///" + os.environ["BENCH_MLFLOW"])
kw = {kw}
warm = {warm}
if warm:
    mlflow.search_runs(**kw)
t = time.process_time()
frame = mlflow.search_runs(**kw)
print(json.dumps({{"cpu_s": time.process_time() - t, "rows": len(frame)}} if warm else {{"rows": len(frame)}}))
"""

SELECTIVE = ["train.seed=3", "test_loss<2.7"]  # at scale 1: 10 rows of 10,000 (seed 3 of each 1,000-run filler)


def measures(experiment: str, sweep: str) -> list[Measure]:
    """Every row of the table, in order (issue 49's figures first, then MLflow's side by side)."""
    out = [
        Measure("cemctl --help", "commands", ["--help"], target_s=0.2, db_args=False),
        Measure("cemctl status (default view)", "commands", ["status"], target_s=0.3),
        Measure("cemctl status --json", "commands", ["status", "--json"]),
        Measure("cemctl export --where state=done (CSV, every run)", "commands",
                ["export", "--where", "state=done", "--format", "csv", "-o", "{work}/export.csv", "--force"],
                target_s=2.0),
        Measure(f"cemctl report {experiment} (png + pdf)", "commands",
                ["report", experiment, "--out", "{work}/report"], target_s=3.0),
        Measure("cemctl claims (every grid's claims, every run)", "commands", ["claims", "--out", "{work}/claims"],
                target_s=10.0),
        Measure(f"dashboard: {experiment}'s claims fragment, first view (server CPU for the request)", "commands",
                code=_DASHBOARD_CLAIMS.format(experiment=experiment), target_s=1.0),
        # each cemctl row below is followed by the same query through MLflow on an equal store
        Measure(f"cemctl.api.runs(where={' and '.join(SELECTIVE)}), warm", "commands",
                code=_API_WARM.format(experiment=None, where=SELECTIVE)),
        Measure("mlflow.search_runs(filter_string=\"params.seed = '3' and metrics.test_loss < 2.7\"), warm",
                "vs MLflow", needs="mlflow",
                code=_MLFLOW.format(kw={"search_all_experiments": True,
                                        "filter_string": "params.seed = '3' and metrics.test_loss < 2.7"}, warm=True)),
        Measure(f"cemctl.api.runs({sweep!r}): one experiment into a DataFrame, fresh process", "vs MLflow",
                code=_API_COLD.format(experiment=sweep, where=[])),
        Measure(f"mlflow.search_runs(experiment {sweep}), fresh process", "vs MLflow", needs="mlflow",
                code=_MLFLOW.format(kw={"experiment_names": [sweep], "max_results": 50_000}, warm=False)),
        Measure("cemctl.api.runs(where=state=done): every run into a DataFrame, fresh process", "vs MLflow",
                code=_API_COLD.format(experiment=None, where=["state=done"])),
        Measure("mlflow.search_runs(every experiment): every run, fresh process", "vs MLflow", needs="mlflow",
                code=_MLFLOW.format(kw={"search_all_experiments": True, "max_results": 50_000}, warm=False)),
    ]
    return out


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    for key in ("CEMCTL_DB", "CEMCTL_RUNS"):
        env.pop(key, None)
    # A user's Python writes byte code at the first run of an installed package; without it every run compiles
    # cemctl's modules again (0.2-0.3 s of a report here), which no user pays.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["COLUMNS"] = "120"
    env.update(extra)
    return env


def _once(argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    own: dict[str, Any] = {}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                own = json.loads(line)
            except ValueError:
                pass
            break
    error = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
    return {"cpu_s": own.get("cpu_s", cpu), "process_cpu_s": cpu, "wall_s": own.get("wall_s", wall),
            "rc": proc.returncode, "error": error, "rows": own.get("rows")}


def _argv(m: Measure, db: list[str], work: Path) -> list[str]:
    if m.code is not None:
        return [sys.executable, "-c", m.code]
    args = [a.replace("{work}", str(work)) for a in (m.argv or [])]
    return [sys.executable, "-m", "cemctl.cli", *args, *(db if m.db_args else [])]


def _fig2a_runs(big: Any) -> list[str]:
    import sqlite3

    con = sqlite3.connect(big.db_path)
    try:
        return [r[0] for r in con.execute("SELECT er.run_id FROM experiment_runs er JOIN experiments e ON "
                                          "e.id = er.experiment_id WHERE e.name = ?", (big.report_experiment,))]
    finally:
        con.close()


def have_mlflow() -> str | None:
    """Why MLflow's rows cannot be measured (None: they can)."""
    try:
        import importlib.util

        return None if importlib.util.find_spec("mlflow") else "MLflow is not installed (pip install -e \".[bench]\")"
    except (ImportError, ValueError) as e:
        return f"MLflow cannot be imported: {e}"


def run(s: Settings) -> Section:
    section = Section("speed", "Commands on the large results database: CPU seconds and x the interpreter floor "
                      "(issue 49)", columns=["group", "measure", "CPU s (median)", "x floor", "wall s (median)",
                                             "target", "verdict"])
    work = Path(tempfile.mkdtemp(prefix="cemctl-bench-speed-"))
    try:
        _run(s, section, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return section


def _run(s: Settings, section: Section, work: Path) -> None:
    rounds = 3 if s.quick else 7
    big = dbgen.build(s.cache_dir, s.scale, log=lambda m: print(m, flush=True))
    db_copy = work / "results.db"  # a command may write (sync): work on a copy, keep the cache pristine
    shutil.copyfile(big.db_path, db_copy)
    db = ["--db", str(db_copy), "--runs-dir", str(big.runs_root)]
    extra = {"BENCH_DB": str(db_copy), "BENCH_RUNS": str(big.runs_root)}
    no_mlflow = have_mlflow()
    if no_mlflow is None:
        from bench import mlflow_store

        store = mlflow_store.build(s.cache_dir, big, log=lambda m: print(m, flush=True))
        extra["BENCH_MLFLOW"] = str(store.db_path)
        section.notes.append(f"MLflow {store.version} store: {store.runs:,} runs with {store.params} params and "
                             f"{store.metrics} metrics each, the same values as cemctl's runs (bench/mlflow_store.py), "
                             f"SQLite, cached in {store.root}.")
    env = _env(extra)
    sweep = "bench-sweep-0" if big.runs > len(_fig2a_runs(big)) else big.report_experiment  # 1,000 runs at scale 1
    every = measures(big.report_experiment, sweep)
    todo = [m for m in every if not (m.needs == "mlflow" and no_mlflow)]
    skipped = [m for m in every if m not in todo]
    floor_argv = [sys.executable, "-c", "pass"]
    for m in todo:  # warm-up: byte code written, the page cache holding the database, a report folder to replace
        _once(_argv(m, db, work), env, work)
    results: dict[str, list[dict[str, Any]]] = {FLOOR: [], **{m.name: [] for m in todo}}
    for _ in range(rounds):
        results[FLOOR].append(_once(floor_argv, env, work))
        for m in todo:
            results[m.name].append(_once(_argv(m, db, work), env, work))
    floor = median([r["cpu_s"] for r in results[FLOOR]])
    section.rows.append({"group": "floor", "measure": FLOOR, "CPU s (median)": floor, "x floor": 1.0,
                         "wall s (median)": median([r["wall_s"] for r in results[FLOOR]]), "target": "-",
                         "verdict": "-"})
    for m in todo:
        rs = results[m.name]
        failed = [r for r in rs if r["rc"]]
        cpu = median([r["cpu_s"] for r in rs])
        wall = median([r["wall_s"] for r in rs])
        ok = None if m.target_s is None else (not failed and cpu <= m.target_s)
        verdict = ("failed: " + failed[0]["error"]) if failed else "-" if ok is None else "met" if ok else "MISSED"
        rows = rs[-1]["rows"]
        name = m.name + (f" ({rows:,} rows)" if isinstance(rows, int) else "")
        section.rows.append({"group": m.group, "measure": name, "CPU s (median)": cpu, "x floor": cpu / floor,
                             "wall s (median)": wall, "target": f"<= {m.target_s} s" if m.target_s else "-",
                             "verdict": verdict})
        if m.target_s is not None:
            section.targets.append(Target(m.name, f"<= {m.target_s} s CPU", f"{cpu:.2f} s CPU ({cpu / floor:.0f}x "
                                          f"the floor), {wall:.2f} s wall", ok,
                                          failed[0]["error"] if failed else ""))
    for m in skipped:
        section.rows.append({"group": m.group, "measure": m.name, "verdict": f"not measured: {no_mlflow}"})
    pairs = [(a, b) for a, b in zip(todo, todo[1:]) if b.needs == "mlflow" and a.needs != "mlflow"]
    for a, b in pairs:
        ca, cb = median([r["cpu_s"] for r in results[a.name]]), median([r["cpu_s"] for r in results[b.name]])
        section.notes.append(f"{a.name} / {b.name}: {ca:.3g} s / {cb:.3g} s CPU = {ca / cb:.2f}x")
    section.notes += [
        f"Database: SQLite (WAL), {big.runs:,} runs, {big.metric_points:,} metric points (bench/dbgen.py), "
        f"cached in {big.root}; commands run on a copy.",
        f"Each measure: a fresh process, {rounds} interleaved rounds (every measure once per round, in turn, after "
        "one warm-up each), median. CPU s = user + sys of the process (getrusage); rows marked warm or 'server CPU' "
        "time their own part with the process's CPU clock. x floor = CPU s / the floor's CPU s in the same loop.",
        "Byte code: the children run without PYTHONDONTWRITEBYTECODE (this machine sets it), so, as for a user, "
        "cemctl's modules are compiled once (at the warm-up), not at every run.",
    ]
