"""Arms: runs that differ only in their seed (`cemctl status --arms`, `report`, `claims`, `compare`, `export`, `cemctl.api`).

    arm_id(flat_config)                      -> "3fa2c1d0e5b7": the hash of the whole config minus the nuisance keys
    varying_keys(flat_configs)               -> ["model.attn_step_size", "model.attn_steps"]

An *arm* is a run's whole resolved configuration minus its seed (and minus any other
key the experiment declares a nuisance: `[experiment] nuisance = [...]`). Two runs are
in one arm only if every other value is equal: nothing here, and nothing that uses
it, ever merges runs that differ in anything else. The arm id hashes the same items a
run id does (`cem_core.identity`), so fields added since 0.2.0 at their default do not
split an arm either.

Labels are not made here: `cemctl.records.labels` names arms and series (one labelling
path), from the keys that vary (`varying_keys`), by their short name where it is unique
(`short_names`), values written as a grid file writes them (`format_value`); it raises
`ArmLabelCollision` rather than show one name for two arms. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping, Sequence

from cem_core.errors import CemError
from cem_core.identity import identity_items

SEED_KEY = "train.seed"
DEFAULT_NUISANCE: tuple[str, ...] = (SEED_KEY,)


class ArmLabelCollision(CemError):
    """Two different arms would be shown under one label."""


def arm_items(flat: Mapping[str, Any], nuisance: Sequence[str] = DEFAULT_NUISANCE) -> dict[str, Any]:
    """The config items that make an arm: the run id's identity items without the nuisance keys."""
    drop = set(nuisance)
    return {k: v for k, v in identity_items(flat).items() if k not in drop}


def arm_id(flat: Mapping[str, Any], nuisance: Sequence[str] = DEFAULT_NUISANCE) -> str:
    """12 hex characters naming the arm of a (flattened, resolved) config."""
    text = json.dumps(arm_items(flat, nuisance), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def format_value(value: Any) -> str:
    """A config value as a grid file writes it: 1.0 -> '1', 0.002 -> '0.002', True -> 'true'."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:g}"
        return text if float(text) == value else repr(value)  # never two values under one text
    if value is None:
        return "none"
    return str(value)


NOT_CONFIG_PREFIXES = ("result.", "tag.")
TOP_LEVEL_KEYS = ("task", "plugins")


def is_config_key(key: str) -> bool:
    """A flattened config key (`model.attn_steps`, `task`, `plugins`), not a record's other fields."""
    return key in TOP_LEVEL_KEYS or ("." in key and not key.startswith(NOT_CONFIG_PREFIXES))


def config_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The flattened config in a run record or a runs-frame row (its config keys), NaN as None."""
    return {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items() if is_config_key(k)}


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Dotted keys -> their last part where unique among `keys` (model.attn_steps -> attn_steps)."""
    tails = [k.split(".")[-1] for k in keys]
    return {k: (t if tails.count(t) == 1 else k) for k, t in zip(keys, tails)}


def varying_keys(configs: Iterable[Mapping[str, Any]], nuisance: Sequence[str] = DEFAULT_NUISANCE,
                 order: Sequence[str] = ()) -> list[str]:
    """Keys (not nuisance) with more than one value among `configs`: those in `order` first (e.g. the grid's
    axes, in file order), then the rest alphabetically."""
    configs = list(configs)
    keys: set[str] = set()
    for c in configs:
        keys.update(arm_items(c, nuisance))
    varying = {k for k in keys if len({json.dumps(c.get(k), sort_keys=True, default=str) for c in configs}) > 1}
    first = [k for k in order if k in varying]
    return first + sorted(varying - set(first))
