"""What counts as a run's result, in one place (the launcher, the executors, ingest and import all ask here).

    result_problem({"state": "done", "test_loss": 1.5}) -> ""             # a result
    result_problem({"state": "done", "test_loss": None}) -> "state done but test_loss is None (allowed: ...)"
    read_result_file(run_dir, now=t) -> ResultFile(result, mtime, problem)  # result.json read by that rule
    aside_folders(run_dir) -> [".outdated-20261125T101500Z", ...]         # earlier results set aside

A result is a JSON object whose `state` is a terminal state (`RESULT_STATES`); a `done`
result has a test loss that is a finite number >= 0 (cross-entropy, MSE). Anything else
in result.json makes the run `damaged` (never retrained silently, never called finished).
Folders whose name starts with an ASIDE prefix hold files a repair or a rerun moved out of
the run's way (`cemctl launch --redo-damaged`, `--rerun-outdated`): they are the run's
history, never moved again. Torch-free.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from typing import Any

from cem_core.runfiles.files import RESULT_FILE, RESULT_STATES, RunFileError, read_run_file

# A result.json that is not valid JSON is damaged once it is this old; newer, it may be a copy still arriving (a
# file system that shows a rename before its data): judged again later, and never read as "no result".
UNREADABLE_GRACE_S = 60.0

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


@dataclass
class ResultFile:
    """What a run's result.json says, by the one rule (ingest, the launcher, cancel)."""

    result: dict[str, Any] | None  # a result (`result_problem` is ""), else None
    mtime: float | None  # None: there is no result.json
    problem: str = ""  # "result.json: why it is not a result": the run is damaged

    @property
    def pending(self) -> bool:
        """There is a result.json, not readable yet and not (yet) judged damaged: the run has no result to show, and
        nothing may start it over (its file would be replaced)."""
        return self.mtime is not None and self.result is None and not self.problem


def read_result_file(run_dir: str | os.PathLike[str], *, now: float | None = None) -> ResultFile:
    """RUN_DIR/result.json read strictly: missing (no result), a result, or why it is not one. A file refused
    (a link out of the run, a FIFO, too large) or not a result is a problem; a file that is not valid JSON is one
    once older than `UNREADABLE_GRACE_S`, and `pending` until then."""
    try:
        mtime: float | None = os.stat(os.path.join(run_dir, RESULT_FILE)).st_mtime
    except OSError:
        mtime = None
    if mtime is None:
        return ResultFile(None, None)
    try:
        res: Any = json.loads(read_run_file(run_dir, RESULT_FILE))
    except FileNotFoundError:
        return ResultFile(None, None)
    except RunFileError as e:
        return ResultFile(None, mtime, f"{RESULT_FILE}: {str(e).split(': ', 1)[-1]}")
    except (OSError, ValueError, RecursionError) as e:  # garbled or truncated
        why = f"unreadable ({e.strerror or e})" if isinstance(e, OSError) else "not valid JSON (truncated or garbled)"
        old = mtime < (time.time() if now is None else now) - UNREADABLE_GRACE_S
        return ResultFile(None, mtime, f"{RESULT_FILE}: {why}" if old else "")
    problem = result_problem(res)
    return ResultFile(None, mtime, f"{RESULT_FILE}: {problem}") if problem else ResultFile(res, mtime)


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
