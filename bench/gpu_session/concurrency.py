"""Many small runs on one GPU: throughput of 1, 2, 4, 8 concurrent 20M runs (issue 50, item 3).

    python bench/gpu_session/concurrency.py --jobs 1,2,4,8 --out DIR [--steps 100] [--budget-s 90] [--warm-steps 10]

First a warm-up launch (one run of --warm-steps steps, not in the table) prepares the corpus cache and fills one
inductor cache ($TORCHINDUCTOR_CACHE_DIR), so that no N pays what the others reuse. Then for each N, a project
folder of its own gets concurrency.toml (beside this file) with seeds 0..N-1, and `cemctl launch --gpus 0
--jobs-per-gpu N` trains them at once on GPU 0. A launch past --budget-s is stopped with every trainer it started
(they run in sessions of their own), so the next N starts on an idle GPU. One `[concurrency]` line an N, and
concurrency.json / concurrency.md rewritten after each:
- launch s: the launch's wall time (start-up, compiling, training and the final evaluation): what a grid costs;
- tokens/s, launch: every run's training tokens over that wall time;
- tokens/s, steady: the sum over runs of each run's median logged tokens/s over the second half of its steps
  (the trainer's own interval rate, evaluation excluded), while all N train;
- vs 1: the steady figure over N=1's.
The best N is the one with the most launch tokens/s; `table` turns the rows into the README's table. Every run's
folder is read through cem_core.runfolder and cem_core.runfiles (the product's readers). Runs only on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cem_core.runfiles import METRICS_FILE, iter_jsonl
from cem_core.runfolder import read_folder

GRID = Path(__file__).with_name("concurrency.toml")


def grid_text(n: int, steps: int) -> str:
    """concurrency.toml with seeds 0..n-1 and `steps` optimizer steps."""
    text = GRID.read_text()
    assert "seeds = [0]" in text and '"train.max_steps" = 100' in text, "concurrency.toml's seeds/steps lines moved"
    return (text.replace("seeds = [0]", f"seeds = {list(range(n))}")
            .replace('"train.max_steps" = 100', f'"train.max_steps" = {steps}'))


def steady_tokens_per_s(run_dir: Path) -> float | None:
    """Median of the run's logged training tokens/s over the second half of its logged steps (None if none)."""
    rates = [float(m["tokens_per_s"]) for m in iter_jsonl(run_dir / METRICS_FILE)
             if m.get("kind") == "train" and isinstance(m.get("tokens_per_s"), (int, float))]
    tail = rates[len(rates) // 2:]
    return statistics.median(tail) if tail else None


def measure(runs_dir: Path, n: int, launch_s: float) -> dict[str, Any]:
    """One table row from the run folders a launch of `n` concurrent runs left, and its wall time."""
    tokens, steady, done = 0, [], 0
    folders = sorted(p for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if runs_dir.is_dir() else []  # a launch that failed before planning left none
    for run_dir in folders:
        result = read_folder(run_dir).result.result
        if result is not None and result.state == "done":
            done += 1
            tokens += result.tokens or 0
            rate = steady_tokens_per_s(run_dir)
            if rate is not None:
                steady.append(rate)
    return {"jobs": n, "done": done, "launch s": round(launch_s, 1),
            "tokens/s, launch": round(tokens / launch_s) if launch_s > 0 and done == n else None,
            "tokens/s, steady": round(sum(steady)) if len(steady) == n else None,
            "per run, steady": round(statistics.mean(steady)) if steady else None}


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of the rows, with each N's steady throughput against N=1's and the best N named."""
    base = next((r["tokens/s, steady"] for r in rows if r["jobs"] == 1 and r["tokens/s, steady"]), None)
    out = ["| runs at once | done | launch s | tokens/s (launch) | tokens/s (steady) | per run (steady) | vs 1 |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        vs = f"{r['tokens/s, steady'] / base:.2f}x" if base and r["tokens/s, steady"] else "-"
        cells = [r["jobs"], f"{r['done']}/{r['jobs']}", r["launch s"], r["tokens/s, launch"], r["tokens/s, steady"],
                 r["per run, steady"], vs]
        out.append("| " + " | ".join("-" if c is None else f"{c:,}" if isinstance(c, int) else str(c)
                                     for c in cells) + " |")
    best = max((r for r in rows if r["tokens/s, launch"]), key=lambda r: r["tokens/s, launch"], default=None)
    if best:
        out.append(f"\nMost tokens/s over a whole launch: {best['jobs']} runs at once.")
    return "\n".join(out)


def processes_naming(text: str) -> list[int]:
    """Pids of this machine's processes (not this one) whose command line contains `text` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


def stop(pids: list[int], grace_s: float) -> None:
    """SIGTERM, then SIGKILL for those still alive after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.5)


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()  # a zombie has stopped
    except OSError:
        return False


def _launch(cmd: list[str], log_path: Path, env: dict[str, str], budget_s: float, work: Path) -> int:
    """Run `cmd` (its output to `log_path`); past `budget_s` the launch and every process whose command line names
    `work` (its trainers run in sessions of their own, and stop only after a step) are stopped, and 124 returned."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            return proc.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            stop([proc.pid, *processes_naming(str(work) + os.sep)], grace_s=45)
            proc.wait()
            return 124


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", default="1,2,4,8")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--budget-s", type=int, default=90, help="time box of one launch")
    p.add_argument("--warm-steps", type=int, default=10, help="steps of the warm-up launch (0: none)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR",
                                                                   str(Path(tempfile.gettempdir()) / "inductor-shared"))}
    rows: list[dict[str, Any]] = []
    plan = [("warm-up", 1, a.warm_steps)] if a.warm_steps else []
    for label, n, steps in plan + [(str(n), n, a.steps) for n in (int(x) for x in a.jobs.split(","))]:
        work = Path(tempfile.mkdtemp(prefix=f"concurrency{label}-"))  # a folder of its own: nothing there before
        grid = work / "concurrency.toml"
        grid.write_text(grid_text(n, steps))
        t0 = time.perf_counter()
        rc = _launch([sys.executable, "-m", "cemctl.cli", "launch", str(grid), "--gpus", "0", "--jobs-per-gpu",
                      str(n), "--db", str(work / "results.db"), "--runs-dir", str(work / "runs")],
                     a.out / f"launch-{label}.log", env, a.budget_s, work)
        row = {**measure(work / "runs", n, time.perf_counter() - t0), "exit": rc}
        print(f"[concurrency] {label}: {json.dumps(row)}", flush=True)
        if label == "warm-up":
            continue
        rows.append(row)
        (a.out / "concurrency.json").write_text(json.dumps(rows, indent=1))
        (a.out / "concurrency.md").write_text(table(rows) + "\n")
    print(table(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
