"""Claims decided honestly (`cemctl claims`, and the claims table of every report).

    table = evaluate_claims(runs, claims)     # runs: runs frame with `scale` (cemctl.report.frame + arms)
    verdicts = claim_verdicts(table)          # claims: ClaimSpec from the grids' [[claim]] tables

The plan, fixed before any number is seen (it is printed on every claims page):

- Arms. A part's selectors must each match exactly one arm (every config value but the
  seed) per setting (scale and model size); a selector matching two is refused with the
  arms it matched, and the arms a part compares may differ only in the keys its
  selectors set differently. No two configurations are ever pooled into one cell.
- Estimate. `paired = true` parts (the arms are the same model at initialisation) take
  the per-seed contrast and a paired t interval. Others take the contrast of the arm
  means with the within-arm variance pooled over the stratum: the finished arms of the
  experiment that declares the part, at that scale and size (df = the sum of seeds - 1;
  other experiments' arms, e.g. a sweep's extreme rates, are not assumed to share its
  variance), falling back to Welch when nothing can be pooled. Learning-rate optima are
  bootstrapped over seeds, once every rate of both sweeps has at least two finished seeds
  (an optimum at the edge of the sweep is censored: the interval is open on that side).
  Several sizes: the mean of the per-size effects.
- Decision. A part's 95% interval is placed against 0 and its margin (a % of the
  reference arm's loss, or stated units): `lower` / `higher` (the interval excludes 0),
  `close` (within +-margin), `not close` (wholly beyond it), else inconclusive. The
  verdict says what that means for the part's expectation: holds, contradicted (the
  opposite, or for a directional claim: no difference as large as the margin), or
  inconclusive; `not run` without runs.
- Multiplicity. Holm's step-down procedure over all parts of the page at one scale
  (family-wise error 5%); each part shows its unadjusted and its adjusted verdict and
  interval, and the claim's verdict uses the adjusted ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.errors import ConfigError
from cemctl.grid.claims import ClaimSpec, PartSpec
from cemctl.report.stats import (
    BootEstimate,
    Estimate,
    TEstimate,
    decide,
    holm,
    holm_levels,
    paired_estimate,
    pooled_estimate,
    pooled_variance,
    seeds_for_power,
    welch_estimate,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

VALUE = "test_loss"
EXPERIMENT = "experiment"  # the runs frame's experiments linking a run, joined by ', '
LR = "train.lr"
SEED = "train.seed"
SETTING = "model.size"
ALPHA = 0.05
MIN_SWEEP_SEEDS = 2  # finished seeds every rate of a sweep needs before its optimum is bootstrapped
BOOTSTRAP = 2000  # resamples of each learning-rate sweep (the smallest p a bootstrap part can have: 1/2001)


class PooledArms(ConfigError):
    """A selector matches several arms at one setting, or a part compares arms that differ in more than it says."""


def _matches(config: dict[str, Any], selector: dict[str, Any]) -> bool:
    for key, want in selector.items():
        have = config.get(key)
        if isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(have, (int, float)) \
                and not isinstance(have, bool):
            if not math.isclose(float(have), float(want), rel_tol=1e-12, abs_tol=0.0):
                return False
        elif str(have) != str(want):
            return False
    return True


@dataclass
class Arm:
    id: str
    label: str
    config: dict[str, Any]
    values: dict[int, float]  # seed -> loss
    run_ids: list[str]
    experiments: frozenset[str] = frozenset()  # the experiments (grids) whose plans link its runs

    @property
    def losses(self) -> list[float]:
        return [self.values[s] for s in sorted(self.values)]


def _arms(rows: "pd.DataFrame") -> list[Arm]:
    from cemctl.report.arms import config_of

    out = []
    for aid, g in rows.groupby("arm", sort=False):
        cfg = {k: v for k, v in config_of(g.iloc[0].to_dict()).items() if k != SEED}
        values = {int(s): float(v) for s, v in zip(g[SEED], g[VALUE])}
        names = frozenset(n.strip() for v in (g[EXPERIMENT] if EXPERIMENT in g.columns else ())
                          for n in str(v).split(",") if n.strip() and str(v) != "nan")
        out.append(Arm(aid, str(g["arm_label"].iloc[0]), cfg, values, list(g["run_id"]), names))
    return out


def _stratum(part: PartSpec, arms: list[Arm]) -> list[Arm]:
    """The arms whose within-arm variance a part pools: those of the experiment that declares the part, at the
    part's scale and size (every arm there when the runs name no experiment, e.g. one grid's report). Arms of other
    experiments are left out: a sweep's extreme learning rates or another grid's unstable variant would otherwise
    set every part's variance."""
    if part.source and any(part.source in a.experiments for a in arms):
        return [a for a in arms if part.source in a.experiments]
    return arms


