"""Compare runs or arms side by side (`cemctl compare A B [C ...]`).

    cmp = compare(url, runs_root, ["3fa2c1d0", "attn_steps=2, attn_step_size=0.5"], experiment="own")
    cmp.differing     # [(key, [value of A, value of B, ...])]: only the config keys that differ
    cmp.environment   # [(field, [A, B, ...])]: what they trained on, where that differs (GPU, torch, ...)
    cmp.metrics       # [(field, [A, B, ...])]: test loss, perplexity, ..., side by side
    cmp.differences   # [(field, [None, B - A, C - A])]: each item against the first, with a 95% interval
    cmp.identical     # True when the configs are the same (apart from the seed, for arms)

Each item is a run id (or a unique prefix of one), an arm id (`cemctl status --arms`)
or an arm label as a report and `status --arms` write it, its `key=value` parts in any
order and by any name `cemctl keys` takes (`attn_step_size=0.5, attn_steps=2` and
`model.attn_steps=2, attn_step_size=0.5` are one arm); labels are looked up in every
experiment (each with its own nuisance keys), `experiment` narrows. An unknown or
ambiguous item is one line naming the candidates with their experiment. An arm stands
for its seeds: its metrics are the mean +- s.d. over the finished ones; the difference
of two arms is paired by seed when they share their seeds and their parameter count (the
same initialisation per seed), else Welch's (`cemctl.report.stats`, the functions
`cemctl claims` uses). Runs are read only through the run record (`cemctl.records`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.errors import CemError, ConfigError
from cem_core.runfiles import number

if TYPE_CHECKING:  # pragma: no cover
    from cemctl.records import RunRecords
    from cemctl.records.record import RunRecord

METRICS = ("state", "test_loss", "test_ppl", "val_loss", "params_total", "tokens", "train_flops", "wall_time_s",
           "avg_tokens_per_s")
DIFFERENCE_METRICS = ("test_loss", "test_ppl", "val_loss", "wall_time_s")
ENVIRONMENT = ("host", "device", "gpu_model", "cpu_model", "torch_version", "cuda_version", "cemctl_version",
               "code_snapshot", "code_fingerprint", "peak_host_rss_bytes", "peak_gpu_allocated_bytes")


@dataclass
class Item:
    text: str  # as given
    kind: str  # run | arm
    name: str  # run id, or arm label
    experiment: str
    runs: list[RunRecord]  # the run records it stands for

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]


@dataclass
class Comparison:
    items: list[Item]
    differing: list[tuple[str, list[Any]]] = field(default_factory=list)
    metrics: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)  # (field, per item)
    differences: list[tuple[str, list[dict[str, Any] | None]]] = field(default_factory=list)  # against the first item
    environment: list[tuple[str, list[str]]] = field(default_factory=list)  # only what differs

    @property
    def identical(self) -> bool:
        return not self.differing

    def to_json(self) -> dict[str, Any]:
        return {"items": [{"text": i.text, "kind": i.kind, "name": i.name, "experiment": i.experiment,
                           "runs": i.run_ids} for i in self.items],
                "identical": self.identical, "differing": {k: v for k, v in self.differing},
                "metrics": {k: v for k, v in self.metrics}, "differences": {k: v for k, v in self.differences},
                "environment": {k: v for k, v in self.environment}}


def _label_parts(text: str) -> dict[str, Any] | None:
    """'attn_steps=2, lr=0.002' -> {"model.attn_steps": 2, "train.lr": 0.002} (keys resolved by the catalogue);
    None when the text is not a label."""
    from cemctl.grid.overrides import parse_value
    from cemctl.records.fields import resolve

    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all("=" in p for p in parts):
        return None
    out = {}
    for p in parts:
        key, _, value = p.partition("=")
        out[resolve(key.strip(), what="compare")] = parse_value(value.strip(), "compare")
    return out


def _same(a: Any, b: Any) -> bool:
    from cemctl.records.formats import value as fmt

    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return fmt(a) == fmt(b)


def _resolve(text: str, recs: "RunRecords") -> Item:
    records = recs.records
    if not records:
        raise CemError(f"compare: no runs to look {text!r} up in")
    exact = [r for r in records if r.run_id == text]
    if exact:
        return Item(text, "run", text, exact[0].group, exact[:1])
    prefix = {r.run_id: r for r in records if len(text) >= 4 and r.run_id.startswith(text)}
    arm_rows = [r for r in records if r.arm == text or r.arm_label == text.strip()]
    parts = _label_parts(text) if not arm_rows else None
    if parts:
        arm_rows = [r for r in records if all(_same(r.get(k), v) for k, v in parts.items())]
    if prefix and arm_rows:
        raise ConfigError("compare", f"{text!r} is both a run id prefix and an arm; give more of the id")
    if len(prefix) == 1:
        rid, r = next(iter(prefix.items()))
        return Item(text, "run", rid, r.group, [r])
    if len(prefix) > 1:
        shown = ", ".join(sorted(prefix)[:5])
        raise ConfigError("compare", f"{text!r} matches {len(prefix)} runs ({shown}); give more of the id")
    if arm_rows:
        arms: dict[tuple[str, str | None], list[RunRecord]] = {}
        for r in arm_rows:
            arms.setdefault((r.group, r.arm), []).append(r)
        by_runs: dict[frozenset, tuple[str, str | None]] = {}
        for key, rs in arms.items():  # one arm linked by two experiments (a shared baseline) is one arm
            by_runs.setdefault(frozenset(r.run_id for r in rs), key)
        arms = {key: arms[key] for key in by_runs.values()}
        if len(arms) > 1:
            shown = "; ".join(f"{rs[0].arm_label} ({exp})" for (exp, _), rs in list(arms.items())[:6])
            raise ConfigError("compare", f"{text!r} names {len(arms)} arms: {shown}"
                              + ("; add keys to the label" if len({e for e, _ in arms}) == 1 else
                                 "; give --experiment (-e) or more keys"))
        (exp, _), rows = next(iter(arms.items()))
        return Item(text, "arm", rows[0].arm_label or "", exp, rows)
    labels = list(dict.fromkeys(f"{r.arm_label} ({r.group})" for r in records))[:4]
    raise ConfigError("compare", f"no run or arm {text!r}", allowed=["a run id or unique prefix", "an arm id",
                                                                      "an arm label (key=value, ... in any order)",
                                                                      *labels])


def _finished(item: Item) -> list[RunRecord]:
    return [r for r in item.runs if r.state == "done"] if item.kind == "arm" else item.runs


def _values(item: Item, col: str) -> list[float]:
    return [v for v in (number(r.get(col)) for r in _finished(item)) if v is not None]


def _value(item: Item, col: str) -> dict[str, Any]:
    """{'text': ...} for the state, else {'mean', 'sd', 'n'} over the item's finished runs (n=0: none)."""
    if col == "state":
        states: dict[str, int] = {}
        for r in item.runs:
            states[r.state] = states.get(r.state, 0) + 1
        return {"text": ", ".join(f"{n} {s}" for s, n in states.items()) if item.kind == "arm" else item.runs[0].state}
    vals = _values(item, col)
    if not vals:
        return {"mean": None, "sd": None, "n": 0}
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    return {"mean": mean, "sd": sd, "n": len(vals)}


