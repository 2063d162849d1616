"""The statistics of `cemctl claims` against simulated data whose truth is known (`cemctl.report.stats`).

- coverage: the 95% intervals (paired, pooled, Welch; differences and interactions) cover the true effect
  in 95% of 2,000 simulated data sets, within binomial error (3 s.e.: +-0.0146);
- family-wise error: the whole page under the global null is tests/test_claims_page_sim.py;
- power: at the seed count `seeds_for_power` gives, simulated experiments decide the part in ~80% of cases
  (and with one seed fewer, in fewer than 80%).
Seeds are fixed, so every number here is reproducible.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cemctl.report import stats

SIMS = 2000
TOL = 3 * math.sqrt(0.95 * 0.05 / SIMS)


def _paired(rng, n, effect, sd_seed=0.05, sd_diff=0.01):
    shared = rng.normal(0, sd_seed, n)  # the seed's effect, common to both arms
    a = 2.0 + effect + shared + rng.normal(0, sd_diff / math.sqrt(2), n)
    b = 2.0 + shared + rng.normal(0, sd_diff / math.sqrt(2), n)
    return stats.paired_estimate(list(a - b))


def _pooled(rng, n, effect, coefs=(1.0, -1.0), arms=6, sd=0.03):
    groups = []
    means = [effect if i == 0 else 0.0 for i in range(len(coefs))]
    for c, m in zip(coefs, means):
        groups.append((c, list(2.0 + m + rng.normal(0, sd, n))))
    others = [list(2.0 + rng.normal(0, sd, n)) for _ in range(arms - len(coefs))]
    s2, df = stats.pooled_variance([g for _, g in groups] + others)
    return stats.pooled_estimate(groups, s2, df)


def _welch(rng, n, effect, sds=(0.02, 0.06)):
    a = list(2.0 + effect + rng.normal(0, sds[0], n))
    b = list(2.0 + rng.normal(0, sds[1], n))
    return stats.welch_estimate([(1.0, a), (-1.0, b)])


@pytest.mark.parametrize("name,make,truth", [
    ("paired, 3 seeds", lambda rng: _paired(rng, 3, 0.02), 0.02),
    ("paired, 8 seeds", lambda rng: _paired(rng, 8, -0.01), -0.01),
    ("pooled difference, 3 seeds x 6 arms", lambda rng: _pooled(rng, 3, 0.03), 0.03),
    ("pooled interaction, 3 seeds x 8 arms", lambda rng: _pooled(rng, 3, -0.02, coefs=(1, -1, -1, 1), arms=8), -0.02),
    ("Welch, unequal variances, 4 seeds", lambda rng: _welch(rng, 4, 0.05), 0.05),
])
def test_95_percent_intervals_cover_the_true_effect(name, make, truth):
    rng = np.random.default_rng(12345)
    covered = 0
    for _ in range(SIMS):
        lo, hi = make(rng).interval(0.95)
        covered += lo <= truth <= hi
    rate = covered / SIMS
    assert abs(rate - 0.95) <= TOL, f"{name}: coverage {rate:.3f}"


def test_holm_adjusted_p_values():
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(stats.holm([math.nan, 0.01])[0]) and stats.holm([math.nan, 0.01])[1] == pytest.approx(0.01)


def _decides(est, expect, margin):
    return stats.decide(est, expect, margin, 0.05).label == {"lower": "lower", "close": "close"}[expect]


@pytest.mark.parametrize("method,expect", [("paired t", "lower"), ("pooled t", "lower"), ("paired t", "close"),
                                           ("pooled t", "close")])
def test_power_seed_counts_match_simulated_power(method, expect):
    margin, sd, arms = 0.02, 0.02, 6
    kw = dict(expect=expect, margin=margin, method=method, sd=sd, stratum_arms=arms)
    n = stats.seeds_for_power(**kw)
    assert n is not None and 3 <= n <= 64
    truth = -margin if expect == "lower" else 0.0
    rng = np.random.default_rng(7)

    def simulate(n_seeds: int) -> float:
        hits = 0
        for _ in range(SIMS // 2):
            if method == "paired t":
                est = _paired(rng, n_seeds, truth, sd_diff=sd)
            else:
                est = _pooled(rng, n_seeds, truth, arms=arms, sd=sd)
            hits += _decides(est, expect, margin)
        return hits / (SIMS // 2)

    at_n, below = simulate(n), simulate(n - 1)
    err = 3 * math.sqrt(0.8 * 0.2 / (SIMS // 2))
    assert at_n >= 0.8 - err, f"{method} {expect}: simulated power {at_n:.3f} at the {n} seeds asked for"
    assert below < 0.8 + err, f"{method} {expect}: {n - 1} seeds already give {below:.3f}"
    assert abs(at_n - stats.power_at(n, **kw)) < 0.06  # the formula is the power a simulation sees


def test_labels_and_verdicts_for_each_expectation():
    def est(effect, se=0.005, df=20):
        return stats.TEstimate(effect, se, df, "pooled t", 3)

    assert stats.decide(est(-0.05), "lower", 0.02).verdict == "holds"
    assert stats.decide(est(0.05), "lower", 0.02).verdict == "contradicted"
    d = stats.decide(est(0.0, se=0.002), "lower", 0.02)
    assert (d.label, d.verdict) == ("close", "contradicted")  # no gain as large as the margin
    assert stats.decide(est(0.0, se=0.002), "close", 0.02).verdict == "holds"
    d = stats.decide(est(0.05, se=0.005), "close", 0.02)
    assert (d.label, d.verdict) == ("not close", "contradicted")  # worse by more than the margin
    d = stats.decide(est(0.02, se=0.006), "close", 0.02)
    assert d.label == "higher" and d.verdict == "inconclusive"  # excludes 0 but straddles the margin
    assert stats.decide(None, "close", 0.02).verdict == "not run"
