"""`python -m bench [--quick] [--out DIR] [--only NAMES]`: run the benchmarks, write the tables.

Writes DIR/latest.md and DIR/latest.json (default DIR: bench/results). With
`--only`, the sections measured now replace theirs in the existing files and the
others are kept, each section saying when, at which commit and under what load it
was measured. Each benchmark that fails is recorded as skipped with its error;
the others still run.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

from bench import env
from bench.settings import Settings
from bench.table import Section, write_results

BENCHMARKS = ("train", "variants", "mfu", "gpu", "gpu_attention", "gpu_memory", "speed", "cli", "ingest", "data",
              "serve", "environment")
GPU_BENCHMARKS = ("gpu", "gpu_attention", "gpu_memory")


def _runners() -> dict[str, Callable[[Settings, dict[str, Section]], Section]]:
    from bench import data_prepare, gpu, mfu, train_speed, variants

    def orchestration(name: str) -> Callable[[Settings, dict[str, Section]], Section]:
        def run(s: Settings, done: dict[str, Section]) -> Section:
            from bench import orchestration as orch

            return orch.run_cli(s) if name == "cli" else orch.run_ingest(s)
        return run

    return {
        "train": lambda s, done: train_speed.run(s),
        "variants": lambda s, done: variants.run(s),
        "mfu": lambda s, done: mfu.run(s, done.get("train") or Section("train", "")),
        "gpu": lambda s, done: gpu.run(s),
        "gpu_attention": lambda s, done: gpu.run_sublayer(s),
        "gpu_memory": lambda s, done: gpu.run_memory(s),
        "cli": orchestration("cli"),
        "ingest": orchestration("ingest"),
        "data": lambda s, done: data_prepare.run(s),
        "serve": lambda s, done: _serve(s),
        "environment": lambda s, done: _environment(s),
        "speed": lambda s, done: _speed(s),
    }


def _speed(s: Settings) -> Section:
    from bench import speed

    return speed.run(s)


def _environment(s: Settings) -> Section:
    from bench import run_environment

    return run_environment.run(s)


def _serve(s: Settings) -> Section:
    from bench import dashboard

    return dashboard.run(s)


def parse_args(argv: list[str]) -> tuple[Settings, list[str]]:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smallest inputs, only checks that everything runs")
    p.add_argument("--out", type=Path, default=None, help="output folder (default bench/results)")
    p.add_argument("--only", default=",".join(BENCHMARKS), help=f"comma list of: {', '.join(BENCHMARKS)}")
    p.add_argument("--gpu", action="store_true", help=f"only the GPU benchmarks ({', '.join(GPU_BENCHMARKS)})")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default 1)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds per model")
    p.add_argument("--sizes", default=None, help="comma list of sizes for the HF comparison")
    p.add_argument("--variant-size", default=None, help="size of the CEM variant comparison")
    p.add_argument("--scale", type=float, default=None, help="orchestration DB size (1.0: 10,000 runs, 10M points)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--gpu-rows", default="", help="comma list of the gpu section's rows to time (1-based; default all)")
    p.add_argument("--gpu-profile", default="", help="comma list of those rows to profile (torch.profiler's top "
                   "kernels, after the timed steps)")
    p.add_argument("--gpu-memory-sizes", default="", help="comma list of the gpu_memory section's sizes (default all)")
    a = p.parse_args(argv)
    out = a.out or env.REPO_ROOT / "bench" / "results"
    s = Settings.quick_mode(out) if a.quick else Settings(out_dir=out)
    for attr, value in (("threads", a.threads), ("repeats", a.repeats), ("variant_size", a.variant_size),
                        ("scale", a.scale)):
        if value is not None:
            setattr(s, attr, value)
    if a.sizes:
        s.sizes = a.sizes.split(",")
    if a.no_memory:
        s.memory = False
    s.gpu_rows = a.gpu_rows
    s.gpu_profile_rows = a.gpu_profile
    s.gpu_memory_sizes = a.gpu_memory_sizes
    only = list(GPU_BENCHMARKS) if a.gpu else [x for x in a.only.split(",") if x]
    unknown = sorted(set(only) - set(BENCHMARKS))
    if unknown:
        p.error(f"--only: unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    if "mfu" in only and "train" not in only:
        only.insert(0, "train")
    return s, [b for b in BENCHMARKS if b in only]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    s, selected = parse_args(argv)
    meta = env.metadata_block()
    meta["command"] = "python -m bench " + " ".join(argv)
    meta["load_start"] = env.load_average()
    meta["settings"] = s.public()
    runners = _runners()
    done: dict[str, Section] = {}
    t_all = time.perf_counter()
    for name in selected:
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        try:
            section = runners[name](s, done)
        except Exception as e:
            traceback.print_exc()
            section = Section(name, name, skipped=f"failed: {type(e).__name__}: {e}"[:300])
        section.seconds = time.perf_counter() - t0
        section.measured = (f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, commit {meta['git_commit']}, "
                            f"load {env.load_average()}")
        done[name] = section
        print(f"[bench] {name} done in {section.seconds:.0f} s", flush=True)
        # Write after every benchmark so an interrupted run keeps what it measured.
        meta["load_end"] = env.load_average()
        meta["total_seconds"] = round(time.perf_counter() - t_all, 1)
        md, js = write_results(s.out_dir, meta, list(done.values()), merge=len(selected) < len(BENCHMARKS))
    print(f"[bench] wrote {md} and {js} in {time.perf_counter() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
