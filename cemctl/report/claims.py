"""Claims decided honestly (`cemctl claims`, and the claims table of every report).

    page = evaluate_page(runs, claims)        # runs: runs frame with `scale` (cemctl.report.frame + arms)
    page.parts, page.robustness               # one row per (claim part, scale); the same contrasts elsewhere
    table = evaluate_claims(runs, claims)     # page.parts
    verdicts = claim_verdicts(table)          # claims: ClaimSpec from the grids' [[claim]] tables

The plan, fixed before any number is seen (it is printed on every claims page; docs/claims.md):

- Arms. A part's selectors must each match exactly one arm (every config value but the seed) per
  setting (scale and model size); a selector matching two is refused with the arms it matched, and the
  arms a part compares may differ only in the keys its selectors set differently. No two configurations
  are ever pooled into one cell. A part changes one key (an interaction two) unless its grid lists more
  in `changes` (checked at plan, `cemctl.grid.claims`).
- Contrast. `at = "fixed"`: the arms at the learning rate the selectors pin. `at = "own_optimum"`: each
  arm at its own optimum, from its lr profile (`cemctl.report.tuned`: the Akima optimum of the seed-mean
  profile, a jackknife over seeds for the tuning's noise). The primary contrast decides; the other is
  shown beside it, and a part where the two labels differ is flagged.
- Variance. The part's declared model, else the rule (`cemctl.grid.claims.variance_model`): `paired`
  (the per-seed contrast), `pooled` (the within-arm variance pooled over the part's own arms), `welch`.
  Learning-rate optima are bootstrapped over seeds, once every rate of both sweeps has two finished
  seeds (an optimum at the edge of the sweep is censored: the interval is open on that side).
  Several sizes: the mean of the per-size effects.
- Decision. A part's 95% interval is placed against 0 and its margin (a % of the reference arm's loss,
  or stated units): `lower` / `higher` (the interval excludes 0), `close` (within +-margin), `not close`
  (wholly beyond it), else inconclusive. The verdict says what that means for the part's expectation:
  holds, contradicted (the opposite, or for a directional claim: no difference as large as the margin),
  or inconclusive; `not run` without runs.
- Sequential parts. A part whose experiment was launched `--until-decided` is analysed over its recorded
  looks with the group-sequential design of `cemctl.report.sequential` (alpha spending; repeated
  confidence intervals); the others at the one look there is.
- Multiplicity. A step-down procedure over the primary contrasts of all parts of the page at one scale
  (family-wise error 5%): Holm's over the parts' label hypotheses, each part counted by how many of its
  hypotheses can still be true (Shaffer's S1; `cemctl.report.sequential.step_down`). Each part shows its
  unadjusted and its adjusted verdict and interval, and the claim's verdict uses the adjusted ones. Secondary contrasts and robustness rows are not in the
  family: they are read as sensitivity, never as verdicts.
- Robustness. Where the runs hold the same contrast under another value of one key the part pins but
  does not contrast (a preconditioner, a step size, a learning rate), it is a secondary row with its own
  95% interval, and the part gets a one-line summary of whether the sign holds across them.
- Convergence. Each arm's end-of-training slope of the validation loss (per 10% of the budget, from the
  metrics); a part whose arms still fall faster than its margin per 10% is `not converged`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from cem_core.errors import ConfigError
from cemctl.grid.claims import KIND_KEYS, LR, ClaimSpec, PartSpec, profile_advice, variance_model
from cemctl.report.stats import (
    BootEstimate,
    Estimate,
    TEstimate,
    decide,
    paired_estimate,
    pooled_estimate,
    pooled_variance,
    sd_range,
    seeds_for_power,
    welch_estimate,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from cemctl.report.sequential import Design

VALUE = "test_loss"
EXPERIMENT = "experiment"  # the runs frame's experiments linking a run, joined by ', '
SEED = "train.seed"
SETTING = "model.size"
ALPHA = 0.05
MIN_SWEEP_SEEDS = 2  # finished seeds every rate of a sweep needs before its optimum is bootstrapped
BOOTSTRAP = 2000  # resamples of each learning-rate sweep (the smallest p a bootstrap part can have: 1/2001)
MAX_POWER_SEEDS = 1000  # `--power` searches seed counts up to this
DECIDED = ("holds", "contradicted")
DECISIVE = ("lower", "higher", "close", "not close")


class PooledArms(ConfigError):
    """A selector matches several arms at one setting, or a part compares arms that differ in more than it says."""


def _matches(config: dict[str, Any], selector: dict[str, Any]) -> bool:
    from cemctl.grid.claims import selector_matches

    return selector_matches(config, selector)


@dataclass
class Arm:
    id: str
    label: str
    config: dict[str, Any]
    values: dict[int, float]  # seed -> loss
    run_ids: list[str]
    experiments: frozenset[str] = frozenset()  # the experiments (grids) whose plans link its runs
    seed_runs: dict[int, str] = field(default_factory=dict)  # seed -> run id

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
        out.append(Arm(aid, str(g["arm_label"].iloc[0]), cfg, values, list(g["run_id"]), names,
                       {int(s): str(r) for s, r in zip(g[SEED], g["run_id"])}))
    return out


def _contrast_keys(selectors: Sequence[dict[str, Any]]) -> set[str]:
    """The keys a part's arms may differ in: those its selectors set differently; a different attention (MLP)
    kind also brings that sublayer's own settings (Llama attention has no KQ diagonal to match CEM's)."""
    keys: set[str] = set()
    for k in set().union(*selectors):
        if len({repr(sel.get(k, "<unset>")) for sel in selectors}) > 1:
            keys.add(k)
    for kind, own in KIND_KEYS.items():
        if kind in keys:
            keys.update(own)
    return keys


def _select(part: PartSpec, arms: list[Arm], setting: str, *, sweep: bool,
            selectors: Sequence[dict[str, Any]] | None = None) -> list[list[Arm]] | None:
    """Per selector, its arms at this setting (one, or one per learning rate for a sweep or an lr profile); None
    if one is missing. A sweep's selectors are matched without their train.lr."""
    selectors = list(selectors or part.arms)
    contrast = _contrast_keys(selectors)
    if sweep:
        selectors = [{k: v for k, v in sel.items() if k != LR} for sel in selectors]
    chosen: list[list[Arm]] = []
    for i, selector in enumerate(selectors):
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
    allowed = contrast | ({LR} if sweep else set())
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


