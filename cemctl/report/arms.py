"""Arms in a runs frame, and the arms table every report starts with (`cemctl report`, `cemctl.api.arms`).

    runs = with_arms(runs, nuisance=("train.seed",), order=axes)   # + columns `arm` (id) and `arm_label`
    table = arms_table(runs, metric="test_loss")                   # one row per arm

An arm is every config value but the nuisance keys (`cem_core.arms`); `with_arms`
labels the arms by the keys that vary among the runs of the frame. The arms table:
label, seeds done / planned, the metric's mean, s.d. and 95% t interval over the
seeds (and the perplexity's, for a loss), parameters, tokens, training FLOPs,
tokens/s and wall time (means over the finished seeds).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.arms import DEFAULT_NUISANCE, arm_id, config_of  # noqa: F401 - config_of: re-exported

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

ARM = "arm"
ARM_LABEL = "arm_label"


def has_arms(runs: "pd.DataFrame") -> bool:
    """Whether every row of a runs frame names its arm (the run record's frames do; synthetic ones may not)."""
    return ARM in runs.columns and ARM_LABEL in runs.columns and not runs[ARM].isna().any()


def with_arms(runs: "pd.DataFrame", *, nuisance: Sequence[str] = DEFAULT_NUISANCE,
              order: Sequence[str] = ()) -> "pd.DataFrame":
    """`runs` with `arm` (12-hex id) and `arm_label` ('attn_steps=2, lr=0.002') columns, by the one labelling path
    (`cemctl.records.labels.arm_labels`)."""
    from cemctl.records.labels import arm_labels

    if runs.empty:
        return runs.assign(**{ARM: [], ARM_LABEL: []})
    nuisance = tuple(dict.fromkeys([*DEFAULT_NUISANCE, *nuisance]))  # the seed is always a nuisance
    records = runs.to_dict("records")
    ids, labels = arm_labels(records, nuisance=nuisance, order=order)
    if all(i is None for i in ids):  # a frame without config columns (a GP table's own input): one arm
        ids, labels = [arm_id({}, nuisance)] * len(records), ["all runs"] * len(records)
    return runs.assign(**{ARM: ids, ARM_LABEL: labels})


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float, float]:
    """(mean, s.d., low, high): a t interval over the values (NaN s.d. and interval for n < 2)."""
    from cemctl.report.tdist import t_quantile  # not scipy.stats: ~0.7 s of imports for one quantile

    n = len(values)
    if n == 0:
        return (math.nan,) * 4  # type: ignore[return-value]
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


def arms_table(runs: "pd.DataFrame", *, metric: str = "test_loss") -> "pd.DataFrame":
    """One row per arm of `runs` (which must have `arm`/`arm_label`, e.g. from `with_arms`), in first-seen order."""
    import numpy as np
    import pandas as pd

    def finite(frame: "pd.DataFrame", col: str) -> list[float]:
        if col not in frame:
            return []
        vals = pd.to_numeric(frame[col], errors="coerce").astype(float)
        return [float(v) for v in vals if np.isfinite(v)]

    rows = []
    ppl_col = metric.replace("_loss", "_ppl")
    wanted = [ARM, ARM_LABEL, "state", metric, ppl_col, "params_total", "tokens", "train_flops", "wall_time_s"]
    narrow = runs[[c for c in dict.fromkeys(wanted) if c in runs.columns]]  # a slice per arm of these, not every column
    for aid, group in narrow.groupby(ARM, sort=False):
        done = group[group["state"].eq("done")] if "state" in group else group
        values = finite(done, metric)
        mean, sd, low, high = t_interval(values)
        row: dict[str, Any] = {"arm": group[ARM_LABEL].iloc[0], "arm id": aid,
                               "seeds done": len(values), "seeds planned": len(group),
                               f"{metric} mean": mean, f"{metric} s.d.": sd,
                               f"{metric} 95% low": low, f"{metric} 95% high": high}
        if metric.endswith("_loss"):
            ppl = metric.replace("_loss", "_ppl")
            pm, psd, plo, phi = t_interval(finite(done, ppl))
            row.update({f"{ppl} mean": pm, f"{ppl} s.d.": psd, f"{ppl} 95% low": plo, f"{ppl} 95% high": phi})
        for col, name in (("params_total", "params"), ("tokens", "tokens"), ("train_flops", "train FLOPs"),
                          ("wall_time_s", "wall time (s)")):
            vals = finite(done, col)
            row[name] = sum(vals) / len(vals) if vals else math.nan
        if {"tokens", "wall_time_s"} <= set(done.columns):
            t = pd.to_numeric(done["tokens"], errors="coerce").astype(float)
            w = pd.to_numeric(done["wall_time_s"], errors="coerce").astype(float)
            rates = (t / w)[(w > 0) & np.isfinite(t / w)]
            row["tokens/s"] = float(rates.mean()) if len(rates) else math.nan
        else:
            row["tokens/s"] = math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def arms_display(table: "pd.DataFrame", metric: str = "test_loss", names: "dict[str, str] | None" = None
                 ) -> "pd.DataFrame":
    """The arms table as a reader wants it: 'mean \u00b1 s.d.' and '[low, high]' cells, counts with units; `names`
    (arm id -> the name a reader reads, `cemctl.report.generic.arm_names`) in place of the full labels."""
    import pandas as pd

    from cemctl.records.formats import duration  # '3m21s' as status, launch and the dashboard write it

    def pm(mean: float, sd: float, digits: int) -> str:
        if not math.isfinite(mean):
            return ""
        return f"{mean:.{digits}f}" + (f" \u00b1 {sd:.{digits}f}" if math.isfinite(sd) else "")

    def ci(low: float, high: float, digits: int) -> str:
        return f"[{low:.{digits}f}, {high:.{digits}f}]" if math.isfinite(low) else ""

    def count(x: float) -> str:
        if not math.isfinite(x):
            return ""
        for div, unit in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(x) >= div:
                return f"{x / div:.3g}{unit}"
        return f"{x:.3g}"

    digits = 4 if metric.endswith("_loss") or metric.endswith("rmse") else 2
    rows = []
    for r in table.to_dict("records"):
        row = {"arm": (names or {}).get(r["arm id"], r["arm"]), "seeds": f"{r['seeds done']}/{r['seeds planned']}",
               f"{metric} (mean \u00b1 s.d.)": pm(r[f"{metric} mean"], r[f"{metric} s.d."], digits),
               f"{metric} 95% interval": ci(r[f"{metric} 95% low"], r[f"{metric} 95% high"], digits)}
        ppl = metric.replace("_loss", "_ppl")
        if metric.endswith("_loss") and f"{ppl} mean" in r:
            row[f"{ppl} (mean \u00b1 s.d.)"] = pm(r[f"{ppl} mean"], r[f"{ppl} s.d."], 2)
            row[f"{ppl} 95% interval"] = ci(r[f"{ppl} 95% low"], r[f"{ppl} 95% high"], 2)
        row.update({"params": count(r["params"]), "tokens": count(r["tokens"]), "train FLOPs": count(r["train FLOPs"]),
                    "tokens/s": count(r["tokens/s"]),
                    "wall time": duration(r["wall time (s)"]) if math.isfinite(r["wall time (s)"])
                    else ""})
        rows.append(row)
    return pd.DataFrame(rows)
