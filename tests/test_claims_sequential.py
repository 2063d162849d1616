"""Seeds in rounds until decided (`cemctl.report.sequential`), against simulated experiments whose truth is known.

- the spending boundaries are the published Lan-DeMets O'Brien-Fleming ones, and one look at full information
  is the fixed design's t test exactly;
- family-wise error: pages of parts whose true effects are all 0, seeds added in rounds of 2 from 3 to 15 only
  to the parts still undecided, stopping as soon as every part is decided: wrong decisive verdicts in at most
  alpha of 4,000 pages (+ binomial error); testing every look at the fixed level instead is wrong far more often
  (the whole page with stage 2 and every part kind: tests/test_claims_page_sim.py);
- power and seeds: at the s.d.s and margins of the cpu findings (docs/findings: claims 1, 3 and 5), the
  sequential design with the fixed design's seed count as its cap keeps the fixed design's power at the margin
  and needs fewer seeds on average (the saving is printed: `pytest -s`).
Every simulation is vectorised with numpy and seeded, so the numbers are reproducible and take seconds.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from cemctl.report import sequential as seq
from cemctl.report import stats

ALPHA = 0.05


def test_boundaries_are_the_published_lan_demets_obrien_fleming_values():
    c = seq.boundaries([0.2, 0.4, 0.6, 0.8, 1.0], [ALPHA])[0]
    assert c == pytest.approx([4.877, 3.357, 2.680, 2.290, 2.031], abs=0.002)
    assert seq.boundaries([1.0], [0.05, 0.01])[:, 0] == pytest.approx([1.95996, 2.57583], abs=1e-4)
    assert seq.spend(1.0, 0.05) == pytest.approx(0.05)


@pytest.mark.parametrize("effect,se,df,margin,expect", [(-0.03, 0.01, 4, 0.015, "lower"), (0.004, 0.006, 8, 0.02,
                                                                                        "close"),
                                                        (0.05, 0.01, 2.7, 0.015, "close")])
def test_one_look_at_full_information_is_the_fixed_t_test(effect, se, df, margin, expect):
    fixed = stats.TEstimate(effect, se, df, "pooled t", 3)
    one = seq.SeqEstimate([seq.Look(effect, se, df, 16)], max_seeds=16)
    want, got = stats.label_ps(fixed, expect, margin), one.label_ps(expect, margin)
    assert set(want) == set(got)
    for label in want:
        assert got[label] == pytest.approx(want[label], rel=0.02, abs=1e-9), label
    assert one.interval(0.95) == pytest.approx(fixed.interval(0.95), rel=1e-3)
    assert stats.decide(one, expect, margin).label == stats.decide(fixed, expect, margin).label


def test_the_step_down_is_holm_when_no_part_has_a_margin():
    rng = np.random.default_rng(5)
    for _ in range(50):
        lower, higher = rng.uniform(0, 0.1, 6), rng.uniform(0, 0.1, 6)
        decided, labels, adjusted, _ = seq.step_down({"lower": lower, "higher": higher}, ["lower"] * 6, [0.0] * 6)
        assert adjusted == pytest.approx(stats.holm(list(np.minimum(lower, higher))))
        assert list(decided) == [a <= ALPHA for a in adjusted]
        assert all(lab == ("lower" if lo <= hi else "higher") for lab, lo, hi, d in zip(labels, lower, higher, decided)
                   if d)


def test_a_part_rejected_as_close_still_counts_for_its_direction():
    """Regression: Holm over parts dropped a part from the count once any of its labels was decided (here 'close',
    which is true), so the next part was tested at alpha / 1 instead of alpha / 2, and the first part's direction
    too: with 8 parts and 15 seeds, 6% of null pages had a wrong decisive verdict."""
    ps = {"lower": np.array([0.04, 0.04]), "higher": np.array([0.9, 0.9]), "close": np.array([1e-6, 0.5])}
    decided, labels, _, levels = seq.step_down(ps, ["lower", "lower"], [0.015, 0.015])
    assert list(labels) == ["close", ""]  # 0.04 > 0.05 / 2: neither direction is decided
    assert levels[0] == pytest.approx(0.025)


# ---------------------------------------------------------------------------------------------- simulation


class Part:
    """One part of a simulated page: its arms' per-seed values (S simulations x arms x seeds) and its estimate at
    every look, made by the page's own estimators (`cemctl.report.stats.paired_arrays`, `pooled_arrays` within
    the part's arms, `welch_arrays`: the code `paired_estimate`, `pooled_estimate` and `welch_estimate` run;
    `test_the_simulated_estimates_are_the_pages` checks them against `estimate_part` itself)."""

    def __init__(self, rng, sims, max_seeds, *, method, truth, sds, coefs=(1.0, -1.0), expect="lower", margin=0.015,
                 seed_sd=0.0):
        self.method, self.coefs, self.expect, self.margin, self.truth = method, np.asarray(coefs), expect, margin, truth
        arms = len(coefs)
        shared = rng.normal(0, seed_sd, (sims, 1, max_seeds))  # a seed effect every arm shares
        x = rng.normal(0, 1, (sims, arms, max_seeds)) * np.asarray(sds, dtype=float)[None, :, None] + shared
        x[:, 0, :] += truth * (1 if coefs[0] > 0 else -1)  # the first arm carries the effect
        self.x = 2.0 + x
        self.sims = sims

    def look(self, n):
        c, x = self.coefs, self.x[:, :, :n]
        if self.method == "paired":
            e, s, d = stats.paired_arrays(np.einsum("a,san->sn", c, x))
        elif self.method == "pooled":
            e, s, d = stats.pooled_arrays(c, [x[:, g] for g in range(len(c))])
        else:
            e, s, d = stats.welch_arrays(c, [x[:, g] for g in range(len(c))])
        return e, s, d

    def looks(self, looks):
        """(effect, se, df), each (S, K), at every look."""
        return tuple(np.stack(v, axis=1) for v in zip(*(self.look(n) for n in looks)))

    def false_labels(self):
        """The labels that are wrong for this part's truth."""
        wrong = {"lower"} if self.truth >= 0 else set()
        wrong |= {"higher"} if self.truth <= 0 else set()
        if abs(self.truth) < self.margin:
            wrong.add("not close")
        if abs(self.truth) > self.margin:
            wrong.add("close")
        return wrong


