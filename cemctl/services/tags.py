"""Tag runs and write notes on them (`cemctl tag RUN|EXPERIMENT key=value ... [--remove key]`, `cemctl note RUN TEXT`).

    result = tag_runs(url, runs_root, "fig2c", set={"phase": "b"}, remove=["old"])
    result = note_run(url, runs_root, "3fa2c1d0", "lr looked too high")

Every tag and note is checked before anything is written (`cem_core.runfiles.tags`:
names are identifiers, values and notes printable text), then written to each run's
tags.json (the ground truth) and mirrored into the database (`cemctl.db.tags`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from cem_core.errors import ConfigError
from cem_core.runfiles.tags import TagsRecord, check_note, check_tag, tags_mtime, update_tags


@dataclass
class TagResult:
    target: str
    kind: str  # run | experiment
    records: dict[str, TagsRecord] = field(default_factory=dict)  # run id -> its tags after the change


def parse_tags(items: Sequence[str]) -> dict[str, str]:
    """['phase=b', 'note=warmup sweep'] -> {'phase': 'b', 'note': 'warmup sweep'} (each checked)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("tag", f"{item!r} must look like NAME=VALUE (e.g. phase=b)", allowed=["NAME=VALUE"])
        out.update([check_tag(name.strip(), value.strip())])
    return out


def _targets(url: str, runs_root: Path, target: str, runs_only: bool) -> tuple[object, str, list[tuple[str, Path]]]:
    from cemctl.db.engine import open_existing_db
    from cemctl.services.targets import resolve_runs

    engine = open_existing_db(url)
    resolved = resolve_runs(engine, target, runs_root, runs_only=runs_only)
    return engine, resolved.kind, [(r.run_id, Path(r.run_dir)) for r in resolved.runs]


def tag_runs(url: str, runs_root: Path, target: str, *, set: Mapping[str, str] | None = None,
             remove: Sequence[str] = ()) -> TagResult:
    if not set and not remove:
        raise ConfigError("tag", "give NAME=VALUE tags to set or --remove NAME", allowed=["NAME=VALUE", "--remove NAME"])
    values = {k: check_tag(k, str(v))[1] for k, v in (set or {}).items()}
    for name in remove:
        check_tag(name, "")
    return _apply(url, runs_root, target, lambda d: update_tags(d, set=values, remove=remove))


def note_run(url: str, runs_root: Path, target: str, text: str) -> TagResult:
    note = check_note(text)
    return _apply(url, runs_root, target, lambda d: update_tags(d, note=note), runs_only=True)


def _apply(url: str, runs_root: Path, target: str, change, *, runs_only: bool = False) -> TagResult:  # noqa: ANN001
    from cemctl.db.engine import is_readonly
    from cemctl.db.tags import store_tags

    engine, kind, runs = _targets(url, runs_root, target, runs_only)  # as given: unnamed, the recorded folder
    if is_readonly(engine):  # type: ignore[arg-type]
        from cemctl.db.engine import DatabaseError

        raise DatabaseError(f"--db: {url} is read-only here; tags are recorded in it too")
    result = TagResult(target, kind)
    from cem_core.runfiles.tags import read_tags

    for run_id, run_dir in runs:  # every run checked before any is written: all or nothing
        if not run_dir.is_dir():
            raise ConfigError("run", f"{run_id}: its run directory {run_dir} is missing (tags live in it)")
        read_tags(run_dir)  # an unreadable tags.json: one line (TagsUnreadable), nothing written
    for run_id, run_dir in runs:
        record = change(run_dir)
        store_tags(engine, run_id, record, tags_mtime(run_dir))  # type: ignore[arg-type]
        result.records[run_id] = record
    return result
