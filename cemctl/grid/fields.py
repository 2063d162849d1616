"""A grid file's config keys and single values, checked one way by every part of a grid (`cemctl plan`, `--set`).

    check_field("model.attention", "g.toml", "[base]")      # ConfigError naming close matches otherwise
    check_scalar("train.lr", 0.004, "g.toml", "[[claim]]")  # a string, a finite number or a boolean

The leaf of the grid layers: `spec` (the grid file), `claims` ([[claim]] tables) and
`overrides` (`--set`) all import it, and it imports nothing of cemctl.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from cem_core.config import field_names
from cem_core.errors import ConfigError

Scalar = str | int | float | bool


def check_field(key: str, path: str, where: str) -> None:
    """Raise unless `key` is an addressable config field (names close matches, else the section's keys)."""
    names = field_names()
    if key in names:
        return
    section = key.split(".")[0]
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.75)
    if close:
        allowed: Any = close
    elif section in ("model", "data", "train"):
        allowed = field_names(section)
    else:
        allowed = ["task", "model.*", "data.*", "train.*"]
    raise ConfigError(key, f"unknown config key in {where}", source=path, allowed=allowed)


def check_scalar(key: str, value: Any, path: str, where: str) -> Scalar:
    """`value` if it is one string, finite number or boolean (a grid value), else a ConfigError naming `key`."""
    if isinstance(value, (dict, list)):
        raise ConfigError(key, f"must be a single value in {where}, got a "
                          f"{'table' if isinstance(value, dict) else 'list'}", source=path)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value} (in {where})", source=path)
    if not isinstance(value, (str, int, float, bool)):
        raise ConfigError(key, f"must be a string, number or boolean, got {type(value).__name__} (in {where})",
                          source=path)
    return value