def run_design(parts, looks, max_seeds, alpha=ALPHA, *, spending=True):
    """Rounds of seeds at `looks` (seeds per arm): after each look, the page's step-down; a decided part gets no
    more seeds (its statistics stay as they were), the page stops when every part is decided. Returns (the
    labels decided at the end (S, m), the seeds each part had when it stopped (S, m))."""
    sims, m, k = parts[0].sims, len(parts), len(looks)
    info = tuple(min(1.0, n / max_seeds) for n in looks) if spending else tuple(1.0 for _ in looks)
    levels = {lab: np.ones((sims, m, k)) for lab in seq.LABELS}
    for j, part in enumerate(parts):
        e, s, d = part.looks(looks)
        if spending:
            per = seq.label_levels(e, s, d, part.margin, info)
        else:  # every look tested as if it were the only one (the error this design must not make)
            per = {lab: np.stack([seq.label_levels(e[:, i:i + 1], s[:, i:i + 1], d[:, i:i + 1], part.margin,
                                                   (1.0,))[lab][:, 0] for i in range(k)], axis=1)
                   for lab in seq.label_statistics(0, 1, 1)}
        for lab, v in per.items():
            levels[lab][:, j, :] = np.minimum.accumulate(v, axis=1)
    stop = np.full((sims, m), k - 1)  # the look at which each part stopped getting seeds
    done = np.zeros((sims, m), dtype=bool)
    expects, margins = [p.expect for p in parts], [p.margin for p in parts]
    for i in range(k):
        at = np.minimum(stop, i)  # a decided part keeps the p-values of the look it was decided at
        ps = {lab: np.take_along_axis(v, at[:, :, None], axis=2)[:, :, 0] for lab, v in levels.items()}
        decided = seq.step_down(ps, expects, margins, alpha)[0]
        newly = decided & ~done
        stop = np.where(newly, i, stop)
        done |= decided
    ps = {lab: np.take_along_axis(v, stop[:, :, None], axis=2)[:, :, 0] for lab, v in levels.items()}
    labels = seq.step_down(ps, expects, margins, alpha)[1]
    seeds = np.asarray(looks)[stop]
    return labels, seeds