def _sd(values: Sequence[float]) -> float:
    if len(values) < 2:
        return math.nan
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


# ---------------------------------------------------------------------------------------------- one contrast


@dataclass
class Estimated:
    """A part's contrast (combined over the settings it has runs at)."""

    est: Estimate | None
    runs: list[str] = field(default_factory=list)
    refs: list[float] = field(default_factory=list)  # the reference arm's loss per setting
    info: dict[str, Any] = field(default_factory=dict)
    why: str = ""  # why there is no estimate, when there is none
    arm_runs: list[list[str]] = field(default_factory=list)  # per arm: the runs at the arm's (optimal) rate
    settings: int = 0


def _fixed(part: PartSpec, chosen: list[list[Arm]], model: str) -> tuple[Estimate | None, float, dict[str, Any]]:
    arms = [group[0] for group in chosen]
    ref = sum(arms[part.reference].losses) / len(arms[part.reference].losses)
    info: dict[str, Any] = {"arm_sds": [_sd(a.losses) for a in arms]}
    if model == "paired":
        common = sorted(set.intersection(*[set(a.values) for a in arms]))
        diffs = [sum(c * a.values[s] for c, a in zip(part.coefs, arms)) for s in common]
        info["paired_sd"] = _sd(diffs)
        return (paired_estimate(diffs) if diffs else None), ref, info
    groups = [(c, a.losses) for c, a in zip(part.coefs, arms)]
    if model == "pooled":
        s2, df = pooled_variance([a.losses for a in arms])
        info.update(pooled_sd=math.sqrt(s2) if df else math.nan, stratum_arms=sum(len(a.values) >= 2 for a in arms))
        if df > 0:
            return pooled_estimate(groups, s2, df), ref, info
    return welch_estimate(groups), ref, info


