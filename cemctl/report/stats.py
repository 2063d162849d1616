"""The statistics of `cemctl claims`: estimates with intervals, decisions against a margin, Holm, power.

    est = paired_estimate(diffs)                                  # the same model at initialisation, paired by seed
    est = pooled_estimate(groups, pooled_var, pooled_df)          # other parts: the stratum's pooled variance
    est = welch_estimate(groups)                                  # each arm its own variance (the default)
    d = decide(est, expect="lower", margin=0.014, alpha=0.05)     # label, verdict, p
    adjusted = holm([d.p for d in decisions])                     # Holm's step-down adjusted p-values
    seeds_for_power(...)                                          # seeds per arm for 80% power at the margin

A contrast is sum_g c_g * mean(loss of arm g): a difference (1, -1) or an interaction
(1, -1, -1, 1). Every interval is two-sided at `level`; a part is decided at
alpha = 1 - level by where its interval lies (see `decide`), and its p-value is the
smallest alpha at which it would be decided, so Holm's procedure over the parts
controls the family-wise rate of wrong decisive verdicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

Group = tuple[float, Sequence[float]]  # (contrast coefficient, the arm's per-seed values)


@dataclass
class TEstimate:
    """effect ~ t(df) * se around the truth: paired, pooled or Welch."""

    effect: float
    se: float
    df: float
    method: str  # "paired t" | "pooled t" | "Welch" | "chosen rates" (a stage-1 lr_optimum: no test)
    n: int  # seeds per arm (the smallest), or pairs
    censored: str = ""  # "" | "low" | "high" | "both": the side(s) the interval is open on (a stage-1 rate at the
    # edge of its profile: the arm may do better beyond it)

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        if not (self.se > 0 and self.df > 0 and math.isfinite(self.se)):
            return (math.nan, math.nan)
        from cemctl.report.tdist import t_quantile  # scipy.stats would cost a report ~0.7 s of imports

        half = t_quantile(0.5 + level / 2, self.df) * self.se
        return self.effect - half, self.effect + half

    def p_above(self, threshold: float) -> float:
        """One-sided p-value for 'the true effect exceeds threshold' (small when the effect is well above it);
        1 when the interval is open below (nothing bounds the effect from below)."""
        if not (self.se > 0 and self.df > 0 and math.isfinite(self.se)):
            return math.nan
        if self.censored in ("low", "both"):
            return 1.0
        from cemctl.report.tdist import t_cdf

        return t_cdf(-(self.effect - threshold) / self.se, self.df)  # the upper tail, computed as a tail

    def p_below(self, threshold: float) -> float:
        if not (self.se > 0 and self.df > 0 and math.isfinite(self.se)):
            return math.nan
        if self.censored in ("high", "both"):
            return 1.0
        from cemctl.report.tdist import t_cdf

        return t_cdf((self.effect - threshold) / self.se, self.df)


Estimate = Any  # TEstimate | cemctl.report.sequential.SeqEstimate (anything with `label_ps`)


def _arrays(values: Sequence[Any]) -> list[np.ndarray]:
    return [np.asarray(v, dtype=float) for v in values]


def paired_arrays(diffs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(effect, se, df) of the mean of per-seed contrasts along the last axis (seeds), for any leading shape: one
    part (a 1-d array) or thousands of simulated ones; se NaN with fewer than two seeds."""
    d = np.asarray(diffs, dtype=float)
    n = d.shape[-1]
    effect = d.mean(axis=-1) if n else np.full(d.shape[:-1], np.nan)
    if n < 2:
        return effect, np.full(effect.shape, np.nan), np.zeros(effect.shape)
    return effect, np.sqrt(d.var(axis=-1, ddof=1) / n), np.full(effect.shape, n - 1.0)


def pooled_variance_arrays(arms: Sequence[Any]) -> tuple[Any, int]:
    """(s_p^2, df): the within-arm variance pooled over every arm with at least two seeds (seeds along the last
    axis of each; s_p^2 NaN without any)."""
    ss: Any = 0.0
    df = 0
    for v in _arrays(arms):
        if v.shape[-1] >= 2:
            ss = ss + v.var(axis=-1, ddof=1) * (v.shape[-1] - 1)
            df += v.shape[-1] - 1
    return (ss / df if df else np.nan), df