def _page(rng, sims, max_seeds, truth=0.0):
    """Eight parts like the cpu page's: directional and 'close', paired, pooled within two or four arms, Welch;
    `truth`: every part's true effect, or one per part."""
    t = list(truth) if isinstance(truth, (list, tuple)) else [truth] * 8
    return [Part(rng, sims, max_seeds, method="paired", sds=(0.02, 0.02), seed_sd=0.01, truth=t[0]),
            Part(rng, sims, max_seeds, method="pooled", sds=(0.012, 0.012), truth=t[1]),
            Part(rng, sims, max_seeds, method="pooled", sds=(0.015,) * 4, coefs=(1, -1, -1, 1), truth=t[2]),
            Part(rng, sims, max_seeds, method="welch", sds=(0.02, 0.006), truth=t[3]),
            Part(rng, sims, max_seeds, method="welch", sds=(0.01, 0.01, 0.02, 0.02), coefs=(1, -1, -1, 1), truth=t[4]),
            Part(rng, sims, max_seeds, method="pooled", sds=(0.01, 0.01), expect="close", truth=t[5]),
            Part(rng, sims, max_seeds, method="welch", sds=(0.012, 0.02), expect="close", truth=t[6]),
            Part(rng, sims, max_seeds, method="paired", sds=(0.015, 0.015), expect="close", margin=0.01, truth=t[7])]


def _wrong(parts, labels):
    wrong = np.zeros(labels.shape[0], dtype=bool)
    for j, part in enumerate(parts):
        wrong |= np.isin(labels[:, j], list(part.false_labels()))
    return wrong


@pytest.mark.parametrize("sims", [1000, pytest.param(4000, marks=pytest.mark.slow)])  # the full size: slow
def test_family_wise_error_holds_under_the_global_null_with_optional_stopping(sims):
    looks = [3, 5, 7, 9, 11, 13, 15]
    parts = _page(np.random.default_rng(2026), sims, max_seeds=15)
    labels, seeds = run_design(parts, looks, max_seeds=15)
    fwer = float(_wrong(parts, labels).mean())
    assert fwer <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / sims), f"family-wise error {fwer:.4f}"
    assert (seeds < 15).any(), "some parts should stop early (decided 'close')"
    naive_labels, _ = run_design(parts, looks, max_seeds=15, spending=False)
    naive = float(_wrong(parts, naive_labels).mean())
    assert naive > 1.5 * ALPHA, f"testing every look at the fixed level: {naive:.3f} (the test must have teeth)"
    print(f"\nglobal null, 8 parts, looks at {looks}: family-wise error {fwer:.4f} (every look at the fixed level: "
          f"{naive:.4f}); mean seeds per part {seeds.mean():.1f} of 15")


def _spec(part):
    """The part as a grid declares it (arm g is model.attn_steps = g + 1), for the page's `estimate_part`."""
    from cemctl.grid.claims import parse_claims

    k = len(part.coefs)
    decl = {"name": "p", "statistic": "interaction" if k == 4 else "difference", "expect": part.expect,
            "margin": part.margin, "variance": part.method,
            "arms": [{"model.attn_steps": g + 1, "train.lr": 0.002} for g in range(k)]}
    return parse_claims([{"id": "S", "statement": "s", "part": [decl]}], "sim.toml")[0].parts[0]


