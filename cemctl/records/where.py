"""`--where` conditions on run records (`cemctl status`, `report`, `compare`, `export`, `cemctl.api`, the dashboard).

    conds = parse_where(["model.attn_steps>=2", "model.attention!=llama", "train.lr in 1e-3,2e-3", "note~warmup"])
    keep = [row for row in rows if matches(conds, row)]     # row: {"model.attn_steps": 2, "state": "done", ...}
    frame = filter_frame(frame, conds)                       # the same on a pandas runs frame

Grammar: `KEY OP VALUE`, several conditions are all required (AND).
- KEY: any field of the catalogue (`cemctl.records.fields`, listed by `cemctl keys`): a run field
  (`state`, `run_id`, `arm_label`, `test_loss`, `val_ppl`, `wall_time_s`, `note`, ...), a tag
  (`tag.NAME`), or a config key, dotted (`model.attn_steps`) or by its unique last part (`attn_steps`).
- OP: `=` (or `==`), `!=`, `<`, `<=`, `>`, `>=` (numbers), `in` (a comma-separated list: `in 1e-3,2e-3`),
  `~` (contains; case-insensitive), `!~` (does not contain).
- VALUE: read as a grid file reads values (`2`, `0.002`, `true`, `cem`; strings need no quotes); after `~`
  and `!~`, the text as written (`job~77_1` looks for "77_1", not the number 771).
Every command filters the same records (`cemctl.records.load`), so a condition selects the same runs
everywhere. A run without a value (None: no result yet, no such tag) never matches a comparison
(and matches `!=`, `!~`). Numbers compare as
numbers (`1.0` equals `1`). A bad expression is a `ConfigError` naming what is allowed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from cem_core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

OPERATORS = ("!~", "<=", ">=", "!=", "==", "=", "<", ">", "~")  # longest first
HELP = ("KEY OP VALUE with OP one of =, !=, <, <=, >, >=, in, ~, !~ "
        "(e.g. model.attn_steps>=2, attention!=llama, train.lr in 1e-3,2e-3, tag.phase~warmup, note~lr)")
_IN = re.compile(r"^\s*(?P<key>[^\s=!<>~]+)\s+in\s+(?P<value>.+)$")


@dataclass(frozen=True)
class Condition:
    key: str
    op: str  # one of OPERATORS (== normalised to =) or "in"
    value: Any  # a scalar, or a tuple for "in"
    text: str  # as written

    def test(self, have: Any, present: bool = True) -> bool:
        if not present or have is None:
            return self.op in ("!=", "!~")
        if self.op in ("~", "!~"):
            found = str(self.value).lower() in str(have).lower()
            return found if self.op == "~" else not found
        if self.op == "in":
            return any(_equal(have, v) for v in self.value)
        if self.op == "=":
            return _equal(have, self.value)
        if self.op == "!=":
            return not _equal(have, self.value)
        a, b = _number(have), _number(self.value)
        if a is None or b is None:
            return False
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[self.op]


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v))
    except ValueError:
        return None


def _equal(a: Any, b: Any) -> bool:
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        return x == y or math.isclose(x, y, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(a, bool) or isinstance(b, bool):
        return str(a).lower() == str(b).lower()
    return str(a) == str(b)


def _value(text: str) -> Any:
    from cemctl.grid.overrides import parse_value

    return parse_value(text.strip(), "--where")


def resolve_key(key: str, known: Sequence[str] = ()) -> str:
    """The field a key names (`cemctl.records.fields.resolve`): a run field by its name, short name or alias, a
    tag (`tag.NAME`), or a config key by its dotted name or unique last part."""
    from cemctl.records.fields import resolve

    return resolve(key, known, what="--where")


def parse_condition(text: str, known: Sequence[str] = ()) -> Condition:
    m = _IN.match(text)
    if m:
        items = tuple(_value(v) for v in m.group("value").split(",") if v.strip())
        if not items:
            raise ConfigError("--where", f"{text!r}: 'in' needs a comma-separated list of values", allowed=[HELP])
        return Condition(resolve_key(m.group("key"), known), "in", items, text)
    found = [(text.find(op), -len(op), op) for op in OPERATORS if text.find(op) > 0]
    if found:  # the first operator in the text (the longest at that place): `arm_label~rank=8` is a `~`
        i, _, op = min(found)
        key, value = text[:i].strip(), text[i + len(op):]
        if key and value.strip() and not any(c in key for c in "=!<>~ "):  # `~` looks for the text as written
            written = value.strip() if op in ("~", "!~") else _value(value)
            return Condition(resolve_key(key, known), "=" if op == "==" else op, written, text)
    raise ConfigError("--where", f"cannot read {text!r}", allowed=[HELP])


def parse_where(items: Iterable[str] | None, known: Sequence[str] = ()) -> list[Condition]:
    """Each `--where` item; an item may also hold several conditions joined by ' and '."""
    out: list[Condition] = []
    for item in items or ():
        for part in re.split(r"\s+and\s+", item.strip()):
            if part.strip():
                out.append(parse_condition(part.strip(), known))
    return out


def matches(conds: Sequence[Condition], row: Mapping[str, Any]) -> bool:
    return all(c.test(row.get(c.key), c.key in row) for c in conds)


def filter_frame(frame: "pd.DataFrame", conds: Sequence[Condition]) -> "pd.DataFrame":
    """The rows of a runs frame (one column per key) that meet every condition."""
    if not conds or frame.empty:
        return frame
    keep = [matches(conds, {k: (None if _is_nan(v) else v) for k, v in rec.items()})
            for rec in frame.to_dict("records")]
    return frame[keep]


def _is_nan(v: Any) -> bool:
    try:
        return v is not None and not isinstance(v, str) and v != v
    except (TypeError, ValueError):
        return False


def describe(conds: Sequence[Condition]) -> str:
    """'model.attn_steps>=2 and state=done' (for a report's index)."""
    return " and ".join(c.text.strip() for c in conds)
