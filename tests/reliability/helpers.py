"""Shared helpers of the reliability suite: running the real CLI and trainer as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_DIR = Path(__file__).resolve().parent / "hostile_grids"


def env(**extra: str) -> dict[str, str]:
    """A subprocess environment that imports this checkout and uses one thread per process."""
    out = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CEMCTL_NUM_THREADS": "1"}
    for key in ("CEMCTL_DB", "CEMCTL_RUNS"):
        out.pop(key, None)
    out.update(extra)
    return out


def cemctl(*args: str, cwd: Path | str | None = None, timeout: float = 120, **env_extra: str) -> subprocess.CompletedProcess:
    """`python -m cemctl.cli ARGS` in a subprocess (text output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "cemctl.cli", *args], cwd=cwd, env=env(**env_extra), capture_output=True, text=True,
        timeout=timeout,
    )


def assert_clean_error(proc: Any, *, code: int = 2, contains: str = "") -> str:
    """The process failed with `code` and printed exactly one non-empty line, no traceback; returns it."""
    stderr = getattr(proc, "stderr", "") or ""
    stdout = getattr(proc, "stdout", "") or ""
    rc = getattr(proc, "returncode", getattr(proc, "exit_code", None))
    assert rc == code, f"exit code {rc}, expected {code}\nstdout: {stdout}\nstderr: {stderr}"
    lines = [ln for ln in (stderr + stdout).splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n" + "\n".join(lines[:20])
    assert "Traceback" not in stderr + stdout
    assert lines[0].startswith("error: "), lines[0]
    assert contains in lines[0], f"{contains!r} not in {lines[0]!r}"
    return lines[0]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return out
    for line in raw.split(b"\n"):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def tiny_grid(name: str, *, steps: int = 6, ckpt: int = 2, seeds: str = "[0, 1]", cache_dir: str = "") -> str:
    """A grid of tiny, fast CPU runs (nano model, byte tokenizer, 32-token context)."""
    cache = f'"data.cache_dir" = "{cache_dir}"\n' if cache_dir else ""
    return f"""seeds = {seeds}

[experiment]
name = "{name}"
figure = "curves"

[base]
"model.size" = "nano"
"model.context_len" = 32
"data.tokenizer" = "byte"
{cache}"train.max_steps" = {steps}
"train.batch_seqs" = 4
"train.micro_batch_seqs" = 4
"train.log_every_steps" = 1
"train.eval_every_steps" = {steps}
"train.ckpt_every_steps" = {ckpt}
"train.ckpt_keep" = 2
"train.val_tokens" = 256
"train.test_tokens" = 256
"""