def test_the_simulated_estimates_are_the_pages():
    """Every simulated look is what the claims page's `estimate_part` makes of the same losses (arms built as the
    page builds them from runs, the part declared as a grid declares it): paired, pooled within the part's arms,
    Welch, at every look."""
    from cemctl.report.claims import Arm, estimate_part

    rng = np.random.default_rng(7)
    sims, looks = 24, [3, 6, 9]
    for part in _page(rng, sims, 9):
        e, s, d = part.looks(looks)
        spec = _spec(part)
        for sim in range(0, sims, 3):
            for i, n in enumerate(looks):
                arms = [Arm(f"{g}", f"arm {g}", {"model.attn_steps": g + 1, "train.lr": 0.002},
                            {k: float(v) for k, v in enumerate(part.x[sim, g, :n])}, [f"{g}/{k}" for k in range(n)])
                        for g in range(len(part.coefs))]
                est = estimate_part(spec, {"": arms}, stage="fixed", scale="sim").est
                assert (est.effect, est.se, est.df) == pytest.approx((e[sim, i], s[sim, i], d[sim, i]), rel=1e-9)


@pytest.mark.parametrize("sims", [1000, pytest.param(4000, marks=pytest.mark.slow)])  # the full size: slow
def test_partial_null_error_power_and_seeds_against_the_fixed_design(sims):
    """Eight parts like the cpu page's, four with a real effect (three directional at three times the margin, one
    `close` part as far beyond its margin), four without: the family-wise error over the true-null parts (and over every wrong
    label, a wrong direction included) stays at or below alpha with optional stopping, the parts with effects
    stop early, and the sequential page keeps the fixed design's power at its cap with fewer seeds (printed)."""
    looks = [3, 5, 7, 9, 11, 13, 15]
    rng = np.random.default_rng(4242)
    truths = [-0.045, -0.045, 0.0, -0.045, 0.0, 0.0, 0.045, 0.0]
    parts = _page(rng, sims, 15, truth=truths)
    labels, seeds = run_design(parts, looks, max_seeds=15)
    fixed, _ = run_design(parts, [15], max_seeds=15)
    null = [j for j, t in enumerate(truths) if t == 0.0]
    real = [j for j, t in enumerate(truths) if t != 0.0]
    bound = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / sims)
    fwer_null = float(_wrong([parts[j] for j in null], labels[:, null]).mean())
    fwer_all = float(_wrong(parts, labels).mean())
    assert fwer_null <= bound and fwer_all <= bound, (fwer_null, fwer_all)

    def power(lab):
        right = [np.isin(lab[:, j], ["lower" if truths[j] < 0 else "not close"]) for j in real]
        return float(np.mean(right))

    seq_power, fixed_power = power(labels), power(fixed)
    real_seeds, null_seeds = float(seeds[:, real].mean()), float(seeds[:, null].mean())
    assert seq_power >= fixed_power - 0.05, (seq_power, fixed_power)
    assert real_seeds < 0.7 * 15, f"the parts with effects should stop early: {real_seeds:.1f} seeds"
    print(f"\npartial null, 8 parts (4 with effects), looks at {looks}: family-wise error {fwer_null:.4f} over the "
          f"true-null parts, {fwer_all:.4f} over every label; power {seq_power:.3f} (fixed design at 15 seeds: "
          f"{fixed_power:.3f}); mean seeds {real_seeds:.1f} per part with an effect, {null_seeds:.1f} without, "
          f"{float(seeds.mean()):.1f} over the page against 15 fixed ({1 - float(seeds.mean()) / 15:.0%} fewer)")


