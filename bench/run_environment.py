"""What a run pays to record where it ran (`python -m bench --only environment`): `gather_environment` on the CPU
(host, CPU, versions, code snapshot; the GPU's model, memory and driver where there is one), once per attempt."""

from __future__ import annotations

import statistics
import time

from bench.settings import Settings
from bench.table import Section, Target

GOAL_MS = 100.0  # a run's start should not notice it


def run(s: Settings) -> Section:
    import torch

    from cem_core.train.environment import gather_environment

    section = Section("environment", "Recording a run's environment (environment.json) at its start",
                      columns=["device", "calls", "median ms", "min ms", "max ms", "target", "verdict"])
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    gather_environment(device, attempt=1, code_fingerprint="0" * 12)  # first call: imports and caches
    costs = []
    for _ in range(3 if s.quick else 20):
        t0 = time.perf_counter()
        gather_environment(device, attempt=1, code_fingerprint="0" * 12)
        costs.append((time.perf_counter() - t0) * 1000)
    med = statistics.median(costs)
    ok = med < GOAL_MS
    section.rows.append({"device": str(device), "calls": len(costs), "median ms": round(med, 2),
                         "min ms": round(min(costs), 2), "max ms": round(max(costs), 2),
                         "target": f"< {GOAL_MS:.0f} ms", "verdict": "met" if ok else "MISSED"})
    section.targets.append(Target("gather_environment", f"< {GOAL_MS:.0f} ms", f"{med:.1f} ms median", ok))
    section.notes.append("Wall time of `cem_core.train.environment.gather_environment` after a first call; the "
                         "trainer calls it once per attempt and records its own cost as gather_ms.")
    return section
