"""Seed aggregation and baseline matching for `cemctl report`.

`aggregate_seeds(runs)` turns one row per run into one row per arm (every
config column except `train.seed` equal; with an `arm` column, from
`cemctl.report.arms.with_arms`, the arm it names): the mean, the sample standard
deviation (ddof=1 by default; NaN for a single seed), min, max and n of a
metric over the variant's finished runs. `match_baselines(agg)` links every
variant to the Llama baseline trained with the same dims and the same training
setup (all config columns equal except the component swap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from cemctl.report.style import COMPONENT_COLUMNS, DIM_COLUMNS, role, variant_label

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

SEED_COLUMN = "train.seed"
STAT_COLUMNS = ("mean", "std", "min", "max", "n")
# Carried along (first value of the group): identical for every seed of a variant.
CARRY_FIRST = ("params_total", "params_non_embedding", "flops_per_token", "marks")
CARRY_MEAN = ("tokens", "flops")


def config_columns(frame: "pd.DataFrame") -> list[str]:
    """The run-config columns of a runs frame (dotted keys, plus `task`)."""
    cols = [c for c in frame.columns if "." in c]
    if "task" in frame.columns:
        cols = ["task"] + cols
    return cols


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
    the carried columns, `variant` (paper name) and `role`.
    """
    import numpy as np
    import pandas as pd

    data = finished(runs, value) if only_finished else runs
    by_arm = by is None and "arm" in runs.columns  # arms (cemctl.report.arms): the nuisance keys do not split
    keys = list(by) if by is not None else (["arm"] if by_arm else
                                            [c for c in config_columns(runs) if c != SEED_COLUMN])
    carried = [c for c in config_columns(runs) if c != SEED_COLUMN] + ["arm_label"] if by_arm else []
    out_cols = keys + carried + list(STAT_COLUMNS) + ["seeds", "run_ids"]
    if data.empty:
        return pd.DataFrame(columns=out_cols + ["variant", "role"])
    rows = []
    for key, group in data.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        vals = group[value].astype(float).to_numpy()
        n = len(vals)
        row = dict(zip(keys, key))
        row.update({c: group[c].iloc[0] for c in carried if c in group})
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
    agg["variant"] = [variant_label(r) for r in agg.to_dict("records")]
    agg["role"] = [role(r) for r in agg.to_dict("records")]
    if "arm_label" not in agg.columns:  # name each row by what varies among them (cem_core.arms)
        from cem_core.arms import ArmLabels

        configs = [{c: r[c] for c in config_columns(agg)} for r in agg.to_dict("records")]
        labels = ArmLabels.of(configs, nuisance=(SEED_COLUMN,))
        agg["arm_label"] = [labels.label(c) for c in configs]
    return agg


NAME_COLUMNS = ("model.attention", "model.mlp", "model.attn_steps", "model.mlp_steps", "model.attn_precond",
                "model.mlp_precond", "model.kq_diagonal")  # what `style.variant_label` names


def _pretty(key: str, value: object) -> str:
    from cem_core.arms import format_value, short_names

    if key in ("model.attn_precond", "model.mlp_precond"):
        return ("MLP " if key == "model.mlp_precond" else "") + style_precond(value)
    if key == "model.kq_diagonal":
        from cemctl.report.style import KQ_LABELS

        return KQ_LABELS.get(str(value), str(value))
    if key == "model.mlp" and value in ("cem", "cem_param_matched"):
        return "param-matched" if value == "cem_param_matched" else "dim-matched"
    return f"{short_names([key])[key]}={format_value(value)}"


def style_precond(value: object) -> str:
    from cemctl.report.style import precond_label

    return precond_label(value)


def extra_settings(agg: "pd.DataFrame", shown: Sequence[str]) -> "pd.Series":
    """Per row, 'k=v, ...' for every config column that varies among the rows and that the figure neither
    shows (`shown`: its axes, panels, series) nor is the seed: what tells two arms apart beyond the figure."""
    import pandas as pd

    skip = set(shown) | {SEED_COLUMN}
    varying = [c for c in config_columns(agg) if c not in skip and agg[c].astype(str).nunique(dropna=False) > 1]
    texts = [", ".join(_pretty(c, r[c]) for c in varying) for r in agg.to_dict("records")]
    return pd.Series(texts, index=agg.index, dtype=object)


def series_labels(agg: "pd.DataFrame", shown: Sequence[str], base: "pd.Series | Sequence[str] | None" = None
                  ) -> "pd.Series":
    """The name of each row's series in a figure: `base` (the figure's own name for it) and its
    `extra_settings`. Two rows with the same name and the same values of `shown` would be drawn as one
    point: that raises `ArmLabelCollision` instead (two arms are never merged)."""
    import pandas as pd

    from cem_core.arms import ArmLabelCollision

    extra = extra_settings(agg, shown)
    base_list = list(base) if base is not None else [""] * len(agg)
    labels = pd.Series([", ".join(p for p in (str(b), e) if p) or "all runs" for b, e in zip(base_list, extra)],
                       index=agg.index, dtype=object)
    cols = [c for c in shown if c in agg.columns]
    key = agg[cols].astype(str).assign(_label=labels) if cols else labels.to_frame("_label")
    dup = key.duplicated(keep=False)
    if dup.any():
        raise ArmLabelCollision(f"two arms drawn as one ({labels[dup].iloc[0]!r} at the same "
                                f"{', '.join(cols) or 'place'}): a figure must show every key that varies")
    return labels


def _baseline_key(frame: "pd.DataFrame", exclude: Sequence[str]) -> list[str]:
    return [c for c in config_columns(frame) if c not in COMPONENT_COLUMNS and c not in exclude and c != SEED_COLUMN]


def match_baselines(agg: "pd.DataFrame", *, ignore: Sequence[str] = ()) -> "pd.Series":
    """For each variant row, the index of its Llama baseline row in `agg` (or -1).

    A baseline shares every config column except the component swap (and `ignore`,
    e.g. `train.lr` when comparing optima); failing that, the same dims
    (`model.size`, `model.d_model`, ...) with any training setup.
    """
    import pandas as pd

    if agg.empty:
        return pd.Series([], dtype=int)
    is_base = agg["role"].eq("llama")
    strict = _baseline_key(agg, ignore)
    dims = [c for c in DIM_COLUMNS if c in agg.columns]

    def lookup(cols: list[str]) -> dict[tuple, int]:
        table: dict[tuple, int] = {}
        for idx, row in agg[is_base].iterrows():
            table.setdefault(tuple(_norm(row[c]) for c in cols), idx)
        return table

    by_strict, by_dims = lookup(strict), lookup(dims)
    out = []
    for idx, row in agg.iterrows():
        if is_base[idx]:
            out.append(idx)
            continue
        hit = by_strict.get(tuple(_norm(row[c]) for c in strict))
        if hit is None:
            hit = by_dims.get(tuple(_norm(row[c]) for c in dims), -1)
        out.append(hit)
    return pd.Series(out, index=agg.index, dtype=int)


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

    parts = ReportParts()
    agg = aggregate_seeds(runs)
    if agg.empty:
        parts.notes.append(f"{kind}: no finished runs")
        return parts
    base_idx = match_baselines(agg)
    for component in components:
        parts.extend(render_component(agg, base_idx, component))
    if parts.is_empty():
        parts.notes.append(f"{kind}: {none_note}")
    return parts
