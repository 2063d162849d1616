"""A run's tags and notes: `tags.json` in its directory (`cemctl tag`, `cemctl note`; `cemctl sync` reads it back).

    record = read_tags(run_dir)                       # TagsRecord(tags={"note": "warmup"}, notes=[...]) or empty
    update_tags(run_dir, set={"phase": "b"}, remove=["old"], note="lr looked too high")

The file is the ground truth (the database mirrors it, so `cemctl sync` rebuilds the
tags of a copied project); it is written atomically under a lock of its own, so two
`cemctl tag` commands never lose each other's tags. Names are short identifiers,
values and notes printable text: `check_tag` raises a ConfigError naming the rule.
Torch-free.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from cem_core.errors import ConfigError
from cem_core.runfiles.files import RunFileError, atomic_write_json, read_run_file

TAGS_FILE = "tags.json"
TAGS_LOCK = ".tags.lock"
TAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
MAX_VALUE_CHARS = 200
MAX_NOTE_CHARS = 2000
MAX_NOTES = 1000


@dataclass
class TagsRecord:
    tags: dict[str, str] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)  # {"time": unix s, "text": str}

    def to_dict(self) -> dict[str, Any]:
        return {"tags": dict(sorted(self.tags.items())), "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: Any) -> "TagsRecord":
        """Tolerant: what is not a string-to-string tag or a {time, text} note is dropped."""
        if not isinstance(d, dict):
            return cls()
        raw_tags = d.get("tags") if isinstance(d.get("tags"), dict) else {}
        tags = {str(k): str(v) for k, v in raw_tags.items()
                if isinstance(k, str) and TAG_NAME.match(k) and isinstance(v, (str, int, float, bool))}
        notes = [{"time": float(n["time"]) if isinstance(n.get("time"), (int, float)) else None, "text": n["text"]}
                 for n in (d.get("notes") or []) if isinstance(n, dict) and isinstance(n.get("text"), str)]
        return cls(tags, notes[-MAX_NOTES:])


def _printable(text: str) -> bool:
    return all(ch.isprintable() for ch in text)


def check_tag(name: str, value: str) -> tuple[str, str]:
    if not TAG_NAME.match(name or ""):
        raise ConfigError("tag", f"bad tag name {name!r}", value=name,
                          allowed=["a letter, then up to 63 letters, digits, _ . -"])
    if len(value) > MAX_VALUE_CHARS or not _printable(value):
        raise ConfigError(f"tag.{name}", f"the value must be printable text of at most {MAX_VALUE_CHARS} characters "
                          "(no control characters)", value=value[:40])
    return name, value


def check_note(text: str) -> str:
    text = text.strip()
    if not text or len(text) > MAX_NOTE_CHARS or not _printable(text):
        raise ConfigError("note", f"must be printable text of 1 to {MAX_NOTE_CHARS} characters (one line, no "
                          "control characters)", value=text[:40])
    return text


def read_tags(run_dir: str | os.PathLike[str]) -> TagsRecord:
    """The run's tags.json (confined read); an empty record when it has none or it cannot be read."""
    try:
        import json

        return TagsRecord.from_dict(json.loads(read_run_file(run_dir, TAGS_FILE, max_bytes=1 << 20)))
    except (FileNotFoundError, RunFileError, OSError, ValueError):
        return TagsRecord()


def tags_mtime(run_dir: str | os.PathLike[str]) -> float | None:
    try:
        return os.stat(Path(run_dir) / TAGS_FILE).st_mtime
    except OSError:
        return None


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    from cem_core.runfiles.lock import file_lock

    with file_lock(run_dir / TAGS_LOCK):
        yield


def update_tags(run_dir: str | os.PathLike[str], *, set: Mapping[str, str] | None = None,
                remove: Sequence[str] = (), note: str | None = None, now: float | None = None) -> TagsRecord:
    """Set and remove tags and append a note (all checked first), atomically; returns the new record."""
    items = [check_tag(k, str(v)) for k, v in (set or {}).items()]
    for name in remove:
        check_tag(name, "")
    text = check_note(note) if note is not None else None
    run_dir = Path(run_dir)
    with _locked(run_dir):
        record = read_tags(run_dir)
        for name in remove:
            record.tags.pop(name, None)
        record.tags.update(dict(items))
        if text is not None:
            record.notes = (record.notes + [{"time": time.time() if now is None else now, "text": text}])[-MAX_NOTES:]
        atomic_write_json(run_dir / TAGS_FILE, record.to_dict(), durable=True)
    return record
