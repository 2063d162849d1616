"""`--where` conditions on runs (`cemctl status`, `report`, `compare`, `export`, `cemctl.api`).

    conds = parse_where(["model.attn_steps>=2", "model.attention!=llama", "train.lr in 1e-3,2e-3", "tag.note~warmup"])
    keep = [row for row in rows if matches(conds, row)]     # row: {"model.attn_steps": 2, "state": "done", ...}
    frame = filter_frame(frame, conds)                       # the same on a pandas runs frame

Grammar: `KEY OP VALUE`, several conditions are all required (AND).
- KEY: a config key, dotted (`model.attn_steps`) or by its unique last part (`attn_steps`);
  `state`, `run_id`, `scale`, `arm`; a result (`test_loss`, `test_ppl`, `val_loss`, `tokens`, ...);
  a tag (`tag.NAME`) or `note` (the run's notes, joined).
- OP: `=` (or `==`), `!=`, `<`, `<=`, `>`, `>=` (numbers), `in` (a comma-separated list: `in 1e-3,2e-3`),
  `~` (contains; case-insensitive), `!~` (does not contain).
- VALUE: read as a grid file reads values (`2`, `0.002`, `true`, `cem`; strings need no quotes).
A row without the key never matches a comparison (and matches `!=`, `!~`). Numbers compare as
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
SPECIAL_KEYS = ("state", "run_id", "scale", "arm", "note")
RESULT_KEYS = ("test_loss", "test_ppl", "val_loss", "val_ppl", "tokens", "steps", "params_total",
               "params_non_embedding", "flops_per_token", "flops", "wall_time_s", "tokens_per_s")
HELP = ("KEY OP VALUE with OP one of =, !=, <, <=, >, >=, in, ~, !~ "
        "(e.g. model.attn_steps>=2, attention!=llama, train.lr in 1e-3,2e-3, tag.note~warmup)")
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
    """A config key by its dotted name or unique last part; special, result and tag keys as they are."""
    from cem_core.config import field_names

    if key in SPECIAL_KEYS or key in RESULT_KEYS or key.startswith("tag."):
        if key.startswith("tag.") and not re.fullmatch(r"tag\.[A-Za-z0-9_.-]+", key):
            raise ConfigError("--where", f"bad tag name in {key!r}", allowed=["tag.NAME (letters, digits, _ . -)"])
        return key
    names = list(dict.fromkeys([*field_names(), *known]))
    if key in names:
        return key
    matches = [k for k in names if k.split(".")[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError("--where", f"ambiguous key {key!r}", allowed=matches)
    import difflib

    tails = sorted({k.split(".")[-1] for k in names})
    close = difflib.get_close_matches(key, [*names, *tails, *SPECIAL_KEYS, *RESULT_KEYS], n=3, cutoff=0.75)
    raise ConfigError("--where", f"unknown key {key!r}" + (f" (did you mean {' or '.join(close)}?)" if close else ""),
                      allowed=[*SPECIAL_KEYS, *RESULT_KEYS, "tag.NAME",
                               "a config key (model.*, train.*, data.*, gp.*, task) or its last part"])


def parse_condition(text: str, known: Sequence[str] = ()) -> Condition:
    m = _IN.match(text)
    if m:
        items = tuple(_value(v) for v in m.group("value").split(",") if v.strip())
        if not items:
            raise ConfigError("--where", f"{text!r}: 'in' needs a comma-separated list of values", allowed=[HELP])
        return Condition(resolve_key(m.group("key"), known), "in", items, text)
    for op in OPERATORS:
        i = text.find(op)
        if i > 0:
            key, value = text[:i].strip(), text[i + len(op):]
            if not key or not value.strip() or any(c in key for c in "=!<>~ "):
                break
            return Condition(resolve_key(key, known), "=" if op == "==" else op, _value(value), text)
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
