"""A run's test-time recursion evaluations: `evals.json` (`cemctl eval` writes it, ingest mirrors it): one reader.

    rows = read_evals(run_dir)     # [] when the run has none; EvalsUnreadable (one line) when it cannot be read

The shape: {"run_id": text, "evals": [{"attn_steps": int >= 1, "mlp_steps": int >= 1, ...numbers or null,
"sublayer": text}]}. A file that exists but cannot be read (not JSON, a bad row, too large, not a regular file)
is never taken for "no evaluations": `cemctl eval` refuses to merge into it (its rows would be lost) and ingest
keeps the rows it mirrored. Torch-free.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cem_core.runfiles.files import EVALS_FILE, RunFileError, read_run_json_strict

RECOVER = "fix the file by hand (it is JSON) or move it aside; `cemctl eval` writes a new one"
RECOVER_LINK = "move it aside; `cemctl eval` writes a new one"  # a link or a special file: nothing to fix by hand


NUMBERS = ("eval_steps", "test_loss", "test_ppl", "test_tokens", "flops_per_token", "trained_attn_steps",
           "trained_mlp_steps", "time", "eval_time_s")  # numbers or null where present; other keys are free text


_MISSING = object()  # no evals.json (a file holding `null` is a bad shape, not "none")


class EvalsUnreadable(RunFileError):
    """An evals.json that exists but cannot be read as evaluations."""


def _number(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def read_evals(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of RUN_DIR/evals.json (the whole shape checked); [] when there is none."""
    path = Path(run_dir) / EVALS_FILE
    doc = read_run_json_strict(run_dir, EVALS_FILE, EvalsUnreadable, RECOVER, recover_refused=RECOVER_LINK,
                               missing=_MISSING)
    if doc is _MISSING:
        return []
    if not isinstance(doc, dict) or not isinstance(doc.get("evals"), list):
        raise EvalsUnreadable(f'{path}: must be {{"run_id": ..., "evals": [...]}}; {RECOVER}')
    for i, row in enumerate(doc["evals"]):
        ok = (isinstance(row, dict)
              and all(isinstance(row.get(k), int) and not isinstance(row.get(k), bool) and row[k] >= 1
                      for k in ("attn_steps", "mlp_steps"))
              and all(_number(row.get(k)) for k in NUMBERS)
              and isinstance(row.get("sublayer", "both"), str))
        if not ok:
            raise EvalsUnreadable(f"{path}: evals[{i}] must hold attn_steps and mlp_steps (integers >= 1), numbers "
                                  f"or null for {', '.join(NUMBERS)}, and a sublayer name; {RECOVER}")
    return list(doc["evals"])
