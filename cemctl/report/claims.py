"""Does CEM hold up? The paper's six headline findings tested on the runs there are (`cemctl claims`).

    table = evaluate_claims(runs)     # runs: a runs frame with a `scale` column (cemctl.report.frame)
    table -> one row per (claim part, scale): effect, 95% interval, n, verdict, runs used

Every claim part is a contrast of test losses (nats per token) between groups
of runs that differ only in the component the claim is about: runs are paired
on every other config value (size, data, recipe) and on the seed, so each pair
(setting, seed) gives one difference; the effect is their mean with a 95%
t interval over the pairs (n = pairs). Where a group's seeds do not match the
other's, the groups' means are compared instead (Welch interval). An interaction
("preconditioners help more at T=2", "recursion gains more than reuse") is a
difference of differences with the same pairing.

Verdicts, for an expectation:
- `lower` (the claim says the first arm has the lower loss): holds if the whole
  interval is below 0, reversed if it is above 0, else inconclusive;
- `close` (the arms are about equal): holds if the interval lies within
  +-TOLERANCE, reversed if it lies wholly outside, else inconclusive;
- `not_worse`: holds if the interval's upper end is below +TOLERANCE, reversed if
  its lower end is above it, else inconclusive.
A part with no pairs is `not run` and names the grid to launch; with one pair it
is inconclusive (no interval).

TOLERANCE is 0.02 nats (a 2% perplexity difference), the margin under which the
paper calls two models "close".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from cemctl.report.aggregate import SEED_COLUMN, config_columns, finished
from cemctl.report.style import COMPONENT_COLUMNS

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

TOLERANCE = 0.02
VALUE = "test_loss"
LR = "train.lr"

Selector = dict[str, Any]


def _cem_attn(**kw: Any) -> Selector:
    return {"model.attention": "cem", "model.mlp": "llama", **kw}


def _cem_mlp(**kw: Any) -> Selector:
    return {"model.attention": "llama", "model.mlp": "cem", **kw}


LLAMA: Selector = {"model.attention": "llama", "model.mlp": "llama"}
FULL_CEM: Selector = {"model.attention": "cem", "model.mlp": "cem", "model.attn_steps": 2, "model.mlp_steps": 2,
                      "model.attn_precond": "diag_lowrank", "model.mlp_precond": "diag_lowrank"}


@dataclass(frozen=True)
class Part:
    """One testable statement: sum_g coef_g * loss(group g), expected `lower` (< 0), `close` or `not_worse`."""

    claim: int
    name: str
    groups: tuple[tuple[float, Selector], ...]
    expect: str
    grids: tuple[str, ...]
    statistic: str = "loss"  # "loss", or over a learning-rate sweep: "optimal_log2_lr" / "optimal_loss"


def _diff(a: Selector, b: Selector) -> tuple[tuple[float, Selector], ...]:
    return ((1.0, a), (-1.0, b))


def _interaction(a2: Selector, b2: Selector, a1: Selector, b1: Selector) -> tuple[tuple[float, Selector], ...]:
    return ((1.0, a2), (-1.0, b2), (-1.0, a1), (1.0, b1))


CLAIMS: dict[int, str] = {
    1: "CEM attention (T=1) is close to Llama attention with about half its parameters",
    2: "CEM MLP (T=1) is worse than the gated MLP; parameter matching narrows the gap",
    3: "T=2 beats T=1 for both CEM sublayers; preconditioners help more at T=2",
    4: "The KQ diagonal matters; shared is close to per-head",
    5: "Within-layer recursion gains more than plain reuse",
    6: "Full CEM prefers a higher learning rate than Llama and matches it with fewer parameters",
}

PARTS: tuple[Part, ...] = (
    Part(1, "CEM attention T=1 (no diagonal, the paper's arm) - Llama",
         _diff(_cem_attn(**{"model.attn_steps": 1, "model.attn_precond": "identity", "model.kq_diagonal": "none"}),
               LLAMA), "close", ("fig2a",)),
    Part(2, "gated MLP - CEM MLP T=1 (CEM worse: expected < 0)",
         _diff(LLAMA, _cem_mlp(**{"model.mlp_steps": 1, "model.mlp_precond": "identity"})), "lower", ("fig2b",)),
    Part(2, "param-matched CEM MLP - CEM MLP (the gap narrows: expected < 0)",
         _diff({"model.attention": "llama", "model.mlp": "cem_param_matched", "model.mlp_steps": 1,
                "model.mlp_precond": "identity"},
               _cem_mlp(**{"model.mlp_steps": 1, "model.mlp_precond": "identity"})), "lower", ("fig2b",)),
    Part(3, "CEM attention T=2 - T=1 (diag+low-rank, shared diagonal)",
         _diff(_cem_attn(**{"model.attn_steps": 2, "model.attn_precond": "diag_lowrank", "model.kq_diagonal": "shared"}),
               _cem_attn(**{"model.attn_steps": 1, "model.attn_precond": "diag_lowrank", "model.kq_diagonal": "shared"})),
         "lower", ("fig2c",)),
    Part(3, "CEM MLP T=2 - T=1 (diag+low-rank)",
         _diff(_cem_mlp(**{"model.mlp_steps": 2, "model.mlp_precond": "diag_lowrank"}),
               _cem_mlp(**{"model.mlp_steps": 1, "model.mlp_precond": "diag_lowrank"})), "lower", ("fig2d",)),
    Part(3, "attention: preconditioner gain at T=2 - gain at T=1 (diag+low-rank vs none)",
         _interaction(
             _cem_attn(**{"model.attn_steps": 2, "model.attn_precond": "diag_lowrank", "model.kq_diagonal": "shared"}),
             _cem_attn(**{"model.attn_steps": 2, "model.attn_precond": "identity", "model.kq_diagonal": "shared"}),
             _cem_attn(**{"model.attn_steps": 1, "model.attn_precond": "diag_lowrank", "model.kq_diagonal": "shared"}),
             _cem_attn(**{"model.attn_steps": 1, "model.attn_precond": "identity", "model.kq_diagonal": "shared"})),
         "lower", ("fig2c", "fig4")),
    Part(3, "MLP: preconditioner gain at T=2 - gain at T=1 (diag+low-rank vs none)",
         _interaction(
             _cem_mlp(**{"model.mlp_steps": 2, "model.mlp_precond": "diag_lowrank"}),
             _cem_mlp(**{"model.mlp_steps": 2, "model.mlp_precond": "identity"}),
             _cem_mlp(**{"model.mlp_steps": 1, "model.mlp_precond": "diag_lowrank"}),
             _cem_mlp(**{"model.mlp_steps": 1, "model.mlp_precond": "identity"})),
         "lower", ("fig2d", "fig3c")),
    Part(4, "shared KQ diagonal - no diagonal (the diagonal matters: expected < 0)",
         _diff(_cem_attn(**{"model.attn_steps": 1, "model.attn_precond": "diag", "model.kq_diagonal": "shared"}),
               _cem_attn(**{"model.attn_steps": 1, "model.attn_precond": "diag", "model.kq_diagonal": "none"})),
         "lower", ("fig3b",)),
    Part(4, "shared - per-head KQ diagonal (close)",
         _diff(_cem_attn(**{"model.attn_steps": 1, "model.attn_precond": "diag", "model.kq_diagonal": "shared"}),
               _cem_attn(**{"model.attn_steps": 1, "model.attn_precond": "diag", "model.kq_diagonal": "per_head"})),
         "close", ("fig3b",)),
    Part(5, "attention: CEM recursion gain (T=2 - T=1) - plain reuse gain",
         _interaction(_cem_attn(**{"model.attn_steps": 2, "model.attn_precond": "identity", "model.kq_diagonal": "shared"}),
                      _cem_attn(**{"model.attn_steps": 1, "model.attn_precond": "identity", "model.kq_diagonal": "shared"}),
                      {"model.attention": "reuse", "model.mlp": "llama", "model.attn_steps": 2},
                      {"model.attention": "reuse", "model.mlp": "llama", "model.attn_steps": 1}),
         "lower", ("fig4",)),
    Part(5, "MLP: CEM recursion gain (T=2 - T=1) - plain reuse gain",
         _interaction(_cem_mlp(**{"model.mlp_steps": 2, "model.mlp_precond": "identity"}),
                      _cem_mlp(**{"model.mlp_steps": 1, "model.mlp_precond": "identity"}),
                      {"model.attention": "llama", "model.mlp": "reuse", "model.mlp_steps": 2},
                      {"model.attention": "llama", "model.mlp": "reuse", "model.mlp_steps": 1}),
         "lower", ("fig3c",)),
    Part(6, "optimal log2(lr): Llama - full CEM (CEM prefers higher: expected < 0)",
         _diff(LLAMA, FULL_CEM), "lower", ("fig3a",), statistic="optimal_log2_lr"),
    Part(6, "optimal test loss: full CEM - Llama (matches with fewer parameters)",
         _diff(FULL_CEM, LLAMA), "not_worse", ("fig3a",), statistic="optimal_loss"),
)


@dataclass
class Estimate:
    effect: float = float("nan")
    low: float = float("nan")
    high: float = float("nan")
    n: int = 0
    paired: bool = True
    run_ids: list[str] = field(default_factory=list)


def _matches(frame: "pd.DataFrame", sel: Selector) -> "pd.Series":
    import pandas as pd

    mask = pd.Series(True, index=frame.index)
    for key, value in sel.items():
        if key not in frame.columns:
            return pd.Series(False, index=frame.index)
        mask &= frame[key].astype(str) == str(value)
    return mask


def _pair_keys(frame: "pd.DataFrame", part: Part) -> list[str]:
    """Columns two arms must share to be compared: every config value but the components (and lr for sweeps)."""
    skip = set(COMPONENT_COLUMNS) | {SEED_COLUMN}
    for _, sel in part.groups:
        skip |= set(sel)
    if part.statistic != "loss":
        skip.add(LR)
    return [c for c in config_columns(frame) if c not in skip]


def _t_interval(values: list[float]) -> tuple[float, float, float]:
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan"), float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _sweep_statistic(group: "pd.DataFrame", statistic: str) -> float | None:
    """Over one seed's learning-rate sweep: the Akima optimum's log2(lr), or its loss."""
    from cemctl.report.optimum import akima_optimum

    if group[LR].nunique() < 3:
        return None
    opt = akima_optimum(group[LR].astype(float).tolist(), group[VALUE].astype(float).tolist())
    return math.log2(opt.lr) if statistic == "optimal_log2_lr" else opt.value


def _cells(frame: "pd.DataFrame", part: Part, keys: list[str]) -> list[dict[tuple, tuple[float, list[str]]]]:
    """Per group: {(setting..., seed): (value, run ids)}."""
    out = []
    for _, sel in part.groups:
        sub = frame[_matches(frame, sel)]
        cells: dict[tuple, tuple[float, list[str]]] = {}
        for key, g in sub.groupby(keys + [SEED_COLUMN], dropna=False, sort=False):
            key = key if isinstance(key, tuple) else (key,)
            if part.statistic == "loss":
                cells[key] = (float(g[VALUE].astype(float).mean()), list(g["run_id"]))
            else:
                value = _sweep_statistic(g, part.statistic)
                if value is not None:
                    cells[key] = (value, list(g["run_id"]))
        out.append(cells)
    return out


def estimate(frame: "pd.DataFrame", part: Part) -> Estimate:
    """The part's effect over the runs of `frame` (one scale), paired by setting and seed."""
    keys = _pair_keys(frame, part)
    cells = _cells(frame, part, keys)
    common = set(cells[0]).intersection(*cells[1:]) if cells else set()
    if common:
        values = [sum(coef * cells[g][k][0] for g, (coef, _) in enumerate(part.groups)) for k in sorted(common, key=str)]
        mean, low, high = _t_interval(values)
        used = sorted({rid for g in range(len(cells)) for k in common for rid in cells[g][k][1]})
        return Estimate(mean, low, high, len(values), True, used)
    # no seed-matched pairs: compare the groups' means (Welch), setting by setting
    settings = set.intersection(*[{k[:-1] for k in c} for c in cells]) if cells and all(cells) else set()
    if not settings:
        return Estimate()
    from scipy import stats

    effect, var, dof_terms, used, n_min = 0.0, 0.0, [], [], None
    for g, (coef, _) in enumerate(part.groups):
        vals = [v for k, (v, _) in cells[g].items() if k[:-1] in settings]
        used += [rid for k, (_, rids) in cells[g].items() if k[:-1] in settings for rid in rids]
        m = sum(vals) / len(vals)
        s2 = sum((v - m) ** 2 for v in vals) / (len(vals) - 1) if len(vals) > 1 else float("nan")
        effect += coef * m
        var += coef * coef * s2 / len(vals)
        dof_terms.append((coef * coef * s2 / len(vals), len(vals)))
        n_min = len(vals) if n_min is None else min(n_min, len(vals))
    if not math.isfinite(var) or var == 0:
        return Estimate(effect, float("nan"), float("nan"), n_min or 0, False, sorted(set(used)))
    dof = var ** 2 / sum(t * t / (n - 1) for t, n in dof_terms if n > 1)
    half = float(stats.t.ppf(0.975, dof)) * math.sqrt(var)
    return Estimate(effect, effect - half, effect + half, n_min or 0, False, sorted(set(used)))