def _tuned(part: PartSpec, chosen: list[list[Arm]], model: str, extensions: Sequence[Mapping[str, Any]] = ()
           ) -> tuple[Estimate | None, float, dict[str, Any], str, list[list[str]]]:
    """`extensions`: the until-decided loop's added rates (`Design.extensions`); an arm whose profile ends at one
    of its own (its selector matches the arm) has that side marked extended (`tuned.edge_side`)."""
    from cemctl.grid.claims import selector_matches
    from cemctl.report.tuned import Profile, tuned_estimate

    profiles = []
    for k, group in enumerate(chosen):
        table = {float(a.config.get(LR) or 0): dict(a.values) for a in group}
        prof = Profile.of(table, [r for a in group for r in a.run_ids])
        if isinstance(prof, str):
            return None, math.nan, {}, f"arm {k + 1}: {prof}", []
        added = [float(e["lr"]) for e in extensions if selector_matches(group[0].config, e["selector"])]
        prof.extended = tuple(any(math.isclose(end, x, rel_tol=1e-9) for x in added)  # type: ignore[assignment]
                              for end in (prof.lrs[0], prof.lrs[-1]))
        profiles.append(prof)
    est, tinfo = tuned_estimate(profiles, part.coefs, model)
    by_lr = [{float(a.config.get(LR) or 0): a for a in group} for group in chosen]
    near = []
    for arms_at, prof, lr in zip(by_lr, profiles, tinfo.optima):
        best = min(prof.lrs, key=lambda x: abs(math.log(x / lr)))
        near.append(list(arms_at[best].run_ids))
    info: dict[str, Any] = {"optima": tinfo.optima, "edges": tinfo.edges, "seed_optima": tinfo.seed_optima,
                            "profiles": [p.lrs for p in profiles], "tuned_losses": tinfo.losses,
                            "arm_sds": [math.sqrt(p.jackknife_var() * p.n) for p in profiles],
                            "spacing": max(p.spacing_octaves() for p in profiles)}
    if model == "paired":
        info["paired_sd"] = est.se * math.sqrt(est.n) if est.n else math.nan
    if model == "pooled":
        info.update(pooled_sd=est.se * math.sqrt(est.n / sum(c * c for c in part.coefs)) if est.n else math.nan,
                    stratum_arms=len(profiles))
    return est, tinfo.losses[part.reference], info, "", near


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
    (_, lo0, hi0), (_, lo1, hi1) = point
    if hi0 or lo1:
        censored = "high"  # arm 1's optimum could be higher still (or arm 2's lower): the effect is at least this
    if lo0 or hi1:
        censored = "low" if not censored else "both"
    steps = [abs(math.log2(b) - math.log2(a)) for lrs, _ in sweeps for a, b in zip(lrs, lrs[1:])]
    info["grid_octaves"] = min(steps) if steps else math.nan
    info["optima"] = [round(2 ** p[0], 6) for p in point]
    info["edges"] = ["low" if lo else ("high" if hi else "") for _, lo, hi in point]
    est = BootEstimate(effect, samples, n=min(len(v) for _, vals in sweeps for v in vals), censored=censored)
    ref_vals = sweeps[part.reference][1]
    ref = min(float(v.mean()) for v in ref_vals)
    return est, ref


def _combine(estimates: list[Estimate]) -> Estimate:
    """The mean of per-setting estimates (independent settings)."""
    if len(estimates) == 1:
        return estimates[0]
    censored = ",".join(sorted({e.censored for e in estimates if getattr(e, "censored", "")}))
    censored = "both" if ("low" in censored and "high" in censored) or "both" in censored else censored
    if all(isinstance(e, TEstimate) for e in estimates):
        se = math.sqrt(sum(e.se ** 2 for e in estimates)) / len(estimates)
        return TEstimate(sum(e.effect for e in estimates) / len(estimates), se,
                         min(e.df for e in estimates), estimates[0].method, min(e.n for e in estimates), censored)
    import numpy as np

    samples = np.mean([e.samples for e in estimates], axis=0)
    return BootEstimate(sum(e.effect for e in estimates) / len(estimates), samples, n=min(e.n for e in estimates),
                        censored=censored)


