"""Claims declared in a grid file (`[[claim]]`): what `cemctl claims` tests, as data (`cemctl plan` checks them).

    [[claim]]
    id = "3"
    statement = "T=2 beats T=1 for both CEM sublayers"
    [[claim.part]]
    name = "CEM attention T=2 - T=1 (diag)"
    statistic = "difference"          # difference | interaction | lr_optimum | optimal_loss
    arms = [{ "model.attn_steps" = 2, ... }, { "model.attn_steps" = 1, ... }]
    expect = "lower"                  # lower | higher | close (the statistic's sign, or within +-margin)
    margin = "1%"                     # % of the reference arm's loss, a number in the statistic's unit,
                                      # or "0.5 octave" for an lr_optimum
    paired = true                     # the arms are the same model at initialisation (pair by seed)
    reference = 2                     # the arm a relative margin is taken from (default: the last)

Statistics: `difference` = loss(arm 1) - loss(arm 2); `interaction` = (a1 - a2) - (a3 - a4);
`lr_optimum` = log2 of arm 1's optimal learning rate - arm 2's (each arm selects a
learning-rate sweep: train.lr is not pinned); `optimal_loss` = the loss at arm 1's optimum
- at arm 2's. Each `arms` entry is a selector (config keys and values); at evaluation
time it must match exactly one arm per setting (`cemctl.report.claims`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cem_core.config import flatten
from cem_core.errors import ConfigError
from cemctl.grid.fields import check_field, check_scalar

STATISTICS = {"difference": 2, "interaction": 4, "lr_optimum": 2, "optimal_loss": 2}  # name -> number of arms
EXPECTS = ("lower", "higher", "close")
CLAIM_KEYS = ("id", "statement", "part")
PART_KEYS = ("name", "statistic", "arms", "expect", "margin", "paired", "reference")
_MARGIN = re.compile(r"^\s*(?P<value>\d+(\.\d+)?)\s*(?P<unit>%|octaves?|nats?)?\s*$")


@dataclass(frozen=True)
class Margin:
    value: float
    relative: bool = False  # a fraction of the reference arm's loss

    def describe(self, unit: str) -> str:
        return f"{self.value * 100:g}% of the reference loss" if self.relative else f"{self.value:g} {unit}"


@dataclass
class PartSpec:
    name: str
    statistic: str
    arms: list[dict[str, Any]]
    expect: str
    margin: Margin
    paired: bool = False
    reference: int = 0  # index into arms
    source: str = ""  # the experiment (grid) that declares it

    @property
    def unit(self) -> str:
        return "log2(lr)" if self.statistic == "lr_optimum" else "nats"

    @property
    def coefs(self) -> tuple[float, ...]:
        return (1.0, -1.0, -1.0, 1.0) if self.statistic == "interaction" else (1.0, -1.0)


@dataclass
class ClaimSpec:
    id: str
    statement: str
    parts: list[PartSpec] = field(default_factory=list)
    source: str = ""  # the grid file that declares it


def _err(key: str, message: str, path: str, **kw: Any) -> ConfigError:
    return ConfigError(key, message, source=path or None, **kw)


def parse_margin(value: Any, statistic: str, where: str, path: str) -> Margin:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return Margin(float(value))
    m = _MARGIN.match(str(value)) if isinstance(value, str) else None
    if m is None:
        raise _err(where, f"must be a number, a percentage ('1%') or octaves ('0.5 octave'), got {value!r}", path)
    amount, unit = float(m.group("value")), (m.group("unit") or "").rstrip("s")
    if unit == "%":
        if statistic == "lr_optimum":
            raise _err(where, "an lr_optimum margin is in octaves, e.g. '0.5 octave'", path)
        return Margin(amount / 100, relative=True)
    if unit == "octave" and statistic != "lr_optimum":
        raise _err(where, "octaves are for lr_optimum parts; give '1%' or a number of nats", path)
    return Margin(amount)


def _selector(item: Any, where: str, path: str) -> dict[str, Any]:
    if not isinstance(item, dict) or not item:
        raise _err(where, "must be a table of config keys and values, e.g. { \"model.attn_steps\" = 2 }", path)
    out = {}
    for key, value in flatten(item).items():
        check_field(key, path, where)
        out[key] = check_scalar(key, value, path, where)
    return out


def parse_claims(value: Any, path: str) -> list[ClaimSpec]:
    """The `[[claim]]` tables of a grid file, checked (one line naming the key and the allowed values)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _err("claim", "must be an array of tables ([[claim]])", path)
    claims: list[ClaimSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        where = f"claim[{i}]"
        if not isinstance(raw, dict):
            raise _err(where, "must be a table", path)
        for k in raw:
            if k not in CLAIM_KEYS:
                raise _err(f"{where}.{k}", "unknown key", path, allowed=CLAIM_KEYS)
        cid, statement = raw.get("id"), raw.get("statement")
        if not isinstance(cid, (str, int)) or isinstance(cid, bool) or not str(cid).strip() or len(str(cid)) > 20:
            raise _err(f"{where}.id", "must be a short name or number (1-20 characters)", path)
        if str(cid) in seen:
            raise _err(f"{where}.id", f"claim {cid!r} is declared twice", path)
        seen.add(str(cid))
        if not isinstance(statement, str) or not statement.strip() or not statement.isprintable():
            raise _err(f"{where}.statement", "must be the claim in one line of text", path)
        parts = raw.get("part")
        if not isinstance(parts, list) or not parts:
            raise _err(f"{where}.part", "needs at least one [[claim.part]]", path)
        claim = ClaimSpec(str(cid), statement.strip(), source=path)
        for j, p in enumerate(parts):
            claim.parts.append(_part(p, f"{where}.part[{j}]", path))
        claims.append(claim)
    return claims


def _part(raw: Any, where: str, path: str) -> PartSpec:
    if not isinstance(raw, dict):
        raise _err(where, "must be a table", path)
    for k in raw:
        if k not in PART_KEYS:
            raise _err(f"{where}.{k}", "unknown key", path, allowed=PART_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip() or not name.isprintable() or len(name) > 200:
        raise _err(f"{where}.name", "must be a short printable description", path)
    statistic = raw.get("statistic", "difference")
    if statistic not in STATISTICS:
        raise _err(f"{where}.statistic", f"unknown statistic {statistic!r}", path, allowed=tuple(STATISTICS))
    arms = raw.get("arms")
    if not isinstance(arms, list) or len(arms) != STATISTICS[statistic]:
        raise _err(f"{where}.arms", f"a {statistic} needs {STATISTICS[statistic]} arm selectors, got "
                   f"{len(arms) if isinstance(arms, list) else type(arms).__name__}", path)
    selectors = [_selector(a, f"{where}.arms[{k}]", path) for k, a in enumerate(arms)]
    if statistic in ("lr_optimum", "optimal_loss") and any("train.lr" in s for s in selectors):
        raise _err(f"{where}.arms", "an lr sweep statistic takes the learning rate from the runs: do not pin train.lr",
                   path)
    expect = raw.get("expect")
    if expect not in EXPECTS:
        raise _err(f"{where}.expect", f"unknown expectation {expect!r}", path, allowed=EXPECTS)
    margin = parse_margin(raw.get("margin", "1%" if statistic != "lr_optimum" else "0.5 octave"), statistic,
                          f"{where}.margin", path)
    paired = raw.get("paired", False)
    if not isinstance(paired, bool):
        raise _err(f"{where}.paired", "must be true or false", path)
    if paired and statistic in ("lr_optimum", "optimal_loss"):
        raise _err(f"{where}.paired", "an lr sweep statistic is bootstrapped over seeds, not paired", path)
    reference = raw.get("reference", len(selectors))
    if not isinstance(reference, int) or isinstance(reference, bool) or not 1 <= reference <= len(selectors):
        raise _err(f"{where}.reference", f"must be an arm number from 1 to {len(selectors)}", path)
    return PartSpec(name.strip(), statistic, selectors, expect, margin, paired, reference - 1)