# The s.d.s and margins of three parts of docs/findings (cpu archive, 3 seeds, at 4e-3): claim 1 (Welch; arm
# s.d.s 0.0088, 0.0133), claim 3 MLP T=2 - T=1 under diag (paired differences' s.d. 0.0120), claim 5's
# attention interaction (Welch over four arms: 0.0287, 0.0100, 0.0051, 0.0133).
FINDINGS = {
    "claim 1 (Welch)": dict(method="welch", sds=(0.0088, 0.0133), margin=0.0141, expect="lower"),
    "claim 3 MLP diag (paired)": dict(method="paired", sds=(0.0120 / math.sqrt(2),) * 2, margin=0.0144,
                                      expect="lower"),
    "claim 5 attention (Welch, 4 arms)": dict(method="welch", sds=(0.0287, 0.0100, 0.0051, 0.0133),
                                              coefs=(1, -1, -1, 1), margin=0.0141, expect="lower"),
}
HOLM_LEVEL = ALPHA / 20  # the strictest level of Holm over the page's 20 parts


@pytest.mark.parametrize("name,sims", [  # 1,000 simulations of two findings fast; every finding at 4,000 slow
    *[(name, 1000) for name in list(FINDINGS)[:2]],
    *[pytest.param(name, 4000, marks=pytest.mark.slow) for name in FINDINGS]])
def test_sequential_power_and_seeds_against_the_fixed_design(name, sims):
    kw = dict(FINDINGS[name])
    method = {"welch": "Welch", "paired": "paired t", "pooled": "pooled t"}[kw["method"]]
    coefs = kw.get("coefs", (1.0, -1.0))
    sd = math.sqrt(2) * kw["sds"][0] if kw["method"] == "paired" else math.nan
    n_fixed = stats.seeds_for_power(max_n=400, expect="lower", margin=kw["margin"], method=method, alpha=HOLM_LEVEL,
                                    coefs=coefs, arm_sds=kw["sds"], sd=sd)
    assert n_fixed is not None and 5 < n_fixed < 100
    looks = sorted({*range(3, n_fixed, 2), n_fixed})
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # a stable seed: str hash() differs per process
    out = {}
    for truth in (-kw["margin"], 0.0):  # at the margin (the power) and at no effect (where 'close' may stop it)
        part = Part(rng, sims, n_fixed, truth=truth, **kw)
        labels, seeds = run_design([part], looks, max_seeds=n_fixed, alpha=HOLM_LEVEL)
        fixed_labels, _ = run_design([part], [n_fixed], max_seeds=n_fixed, alpha=HOLM_LEVEL)
        out[truth] = (float((labels[:, 0] == "lower").mean()), float(seeds.mean()),
                      float((fixed_labels[:, 0] == "lower").mean()), float(np.isin(labels[:, 0], list(part.false_labels())).mean()))
    power, mean_seeds, fixed_power, wrong = out[-kw["margin"]]
    _, null_seeds, _, null_wrong = out[0.0]
    err = 3 * math.sqrt(0.2 * 0.8 / sims)
    assert fixed_power >= 0.8 - err, f"{name}: the fixed design's simulated power {fixed_power:.3f}"
    assert power >= fixed_power - 0.04, f"{name}: sequential power {power:.3f} against fixed {fixed_power:.3f}"
    assert mean_seeds < 0.9 * n_fixed, f"{name}: {mean_seeds:.1f} seeds on average against {n_fixed} fixed"
    assert wrong == 0.0 and null_wrong <= HOLM_LEVEL + 3 * math.sqrt(HOLM_LEVEL / sims)
    print(f"\n{name}: fixed design {n_fixed} seeds per arm (power {fixed_power:.3f} at alpha {HOLM_LEVEL:g}); "
          f"sequential, looks at 3, 5, ... {n_fixed}: power {power:.3f}, {mean_seeds:.1f} seeds on average at the "
          f"margin ({1 - mean_seeds / n_fixed:.0%} fewer), {null_seeds:.1f} at no effect")
