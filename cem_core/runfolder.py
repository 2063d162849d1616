"""A run folder as one reading: what its files say now, whether they can be trusted, and the state they give.

    folder = read_folder(run_dir, now=t)       # result.json, the last event, the heartbeat, their times, damage
    folder.damage                              # "" or why the folder cannot be trusted: `damaged`
    state, reason = folder.state(now=t, timeout_s=120, db_state="queued")

The one reader of a run's folder for everything that judges it: ingest (`cemctl sync`, `status`), the live
view of runs in flight (`cemctl.records.live`, the dashboard), import and the trainer's own check before it
starts. Every file goes through `cem_core.runfiles` (regular files inside the run folder only, never blocking,
size-capped); nothing is written.

Damage is what the folder itself contradicts: a config.json that cannot be read or hashes to another run id
than the folder's name (edited, or copied under another name), a result.json that is no result
(`cem_core.runfiles.RunResult`). Ingest adds what only the database can tell (a recorded result gone, a config
that differs from the recorded one) through `extra_damage`.

The state is `derive_state` of the `Evidence`, newest evidence first, file mtimes as the one clock:
- a damage finding -> `damaged` with that reason; nothing else counts;
- result.json -> its state (`done` always wins);
- the last events.jsonl line -> its state;
- heartbeat.json -> `running` (not after `cancelled`, not once a result exists: a result ends an attempt, the
  trainer's last beat may come after it);
- a `running` run whose last sign of life (heartbeat, or the running event) is older than `timeout_s` ->
  `stale` ("no heartbeat for N s");
- no file evidence -> the database's own state (planned, queued) stays.
Pure and tested with `now=` (no sleeping). Torch-free.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cem_core.config import resolve, saved_run_id
from cem_core.errors import ConfigError
from cem_core.names import is_run_id
from cem_core.runfiles import (
    CONFIG_FILE,
    EVENTS_FILE,
    HEARTBEAT_FILE,
    RUN_STATES,
    ResultFile,
    RunFileError,
    confined_path,
    number,
    read_bytes,
    read_result_file,
    read_run_config,
    run_json,
)
from cem_core.schema import RunConfig

_TAIL_BYTES = 8192


@dataclass(frozen=True)
class Evidence:
    """What a run's files (and the database's own record of it) say, for `derive_state`."""

    db_state: str = "planned"
    db_reason: str = ""
    db_state_at: float | None = None
    result_state: str | None = None  # a valid result.json's state
    result_error: str = ""
    result_time: float | None = None  # result.json mtime
    event_state: str | None = None  # the last events.jsonl line
    event_reason: str = ""
    event_time: float | None = None  # events.jsonl mtime (or the line's time)
    heartbeat_time: float | None = None  # heartbeat.json mtime
    damage: str = ""  # why the run's files cannot be trusted ("" when they can)


def derive_state(ev: Evidence, now: float, timeout_s: float) -> tuple[str, str]:
    """(state, reason) of a run from its file evidence (see the module docstring)."""
    if ev.damage:
        return "damaged", ev.damage
    if ev.result_state == "done":
        return "done", "result.json: done"
    candidates: list[tuple[float, int, str, str]] = []
    if ev.result_state is not None and ev.result_time is not None:
        candidates.append((ev.result_time, 2, ev.result_state, ev.result_error or f"result.json: {ev.result_state}"))
    if ev.event_state is not None:
        candidates.append((ev.event_time or 0.0, 1, ev.event_state, ev.event_reason))
    if ev.heartbeat_time is not None and ev.result_state is None and ev.event_state != "cancelled":
        candidates.append((ev.heartbeat_time, 0, "running", "heartbeat"))
    if not candidates:
        return ev.db_state, ev.db_reason
    _, _, state, reason = max(candidates)
    if state == "running":
        alive = [t for t in (ev.heartbeat_time, ev.event_time if ev.event_state == "running" else None) if t]
        last_alive = max(alive) if alive else (ev.db_state_at or now)
        age = now - last_alive
        if age > timeout_s:
            return "stale", f"no heartbeat for {int(age)} s"
    return state, reason


def mtime(path: Path | str) -> float | None:
    """A file's own mtime (lstat: a file replaced by a symlink changes it, whatever the link points to)."""
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