ATTENTION_KEYS = ("model.attn_steps", "model.attn_step_size", "model.attn_precond", "model.attn_precond_rank",
                  "model.kq_diagonal", "model.cem_position", "model.attn_start")
MLP_KEYS = ("model.mlp_steps", "model.mlp_step_size", "model.mlp_precond", "model.mlp_precond_rank",
            "model.param_match_factor")


def _contrast_keys(part: PartSpec) -> set[str]:
    """The keys a part's arms may differ in: those its selectors set differently; a different attention (MLP)
    kind also brings that sublayer's own settings (Llama attention has no KQ diagonal to match CEM's)."""
    keys: set[str] = set()
    for k in set().union(*part.arms):
        values = {repr(sel.get(k, "<unset>")) for sel in part.arms}
        if len(values) > 1:
            keys.add(k)
    if "model.attention" in keys:
        keys.update(ATTENTION_KEYS)
    if "model.mlp" in keys:
        keys.update(MLP_KEYS)
    return keys


def _select(part: PartSpec, arms: list[Arm], setting: str) -> list[list[Arm]] | None:
    """Per selector, its arms at this setting (one, or one per learning rate for a sweep); None if one is missing."""
    chosen: list[list[Arm]] = []
    sweep = part.statistic in ("lr_optimum", "optimal_loss")
    for i, selector in enumerate(part.arms):
        hits = [a for a in arms if _matches(a.config, selector)]
        if not hits:
            return None
        groups: dict[Any, list[Arm]] = {}
        for a in hits:
            groups.setdefault(a.config.get(LR) if sweep else None, []).append(a)
        for lr, same in groups.items():
            if len(same) > 1:
                where = f" at lr {lr:g}" if sweep and isinstance(lr, float) else ""
                raise PooledArms(f"claims.{part.name}", f"arm selector {i + 1} matches {len(same)} arms at setting "
                                 f"{setting}{where}: " + " | ".join(a.label for a in same)
                                 + "; pin the keys that tell them apart")
        chosen.append(sorted(hits, key=lambda a: float(a.config.get(LR) or 0)) if sweep else hits)
    allowed = _contrast_keys(part) | ({LR} if sweep else set())
    first = chosen[0][0].config
    for group in chosen[1:]:
        for other in group:
            differ = sorted(k for k in set(first) | set(other.config)
                            if k not in allowed and str(first.get(k)) != str(other.config.get(k)))
            if differ:
                k = differ[0]
                raise PooledArms(f"claims.{part.name}", f"compares arms that differ in {k} ({first.get(k)!r} vs "
                                 f"{other.config.get(k)!r}) at setting {setting}, which its selectors do not set "
                                 f"apart: pin {k} in every selector")
    return chosen


def _estimate_setting(part: PartSpec, chosen: list[list[Arm]], stratum: list[Arm],
                      rng: Any) -> tuple[Estimate | None, list[str], float, dict[str, Any]]:
    """(estimate, run ids, reference loss, details) of the part at one setting."""
    runs = [rid for group in chosen for a in group for rid in a.run_ids]
    info: dict[str, Any] = {}
    if part.statistic in ("lr_optimum", "optimal_loss"):
        est, ref = _sweep_estimate(part, chosen, rng, info)
        return est, runs, ref, info
    arms = [group[0] for group in chosen]
    ref = sum(arms[part.reference].losses) / len(arms[part.reference].losses)
    if part.paired:
        common = sorted(set.intersection(*[set(a.values) for a in arms]))
        diffs = [sum(c * a.values[s] for c, a in zip(part.coefs, arms)) for s in common]
        info["paired_sd"] = _sd(diffs)
        return (paired_estimate(diffs) if diffs else None), runs, ref, info
    groups = [(c, a.losses) for c, a in zip(part.coefs, arms)]
    s2, df = pooled_variance([a.losses for a in stratum])
    info.update(pooled_sd=math.sqrt(s2) if df else math.nan, stratum_arms=sum(len(a.values) >= 2 for a in stratum),
                arm_sds=[_sd(a.losses) for a in arms])
    if df > 0:
        return pooled_estimate(groups, s2, df), runs, ref, info
    return welch_estimate(groups), runs, ref, info


def _sd(values: Sequence[float]) -> float:
    if len(values) < 2:
        return math.nan
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def _sweep_stat(lrs: list[float], means: list[float], statistic: str) -> tuple[float, bool, bool]:
    """(statistic, at the low edge, at the high edge) of one sweep's Akima optimum."""
    from cemctl.report.optimum import akima_optimum

    opt = akima_optimum(lrs, means, grid_points=801)
    low_edge = opt.at_edge and math.isclose(opt.lr, min(lrs))
    high_edge = opt.at_edge and not low_edge
    value = math.log2(opt.lr) if statistic == "lr_optimum" else opt.value
    return value, low_edge, high_edge


