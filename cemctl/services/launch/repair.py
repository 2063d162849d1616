"""Damaged and outdated runs (`cemctl launch --redo-damaged`, `--rerun-outdated`): set aside only when asked.

A run is `damaged` when its files and the database disagree or fail their
schema (`cemctl.db.ingest`): config.json edited or copied under another id,
result.json that is not a result, a recorded result whose file is gone. A
launch skips such runs with the reason. `--redo-damaged` repairs each before
it runs again, deleting nothing: every file of the run directory (except the
locks and the executor's log) is moved into a new `<run_dir>/.damaged-<UTC time>[-N]/`
(made by the repair itself: an earlier repair's folder, or one the user made, is never reused or replaced),
config.json is rewritten from the config the database recorded for the run id
(the plan of record), and the run's result row is forgotten, so the run trains
from the start under the identity it was planned with.

`--rerun-outdated` does the same for finished runs trained by older model code
(`cemctl.db.outdated`): their files go to `<run_dir>/.outdated-<UTC time>/`,
kept, never deleted, and the run trains again with the code of this launch.

Both keep with the run what the user wrote: tags.json (its tags and notes) stays in the
run folder. The database forgets every row derived from the old files through the one
projection (`cemctl.db.projection.rebuild_run`: metrics, results, evals, environment, ...
of the old weights are gone in the same transaction), and the set-aside result stays
queryable as the run's history (`result_history`, `compare RUN --history`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.engine import Engine

from cem_core import runfiles
from cem_core.errors import CemError
from cemctl.db.engine import read_session
from cemctl.db.models import Run

from cem_core.runfiles.results import ASIDE_PREFIXES, OUTDATED_PREFIX, QUARANTINE_PREFIX  # noqa: E402, F401
from cem_core.runfiles.tags import TAGS_FILE, TAGS_LOCK  # noqa: E402
from cem_core.runfiles.lock import CLAIM_FILE  # noqa: E402

KEEP = (runfiles.LOCK_FILE, CLAIM_FILE, runfiles.EXECUTOR_LOG, TAGS_FILE, TAGS_LOCK)  # tags and notes stay with the run


def damaged_runs(engine: Engine, run_ids: list[str]) -> dict[str, str]:
    """{run_id: reason} of the given runs the database marks damaged."""
    out: dict[str, str] = {}
    with read_session(engine) as s:
        for i in range(0, len(run_ids), 500):
            q = select(Run.id, Run.state_reason).where(Run.id.in_(run_ids[i:i + 500]), Run.state == "damaged")
            out.update({rid: reason or "damaged" for rid, reason in s.execute(q)})
    return out


def _new_quarantine(run_dir: Path, prefix: str = QUARANTINE_PREFIX) -> Path:
    """A folder `<prefix><UTC time>[-N]` made by this call: never one that exists (an earlier repair's, the user's)."""
    stamp = f"{prefix}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    for n in range(1, 10000):
        path = run_dir / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise CemError(f"{run_dir}: cannot make a new {prefix}* folder to move the run's files into")


def repair_damaged(engine: Engine, run_id: str, run_dir: Path) -> str:
    """Move the run's files aside, restore its recorded config, forget its result; returns what was done."""
    return _set_aside(engine, run_id, run_dir, QUARANTINE_PREFIX, "damaged", "repaired", "--redo-damaged")


def set_aside_outdated(engine: Engine, run_id: str, run_dir: Path) -> str:
    """The same for a run trained by older model code: its files kept in `.outdated-*/`, the run planned again."""
    return _set_aside(engine, run_id, run_dir, OUTDATED_PREFIX, "trained by older code", "set aside",
                      "--rerun-outdated")


def _set_aside(engine: Engine, run_id: str, run_dir: Path, prefix: str, what: str, done: str, flag: str) -> str:
    with read_session(engine) as s:
        run = s.get(Run, run_id)
        recorded = json.loads(run.config_json) if run is not None and run.config_json else None
    if not recorded:
        raise CemError(f"run {run_id}: {what}, and the database holds no config for it to restore")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    entries = [e for e in sorted(os.listdir(run_dir)) if e not in KEEP and not e.startswith(ASIDE_PREFIXES)]
    quarantine = _new_quarantine(run_dir, prefix) if entries else run_dir / prefix
    moved = 0
    for entry in entries:
        os.rename(run_dir / entry, quarantine / entry)  # into a folder made just now: nothing there to replace
        moved += 1
    runfiles.atomic_write_json(run_dir / runfiles.CONFIG_FILE, recorded, indent=1)
    from cemctl.db.projection import rebuild_run

    why = f"{done} by {flag}: files moved to {quarantine.name}, recorded config restored" if moved else \
        f"{done} by {flag}: recorded config restored"
    rebuilt = rebuild_run(engine, run_dir.parent, run_id, reason=why)  # every row of the old files forgotten, one transaction
    kept = "".join(f"; {w}" for w in rebuilt.warnings)  # e.g. a tags.json that cannot be read: its rows kept
    return (f"{done}: {moved} file(s) moved to {quarantine.name}/, recorded config restored{kept}" if moved
            else f"{done}: recorded config restored{kept}")