def _by_seed(item: Item, col: str) -> dict[Any, float]:
    return {r.get("train.seed"): v for r in _finished(item) for v in (number(r.get(col)),) if v is not None}


def difference(a: Item, b: Item, col: str) -> dict[str, Any] | None:
    """b - a of `col` with a 95% interval: paired by seed when both share >= 2 seeds and their parameter count,
    else Welch's; a lone run against a lone run has no interval. None when either has no value."""
    from cemctl.report.stats import paired_estimate, welch_estimate

    va, vb = _values(a, col), _values(b, col)
    if not va or not vb:
        return None
    pa, pb = _by_seed(a, col), _by_seed(b, col)
    common = sorted(set(pa) & set(pb), key=str)
    same_init = {r.params_total for r in a.runs} == {r.params_total for r in b.runs}
    if a.kind == b.kind == "arm" and len(common) >= 2 and same_init:
        est = paired_estimate([pb[s] - pa[s] for s in common])
    else:
        est = welch_estimate([(-1.0, va), (1.0, vb)])
    low, high = est.interval()
    return {"effect": est.effect, "low": None if math.isnan(low) else low, "high": None if math.isnan(high) else high,
            "method": est.method, "df": est.df, "n": est.n}


def _env_text(item: Item, col: str) -> str:
    from cemctl.records import formats as F
    from cemctl.records.fields import field

    kind = field(col).kind
    values = list(dict.fromkeys(F.by_kind(kind)(r.get(col)) for r in item.runs))
    return " | ".join(v for v in values if v) if any(values) else ""