def _sweep_estimate(part: PartSpec, chosen: list[list[Arm]], rng: Any, info: dict[str, Any]
                    ) -> tuple[BootEstimate | None, float]:
    import numpy as np

    sweeps = []
    for group in chosen:
        lrs = [float(a.config[LR]) for a in group]
        if len(set(lrs)) < 3 or min(len(a.values) for a in group) < MIN_SWEEP_SEEDS:
            return None, math.nan  # no sweep yet, or a rate whose one seed a bootstrap could not resample
        sweeps.append((lrs, [np.asarray(a.losses, dtype=float) for a in group]))
    point = []
    for lrs, vals in sweeps:
        point.append(_sweep_stat(lrs, [float(v.mean()) for v in vals], part.statistic))
    effect = point[0][0] - point[1][0]
    samples = np.empty(BOOTSTRAP)
    for b in range(BOOTSTRAP):
        stats = []
        for lrs, vals in sweeps:
            means = [float(v[rng.integers(0, len(v), len(v))].mean()) for v in vals]
            stats.append(_sweep_stat(lrs, means, part.statistic)[0])
        samples[b] = stats[0] - stats[1]
    censored = ""
    if part.statistic == "lr_optimum":  # an optimum at the sweep's edge is a bound, not a value
        (_, lo0, hi0), (_, lo1, hi1) = point
        if hi0 or lo1:
            censored = "high"  # arm 1's optimum could be higher still (or arm 2's lower): the effect is at least this
        if lo0 or hi1:
            censored = "low" if not censored else "both"
        steps = [abs(math.log2(b) - math.log2(a)) for lrs, _ in sweeps for a, b in zip(lrs, lrs[1:])]
        info["grid_octaves"] = min(steps) if steps else math.nan
        info["optima"] = [round(2 ** p[0], 6) for p in point]
    est = BootEstimate(effect, samples, n=min(len(v) for _, vals in sweeps for v in vals), censored=censored)
    ref_lrs, ref_vals = sweeps[part.reference]
    ref = min(float(v.mean()) for v in ref_vals)
    return est, ref


def _combine(estimates: list[Estimate]) -> Estimate:
    """The mean of per-setting estimates (independent settings)."""
    if len(estimates) == 1:
        return estimates[0]
    if all(isinstance(e, TEstimate) for e in estimates):
        se = math.sqrt(sum(e.se ** 2 for e in estimates)) / len(estimates)  # type: ignore[union-attr]
        return TEstimate(sum(e.effect for e in estimates) / len(estimates), se,
                         min(e.df for e in estimates), estimates[0].method, min(e.n for e in estimates))  # type: ignore[union-attr]
    import numpy as np

    samples = np.mean([e.samples for e in estimates], axis=0)  # type: ignore[union-attr]
    censored = ",".join(sorted({e.censored for e in estimates if e.censored}))  # type: ignore[union-attr]
    return BootEstimate(sum(e.effect for e in estimates) / len(estimates), samples, n=min(e.n for e in estimates),
                        censored=censored)


def _interval(est: Estimate, level: float) -> tuple[float, float]:
    low, high = est.interval(level)
    if isinstance(est, BootEstimate) and est.censored:
        if est.censored in ("high", "both"):
            high = math.inf
        if est.censored in ("low", "both"):
            low = -math.inf
    return low, high


def _power(part: PartSpec, est: Estimate | None, margin: float, info: dict[str, Any]) -> int | None:
    if est is None or not isinstance(est, TEstimate) or not margin > 0:
        return None
    expect = part.expect
    if est.method == "paired t":
        return seeds_for_power(expect=expect, margin=margin, method="paired t", sd=info.get("paired_sd", math.nan))
    if est.method == "pooled t":
        return seeds_for_power(expect=expect, margin=margin, method="pooled t", sd=info.get("pooled_sd", math.nan),
                               coefs=part.coefs, stratum_arms=int(info.get("stratum_arms", 0)))
    return seeds_for_power(expect=expect, margin=margin, method="Welch", coefs=part.coefs,
                           arm_sds=info.get("arm_sds", []))


