"""Each arm at its best learning rate: what a report's figures show when the grid holds learning-rate profiles.

    choice = rate_choice(runs, metric="test_loss", drawn=keys)  # None: some arm ran at one rate, or a figure draws it
    choice.runs    # the runs at each arm's chosen rate (no `train.lr` column; arms without the rate)
    choice.table   # one row per arm: its rates, the chosen one, why, the runner-up

A grid that compares arms each at its own optimal learning rate (issue 36: `at = "own_optimum"` claim parts) runs
every arm at several rates. Drawn as they are, a figure would make every (arm, rate) its own series: fig4's fifteen
panels, twenty-four training curves. The figures of such a report show one rate per arm, and a figure of the
profiles themselves (`cemctl.report.figures.lr_profiles`, on every run) shows what was chosen from. The arms table, the problem
runs and the claims keep every run.

The rule, fixed before the numbers: an arm (every config value but the seed and the learning rate) is shown at the
sampled rate with the lowest mean **validation** loss over its finished seeds, among the rates that have the arm's
largest number of finished seeds (a rate still training cannot win on one lucky seed). Selected on validation,
reported on test, so the shown test perplexity is not the minimum of noisy test numbers. An arm whose runs have no
validation loss is chosen by the report's metric, and the table says so.

Only when every arm with a finished run has a profile (two rates or more): a figure never sets an arm at its best of
several rates beside one run at a single rate (an ablation whose learning rate is one of its factors, a grid whose
profiles are half trained); then every rate is drawn as it ran, as before.

Not applied when the figure shows the learning rate itself: the `lr_sweep` kind, or a grid whose `x` or `hue` names
`train.lr`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

LR = "train.lr"
SELECT_BY = "val_loss"
CAPTION_NOTE = ("Each arm at its best sampled learning rate by mean validation loss (table learning_rates; the "
                "profiles in figure lr_profiles); the claims use each arm's interpolated optimum instead.")


@dataclass
class RateChoice:
    runs: "pd.DataFrame"  # the runs at each arm's chosen rate, without the `train.lr` column; `arm`/`arm_label` anew
    table: "pd.DataFrame"  # one row per arm: label, rates sampled, rate chosen, its mean validation loss, n, by what


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def choose(rates: dict[float, list[tuple[float | None, float | None]]]) -> tuple[float, str, int, dict[float, float]]:
    """The chosen rate of one arm from {lr: [(validation loss, metric) per finished seed]}: (lr, by what, n, the mean
    of every candidate rate).

    Among the rates with the arm's largest seed count, the lowest mean validation loss; by the metric where no
    candidate rate has a validation loss for every seed."""
    top = max(len(v) for v in rates.values())
    candidates = {lr: v for lr, v in rates.items() if len(v) == top}
    if all(all(val is not None for val, _ in v) for v in candidates.values()):
        by, pick = "validation loss", 0
    else:
        by, pick = "metric (no validation loss)", 1
    means = {lr: sum(p[pick] for p in v if p[pick] is not None) / max(1, sum(p[pick] is not None for p in v))  # type: ignore[misc]
             for lr, v in candidates.items()}
    lr = min(sorted(means), key=lambda r: means[r])
    return lr, by, top, means


def rate_choice(runs: "pd.DataFrame", *, metric: str, drawn: Sequence[str] = (),
                nuisance: Sequence[str] = ("train.seed",), order: Sequence[str] = ()) -> RateChoice | None:
    """Each arm at its chosen rate (module docstring), or None when some arm has finished runs at one rate only or
    the report draws the rate itself (`drawn`: the keys its figures draw, `cemctl.report.figures.kind_shown` and the
    grid's x and hue)."""
    import pandas as pd

    from cemctl.report.arms import ARM, ARM_LABEL, with_arms
    from cem_core.arms import format_value

    if runs.empty or LR not in runs.columns or LR in drawn:
        return None
    base = with_arms(runs.drop(columns=[LR]), nuisance=nuisance, order=order)  # arms without the rate
    done = runs["state"].eq("done") if "state" in runs.columns else pd.Series(True, index=runs.index)
    keep: list[Any] = []
    rows = []
    profiled = True
    for aid, group in base.groupby(ARM, sort=False):
        rates: dict[float, list[tuple[float | None, float | None]]] = {}
        for i in group.index:
            lr = _finite(runs.at[i, LR])
            value = _finite(runs.at[i, metric]) if metric in runs.columns else None
            if lr is None or not done[i] or value is None:
                continue
            val = _finite(runs.at[i, SELECT_BY]) if SELECT_BY in runs.columns else None
            rates.setdefault(lr, []).append((val, value))
        if not rates:
            continue  # nothing finished: nothing to draw (the problem runs list it)
        profiled = profiled and len(rates) > 1
        lr, by, n, means = choose(rates)
        at = group.index[[_finite(runs.at[i, LR]) == lr for i in group.index]]
        keep.extend(at)
        lrs = sorted(rates)
        runner = min((r for r in means if r != lr), key=lambda r: means[r], default=None)
        in_grid = runs.loc[at, "in_grid"].astype(bool).all() if "in_grid" in runs.columns else True
        rows.append({"arm": group[ARM_LABEL].iloc[0], "rates": ", ".join(format_value(r) for r in lrs),
                     "seeds per rate": ", ".join(str(len(rates[r])) for r in lrs), "chosen lr": lr,
                     "at an end": "low" if len(lrs) > 1 and lr == lrs[0] else
                     "high" if len(lrs) > 1 and lr == lrs[-1] else "",
                     "in the grid": "yes" if in_grid else "no (planned by an earlier version of the grid)",
                     "chosen by": by, "seeds at chosen": n, "mean at chosen": means[lr],
                     "next best lr": runner, "next best mean": means[runner] if runner is not None else None})
    if not profiled or not rows:
        return None
    return RateChoice(base[base.index.isin(keep)], pd.DataFrame(rows))