def estimate_part(part: PartSpec, arms_by: Mapping[str, list[Arm]], *, tuned: bool, rng: Any, scale: str = "",
                  selectors: Sequence[dict[str, Any]] | None = None,
                  extensions: Sequence[Mapping[str, Any]] = ()) -> Estimated:
    """The part's contrast at every setting with runs (`tuned`: each arm at its own optimum; `extensions`: the
    rates an until-decided design added to profiles, `_tuned`)."""
    sweep = tuned or part.statistic == "lr_optimum"
    model, _ = variance_model(part, tuned)
    out = Estimated(None)
    ests: list[Estimate] = []
    infos: list[dict[str, Any]] = []
    for s, arms in arms_by.items():
        chosen = _select(part, arms, f"{scale or '-'}/{s}", sweep=sweep, selectors=selectors)
        if chosen is None:
            continue
        runs = [rid for group in chosen for a in group for rid in a.run_ids]
        if part.statistic == "lr_optimum":
            info: dict[str, Any] = {}
            est, ref = _sweep_estimate(part, chosen, rng, info)
            near = [[r for a in group for r in a.run_ids] for group in chosen]
        elif tuned:
            est, ref, info, why, near = _tuned(part, chosen, model, extensions)
            out.why = out.why or why
        else:
            est, ref, info = _fixed(part, chosen, model)
            near = [list(group[0].run_ids) for group in chosen]
        if est is None:
            continue
        ests.append(est)
        out.runs += runs
        out.refs.append(ref)
        infos.append(info)
        out.arm_runs = [a + b for a, b in zip(out.arm_runs, near)] if out.arm_runs else near
    if ests:
        out.est, out.settings, out.why = _combine(ests), len(ests), ""
        out.info = infos[0] if len(infos) == 1 else {}
        out.info["model"] = model
    elif not out.why:
        out.why = "no runs" if not out.runs else "not enough finished seeds"
    return out


def _margin(part: PartSpec, refs: Sequence[float]) -> float:
    if part.margin.relative:
        return part.margin.value * abs(sum(refs) / len(refs)) if refs else math.nan
    return part.margin.value


def _interval(est: Estimate, level: float) -> tuple[float, float]:
    low, high = est.interval(level)
    censored = getattr(est, "censored", "")
    if censored in ("high", "both"):
        high = math.inf
    if censored in ("low", "both"):
        low = -math.inf
    return low, high


# ---------------------------------------------------------------------------------------------- power, convergence


def power_needs(est: Estimate | None, info: Mapping[str, Any], expect: str, margin: float, coefs: Sequence[float],
                level: float) -> dict[str, Any]:
    """Seeds per arm for 80% power at the margin: at the part's Holm level, at 5%, and at the ends of the 80%
    confidence interval of the s.d. the estimate rests on (optimistic, pessimistic)."""
    none = {"seeds_for_80pct_power": None, "seeds_unadjusted": None, "seeds_low": None, "seeds_high": None}
    if est is None or not margin > 0 or not math.isfinite(margin) or isinstance(est, BootEstimate):
        return none
    model = info.get("model", "welch")
    df = float(getattr(est, "df", math.nan))
    if model == "paired":
        sd, kw = info.get("paired_sd", math.nan), {"method": "paired t"}
    elif model == "pooled":
        sd, kw = info.get("pooled_sd", math.nan), {"method": "pooled t", "coefs": tuple(coefs),
                                                   "stratum_arms": int(info.get("stratum_arms", len(coefs)))}
    else:
        sds = [float(s) for s in info.get("arm_sds", [])]
        if not sds or not all(math.isfinite(s) for s in sds):
            return none
        sd, kw = 1.0, {"method": "Welch", "coefs": tuple(coefs)}
    if not math.isfinite(sd):
        return none
    lo, hi = sd_range(sd, df) if math.isfinite(df) and df > 0 else (math.nan, math.nan)

    def need(scale: float, alpha: float) -> int | None:
        if not math.isfinite(scale):
            return None
        if kw["method"] == "Welch":
            return seeds_for_power(max_n=MAX_POWER_SEEDS, expect=expect, margin=margin, alpha=alpha,
                                   arm_sds=[s * scale for s in info["arm_sds"]], **kw)
        return seeds_for_power(max_n=MAX_POWER_SEEDS, expect=expect, margin=margin, alpha=alpha, sd=sd * scale, **kw)

    level = level if math.isfinite(level) else ALPHA
    return {"seeds_for_80pct_power": need(1.0, level), "seeds_unadjusted": need(1.0, ALPHA),
            "seeds_low": need(lo / sd if math.isfinite(lo) else math.nan, level),
            "seeds_high": need(hi / sd if math.isfinite(hi) else math.nan, level)}


