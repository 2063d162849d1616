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

import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from cem_core.errors import ConfigError
from cem_core.runfiles.files import RunFileError, atomic_write_bytes, read_run_json_strict

TAGS_FILE = "tags.json"
TAGS_LOCK = ".tags.lock"
TAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
MAX_VALUE_CHARS = 200
MAX_NOTE_CHARS = 2000
MAX_TAGS_BYTES = 16 << 20  # the one bound (what a reader accepts): a note that would pass it is refused, none dropped


_MISSING = object()  # no tags.json (a file holding `null` is a bad shape, not "no tags")


class TagsUnreadable(RunFileError):
    """A tags.json that exists but cannot be read as tags: never taken for "no tags" by a command that writes."""


@dataclass
class TagsRecord:
    tags: dict[str, str] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)  # {"time": unix s, "text": str}

    def to_dict(self) -> dict[str, Any]:
        return {"tags": dict(sorted(self.tags.items())), "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: Any) -> "TagsRecord":
        """Tolerant (the database's mirror): what is not a string-to-string tag or a {time, text} note is dropped.
        A run's file is read strictly (`read_tags`): nothing in it is ever dropped without a word."""
        if not isinstance(d, dict):
            return cls()
        raw_tags: dict[Any, Any] = d["tags"] if isinstance(d.get("tags"), dict) else {}
        tags = {str(k): str(v) for k, v in raw_tags.items()
                if isinstance(k, str) and TAG_NAME.match(k) and isinstance(v, (str, int, float, bool))}
        notes = [{"time": float(n["time"]) if isinstance(n.get("time"), (int, float)) else None, "text": n["text"]}
                 for n in (d.get("notes") or []) if isinstance(n, dict) and isinstance(n.get("text"), str)]
        return cls(tags, notes)


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


def _strict(d: Any, path: str) -> TagsRecord:
    """The whole shape checked: {"tags": {NAME: text}, "notes": [{"time": number|null, "text": text}]}."""
    def bad(what: str) -> TagsUnreadable:
        return TagsUnreadable(f"{path}: {what}")

    if not isinstance(d, dict) or set(d) - {"tags", "notes"}:
        raise bad('must be a JSON object with "tags" and "notes" (nothing else)')
    tags, notes = d.get("tags", {}), d.get("notes", [])
    if not isinstance(tags, dict):
        raise bad('"tags" must be an object of NAME: text')
    for k, v in tags.items():
        if not isinstance(k, str) or not TAG_NAME.match(k) or not isinstance(v, str):
            raise bad(f"tag {k!r} must be a name (a letter, then letters, digits, _ . -) with a text value")
    if not isinstance(notes, list):
        raise bad('"notes" must be a list')
    for i, n in enumerate(notes):
        if not (isinstance(n, dict) and isinstance(n.get("text"), str) and set(n) <= {"time", "text"}
                and (n.get("time") is None or (isinstance(n["time"], (int, float)) and not isinstance(n["time"], bool)))):
            raise bad(f"note {i + 1} must be {{\"time\": unix seconds, \"text\": text}}")
    return TagsRecord(dict(tags), [{"time": None if n.get("time") is None else float(n["time"]), "text": n["text"]}
                                   for n in notes])


def read_tags(run_dir: str | os.PathLike[str]) -> TagsRecord:
    """The run's tags.json (confined read, the whole shape checked); an empty record when it has none. A file that
    exists but cannot be read as tags (too large, not JSON, a bad entry, not a regular file) raises TagsUnreadable
    naming the file: it is never taken for "no tags", so nothing that writes tags can wipe it."""
    path = str(Path(run_dir) / TAGS_FILE)
    d = read_run_json_strict(run_dir, TAGS_FILE, TagsUnreadable, RECOVER, max_bytes=MAX_TAGS_BYTES, missing=_MISSING)
    if d is _MISSING:
        return TagsRecord()
    try:
        return _strict(d, path)
    except TagsUnreadable as e:
        raise TagsUnreadable(f"{e}; {RECOVER}") from None


RECOVER = ("its tags and notes are kept as they are: fix the file by hand (it is JSON), or move it aside to start "
           "the run's tags afresh")


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
            record.notes.append({"time": time.time() if now is None else now, "text": text})
        data = (json.dumps(record.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
        if len(data) > MAX_TAGS_BYTES:
            raise ConfigError("note" if text is not None else "tag",
                              f"{run_dir / TAGS_FILE} would pass {MAX_TAGS_BYTES >> 20} MiB with it, more than cemctl "
                              "reads back; nothing was written (every note is kept: move the file aside to start "
                              "afresh, or edit it by hand)")
        atomic_write_bytes(run_dir / TAGS_FILE, data, durable=True)
    return record
