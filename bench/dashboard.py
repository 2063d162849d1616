"""`cemctl serve` on the large results database (`python -m bench --only serve`): how long pages take.

The database of `bench/dbgen.py` (at scale 1: 10,000 finished runs, 10M metric points; fig2a
plus filler experiments of 1,000 runs each) is served read-only by a real server (`cemctl.serve.start`)
in this process; every page is fetched over HTTP with `urllib` as a browser would, its data requests
(the charts' JSON, the live table's refresh) timed separately. "cold": the first request after the
server started (empty cache: the run records are read from the database); "warm": median of N more
(the database unchanged, so the records come from the per-state cache; the live table still reads
its in-flight runs' folders and renders every time). Targets (issue 34): the experiment page and one
run page under 1 s each at 10,000 runs.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from bench import dbgen
from bench.settings import Settings
from bench.table import Section, Target
from bench.timing import median

TARGET_S = 1.0


def _fetch(url: str) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=300) as resp:
        body = resp.read()
        status = resp.status
    return time.perf_counter() - t0, status, len(body)


def run(s: Settings) -> Section:
    section = Section("serve", "cemctl serve: page times on the large results database",
                      columns=["page", "request", "cold s", "warm s (median)", "bytes", "target", "verdict"])
    big = dbgen.build(s.cache_dir, s.scale, log=lambda m: print(m, flush=True))
    from cemctl.serve import start

    t0 = time.perf_counter()
    server = start(big.url, big.runs_root, port=0)
    started = time.perf_counter() - t0
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    base = server.url.rstrip("/")
    repeats = max(3, s.cli_repeats)
    try:
        from cemctl.records import load_records

        recs = load_records(server.app.src.engine, None, per_experiment=True, arms=False)
        sizes: dict[str, int] = {}
        for r in recs.records:
            sizes[r["experiment"]] = sizes.get(r["experiment"], 0) + 1
        largest = max((n for n in sizes if n != big.report_experiment), key=lambda n: sizes[n], default=None)
        one_run = next(r["run_id"] for r in recs.records if r["experiment"] == big.report_experiment)
        pages: list[tuple[str, list[tuple[str, str]], bool]] = [
            ("experiments (index)", [("page", "/"), ("claims (every recorded run)", "/claims")], False)]
        for name in [big.report_experiment, largest]:
            if name is None:
                continue
            label = f"experiment {name} ({sizes[name]:,} runs)"
            pages.append((label, [("page", f"/experiments/{name}"), ("live table refresh", f"/experiments/{name}/live"),
                                  ("arms table", f"/experiments/{name}/arms"),
                                  ("metric chart data", f"/experiments/{name}/metric.json"),
                                  ("curves data", f"/experiments/{name}/curves.json")], True))
        pages.append((f"run {one_run}", [("page", f"/runs/{one_run}"), ("curves data", f"/runs/{one_run}/curves.json"),
                                         ("system data", f"/runs/{one_run}/system.json")], True))
        for label, requests, targeted in pages:
            cold_total = warm_total = 0.0
            for what, path in requests:
                cold, status, size = _fetch(base + path)
                warm = median([_fetch(base + path)[0] for _ in range(repeats)])
                cold_total += cold
                warm_total += warm
                section.rows.append({"page": label, "request": f"{what}: {path}", "cold s": cold,
                                     "warm s (median)": warm, "bytes": size, "target": "-",
                                     "verdict": "-" if status == 200 else f"HTTP {status}"})
            if targeted:
                page_cold = section.rows[-len(requests)]["cold s"]
                ok = page_cold < TARGET_S
                section.rows.append({"page": label, "request": "all of the above, one after another",
                                     "cold s": cold_total, "warm s (median)": warm_total, "bytes": "",
                                     "target": f"page < {TARGET_S} s", "verdict": "met" if ok else "MISSED"})
                section.targets.append(Target(f"serve: {label}", f"< {TARGET_S} s",
                                              f"page {page_cold:.2f} s cold; with its data requests "
                                              f"{cold_total:.2f} s cold, {warm_total:.2f} s warm", ok,
                                              "" if ok else "see the rows"))
    finally:
        server.shutdown()
        server.server_close()
    section.notes += [
        f"Database: SQLite (WAL), {big.runs:,} runs, {big.metric_points:,} metric points (bench/dbgen.py), opened "
        f"read-only; server start (open + bind) {started:.2f} s.",
        "Each request is a fresh HTTP connection to a real `cemctl.serve` server in this process; cold = the first "
        f"request after start (empty cache), warm = median of {repeats} more. The page's HTML comes first; the "
        "browser then fetches its chart data and refreshes the live table every few seconds (rows below each page).",
        f"Curves average at most {20} seeds per arm ({240} runs per chart); an experiment of 1,000 seeds of one arm "
        "says so under the chart.",
    ]
    return section