def convergence(arm_runs: Sequence[Sequence[str]], slopes: Mapping[str, float] | None, margin: float
                ) -> tuple[float, str]:
    """(the fastest fall among the arms per 10% of the budget, nats; 'converged' | 'not converged' | '')."""
    if not slopes or not arm_runs:
        return math.nan, ""
    falls = []
    for runs in arm_runs:
        known = [slopes[r] for r in runs if r in slopes and math.isfinite(slopes[r])]
        if known:
            falls.append(-sum(known) / len(known))
    if not falls:
        return math.nan, ""
    fastest = max(falls)
    if not (math.isfinite(margin) and margin > 0):
        return fastest, ""
    return fastest, "not converged" if fastest > margin else "converged"


# ---------------------------------------------------------------------------------------------- robustness


def _variants(part: PartSpec, tuned: bool) -> list[str]:
    """The keys whose other values make robustness rows: pinned to one value by every selector that names them
    (a sublayer's settings pinned on its CEM arms only count), not the seed, not the learning rate of an
    own-optimum contrast, and not a sublayer kind."""
    keys = []
    for k in sorted({k for sel in part.arms for k in sel} - {SEED} - set(KIND_KEYS)):
        if tuned and k == LR:
            continue
        if len({repr(sel[k]) for sel in part.arms if k in sel}) == 1:
            keys.append(k)
    return keys


def robustness(part: PartSpec, arms_by: Mapping[str, list[Arm]], *, tuned: bool, rng: Any, scale: str,
               margin: float) -> list[dict[str, Any]]:
    """The part's contrast under every other value of one key it pins but does not contrast, where the runs hold
    one arm per selector: a row each (own 95% interval, unadjusted label)."""
    if part.statistic == "lr_optimum":
        return []
    rows = []
    present = [a.config for arms in arms_by.values() for a in arms]
    for key in _variants(part, tuned):
        base = next(sel[key] for sel in part.arms if key in sel)
        values = sorted({v for cfg in present if (v := cfg.get(key)) is not None and str(v) != str(base)}, key=str)
        for value in values:
            selectors = [dict(sel, **{key: value}) if key in sel else dict(sel) for sel in part.arms]
            try:
                e = estimate_part(part, arms_by, tuned=tuned, rng=rng, scale=scale, selectors=selectors)
            except PooledArms:
                continue
            if e.est is None:
                continue
            d = decide(e.est, part.expect, margin if math.isfinite(margin) else 0.0, ALPHA)
            low, high = _interval(e.est, 1 - ALPHA)
            rows.append({"key": key, "value": value, "effect": e.est.effect, "ci95_low": low, "ci95_high": high,
                         "method": e.est.method, "n": e.est.n, "label": d.label, "runs": ",".join(sorted(set(e.runs)))})
    return rows


