"""`--set key=value` command-line overrides (`cemctl plan`, `cemctl launch`): they beat the grid file.

Values are read as TOML values (`train.lr=0.004`, `model.attention="cem"`,
`train.compile=true`); anything that is not valid TOML is taken as a string
(`model.attention=cem`).
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
    return out
