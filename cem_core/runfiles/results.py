"""What counts as a run's result, in one place (the launcher, the executors, ingest and import all ask here).

    result_problem({"state": "done", "test_loss": 1.5}) -> ""             # a result
    result_problem({"state": "done", "test_loss": None}) -> "state done but test_loss is None (allowed: ...)"
    aside_folders(run_dir) -> [".outdated-20261125T101500Z", ...]         # earlier results set aside

A result is a JSON object whose `state` is a terminal state (`RESULT_STATES`); a `done`
result has a test loss that is a finite number >= 0 (cross-entropy, MSE). Anything else
in result.json makes the run `damaged` (never retrained silently, never called finished).
Folders whose name starts with an ASIDE prefix hold files a repair or a rerun moved out of
the run's way (`cemctl launch --redo-damaged`, `--rerun-outdated`): they are the run's
history, never moved again. Torch-free.
"""

from __future__ import annotations

import math
import os
from typing import Any

from cem_core.runfiles.files import RESULT_STATES

QUARANTINE_PREFIX = ".damaged-"
OUTDATED_PREFIX = ".outdated-"
ASIDE_PREFIXES = (QUARANTINE_PREFIX, OUTDATED_PREFIX)


def result_problem(res: Any) -> str:
    """"" when `res` (result.json, parsed) is a result, else why not (one line, naming what is allowed)."""
    if not isinstance(res, dict) or res.get("state") not in RESULT_STATES:
        what = f"a JSON {type(res).__name__}" if not isinstance(res, dict) else f"state {res.get('state')!r}"
        return f"not a result ({what}; allowed states: {', '.join(RESULT_STATES)})"
    if res["state"] == "done":
        loss = res.get("test_loss")
        if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not math.isfinite(loss) or loss < 0:
            return f"state done but test_loss is {repr(loss)[:60]} (allowed: a finite number >= 0)"
    return ""


def aside_folders(run_dir: str | os.PathLike[str]) -> list[str]:
    """The run's set-aside folders (oldest first: their names carry the UTC time they were made)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(ASIDE_PREFIXES) and os.path.isdir(os.path.join(run_dir, n)))


def aside_time(folder: str) -> float | None:
    """The UTC time in a set-aside folder's name ('.outdated-20261125T101500Z[-2]'), as unix seconds."""
    import calendar
    import time

    stamp = folder.split("-", 2)[1] if folder.count("-") >= 1 else ""
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ")))
    except ValueError:
        return None