def last_event(run_dir: Path | str) -> dict[str, Any] | None:
    """The last complete, readable line of events.jsonl with a known state (read from the file's tail), or None."""
    try:
        path = confined_path(run_dir, EVENTS_FILE)
        size = path.stat().st_size
        data = read_bytes(path, offset=max(0, size - _TAIL_BYTES), max_bytes=_TAIL_BYTES)
    except (OSError, RunFileError):
        return None
    for line in reversed(data[: data.rfind(b"\n") + 1].splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("state") in RUN_STATES and number(obj.get("time")) is not None:
            return obj
    return None


def resolved_config(run_dir: Path | str) -> tuple[dict[str, Any], RunConfig]:
    """config.json as saved and resolved; ConfigError (one line naming the file) when it cannot be read or
    validated. A config that names plugins is taken as saved (resolving would import them: a run folder is data)."""
    saved = read_run_config(run_dir)  # the one reader of config.json (strict, one line naming the file)
    if saved.config.plugins:
        return saved.raw, saved.config
    try:
        return saved.raw, resolve(saved.config)  # a saved config is resolved already; this validates it
    except ConfigError as e:
        raise e.with_source(str(Path(run_dir) / CONFIG_FILE)) from None


def checked_config(run_dir: Path | str) -> tuple[dict[str, Any], RunConfig]:
    """`resolved_config`, refused too (ConfigError) when it hashes to another run id than the folder's name (an
    edited config, a folder copied under another name; `cem_core.config.saved_run_id`: no plugin code runs)."""
    run_dir = Path(run_dir)
    raw, cfg = resolved_config(run_dir)
    if is_run_id(run_dir.name) and saved_run_id(cfg) != run_dir.name:
        raise ConfigError("config.json", f"hashes to run id {saved_run_id(cfg)}, not {run_dir.name} (edited, or a run "
                          "directory copied under another name); `cemctl launch --redo-damaged` restores the recorded "
                          "config")
    return raw, cfg


@dataclass(frozen=True)
class RunFolder:
    """What a run's folder says, read once (`read_folder`)."""

    path: Path
    result: ResultFile
    event: dict[str, Any] | None  # the last events.jsonl line with a known state
    events_mtime: float | None
    heartbeat: dict[str, Any] | None  # heartbeat.json (None: missing or unreadable)
    heartbeat_mtime: float | None  # its mtime, when it could be read
    config_problem: str = ""  # why config.json cannot be trusted ("": it can, or it was not checked)

    @property
    def damage(self) -> str:
        """Why the folder cannot be trusted ("" when it can): its result.json is no result, its config.json is
        unreadable or another run's."""
        return self.result.problem or self.config_problem

    def evidence(self, *, db_state: str = "planned", db_reason: str = "", db_state_at: float | None = None,
                 extra_damage: str = "") -> Evidence:
        res, ev = self.result.result, self.event
        return Evidence(
            db_state=db_state, db_reason=db_reason, db_state_at=db_state_at,
            result_state=res.state if res is not None else None, result_error=(res.error or "") if res else "",
            result_time=self.result.mtime if res is not None else None,
            event_state=ev["state"] if ev else None, event_reason=str(ev.get("reason") or "") if ev else "",
            event_time=(self.events_mtime or number(ev.get("time"))) if ev else None,
            heartbeat_time=self.heartbeat_mtime, damage=self.damage or extra_damage)

    def state(self, *, now: float, timeout_s: float, **db: Any) -> tuple[str, str]:
        """(state, reason) by `derive_state` (`db`: the `evidence` keywords)."""
        return derive_state(self.evidence(**db), now, timeout_s)


def read_folder(run_dir: Path | str, *, now: float | None = None, check_config: bool = True) -> RunFolder:
    """Read a run folder (see the module docstring). `check_config=False`: the caller judges config.json itself
    (ingest, which remembers when it last checked it)."""
    run_dir = Path(run_dir)
    hb_mtime = mtime(run_dir / HEARTBEAT_FILE)
    hb = run_json(run_dir, HEARTBEAT_FILE) if hb_mtime is not None else None
    event = last_event(run_dir)
    problem = ""
    if check_config and os.path.lexists(run_dir / CONFIG_FILE):
        try:
            checked_config(run_dir)
        except ConfigError as e:
            problem = str(e)
    return RunFolder(run_dir, read_result_file(run_dir, now=now), event,
                     mtime(run_dir / EVENTS_FILE) if event is not None else None,
                     hb, hb_mtime if hb is not None else None, problem)
