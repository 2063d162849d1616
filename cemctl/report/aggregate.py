"""Seed aggregation and baseline matching for `cemctl report`.

`aggregate_seeds(runs)` turns one row per run into one row per arm (every
config column except `train.seed` equal; with an `arm` column, from
`cemctl.report.arms.with_arms`, the arm it names): the mean, the sample standard
deviation (ddof=1 by default; NaN for a single seed), min, max and n of a
metric over the variant's finished runs. `match_baselines(agg)` links every
variant to the Llama baseline trained with the same dims and the same training
setup (all config columns equal except the component swap), and to nothing
else: `unpaired_notes` says why a variant has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from cemctl.report.arms import has_arms
from cemctl.report.style import DIM_COLUMNS, role

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

SEED_COLUMN = "train.seed"
STAT_COLUMNS = ("mean", "std", "min", "max", "n")
# Carried along (first value of the group): identical for every seed of a variant.
CARRY_FIRST = ("params_total", "params_non_embedding", "flops_per_token", "marks")
CARRY_MEAN = ("tokens", "train_flops")


def config_columns(frame: "pd.DataFrame") -> list[str]:
    """The run-config columns of a runs frame (`task`, `plugins`, the dotted keys; never a tag or a result)."""
    from cem_core.arms import TOP_LEVEL_KEYS, is_config_key

    return [c for c in TOP_LEVEL_KEYS if c in frame.columns] + \
        [c for c in frame.columns if is_config_key(c) and c not in TOP_LEVEL_KEYS]


def finished(runs: "pd.DataFrame", value: str = "test_ppl") -> "pd.DataFrame":
    """Runs in state 'done' with a finite `value`."""
    import numpy as np

    if runs.empty or value not in runs.columns:
        return runs.iloc[0:0]
    ok = runs["state"].eq("done") if "state" in runs.columns else True
    vals = runs[value].astype(float)
    return runs[ok & np.isfinite(vals)]


def aggregate_seeds(runs: "pd.DataFrame", value: str = "test_ppl", *, by: Sequence[str] | None = None,
                    ddof: int = 1, only_finished: bool = True) -> "pd.DataFrame":
    """One row per variant: the `by` columns (default: every config column but the seed), then
    mean, std (ddof), min, max, n of `value`, `seeds` (sorted, comma-separated), `run_ids`,
    the carried columns, `variant` (the row's name by the one labelling path) and `role`.
    """
    import numpy as np
    import pandas as pd

    data = finished(runs, value) if only_finished else runs
    by_arm = by is None and has_arms(runs)  # arms (cemctl.report.arms): the nuisance keys do not split
    keys = list(by) if by is not None else (["arm"] if by_arm else
                                            [c for c in config_columns(runs) if c != SEED_COLUMN])
    carried = [c for c in config_columns(runs) if c != SEED_COLUMN] + ["arm_label"] if by_arm else []
    out_cols = keys + carried + list(STAT_COLUMNS) + ["seeds", "run_ids"]
    if data.empty:
        return pd.DataFrame(columns=out_cols + ["variant", "role"])
    rows = []
    used = [*keys, value, SEED_COLUMN, "run_id", *CARRY_FIRST, *CARRY_MEAN]
    narrow = data[[c for c in dict.fromkeys(used) if c in data.columns]]  # a slice per group of these only
    firsts = data.drop_duplicates(keys) if carried else None  # the carried values: each group's first row
    for i, (key, group) in enumerate(narrow.groupby(keys, dropna=False, sort=False)):
        key = key if isinstance(key, tuple) else (key,)
        vals = group[value].astype(float).to_numpy()
        n = len(vals)
        row = dict(zip(keys, key))
        if firsts is not None:
            first = firsts.iloc[i]
            row.update({c: first[c] for c in carried if c in firsts.columns})
        row.update(
            mean=float(np.mean(vals)),
            std=float(np.std(vals, ddof=ddof)) if n > ddof else float("nan"),
            min=float(np.min(vals)),
            max=float(np.max(vals)),
            n=n,
            seeds=",".join(str(s) for s in sorted(group[SEED_COLUMN].tolist())) if SEED_COLUMN in group else "",
            run_ids=",".join(group["run_id"].astype(str)) if "run_id" in group else "",
        )
        for col in CARRY_FIRST:
            if col in group:
                row[col] = group[col].iloc[0]
        for col in CARRY_MEAN:
            if col in group:
                row[col] = float(group[col].astype(float).mean())
        rows.append(row)
    agg = pd.DataFrame(rows)
    agg["variant"] = series_labels(agg, [])  # each row's name (a figure renames its series by what it shows)
    agg["role"] = [role(r) for r in agg.to_dict("records")]
    if "arm_label" not in agg.columns:  # name each row by what varies among them (the one labelling path)
        from cemctl.records.labels import arm_labels

        agg["arm_label"] = arm_labels(agg.to_dict("records"), nuisance=(SEED_COLUMN,))[1]
    return agg


def _configs(agg: "pd.DataFrame") -> list[dict]:
    from cem_core.arms import config_of

    return [config_of(r) for r in agg.to_dict("records")]


def extra_settings(agg: "pd.DataFrame", shown: Sequence[str]) -> "pd.Series":
    """Per row, what tells its series apart beyond the keys the figure shows (`shown`), by the one labelling path
    (`cemctl.records.labels.series_names`); "" when nothing else varies."""
    import pandas as pd

    from cemctl.records.labels import series_names

    if agg.empty:
        return pd.Series([], index=agg.index, dtype=object)
    names = series_names(_configs(agg), shown=[*shown, SEED_COLUMN])
    return pd.Series(["" if n == "all runs" else n for n in names], index=agg.index, dtype=object)


def series_labels(agg: "pd.DataFrame", shown: Sequence[str], base: "pd.Series | Sequence[str] | None" = None, *,
                  arch: bool = False) -> "pd.Series":
    """The name of each row's series in a figure (`cemctl.records.labels.series_names`): rows equal in every key
    but the seed and those the figure shows (`shown`: its axes and panels) are one series, named by the fewest
    varying keys that tell the series apart, by the specs' names. Two series never share a name:
    `ArmLabelCollision` instead. `base` is ignored (names come from the configs, never from a variant's label
    alone); kept for callers that pass one. `arch`: name the architecture even when it is the same for every row."""
    import pandas as pd

    from cemctl.records.labels import series_names

    if agg.empty:
        return pd.Series([], index=agg.index, dtype=object)
    return pd.Series(series_names(_configs(agg), shown=list(shown), always_arch=arch), index=agg.index, dtype=object)


def baseline_lines(ax: Any, agg: "pd.DataFrame", bases: Sequence[int], shown: Sequence[str], *, palette: Any,
                   label_ns: Sequence[int] | None = None) -> None:
    """The Llama baselines of a panel as dashed lines in the report's colour of their hue (`palette`): "Llama" when
    the panel has one, else each named by what tells them apart (the one labelling path), never one line standing
    for another setup's baseline."""
    from cemctl.report import style

    bases = sorted({int(b) for b in bases})
    names = dict(zip(bases, series_labels(agg.loc[bases], shown, arch=True))) if len(bases) > 1 else \
        {b: "Llama" for b in bases}
    for b in bases:
        style.baseline_line(ax, agg.loc[b], label=names[b], label_ns=label_ns, color=palette.color_for(agg.loc[b]))


def _baseline_key(frame: "pd.DataFrame", exclude: Sequence[str]) -> list[str]:
    """The keys a variant shares with its Llama baseline: all but the architecture's (from the variant specs)."""
    from cemctl.records.labels import pairing_keys

    return [c for c in pairing_keys(config_columns(frame)) if c not in exclude]


def match_baselines(agg: "pd.DataFrame", *, ignore: Sequence[str] = ()) -> "pd.Series":
    """For each variant row, the index of its Llama baseline row in `agg` (or -1).

    A baseline shares every config column except the component swap (`cemctl.records.labels.pairing_keys`, from
    the variant specs) and `ignore` (e.g. `train.lr` when comparing optima). Nothing looser: a variant whose
    training setup no Llama run has (another learning rate, say) has no baseline rather than another setup's;
    `unpaired_notes` says why.
    """
    import pandas as pd

    if agg.empty:
        return pd.Series([], dtype=int)
    is_base = agg["role"].eq("llama")
    strict = _baseline_key(agg, ignore)
    table: dict[tuple, int] = {}
    for idx, row in agg[is_base].iterrows():
        table.setdefault(tuple(_norm(row[c]) for c in strict), idx)
    out = [idx if is_base[idx] else table.get(tuple(_norm(row[c]) for c in strict), -1) for idx, row in agg.iterrows()]
    return pd.Series(out, index=agg.index, dtype=int)


def unpaired_reasons(agg: "pd.DataFrame", base_idx: "pd.Series", *, ignore: Sequence[str] = ()) -> dict[Any, str]:
    """Why each variant row without a baseline (`match_baselines` gave -1) has none: no Llama run of its dims, or
    the keys in which the closest Llama runs of its dims differ from it, with the values on both sides."""
    from cem_core.arms import format_value, short_names

    is_base = agg["role"].eq("llama")
    keys = _baseline_key(agg, ignore)
    dims = [c for c in DIM_COLUMNS if c in agg.columns]
    bases = agg[is_base]
    out: dict[Any, str] = {}
    for idx, row in agg.iterrows():
        if is_base[idx] or base_idx[idx] >= 0:
            continue
        same = bases[[all(_norm(b[c]) == _norm(row[c]) for c in dims) for _, b in bases.iterrows()]]
        if same.empty:
            where = ", ".join(f"{short_names([c])[c]}={format_value(row[c])}" for c in dims if _norm(row[c]) != "<nan>")
            out[idx] = f"no Llama run of its dimensions ({where})" if where else "no Llama run"
            continue
        differ = [[c for c in keys if _norm(b[c]) != _norm(row[c])] for _, b in same.iterrows()]
        fewest = min(len(d) for d in differ)
        closest = list(dict.fromkeys(c for d in differ if len(d) == fewest for c in d))
        text = "; ".join(f"{short_names([c])[c]} {format_value(row[c])} here, Llama at "
                         + ", ".join(dict.fromkeys(format_value(v) for v in same[c])) for c in closest)
        out[idx] = f"no Llama run with the same settings ({text})"
    return out


def unpaired_notes(agg: "pd.DataFrame", base_idx: "pd.Series", names: "pd.Series", kind: str, *,
                   ignore: Sequence[str] = ()) -> list[str]:
    """One note per reason a figure's rows have no Llama baseline (`unpaired_reasons`), naming the rows by `names`:
    those rows are drawn without a link to Llama and have no difference to it (never another setup's Llama)."""
    by_reason: dict[str, list[str]] = {}
    for idx, why in unpaired_reasons(agg, base_idx, ignore=ignore).items():
        if idx in names.index:
            by_reason.setdefault(why, []).append(str(names[idx]))
    return [f"{kind}: not compared with Llama, {why}: {'; '.join(dict.fromkeys(rows))}" for why, rows in by_reason.items()]


def _norm(value: object) -> object:
    """Make NaN equal to NaN in dictionary keys."""
    if isinstance(value, float) and value != value:
        return "<nan>"
    return value


def difference_std(std_a: float, std_b: float) -> float:
    """s.d. of a difference of two independent means' spreads: sqrt(a^2 + b^2) (NaN treated as 0
    unless both are NaN)."""
    import math

    if math.isnan(std_a) and math.isnan(std_b):
        return float("nan")
    a = 0.0 if math.isnan(std_a) else std_a
    b = 0.0 if math.isnan(std_b) else std_b
    return math.sqrt(a * a + b * b)


def render_per_component(runs: "pd.DataFrame", components: Any, render_component: Any, *, kind: str,
                         none_note: str) -> Any:
    """The Fig. 2-style figure kinds: seeds aggregated, baselines matched, one part per component (attention, MLP);
    a note when there is nothing to draw."""
    from cemctl.report.parts import ReportParts

    from cemctl.report.generic import palette_of

    parts = ReportParts()
    palette = palette_of(runs)  # the report's colours
    agg = aggregate_seeds(runs)
    if agg.empty:
        parts.notes.append(f"{kind}: no finished runs")
        return parts
    base_idx = match_baselines(agg)
    for component in components:
        parts.extend(render_component(agg, base_idx, component, palette))
    if parts.is_empty():
        parts.notes.append(f"{kind}: {none_note}")
    return parts
