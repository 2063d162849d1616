"""Compare runs or arms side by side (`cemctl compare A B [C ...]`).

    cmp = compare(url, runs_root, ["3fa2c1d0", "attn_step_size=0.5, attn_steps=2"], experiment="own")
    cmp.differing   # [(key, [value of A, value of B, ...])]: only the config keys that differ
    cmp.metrics     # [(name, [A, B, ...])]: test loss, perplexity, ..., side by side
    cmp.identical   # True when the configs are the same (apart from the seed, for arms)

Each item is a run id (or a unique prefix of one), an arm id (`cemctl status --arms`)
or an arm label as a report and `status --arms` write it (`attn_step_size=0.5,
attn_steps=2`; within `--experiment`, else looked up in every experiment). An arm
stands for its seeds: its metrics are the mean +- s.d. over the finished ones. An
unknown or ambiguous item is one line naming what it matched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.errors import CemError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

METRICS = (("state", "state"), ("test_loss", "test loss"), ("test_ppl", "test ppl"), ("val_loss", "val loss"),
           ("params_total", "params"), ("tokens", "tokens"), ("train_flops", "train FLOPs"), ("wall_time_s", "wall time (s)"))


@dataclass
class Item:
    text: str  # as given
    kind: str  # run | arm
    name: str  # run id, or arm label
    runs: "pd.DataFrame"  # the runs it stands for (rows of services.results.runs_table)

    @property
    def run_ids(self) -> list[str]:
        return list(self.runs["run_id"])


@dataclass
class Comparison:
    items: list[Item]
    differing: list[tuple[str, list[Any]]] = field(default_factory=list)
    metrics: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)  # (column, per item)

    @property
    def identical(self) -> bool:
        return not self.differing

    def to_json(self) -> dict[str, Any]:
        return {"items": [{"text": i.text, "kind": i.kind, "name": i.name, "runs": i.run_ids} for i in self.items],
                "identical": self.identical, "differing": {k: v for k, v in self.differing},
                "metrics": {k: v for k, v in self.metrics}}


def _config(row: dict[str, Any]) -> dict[str, Any]:
    from cemctl.report.arms import config_of

    return config_of(row)


def _resolve(text: str, table: "pd.DataFrame") -> Item:
    if table.empty:
        raise CemError(f"compare: no runs to look {text!r} up in")
    exact = table[table["run_id"].eq(text)]
    if len(exact) == 1:
        return Item(text, "run", text, exact)
    prefix = table[table["run_id"].str.startswith(text)] if len(text) >= 4 else table.iloc[0:0]
    arm_rows = table[table["arm"].eq(text) | table["arm_label"].eq(text.strip())]
    if len(prefix) and len(arm_rows):
        raise ConfigError("compare", f"{text!r} is both a run id prefix and an arm; give more of the id")
    if len(prefix) == 1:
        rid = prefix["run_id"].iloc[0]
        return Item(text, "run", rid, prefix)
    if len(prefix) > 1:
        shown = ", ".join(sorted(prefix["run_id"])[:5])
        raise ConfigError("compare", f"{text!r} matches {len(prefix)} runs ({shown}); give more of the id")
    if len(arm_rows):
        arms = arm_rows["arm"].unique()
        if len(arms) > 1:
            raise ConfigError("compare", f"{text!r} names {len(arms)} arms of different experiments; give --experiment")
        return Item(text, "arm", arm_rows["arm_label"].iloc[0], arm_rows)
    labels = list(dict.fromkeys(table["arm_label"]))[:6]
    raise ConfigError("compare", f"no run or arm {text!r}", allowed=["a run id or unique prefix", "an arm id",
                                                                      *[f"arm '{a}'" for a in labels]])


def _value(item: Item, col: str) -> dict[str, Any]:
    """{'text': ...} for the state, else {'mean', 'sd', 'n'} over the item's finished runs (n=0: none)."""
    import pandas as pd

    if col not in item.runs.columns:
        return {"mean": None, "sd": None, "n": 0}
    if col == "state":
        states = item.runs["state"].value_counts()
        text = ", ".join(f"{n} {s}" for s, n in states.items()) if item.kind == "arm" else str(item.runs["state"].iloc[0])
        return {"text": text}
    done = item.runs[item.runs["state"].eq("done")] if item.kind == "arm" else item.runs
    vals = [float(v) for v in pd.to_numeric(done[col], errors="coerce") if not math.isnan(v)]
    if not vals:
        return {"mean": None, "sd": None, "n": 0}
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    return {"mean": mean, "sd": sd, "n": len(vals)}


def compare(url: str, runs_root: Path | str, items: Sequence[str], *, experiment: str | None = None,
            where: Sequence[str] | None = None) -> Comparison:
    """Resolve each item, then the config keys that differ and the metrics side by side."""
    from cemctl.db.engine import open_readonly_db
    from cemctl.services.results import runs_table

    if len(items) < 2:
        raise ConfigError("compare", "give at least two runs or arms to compare", allowed=["RUN", "ARM"])
    engine = open_readonly_db(url)
    table = runs_table(engine, experiment, where=where)
    resolved = [_resolve(text, table) for text in items]
    configs = []
    for item in resolved:
        rows = item.runs.to_dict("records")
        cfg = _config(rows[0])
        if item.kind == "arm":
            cfg = {k: v for k, v in cfg.items() if k != "train.seed"}
        configs.append(cfg)
    keys = sorted(set().union(*configs))
    from cem_core.arms import format_value

    differing = [(k, [format_value(c.get(k)) if k in c else "(seeds)" for c in configs]) for k in keys
                 if len({format_value(c.get(k)) if k in c else "(seeds)" for c in configs}) > 1]
    cmp = Comparison(resolved, differing)
    cmp.metrics = [(col, [_value(i, col) for i in resolved]) for col, _ in METRICS]
    return cmp


def curves_figure(url: str, cmp: Comparison) -> Any:
    """Training loss against tokens of each item (an arm: the mean over its seeds with a band)."""
    import pandas as pd

    from cemctl.db.engine import open_readonly_db
    from cemctl.report.frame import load_curves
    from cemctl.report.generic import arm_curves

    engine = open_readonly_db(url)
    frames = []
    for i, item in enumerate(cmp.items):
        label = f"{item.text}" if item.kind == "run" else f"{item.name}"
        frames.append(item.runs.assign(arm=f"item{i}", arm_label=label))
    runs = pd.concat(frames, ignore_index=True)
    curves = load_curves(engine, runs["run_id"].unique())
    part = arm_curves(runs, curves, name="compare")
    if part is None:
        raise CemError("compare: these runs have no training curves yet")
    return part.figure
