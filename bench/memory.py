"""Runs `bench.probe` in a fresh subprocess per model and returns its peak-RSS numbers (`python -m bench`)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from cem_core.config import ModelConfig

from bench.env import REPO_ROOT


def peak_memory(impl: str, m: ModelConfig, batch_seqs: int, *, threads: int, steps: int = 2,
                timeout_s: float = 600) -> dict[str, float | str]:
    """{"rss_base_mib", "rss_peak_mib", "peak_delta_mib"} or {"error": ...} if the probe failed."""
    spec = {"impl": impl, "model": dataclasses.asdict(m), "batch_seqs": batch_seqs, "steps": steps, "threads": threads}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.probe", json.dumps(spec)], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"probe timed out after {timeout_s:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"probe exited {proc.returncode}: {tail[0][:200]}"}
    return json.loads(lines[-1])