def evaluate_claims(runs: "pd.DataFrame", claims: Sequence[ClaimSpec], *, scales: Sequence[str] | None = None,
                    power: bool = False, seed: int = 0) -> "pd.DataFrame":
    """One row per (claim part, scale): the estimate and interval, unadjusted and Holm-adjusted decisions."""
    import numpy as np
    import pandas as pd

    from cemctl.report.aggregate import finished

    done = finished(runs, VALUE)
    if "scale" not in done.columns:
        done = done.assign(scale="")
    if "arm" not in done.columns:
        from cemctl.report.arms import with_arms

        done = with_arms(done)
    present = list(scales) if scales is not None else sorted(set(done["scale"].astype(str))) or [""]
    rows = []
    for scale in present:
        at = done[done["scale"].astype(str) == scale]
        settings = sorted(set(at[SETTING].astype(str))) if SETTING in at.columns and not at.empty else []
        arms_by = {s: _arms(at[at[SETTING].astype(str) == s]) for s in settings}
        family = []
        for claim in claims:
            for part in claim.parts:
                rng = np.random.default_rng([seed, len(rows)])
                ests, used, refs, infos = [], [], [], []
                for s in settings:
                    chosen = _select(part, arms_by[s], f"{scale or '-'}/{s}")
                    if chosen is None:
                        continue
                    est, ids, ref, info = _estimate_setting(part, chosen, _stratum(part, arms_by[s]), rng)
                    if est is not None:
                        ests.append(est)
                        used += ids
                        refs.append(ref)
                        infos.append(info)
                est = _combine(ests) if ests else None
                margin = part.margin.value * abs(sum(refs) / len(refs)) if part.margin.relative and refs else \
                    (part.margin.value if not part.margin.relative else math.nan)
                d = decide(est, part.expect, margin if math.isfinite(margin) else 0.0, ALPHA)
                low, high = _interval(est, 1 - ALPHA) if est is not None else (math.nan, math.nan)
                info = infos[0] if len(infos) == 1 else {}
                row = {
                    "claim": claim.id, "statement": claim.statement, "part": part.name, "scale": scale,
                    "statistic": part.statistic, "unit": part.unit, "expect": part.expect, "margin": margin,
                    "margin_rule": part.margin.describe(part.unit),
                    "effect": est.effect if est is not None else math.nan, "ci95_low": low, "ci95_high": high,
                    "method": est.method if est is not None else "", "df": getattr(est, "df", math.nan),
                    "n": est.n if est is not None else 0, "sizes": len(ests), "p": d.p, "label": d.label,
                    "verdict": d.verdict, "censored": getattr(est, "censored", "") if est is not None else "",
                    "grid_octaves": info.get("grid_octaves", math.nan), "runs": ",".join(sorted(set(used))),
                    "source": part.source or claim.source,
                }
                if power:
                    row["seeds_for_80pct_power"] = _power(part, est, margin, info)
                rows.append(row)
                family.append((len(rows) - 1, est, part, margin))
        ps = [rows[i]["p"] for i, *_ in family]
        adjusted, levels = holm(ps), holm_levels(ps, ALPHA)
        for (i, est, part, margin), p_adj, level in zip(family, adjusted, levels):
            if est is None or not math.isfinite(p_adj):
                rows[i].update(p_holm=math.nan, holm_low=math.nan, holm_high=math.nan, label_holm=rows[i]["label"],
                               verdict_holm=rows[i]["verdict"])
                continue
            low, high = _interval(est, 1 - level)
            if p_adj <= ALPHA:
                d = decide(est, part.expect, margin if math.isfinite(margin) else 0.0, level)
                label, verdict = d.label, d.verdict
            else:
                label, verdict = "inconclusive", "inconclusive"
            rows[i].update(p_holm=p_adj, holm_low=low, holm_high=high, label_holm=label, verdict_holm=verdict)
    return pd.DataFrame(rows)


def claim_verdicts(table: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (claim, scale) from the Holm-adjusted part verdicts: holds (every part holds), contradicted
    (some part contradicted, none holds), partly (some hold, some are contradicted), inconclusive, not run."""
    import pandas as pd

    rows = []
    if table.empty:
        return pd.DataFrame(columns=["claim", "scale", "statement", "verdict", "parts"])
    for (claim, scale), g in table.groupby(["claim", "scale"], sort=False):
        verdicts = list(g["verdict_holm"])
        if all(v == "not run" for v in verdicts):
            v = "not run"
        elif all(v == "holds" for v in verdicts):
            v = "holds"
        elif "contradicted" in verdicts and "holds" in verdicts:
            v = "partly contradicted"
        elif "contradicted" in verdicts:
            v = "contradicted"
        elif "holds" in verdicts:
            v = "partly holds"
        else:
            v = "inconclusive"
        rows.append({"claim": claim, "scale": scale, "statement": g["statement"].iloc[0], "verdict": v,
                     "parts": "; ".join(f"{p}: {vv}" for p, vv in zip(g["part"], verdicts))})
    return pd.DataFrame(rows)