def sign_summary(effect: float, label: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """One line: does the sign of the part's effect hold in the other settings?"""
    if not rows or not math.isfinite(effect):
        return ""
    sign = 1 if effect > 0 else -1
    same = [r for r in rows if (r["effect"] > 0) == (sign > 0)]
    against = [r for r in rows if r["label"] in ("lower", "higher") and (r["label"] == "higher") != (sign > 0)]
    text = f"sign {'+' if sign > 0 else '-'} in {len(same) + 1} of {len(rows) + 1} settings"
    if len(same) < len(rows):
        text += "; other sign: " + ", ".join(f"{r['key'].split('.')[-1]}={r['value']} {r['effect']:+.3f}"
                                             for r in rows if r not in same)
    if against:
        text += f" ({len(against)} decided so)"
    return text


# ---------------------------------------------------------------------------------------------- the page


@dataclass
class Page:
    parts: "pd.DataFrame"  # one row per (part, scale)
    robustness: "pd.DataFrame"  # one row per (part, scale, other setting of one key)


def _sequential(part: PartSpec, current: Estimated, design: "Design", look_arms: list[dict[str, list[Arm]]], *,
                tuned: bool, rng: Any, scale: str) -> Estimate | None:
    """The part over the design's looks (and the runs there are now, when they add seeds). An own-optimum part
    estimated again at a look's seeds with a longer lr profile (the loop extends an unbracketed profile, at the
    seed cap too) is a revision of that look: it replaces the look's estimate and spends no alpha of its own."""
    from cemctl.report.sequential import Look, SeqEstimate

    if not isinstance(current.est, TEstimate):
        return None
    looks: list[Look] = []
    revised = 0
    estimates = []
    for arms_by in look_arms:
        try:
            estimates.append(estimate_part(part, arms_by, tuned=tuned, rng=rng, scale=scale,
                                           extensions=design.extensions).est)
        except PooledArms:
            continue
    for e in [*estimates, current.est]:
        if not (isinstance(e, TEstimate) and math.isfinite(e.se) and e.se > 0):
            continue
        lk = Look(e.effect, e.se, e.df, e.n, e.method, e.censored)
        if not looks or e.n > looks[-1].n:
            looks.append(lk)
        elif tuned and e.n == looks[-1].n and (lk.effect, lk.se, lk.censored) != \
                (looks[-1].effect, looks[-1].se, looks[-1].censored):
            looks[-1] = lk  # the look at these seeds, estimated on every rate they have now
            revised += 1
    if not looks:
        return None
    return SeqEstimate(looks, design.max_seeds, censored=looks[-1].censored, revised=revised)


def disagree(primary: str, other: str) -> bool:
    """The two contrasts of a part disagree: both were estimated (neither is `not run`: a contrast that could not
    be made says nothing against the other), their labels differ, and one of them is decisive (a decided label
    against the opposite one, or against `inconclusive`: the conclusion depends on the contrast)."""
    if "not run" in (primary, other) or primary == other:
        return False
    return any(lab in DECISIVE for lab in (primary, other))


def _fmt_lrs(values: Sequence[float]) -> str:
    return " / ".join(f"{v:.2g}" for v in values)


def evaluate_page(runs: "pd.DataFrame", claims: Sequence[ClaimSpec], *, scales: Sequence[str] | None = None,
                  power: bool = False, seed: int = 0, slopes: Mapping[str, float] | None = None,
                  declared: Mapping[tuple[str, str, str], str] | None = None,
                  designs: Sequence["Design"] = ()) -> Page:
    """Every part at every scale: the primary contrast (unadjusted and Holm-adjusted), the other contrast beside
    it, robustness rows, convergence (`slopes`: run id -> change of the validation loss per 10% of the budget),
    the registration label (`declared`: (experiment, claim, part) -> label) and, for parts of an experiment
    launched `--until-decided` (`designs`), the group-sequential analysis over its looks."""
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
    rows: list[dict[str, Any]] = []
    robust_rows: list[dict[str, Any]] = []
    for scale in present:
        at = done[done["scale"].astype(str) == scale]
        settings = sorted(set(at[SETTING].astype(str))) if SETTING in at.columns and not at.empty else []

        def arms_of(frame: "pd.DataFrame") -> dict[str, list[Arm]]:
            return {s: _arms(frame[frame[SETTING].astype(str) == s]) for s in settings}

        arms_by = arms_of(at)
        scale_designs = [d for d in designs if d.scale == scale]
        look_arms = {id(d): [arms_of(at[at["run_id"].isin(ids)]) for ids in d.looks] for d in scale_designs}
        family = []
        for claim in claims:
            for part in claim.parts:
                rng = np.random.default_rng([seed, len(rows)])
                source = part.source or claim.source
                tuned = part.tuned and part.statistic != "lr_optimum"
                design = next((d for d in scale_designs if (source, claim.id, part.name) in d.family), None)
                prim = estimate_part(part, arms_by, tuned=tuned, rng=rng, scale=scale,
                                     extensions=design.extensions if design is not None else ())
                sequential = ""
                if design is not None and prim.est is not None:
                    seq = _sequential(part, prim, design, look_arms[id(design)], tuned=tuned, rng=rng, scale=scale)
                    if seq is not None:
                        prim.est = seq
                        sequential = f"{len(seq.looks)} look{'s' if len(seq.looks) != 1 else ''} at " + \
                            ", ".join(str(lk.n) for lk in seq.looks) + f" of {design.max_seeds} seeds"
                        if seq.revised:
                            k = seq.revised
                            sequential += f" (revised {'once' if k == 1 else f'{k} times'}: the same seeds, more " \
                                "learning rates)"
                other = Estimated(None, why="")
                if part.statistic in ("difference", "interaction") and (tuned or part.fixed_lr is not None):
                    try:
                        other = estimate_part(part, arms_by, tuned=not tuned, rng=rng, scale=scale)
                    except PooledArms as e:
                        other = Estimated(None, why=str(e))
                est = prim.est
                margin = _margin(part, prim.refs or other.refs)
                use_margin = margin if math.isfinite(margin) else 0.0
                d = decide(est, part.expect, use_margin, ALPHA)
                low, high = _interval(est, 1 - ALPHA) if est is not None else (math.nan, math.nan)
                od = decide(other.est, part.expect, use_margin, ALPHA) if other.est is not None else None
                olow, ohigh = _interval(other.est, 1 - ALPHA) if other.est is not None else (math.nan, math.nan)
                model, why = variance_model(part, tuned)
                info = prim.info
                edges = info.get("edges") or []
                advice = []
                for k, edge in enumerate(edges):
                    if edge and tuned:
                        side = edge.split()[-1]  # 'low' | 'high' | 'near ...' | 'provisional ...' (tuned.edge_side)
                        provisional = edge.startswith("provisional")
                        add = profile_advice(info["profiles"][k], low_edge=side == "low", high_edge=side == "high")
                        where = f"at the {side} edge of its profile" if edge == side else \
                            f"next to the {side}est rate of its profile, which an extension added (a bracket that " \
                            f"stays provisional until one more rate beyond it has run)" if provisional else \
                            f"between the two {side}est rates of its profile"
                        advice.append(f"arm {k + 1}'s optimum is {where}: extend the "
                                      f"profile with train.lr = {', '.join(f'{v:g}' for v in add)}")
                fall, conv = convergence(prim.arm_runs, slopes, margin if part.unit == "nats" else math.nan)
                vrows = robustness(part, arms_by, tuned=tuned, rng=rng, scale=scale, margin=margin)
                for r in vrows:
                    robust_rows.append({"claim": claim.id, "part": part.name, "scale": scale, **r})
                p_of = min(d.candidates, key=d.candidates.get) if d.candidates else ""
                row = {
                    "claim": claim.id, "statement": claim.statement, "part": part.name, "scale": scale,
                    "statistic": part.statistic, "unit": part.unit, "expect": part.expect, "margin": margin,
                    "margin_rule": part.margin.describe(part.unit),
                    "at": ("own optimum" if tuned else (f"lr {part.fixed_lr:g}" if part.fixed_lr else "fixed"))
                    if part.statistic != "lr_optimum" else "optima",
                    "variance": model, "variance_rule": why,
                    "effect": est.effect if est is not None else math.nan, "ci95_low": low, "ci95_high": high,
                    "method": est.method if est is not None else "", "df": getattr(est, "df", math.nan),
                    "n": est.n if est is not None else 0, "sizes": prim.settings, "p": d.p, "p_of": p_of,
                    "label": d.label, "verdict": d.verdict,
                    "censored": getattr(est, "censored", "") if est is not None else "",
                    "grid_octaves": info.get("grid_octaves", math.nan), "runs": ",".join(sorted(set(prim.runs))),
                    "experiment": source, "why_not_run": prim.why if est is None else "",
                    "optima": _fmt_lrs(info["optima"]) if info.get("optima") else "",
                    "seed_optima": "; ".join(_fmt_lrs(v) for v in info.get("seed_optima", [])),
                    "advice": "; ".join(advice),
                    # per arm of an own-optimum contrast at one setting: where its optimum sits ('' | low | high |
                    # near low | near high: tuned.edge_side) and the rates its profile used (the until-decided loop
                    # extends a profile whose optimum is not bracketed)
                    "edges": tuple(edges) if tuned else (),
                    "profiles": tuple(tuple(lrs) for lrs in info.get("profiles", [])) if tuned else (),
                    "other_at": ("lr " + f"{part.fixed_lr:g}" if tuned else "own optimum") if od is not None else "",
                    "other_effect": other.est.effect if other.est is not None else math.nan,
                    "other_low": olow, "other_high": ohigh, "other_label": od.label if od is not None else "",
                    "other_verdict": od.verdict if od is not None else "",
                    "disagree": disagree(d.label, od.label if od is not None else "not run"),
                    "robustness": sign_summary(est.effect if est is not None else math.nan, d.label, vrows),
                    "fall_per_10pct": fall, "convergence": conv,
                    "declared": (declared or {}).get((source, claim.id, part.name), ""),
                    "sequential": sequential,
                }
                row["_ps"] = dict(d.candidates)
                if power:
                    row["_power"] = (est, info)
                rows.append(row)
                family.append((len(rows) - 1, est, part, margin))
        _adjust(rows, family, power)
    parts = pd.DataFrame(rows)
    if power and not parts.empty and "seeds_for_80pct_power" in parts.columns:
        parts["seeds_for_80pct_power"] = parts["seeds_for_80pct_power"].astype(object)
    robust = pd.DataFrame(robust_rows, columns=["claim", "part", "scale", "key", "value", "effect", "ci95_low",
                                                "ci95_high", "method", "n", "label", "runs"])
    return Page(parts, robust)


def _adjust(rows: list[dict[str, Any]], family: list[tuple[int, Estimate | None, PartSpec, float]],
            power: bool) -> None:
    """The adjusted columns of one scale's parts: the step-down over their label hypotheses
    (`cemctl.report.sequential.step_down`), each part's label at the level it was decided at."""
    import numpy as np

    from cemctl.report.sequential import LABELS, step_down
    from cemctl.report.stats import CONTRADICTS, HOLDS

    live = [(i, est, part, margin) for i, est, part, margin in family
            if est is not None and math.isfinite(rows[i]["p"])]
    if live:
        ps = {lab: np.array([rows[i]["_ps"].get(lab, np.nan) for i, *_ in live]) for lab in LABELS}
        margins = [margin if math.isfinite(margin) else 0.0 for *_, margin in live]
        decided, labels, adjusted, levels = step_down(ps, [part.expect for _, _, part, _ in live], margins, ALPHA)
        result = {i: (bool(d), str(lab), float(pa), float(lv))
                  for (i, *_), d, lab, pa, lv in zip(live, decided, labels, adjusted, levels)}
    else:
        result = {}
    for i, est, part, margin in family:
        row = rows[i]
        row.pop("_ps", None)
        decided_, label, p_adj, level = result.get(i, (False, "", math.nan, math.nan))
        if power:
            e, info = row.pop("_power")
            row.update(power_needs(e, info, part.expect, margin, part.coefs,
                                   level if math.isfinite(level) else ALPHA / max(1, len(family))))
        if i not in result:
            row.update(p_holm=math.nan, holm_low=math.nan, holm_high=math.nan, label_holm=row["label"],
                       verdict_holm=row["verdict"], holm_level=math.nan)
            continue
        low, high = _interval(est, 1 - level)
        if decided_:
            verdict = "holds" if label in HOLDS[part.expect] else \
                ("contradicted" if label in CONTRADICTS[part.expect] else "inconclusive")
        else:
            label, verdict = "inconclusive", "inconclusive"
        row.update(p_holm=p_adj, holm_low=low, holm_high=high, label_holm=label, verdict_holm=verdict,
                   holm_level=level)


def evaluate_claims(runs: "pd.DataFrame", claims: Sequence[ClaimSpec], *, scales: Sequence[str] | None = None,
                    power: bool = False, seed: int = 0, **kw: Any) -> "pd.DataFrame":
    """One row per (claim part, scale): the estimate and interval, unadjusted and Holm-adjusted decisions
    (`evaluate_page(...).parts`)."""
    return evaluate_page(runs, claims, scales=scales, power=power, seed=seed, **kw).parts


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
