"""Plain data (TOML tables, JSON objects) to typed dataclasses: the one converter (`cemctl plan`, `launch`, every reader
of run files).

    from_plain(TrainConfig, {"lr": 0.002}, prefix="train")            # strict: a grid file, the command line
    from_plain(SlurmOptions, table, prefix="slurm", source="g.toml")  # strict
    from_plain(JobRecord, json_object, strict=False)                  # tolerant: a file cemctl wrote itself

One set of rules, read from the dataclass's type hints (`bool`, `int`, `float`,
`str`, `X | None`, `dict[str, ...]`, `list[str]`, nested dataclasses):

- an `int` takes an integer, or a float with an integral value (TOML `2.0`); never a bool;
  beyond +-2**62 it is "too large";
- a `float` takes any finite number (never a bool; NaN and infinities are refused);
- a `str` takes a string; a `bool` a boolean; `X | None` takes None too;
- `dict` takes a table, `list[str]` a list of strings.

Strict (what a person wrote): an unknown key or a wrong type raises `ConfigError`
naming the dotted key, the value, the allowed keys or type, and the file. Tolerant
(a run file, where a damaged value must not stop a reader): unknown keys are dropped,
a number stands for a string where a string is expected (a SLURM job id), and any
other wrong value becomes the field's default. Written this way (one small function,
not pydantic or msgspec) because the rules are few, the error lines must be cemctl's
own one-line form, and the trainer's import time stays what it is.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping

from cem_core.errors import ConfigError

INT_LIMIT = 2**62
_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "table", list: "list of strings"}


class _Wrong(Exception):
    """A value of the wrong type (the caller decides: raise or take the default)."""


def type_name(tp: Any) -> str:
    return _NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def _base(tp: Any) -> tuple[Any, bool]:
    """(the type without `| None`, whether None is allowed)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if args else Any), len(args) < len(typing.get_args(tp))
    return tp, False


def coerce(key: str, tp: Any, value: Any, *, source: str | None = None) -> Any:
    """`value` as type `tp` by the rules above; ConfigError naming `key` (and `source`) if it is not one."""
    tp, optional = _base(tp)
    if value is None and optional:
        return None
    origin = typing.get_origin(tp) or tp
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > INT_LIMIT:
                raise ConfigError(key, "is too large", value=value, source=source)
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
            if not math.isfinite(value):
                raise ConfigError(key, f"must be a finite number, got {value}", value=value, source=source)
            return value
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin is dict:
        if isinstance(value, dict):
            return dict(value)
    elif origin is list:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
    name = type_name(origin)
    article = "an" if name[:1] in "aeiou" else "a"
    raise ConfigError(key, f"must be {article} {name}, got {type(value).__name__} {value!r}"[:200], value=value,
                      source=source)


def _tolerant(tp: Any, value: Any, default: Any) -> Any:
    base, optional = _base(tp)
    if value is None:
        return None if optional else default
    if base is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if (typing.get_origin(base) or base) is list and isinstance(value, list):
        return [str(v) for v in value]
    try:
        return coerce("", tp, value)
    except ConfigError:
        return default


def from_plain(klass: type, d: Any, *, prefix: str = "", source: str | None = None, strict: bool = True) -> Any:
    """A `klass` instance from the mapping `d` (nested dataclasses from nested tables); see the module docstring."""
    if not isinstance(d, Mapping):
        if not strict:
            return klass()
        raise ConfigError(prefix or "<config>", f"must be a table of settings, got {type(d).__name__}", source=source)
    hints = typing.get_type_hints(klass)
    fields = {f.name: f for f in dataclasses.fields(klass)}
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            if strict:
                raise ConfigError(dotted, "unknown key", allowed=[f"{prefix}.{n}" if prefix else n for n in fields],
                                  source=source)
            continue
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = from_plain(tp, value, prefix=dotted, source=source, strict=strict)  # type: ignore[arg-type]
        elif strict:
            kwargs[key] = coerce(dotted, tp, value, source=source)
        else:
            f = fields[key]
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
            kwargs[key] = _tolerant(tp, value, default)
    return klass(**kwargs)