def compare(url: str, runs_root: Path | str, items: Sequence[str], *, experiment: str | None = None,
            where: Sequence[str] | None = None, sync: bool = False) -> Comparison:
    """Resolve each item, then the config keys that differ, what they trained on where that differs, the
    metrics side by side and each item's difference to the first. `sync`: first bring the database up to date
    with the run folders (`cemctl compare`; the dashboard, read-only by construction, does not)."""
    from cem_core.arms import format_value
    from cemctl.records import load_records
    from cemctl.records.where import parse_where

    if len(items) < 2:
        raise ConfigError("compare", "give at least two runs or arms to compare", allowed=["RUN", "ARM"])
    if sync:
        from cemctl.services.status.query import sync_before_reading

        sync_before_reading(url, runs_root, experiment)
    recs = load_records(url, experiment, per_experiment=True).where(parse_where(where))
    resolved = [_resolve(text, recs) for text in items]
    configs = []
    for item in resolved:
        cfg = item.runs[0].config
        if item.kind == "arm":
            nuisance = recs.experiments[item.experiment].nuisance if item.experiment in recs.experiments else ()
            cfg = {k: v for k, v in cfg.items() if k not in ("train.seed", *nuisance)}
        configs.append(cfg)
    keys = sorted(set().union(*configs))
    texts = [[format_value(c.get(k)) if k in c else "(seeds)" for c in configs] for k in keys]
    differing = [(k, t) for k, t in zip(keys, texts) if len(set(t)) > 1]
    cmp = Comparison(resolved, differing)
    cmp.metrics = [(col, [_value(i, col) for i in resolved]) for col in METRICS]
    first = resolved[0]
    cmp.differences = [(col, [None, *(difference(first, i, col) for i in resolved[1:])]) for col in DIFFERENCE_METRICS]
    env = [(col, [_env_text(i, col) for i in resolved]) for col in ENVIRONMENT]
    cmp.environment = [(col, vals) for col, vals in env if any(vals) and len(set(vals)) > 1]
    return cmp


@dataclass
class History:
    run_id: str
    rows: list[dict[str, Any]]  # the run's results, oldest first; the last is the current one ("current": True)


def run_history(url: str, item: str, *, experiment: str | None = None) -> History:
    """`compare RUN --history`: the run's current result after its earlier ones (set aside by `--rerun-outdated`
    or `--redo-damaged`), each with its code fingerprint and its test loss's difference to the current one."""
    from cemctl.db.read import open_reader
    from cemctl.records import load_records
    from cemctl.records.load import history_of

    reader = open_reader(url)
    recs = load_records(reader, experiment, per_experiment=True, arms=False)
    found = _resolve(item, recs)
    if found.kind != "run":
        raise ConfigError("compare", f"--history compares one run with its earlier results; {item!r} is an arm",
                          allowed=["a run id or unique prefix"])
    r = found.runs[0]
    rows = [dict(h, current=False) for h in history_of(reader, [r.run_id]).get(r.run_id, [])]
    rows.append({"folder": "(current)", "state": r.state, "test_loss": r.test_loss, "val_loss": r.val_loss,
                 "code_fingerprint": r.code_fingerprint, "set_aside_at": r.finished_at, "current": True})
    now = r.test_loss
    for h in rows:
        h["test_loss_minus_current"] = (h["test_loss"] - now if isinstance(h["test_loss"], (int, float))
                                        and isinstance(now, (int, float)) else None)
    return History(r.run_id, rows)


def curves_figure(url: str, cmp: Comparison) -> Any:
    """Training loss against tokens of each item (an arm: the mean over its seeds with a band)."""
    import pandas as pd

    from cemctl.db.engine import open_readonly_db
    from cemctl.records import records_frame
    from cemctl.report.frame import load_curves
    from cemctl.report.generic import arm_curves

    engine = open_readonly_db(url)
    frames = []
    for i, item in enumerate(cmp.items):
        label = f"{item.text}" if item.kind == "run" else f"{item.name}"
        frames.append(records_frame(item.runs).assign(arm=f"item{i}", arm_label=label))
    runs = pd.concat(frames, ignore_index=True)
    curves = load_curves(engine, runs["run_id"].unique())

    from cemctl.report import style

    class _Items:  # one colour per item, named as given
        hue_of = {f"item{i}": (item.text if item.kind == "run" else item.name) for i, item in enumerate(cmp.items)}
        curve_style_of = {k: "all runs" for k in hue_of}
        color = {name: style.CYCLE[i % len(style.CYCLE)] for i, name in enumerate(hue_of.values())}
    part = arm_curves(runs, curves, name="compare", palette=_Items)  # type: ignore[arg-type]
    if part is None:
        raise CemError("compare: these runs have no training curves yet")
    return part.figure
