"""Timing helpers for `python -m bench`: round-robin (ABAB...) timing and robust summaries."""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable


def time_round_robin(
    fns: dict[str, Callable[[], object]], *, warmup: int, repeats: int, calls_per_repeat: int,
    min_round_s: float = 0.0,
) -> dict[str, dict[str, list[float]]]:
    """Seconds per call of each function, measured alternately in one process.

    Returns {name: {"wall": [...], "cpu": [...]}}: wall-clock and process CPU
    seconds per call, one entry per round. With one intra-op thread the CPU
    time is the compute the call needed, not counting the time the process
    waited for a core, so it is the steadier number on a loaded machine.

    Every function is warmed up first (the last warm-up call is timed to size
    the rounds); then each repeat runs every function in turn, A A B B ...
    A A B B ..., so slow drifts of the machine (other processes, frequency)
    hit all of them alike. A function runs `calls_per_repeat` times per round,
    or more so that one round lasts at least `min_round_s` (short calls).
    """
    calls: dict[str, int] = {}
    for name, fn in fns.items():
        t = 0.0
        for _ in range(max(1, warmup)):
            t0 = time.perf_counter()
            fn()
            t = time.perf_counter() - t0
        calls[name] = max(calls_per_repeat, math.ceil(min_round_s / max(t, 1e-6)))
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(calls[name]):
                fn()
            times[name]["wall"].append((time.perf_counter() - t0) / calls[name])
            times[name]["cpu"].append((time.process_time() - c0) / calls[name])
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float]) -> float:
    """Relative spread of repeated timings: (max - min) / median."""
    if len(xs) < 2:
        return 0.0
    return (max(xs) - min(xs)) / statistics.median(xs)


def time_wall(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out
