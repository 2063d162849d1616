"""Model FLOP utilisation on the CPU (`python -m bench`): model FLOP/s over a measured matmul peak.

Achieved FLOP/s = `cem_core.counts.train_flops_per_token` (exact matmul FLOPs
of forward + backward = 3 x forward) x measured training tokens/s. The peak is
the best of several large square float32 matrix products on the same machine
with the same number of threads (so MFU < 1 is the share of the machine's
practical matmul throughput that training reaches).
"""

from __future__ import annotations

import time

import torch

from bench.settings import Settings
from bench.table import Section


def matmul_peak_flops(n: int, *, threads: int | None = None, dtype: torch.dtype = torch.float32,
                      device: str = "cpu", repeats: int = 7, clock: str = "wall") -> tuple[float, list[float]]:
    """(best FLOP/s, every repeat's FLOP/s) of an n x n x n product `a @ b`.

    clock="cpu" divides by the process CPU time (CPU only; per core-second of compute when threads=1).
    """
    if threads is not None:
        torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    out = torch.empty(n, n, device=device, dtype=dtype)
    for _ in range(2):
        torch.matmul(a, b, out=out)
    sync()
    inner = 1 if device == "cpu" else 20
    timer = time.process_time if clock == "cpu" else time.perf_counter
    rates = []
    for _ in range(repeats):
        t0 = timer()
        for _ in range(inner):
            torch.matmul(a, b, out=out)
        sync()
        rates.append(inner * 2 * n**3 / (timer() - t0))
    return max(rates), rates


def run(s: Settings, train: Section) -> Section:
    n = 512 if s.quick else 2048
    peak, rates = matmul_peak_flops(n, threads=s.threads, repeats=3 if s.quick else 7, clock="cpu")
    peak_wall, _ = matmul_peak_flops(n, threads=s.threads, repeats=3 if s.quick else 7, clock="wall")
    section = Section("mfu_cpu", "Model FLOP utilisation on the CPU (float32)",
                      columns=["size", "train GFLOP/token", "impl", "tokens/s", "achieved GFLOP/s",
                               "matmul peak GFLOP/s", "MFU", "MFU wall"])
    for row in train.rows:
        flops = row.get("train_flops_per_token")
        if not flops:
            continue
        for impl, key in (("ours", "ours tokens/s"), ("HF", "HF tokens/s")):
            achieved = flops * row[key]
            wall = flops * row.get(key.replace(" tokens/s", " wall tokens/s"), 0.0)
            section.rows.append({"size": row["size"], "train GFLOP/token": flops / 1e9, "impl": impl,
                                 "tokens/s": row[key], "achieved GFLOP/s": achieved / 1e9,
                                 "matmul peak GFLOP/s": peak / 1e9, "MFU": f"{100 * achieved / peak:.1f}%",
                                 "MFU wall": f"{100 * wall / peak_wall:.1f}%"})
    section.notes += [
        f"Peak = best of {len(rates)} float32 {n}x{n}x{n} products with {s.threads} thread(s), per second of "
        "process CPU time: " + ", ".join(f"{r / 1e9:.1f}" for r in rates) + " GFLOP/s. Training tokens/s are "
        "per CPU second too (see the HF table), so MFU is the share of the core's matmul throughput that "
        f"training reaches. 'MFU wall': wall-clock tokens/s over the wall-clock peak ({peak_wall / 1e9:.1f} GFLOP/s).",
        "FLOPs per token from cem_core.counts.train_flops_per_token (matmul FLOPs only, 3 x forward, dense "
        "L x L attention scores; element-wise work is not counted), the same count for HF (same architecture).",
    ]
    return section