def verdict(est: Estimate, expect: str, tolerance: float = TOLERANCE) -> str:
    if est.n == 0 or not math.isfinite(est.effect):
        return "not run"
    if not (math.isfinite(est.low) and math.isfinite(est.high)):
        return "inconclusive"
    if expect == "lower":
        return "holds" if est.high < 0 else "reversed" if est.low > 0 else "inconclusive"
    if expect == "close":
        if -tolerance < est.low and est.high < tolerance:
            return "holds"
        return "reversed" if est.low > tolerance or est.high < -tolerance else "inconclusive"
    if expect == "not_worse":
        return "holds" if est.high < tolerance else "reversed" if est.low > tolerance else "inconclusive"
    raise ValueError(f"unknown expectation {expect!r}")


def evaluate_claims(runs: "pd.DataFrame", *, scales: list[str] | None = None,
                    launch_hint: Callable[[Part, str], str] | None = None) -> "pd.DataFrame":
    """One row per (claim part, scale present in `runs`): effect, interval, n, verdict, the runs used."""
    import pandas as pd

    done = finished(runs, VALUE)
    if "scale" not in done.columns:
        done = done.assign(scale="")
    present = scales if scales is not None else sorted(set(done["scale"].astype(str))) or [""]
    rows = []
    for scale in present:
        frame = done[done["scale"].astype(str) == scale]
        for part in PARTS:
            est = estimate(frame, part) if not frame.empty else Estimate()
            v = verdict(est, part.expect)
            hint = ""
            if v == "not run" or (v == "inconclusive" and est.n < 3):
                hint = launch_hint(part, scale) if launch_hint else \
                    "launch " + " and ".join(f"experiments/{g}.toml" for g in part.grids) + (f" --scale {scale}" if scale else "")
            rows.append({"claim": part.claim, "statement": CLAIMS[part.claim], "part": part.name, "scale": scale,
                         "expect": part.expect, "unit": "log2(lr)" if part.statistic == "optimal_log2_lr" else "nats",
                         "effect": est.effect, "ci95_low": est.low, "ci95_high": est.high, "n": est.n,
                         "paired": est.paired, "verdict": v, "next": hint, "runs": ",".join(est.run_ids)})
    return pd.DataFrame(rows)


def claim_verdicts(table: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (claim, scale): holds only if every part holds; reversed if any part is reversed."""
    import pandas as pd

    rows = []
    for (claim, scale), g in table.groupby(["claim", "scale"], sort=True):
        parts = list(g["verdict"])
        if all(p == "holds" for p in parts):
            v = "holds"
        elif any(p == "reversed" for p in parts):
            v = "reversed" if all(p in ("reversed", "not run") for p in parts) else "partly reversed"
        elif all(p == "not run" for p in parts):
            v = "not run"
        else:
            v = "inconclusive"
        rows.append({"claim": claim, "scale": scale, "statement": CLAIMS[int(claim)], "verdict": v,
                     "parts": "; ".join(f"{p}: {vv}" for p, vv in zip(g["part"], parts))})
    return pd.DataFrame(rows)