def pooled_arrays(coefs: Sequence[float], values: Sequence[Any], stratum: Sequence[Any] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(effect, se, df) of sum c_g mean_g with the within-arm variance pooled over `stratum` (default: the
    contrast's own arms), seeds along the last axis of each arm's values."""
    vals = _arrays(values)
    s2, df = pooled_variance_arrays(stratum if stratum is not None else vals)
    return _pooled_contrast(coefs, vals, s2, df)


def _pooled_contrast(coefs: Sequence[float], vals: list[np.ndarray], s2: Any, df: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    effect = sum(c * v.mean(axis=-1) for c, v in zip(coefs, vals))
    if not df:
        return effect, np.full(np.shape(effect), np.nan), np.zeros(np.shape(effect))
    se = np.sqrt(s2 * sum(c * c / v.shape[-1] for c, v in zip(coefs, vals)))
    return effect, np.broadcast_to(se, np.shape(effect)), np.full(np.shape(effect), float(df))


def welch_arrays(coefs: Sequence[float], values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(effect, se, df) of sum c_g mean_g with each arm's own variance and Satterthwaite's df, seeds along the last
    axis of each arm's values; se NaN and df 0 where an arm has fewer than two seeds or the variance is 0."""
    vals = _arrays(values)
    effect = sum(c * v.mean(axis=-1) for c, v in zip(coefs, vals))
    if min(v.shape[-1] for v in vals) < 2:
        return effect, np.full(np.shape(effect), np.nan), np.zeros(np.shape(effect))
    terms = [c * c * v.var(axis=-1, ddof=1) / v.shape[-1] for c, v in zip(coefs, vals)]
    var = sum(terms)
    ok = var > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        df = var ** 2 / sum(t * t / (v.shape[-1] - 1) for t, v in zip(terms, vals))
    return effect, np.where(ok, np.sqrt(np.where(ok, var, 1.0)), np.nan), np.where(ok, df, 0.0)


def _t(effect: Any, se: Any, df: Any, method: str, n: int) -> TEstimate:
    return TEstimate(float(effect), float(se), float(df) if float(df) else 0, method, n)


def paired_estimate(diffs: Sequence[float]) -> TEstimate:
    """The mean of per-seed contrasts (arms that are the same model at initialisation, paired by seed)."""
    return _t(*paired_arrays(list(diffs)), "paired t", len(diffs))


def pooled_variance(arms: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(s_p^2, df): the within-arm variance pooled over every arm with at least two seeds."""
    s2, df = pooled_variance_arrays([list(v) for v in arms])
    return (float(s2) if df else math.nan), df


def pooled_estimate(groups: Sequence[Group], pooled_var: float, pooled_df: int) -> TEstimate:
    """sum c_g mean_g with se from the stratum's pooled within-arm variance (df = the pooled df)."""
    effect, se, _ = _pooled_contrast([c for c, _ in groups], _arrays([list(v) for _, v in groups]), pooled_var,
                                     pooled_df)
    return TEstimate(float(effect), float(se), pooled_df, "pooled t", min(len(v) for _, v in groups))


def welch_estimate(groups: Sequence[Group]) -> TEstimate:
    """sum c_g mean_g with each arm's own variance; Satterthwaite's df."""
    effect, se, df = welch_arrays([c for c, _ in groups], [list(v) for _, v in groups])
    return _t(effect, se, df, "Welch", min(len(v) for _, v in groups))


# ---------------------------------------------------------------------------------------------- decisions

LOWER, HIGHER, CLOSE = "lower", "higher", "close"
EXPECTS = (LOWER, HIGHER, CLOSE)


@dataclass
class Decision:
    label: str  # lower | higher | close | not close | inconclusive | not run
    verdict: str  # holds | contradicted | inconclusive | not run
    p: float  # the smallest alpha at which the part is decided (its Holm input)
    low: float = math.nan
    high: float = math.nan
    candidates: dict[str, float] = field(default_factory=dict)  # decisive label -> its p


def label_ps(est: Estimate, expect: str, margin: float) -> dict[str, float]:
    """Each decisive label the part can take, with the p-value of its test (two-sided intervals, so 2x one side):
    'lower' (the interval below 0), 'higher' (above 0), 'close' (within +-margin), and for a `close`
    expectation 'not close' (wholly beyond the margin on one side)."""
    if hasattr(est, "label_ps"):  # a sequential estimate: each label's p over its looks
        return est.label_ps(expect, margin)

    def two_sided(p: float) -> float:
        return min(1.0, 2 * p) if math.isfinite(p) else math.nan

    out: dict[str, float] = {LOWER: two_sided(est.p_below(0.0)), HIGHER: two_sided(est.p_above(0.0))}
    if margin > 0:
        out[CLOSE] = two_sided(max(est.p_above(-margin), est.p_below(margin)))
        if expect == CLOSE:
            out["not close"] = two_sided(min(est.p_above(margin), est.p_below(-margin)))
    return {k: v for k, v in out.items() if math.isfinite(v)}


# Which label each expectation counts as holding, and which as contradicting it.
HOLDS = {LOWER: (LOWER,), HIGHER: (HIGHER,), CLOSE: (CLOSE,)}
CONTRADICTS = {LOWER: (HIGHER, CLOSE), HIGHER: (LOWER, CLOSE), CLOSE: ("not close",)}
PRECEDENCE = {LOWER: (LOWER, HIGHER, CLOSE), HIGHER: (HIGHER, LOWER, CLOSE), CLOSE: (CLOSE, "not close", LOWER, HIGHER)}


def decide(est: Estimate | None, expect: str, margin: float, alpha: float = 0.05) -> Decision:
    """The label the interval at level 1 - alpha supports (in the expectation's order of precedence), the
    verdict it gives the expectation, and the part's p-value (the least alpha at which it is decided).
    A 'close' or directional label that is not the expected one contradicts the claim only when decisive;
    for a `close` expectation, a decisive 'lower'/'higher' that does not clear the margin is inconclusive."""
    if expect not in EXPECTS:
        raise ValueError(f"unknown expectation {expect!r}")
    if est is None or not math.isfinite(est.effect):
        return Decision("not run", "not run", math.nan)
    ps = label_ps(est, expect, margin)
    low, high = est.interval(1 - alpha)
    if not ps:
        return Decision("inconclusive", "inconclusive", math.nan, low, high)
    decided = [lab for lab in PRECEDENCE[expect] if lab in ps and ps[lab] <= alpha]
    p = min(ps.values())
    if not decided:
        return Decision("inconclusive", "inconclusive", p, low, high, ps)
    label = decided[0]
    if label in HOLDS[expect]:
        verdict = "holds"
    elif label in CONTRADICTS[expect]:
        verdict = "contradicted"
    else:
        verdict = "inconclusive"
    return Decision(label, verdict, p, low, high, ps)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and does not count in the family)."""
    idx = [i for i, p in enumerate(pvalues) if math.isfinite(p)]
    k = len(idx)
    order = sorted(idx, key=lambda i: pvalues[i])
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * pvalues[i]))
        out[i] = running
    return out


# ---------------------------------------------------------------------------------------------- power

def _power_t(expect: str, margin: float, se: float, df: float, alpha: float) -> float:
    """Power of the part's decision at the margin: a directional part detecting a true effect of +-margin;
    a `close` part deciding 'close' when the truth is 0."""
    from scipy import integrate, stats

    if not (se > 0 and df > 0):
        return math.nan
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    if expect in (LOWER, HIGHER):
        nc = margin / se
        power = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
        if not math.isfinite(power):  # scipy's noncentral t fails far in the tail: the normal limit
            power = float(stats.norm.sf(crit - nc) + stats.norm.cdf(-crit - nc))
        return min(1.0, power)

    # close at a true 0: |effect| + crit * s < margin, effect ~ N(0, se^2), s = se * sqrt(chi2_df / df)
    def integrand(x: float) -> float:
        s = se * math.sqrt(x / df)
        room = margin - crit * s
        return (2 * stats.norm.cdf(room / se) - 1) * stats.chi2.pdf(x, df) if room > 0 else 0.0

    upper = min(df * (margin / (crit * se)) ** 2, float(stats.chi2.isf(1e-13, df)))
    lower = float(stats.chi2.ppf(1e-13, df))  # the chi-square mass lies in between (narrow when df is large)
    if upper <= lower:
        return 0.0
    return float(integrate.quad(integrand, lower, upper, limit=200)[0])


def power_at(n: int, *, expect: str, margin: float, method: str, alpha: float = 0.05, sd: float = math.nan,
             coefs: Sequence[float] = (1.0, -1.0), arm_sds: Sequence[float] = (), stratum_arms: int = 0) -> float:
    """Power with n seeds per arm: `sd` is the paired differences' s.d. (paired) or the pooled within-arm s.d.
    (pooled, over `stratum_arms` arms); `arm_sds` each arm's s.d. (Welch)."""
    if n < 2:
        return 0.0
    if method == "paired t":
        return _power_t(expect, margin, sd / math.sqrt(n), n - 1, alpha)
    if method == "pooled t":
        se = sd * math.sqrt(sum(c * c for c in coefs) / n)
        return _power_t(expect, margin, se, max(1, stratum_arms) * (n - 1), alpha)
    terms = [c * c * s * s / n for c, s in zip(coefs, arm_sds)]
    var = sum(terms)
    df = var ** 2 / sum(t * t / (n - 1) for t in terms) if var > 0 else 0
    return _power_t(expect, margin, math.sqrt(var), df, alpha)


def seeds_for_power(target: float = 0.8, max_n: int = 64, **kw: object) -> int | None:
    """The fewest seeds per arm (2..max_n) reaching `target` power; None if even max_n does not (power grows with
    the seeds: a bisection)."""
    def enough(n: int) -> bool:
        p = power_at(n, **kw)  # type: ignore[arg-type]
        return math.isfinite(p) and p >= target

    if not enough(max_n):
        return None
    lo, hi = 1, max_n  # enough(hi), not enough(lo) (n = 1 has no power)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def sd_range(sd: float, df: float, level: float = 0.8) -> tuple[float, float]:
    """The `level` confidence interval of a standard deviation estimated with df degrees of freedom."""
    from scipy import stats

    if not (math.isfinite(sd) and df > 0):
        return math.nan, math.nan
    lo = sd * math.sqrt(df / float(stats.chi2.ppf(0.5 + level / 2, df)))
    hi = sd * math.sqrt(df / float(stats.chi2.ppf(0.5 - level / 2, df)))
    return lo, hi
