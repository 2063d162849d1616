"""What counts as a run's result, in one place: the frozen `RunResult`, checked where the trainer writes it and
wherever it is read (the launcher, the executors, cancel, ingest, the live view and import all ask here).

    RunResult.parse({"state": "done", "test_loss": 1.5})   -> RunResult(state="done", test_loss=1.5, ...)
    RunResult.parse({"state": "done", "test_loss": None})  -> NotAResult: state done but test_loss is None (allowed: ...)
    read_result_file(run_dir, now=t) -> ResultFile(result, mtime, problem)  # result.json read by that rule
    read_result(run_dir) -> RunResult | None                                # the same, for showing and liveness
    aside_folders(run_dir) -> [".outdated-20261125T101500Z", ...]         # earlier results set aside

A result is a JSON object whose `state` is a terminal state (`RESULT_STATES`); a `done`
result has a test loss that is a finite number >= 0 (cross-entropy, MSE). Anything else
in result.json makes the run `damaged` (never retrained silently, never called finished).
A field that is not a usable number (`number`: a bool, NaN, infinity, text, an integer
beyond 64 bits) is dropped, never the result. What a task adds (the GP study's RMSEs and
counts) is kept in `extras`. Folders whose name starts with an ASIDE prefix hold files a repair or a rerun moved out of
the run's way (`cemctl launch --redo-damaged`, `--rerun-outdated`): they are the run's
history, never moved again. Torch-free.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from cem_core.errors import CemError
from cem_core.runfiles.files import RESULT_FILE, RESULT_STATES, RunFileError, number, read_run_file

# A result.json that is not valid JSON is damaged once it is this old; newer, it may be a copy still arriving (a
# file system that shows a rename before its data): judged again later, and never read as "no result".
UNREADABLE_GRACE_S = 60.0

QUARANTINE_PREFIX = ".damaged-"
OUTDATED_PREFIX = ".outdated-"
ASIDE_PREFIXES = (QUARANTINE_PREFIX, OUTDATED_PREFIX)


class NotAResult(CemError):
    """result.json holds no result (one line, naming what is allowed)."""


@dataclass(frozen=True)
class RunResult:
    """result.json, typed: the trainer's outcome of one attempt. Numbers are usable numbers or None."""

    state: str
    test_loss: float | None = None
    test_ppl: float | None = None
    val_loss: float | None = None
    val_ppl: float | None = None
    params_total: int | None = None
    params_non_embedding: int | None = None
    flops_per_token: int | None = None
    train_flops: float | None = None
    tokens: int | None = None
    steps: int | None = None
    total_steps: int | None = None
    wall_time_s: float | None = None
    error: str | None = None
    diverged_step: int | None = None
    test_tokens: int | None = None
    val_tokens: int | None = None
    attempt: int | None = None
    world_size: int | None = None
    device: str | None = None
    host: str | None = None
    run_id: str | None = None
    code_fingerprint: str | None = None  # the model code that trained it (letters and digits, at most 32)
    extras: Mapping[str, Any] = field(default_factory=dict)  # what the task adds (test_rmse, val_rmse, ...)

    def __post_init__(self) -> None:
        if self.state not in RESULT_STATES:
            raise NotAResult(f"not a result (state {self.state!r}; allowed states: {', '.join(RESULT_STATES)})")
        loss = self.test_loss
        if self.state == "done" and (number(loss) is None or loss < 0):  # type: ignore[operator]
            raise NotAResult(f"state done but test_loss is {repr(loss)[:60]} (allowed: a finite number >= 0)")
        for name, kind in _KINDS:
            value = getattr(self, name)
            if kind is str:
                if value is not None:
                    object.__setattr__(self, name, str(value))
            else:
                object.__setattr__(self, name, number(value, kind))
        code = self.code_fingerprint
        if code is not None and not (code.isalnum() and len(code) <= 32):
            object.__setattr__(self, "code_fingerprint", None)

    @classmethod
    def parse(cls, obj: Any) -> "RunResult":
        """result.json's parsed JSON as a RunResult; `NotAResult` (one line) when it is none."""
        if not isinstance(obj, dict):
            raise NotAResult(f"not a result (a JSON {type(obj).__name__}; allowed states: {', '.join(RESULT_STATES)})")
        return cls(**{k: v for k, v in obj.items() if k in _KNOWN},
                   extras={k: v for k, v in obj.items() if k not in _KNOWN})

    def to_json(self) -> dict[str, Any]:
        """The object written to result.json (the task's extras beside the fields)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extras"}
        return {**dict(self.extras), **out}


_KINDS = tuple((f.name, {"float | None": float, "int | None": int, "str | None": str}[str(f.type)])
               for f in dataclasses.fields(RunResult) if f.name not in ("state", "extras"))
_KNOWN = frozenset(f.name for f in dataclasses.fields(RunResult)) - {"extras"}


def result_problem(res: Any) -> str:
    """"" when `res` (result.json, parsed) is a result, else why not (one line, naming what is allowed)."""
    try:
        RunResult.parse(res)
    except NotAResult as e:
        return str(e)
    return ""


@dataclass
class ResultFile:
    """What a run's result.json says, by the one rule (ingest, the launcher, cancel, the live view, import)."""

    result: RunResult | None  # a result, else None
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
    try:
        return ResultFile(RunResult.parse(res), mtime)
    except NotAResult as e:
        return ResultFile(None, mtime, f"{RESULT_FILE}: {e}")


def read_result(run_dir: str | os.PathLike[str]) -> RunResult | None:
    """The run's result by the one rule, or None (none, not readable yet, or not a result): for showing a result and
    for liveness (a job whose run wrote one has ended). What to start or stop asks `read_result_file`, which tells
    "no result" from "damaged" and "not readable yet"."""
    return read_result_file(run_dir).result


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
