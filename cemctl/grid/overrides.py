"""Command-line changes to a grid (`cemctl plan`, `cemctl launch`): `--set key=value` (one value, it beats the
grid file) and `--axis key=v1,v2,...` (an axis added to the grid, or replacing the file's values of that axis).

Values are read as TOML values (`train.lr=0.004`, `model.attention="cem"`,
`train.compile=true`); anything that is not valid TOML is taken as a string
(`model.attention=cem`). An `--axis` list is split at its commas, each value read the same way.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any, Iterable

from cem_core.errors import ConfigError
from cemctl.grid.fields import check_field


_RADIX = re.compile(r"[+-]?0[xXoObB]")


def parse_value(text: str, key: str = "--set") -> Any:
    """A TOML value, else the text as a string. Hexadecimal, octal and binary integers are refused (ConfigError):
    `train.lr=0x10` is a typo far more often than 16."""
    if _RADIX.match(text.strip()):
        raise ConfigError(key, f"{text.strip()!r} is a hexadecimal, octal or binary number; write it in decimal",
                          value=text.strip())
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """['train.lr=0.004', ...] -> {'train.lr': 0.004}; unknown keys raise ConfigError (source --set)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(item, "must look like key=value (e.g. train.max_steps=50)", source="--set")
        check_field(key, "--set", "--set")
        out[key] = parse_value(value.strip(), f"--set {key}")
        if isinstance(out[key], (list, dict)):
            raise ConfigError(key, f"--set takes one value, got {value.strip()!r}; to run several, add an axis: "
                              f"--axis {key}=a,b", source="--set")
    return out


def parse_axes(items: Iterable[str]) -> dict[str, list[Any]]:
    """['model.attn_steps=1,2,4', ...] -> {'model.attn_steps': [1, 2, 4]} (`--axis`, repeatable), checked like a grid
    file's [axes]: a known config key (else the closest names), at least one value, no value twice, a key once."""
    out: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ConfigError(item, "must look like key=v1,v2,... (e.g. model.attn_steps=1,2,4)", source="--axis")
        check_field(key, "--axis", "--axis")
        if key in out:
            raise ConfigError(key, "is given twice; put every value in one --axis key=v1,v2,...", source="--axis")
        values = [parse_value(v.strip(), f"--axis {key}") for v in text.split(",") if v.strip()]
        if not values:
            raise ConfigError(key, f"needs at least one value, got {text!r}", source="--axis")
        for v in values:
            if isinstance(v, (list, dict)) or (isinstance(v, float) and v != v):
                raise ConfigError(key, f"must be single values separated by commas, got {text!r}", source="--axis")
        twice = sorted({repr(v) for v in values if sum(1 for w in values if type(w) is type(v) and w == v) > 1})
        if twice:
            raise ConfigError(key, f"has repeated values: {', '.join(twice)}", source="--axis")
        out[key] = values
    return out
