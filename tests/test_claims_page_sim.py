"""The whole claims page under the global null, simulated: every part kind in the family, equal and ninefold unequal
noise, stage 1 choosing the rates on its seeds and stage 2 deciding on fresh ones, sequential looks, the page's
step-down. Its family-wise error is at most 0.05 (within the simulation's error), the stage-2 intervals cover at
their nominal 95%, and putting back the 3-seed percentile bootstrap of the lr optima (the method this design
replaced) makes the page fail: the test would catch it.

A simulated page (`Page`), S pages at once, numpy throughout:

- arms are lr profiles on a ladder of 5 rates half an octave apart: a curve in log2(lr) (curvature 0.03 nats per
  octave squared, as the cpu archive's below their optima), a seed effect, noise at every point; validation loss is
  the test loss plus a small evaluation noise (the same model, other tokens);
- stage 1 chooses each arm's rate by the page's rule (`lr_choice.choose`: lowest mean validation loss), on 3 seeds;
- stage 2 trains fresh seeds at the chosen cells and estimates with the page's own array estimators
  (`stats.welch_arrays`, `paired_arrays`); `test_the_simulated_estimates_are_the_pages` checks them against
  `estimate_part` on the same numbers;
- the parts: fixed difference (Welch; declared paired), fixed interaction, stage-2 optimal loss (the arms' curves
  identical and flat in lr, so the null holds at every rate the choice can land on), stage-2 own-optimum
  interaction, stage-2 lr_optimum (the preference interaction; the arms' curves share one shape, the location
  null), two of them sequential (looks at 3, 5, 7 of 7 seeds, alpha spending);
- the page's step-down (`sequential.step_down`) over every part's label p-values; a page errs when some part gets a
  wrong decisive label (a direction, or `not close`, where the truth is 0).

Fast tier: 2,000 pages (the smallest that separates 0.05 from the bootstrap's error by several standard errors);
the full-size run (20,000 pages) is marked slow. `pytest -s` prints the figures docs/claims.md states.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from cemctl.report import sequential as seq
from cemctl.report import stats

ALPHA = 0.05
RATES = 0.5 * np.arange(5)  # log2(lr / 0.001): five rates half an octave apart
CURVATURE = 0.03  # nats per octave squared
SD = 0.01  # a run's test-loss noise at one rate (the cpu archive: 0.006-0.04)
EVAL_SD = 0.002  # validation vs test: the same model on other tokens
MARGIN = 0.015  # 1% of a loss of 1.5
STAGE1_SEEDS = 3
SEQ_LOOKS = (3, 5, 7)


def _curve(shift: np.ndarray, shape: str) -> np.ndarray:
    """(S, rates) true test loss: flat (no lr effect), or a parabola with its optimum at `shift` octaves above the
    ladder's middle (steeper above it when `shape` is 'steep', as Llama's at cpu)."""
    if shape == "flat":
        return np.full((shift.shape[0], RATES.size), 1.5)
    d = RATES[None, :] - (1.0 + shift[:, None])
    return 1.5 + CURVATURE * d ** 2 + (0.1 * np.maximum(d, 0) ** 3 if shape == "steep" else 0.0)


@dataclass
class Arm:
    """One arm of S simulated pages: its true curve, its noise s.d., its stage-1 profile and choice."""

    curve: np.ndarray  # (S, rates)
    sd: float
    chosen: np.ndarray | None = None  # (S,) the index of the chosen rate

    def stage1(self, rng: np.random.Generator) -> np.ndarray:
        """Choose a rate on 3 seeds: the lowest mean validation loss (every rate has every seed)."""
        s = self.curve.shape[0]
        test = self.curve[:, None, :] + rng.normal(0, self.sd, (s, STAGE1_SEEDS, RATES.size)) \
            + rng.normal(0, 0.3 * self.sd, (s, STAGE1_SEEDS, 1))
        val = test + rng.normal(0, EVAL_SD, test.shape)
        self.chosen = np.argmin(val.mean(axis=1), axis=-1)
        return test

    def fresh(self, rng: np.random.Generator, n: int, at: np.ndarray | None = None) -> np.ndarray:
        """(S, n) test losses of fresh seeds at a rate index per page (default: the chosen one)."""
        idx = self.chosen if at is None else at
        mean = np.take_along_axis(self.curve, idx[:, None], axis=1)
        return mean + rng.normal(0, self.sd, (self.curve.shape[0], n))


def _looks(values: list[np.ndarray], coefs: tuple[float, ...], looks: tuple[int, ...], paired: bool = False):
    """(effect, se, df) at every look, each (S, K)."""
    out = []
    for n in looks:
        vals = [v[:, :n] for v in values]
        if paired:
            out.append(stats.paired_arrays(sum(c * v for c, v in zip(coefs, vals))))
        else:
            out.append(stats.welch_arrays(coefs, vals))
    return tuple(np.stack(x, axis=1) for x in zip(*out))


def _fixed_ps(e, s, d, expect: str, margin: float) -> dict[str, np.ndarray]:
    """Each label's p-value of a fixed t test (`stats.label_ps`, vectorised: two-sided, the TOST for close)."""
    from scipy.stats import t

    def p_above(th):  # p of 'effect > th'
        with np.errstate(invalid="ignore", divide="ignore"):
            return t.sf((e - th) / s, d)

    def p_below(th):
        with np.errstate(invalid="ignore", divide="ignore"):
            return t.cdf((e - th) / s, d)

    two = lambda p: np.minimum(1.0, 2 * p)  # noqa: E731
    out = {"lower": two(p_below(0.0)), "higher": two(p_above(0.0))}
    if margin > 0:
        out["close"] = two(np.maximum(p_above(-margin), p_below(margin)))
        if expect == "close":
            out["not close"] = two(np.minimum(p_above(margin), p_below(-margin)))
    return {k: np.where(np.isfinite(v), v, 1.0) for k, v in out.items()}


def _seq_ps(e, s, d, expect: str, margin: float, cap: int) -> dict[str, np.ndarray]:
    ps = seq.sequential_label_ps(e, s, d, margin, [n / cap for n in SEQ_LOOKS])
    if expect != "close":
        ps.pop("not close", None)
    return ps


def _bootstrap_lr_ps(tests: list[np.ndarray], expect: str, margin: float) -> dict[str, np.ndarray]:
    """The replaced method: the percentile bootstrap of the Akima optima's locations (log2 lr) over 3 seeds, made
    exact (every one of the 27 resamples of each arm, every pair of them), p-values as `BootEstimate` computed
    them (one side's share of the bootstrap distribution, doubled)."""
    from itertools import product

    from cemctl.report.optimum import akima_minima

    lrs = list(0.001 * 2 ** RATES)
    draws = np.array(list(product(range(STAGE1_SEEDS), repeat=STAGE1_SEEDS)))  # (27, 3)
    locs = []
    for test in tests:  # (S, seeds, rates)
        means = test[:, draws, :].mean(axis=2)  # (S, 27, rates)
        lr, _, _ = akima_minima(lrs, means)
        locs.append(np.log2(lr))
    diff = locs[0][:, :, None] - locs[1][:, None, :]  # (S, 27, 27): every pair of resamples
    diff = diff.reshape(diff.shape[0], -1)
    below = np.mean(diff >= 0, axis=1)  # p of 'the effect is below 0': the share at or above it
    above = np.mean(diff <= 0, axis=1)
    two = lambda p: np.minimum(1.0, 2 * p)  # noqa: E731
    out = {"lower": two(below), "higher": two(above)}
    if margin > 0:
        out["close"] = two(np.maximum(np.mean(diff <= -margin, axis=1), np.mean(diff >= margin, axis=1)))
    return out


def simulate(sims: int, seed: int, *, lr_method: str = "stage 2", n: int = 6, ratio: float = 9.0):
    """S pages under the global null; returns (family-wise error, per-part wrong-label rates, coverage of the fixed
    stage-2 intervals: {part: share})."""
    rng = np.random.default_rng(seed)
    noisy = SD * math.sqrt(ratio)
    zero = np.zeros(sims)
    ps: list[dict[str, np.ndarray]] = []
    expects: list[str] = []
    margins: list[float] = []
    names: list[str] = []
    cover: dict[str, np.ndarray] = {}

    def add(name: str, p: dict[str, np.ndarray], expect: str, margin: float) -> None:
        ps.append(p)
        expects.append(expect)
        margins.append(margin)
        names.append(name)

    def fixed(name, values, coefs, expect, margin, paired=False, truth=0.0):
        e, s, d = (x[:, 0] for x in _looks(values, coefs, (values[0].shape[1],), paired))
        add(name, _fixed_ps(e, s, d, expect, margin), expect, margin)
        from scipy.stats import t

        with np.errstate(invalid="ignore"):
            cover[name] = np.abs(e - truth) <= t.ppf(0.975, d) * s

    flat = [Arm(_curve(zero, "flat"), sd) for sd in (SD, noisy)]
    # fixed parts at one rate (stage 1 is not involved): Welch, equal and unequal; declared paired; an interaction
    fixed("fixed difference, equal noise", [flat[0].fresh(rng, 3, zero.astype(int)),
                                            flat[0].fresh(rng, 3, zero.astype(int))], (1, -1), "lower", MARGIN)
    fixed("fixed difference, 9x noise", [flat[0].fresh(rng, 3, zero.astype(int)),
                                         flat[1].fresh(rng, 3, zero.astype(int))], (1, -1), "close", MARGIN)
    shared = rng.normal(0, SD, (sims, 3))
    fixed("fixed difference, declared paired", [flat[0].fresh(rng, 3, zero.astype(int)) + shared,
                                                flat[1].fresh(rng, 3, zero.astype(int)) + shared], (1, -1),
          "lower", MARGIN, paired=True)
    fixed("fixed interaction, 9x noise", [flat[1].fresh(rng, 3, zero.astype(int))] +
          [flat[0].fresh(rng, 3, zero.astype(int)) for _ in range(3)], (1, -1, -1, 1), "lower", MARGIN)
    # stage 2 of an optimal-loss part and an own-optimum interaction: rates chosen on stage-1 seeds of flat curves
    for ratio_name, arms in (("equal noise", [Arm(_curve(zero, "flat"), SD), Arm(_curve(zero, "flat"), SD)]),
                             ("9x noise", [Arm(_curve(zero, "flat"), noisy), Arm(_curve(zero, "flat"), SD)])):
        for a in arms:
            a.stage1(rng)
        fixed(f"stage-2 optimal loss, {ratio_name}", [a.fresh(rng, n) for a in arms], (1, -1), "close", MARGIN)
    four = [Arm(_curve(zero, "flat"), noisy)] + [Arm(_curve(zero, "flat"), SD) for _ in range(3)]
    for a in four:
        a.stage1(rng)
    fixed("stage-2 own-optimum interaction, 9x noise", [a.fresh(rng, n) for a in four], (1, -1, -1, 1), "lower",
          MARGIN)
    # lr_optimum: the arms' curves share a shape (optima at the same place, drawn per page); stage 2 tests the
    # preference between the two chosen rates, or (the replaced method) stage 1's bootstrap decides
    for shape, ratio_name, sds in (("parabola", "equal noise", (SD, SD)), ("steep", "9x noise", (noisy, SD))):
        where = rng.uniform(-0.5, 0.5, sims)
        arms = [Arm(_curve(where, shape), sd) for sd in sds]
        tests = [a.stage1(rng) for a in arms]
        name = f"lr optimum ({shape}), {ratio_name}"
        if lr_method == "bootstrap":
            add(name, _bootstrap_lr_ps(tests, "higher", 0.5), "higher", 0.5)
            continue
        lo = np.minimum(arms[0].chosen, arms[1].chosen)
        hi = np.maximum(arms[0].chosen, arms[1].chosen)
        hi = np.where(hi == lo, np.minimum(lo + 1, RATES.size - 1), hi)
        lo = np.where(hi == lo, lo - 1, lo)
        cells = [arms[0].fresh(rng, n, lo), arms[0].fresh(rng, n, hi), arms[1].fresh(rng, n, lo),
                 arms[1].fresh(rng, n, hi)]
        fixed(name, cells, (1, -1, -1, 1), "higher", 0.0)
    # two sequential stage-2 parts: looks at 3, 5, 7 of 7 seeds; a part decided stops getting seeds, which cannot
    # change a page's error here (its p-values over the looks only fall), so every look is computed
    for name, arms, expect in (("sequential optimal loss, 9x noise", [Arm(_curve(zero, "flat"), noisy),
                                                                       Arm(_curve(zero, "flat"), SD)], "close"),
                               ("sequential difference, equal noise", [Arm(_curve(zero, "flat"), SD),
                                                                        Arm(_curve(zero, "flat"), SD)], "lower")):
        for a in arms:
            a.stage1(rng)
        e, s, d = _looks([a.fresh(rng, SEQ_LOOKS[-1]) for a in arms], (1, -1), SEQ_LOOKS)
        add(name, _seq_ps(e, s, d, expect, MARGIN, SEQ_LOOKS[-1]), expect, MARGIN)
    labels = ("lower", "higher", "close", "not close")
    stacked = {lab: np.stack([p.get(lab, np.ones(sims)) for p in ps], axis=-1) for lab in labels}
    decided, label, _, _ = seq.step_down(stacked, expects, margins, ALPHA)
    wrong = decided & np.isin(label.astype(str), ["lower", "higher", "not close"])
    return float(wrong.any(axis=1).mean()), dict(zip(names, wrong.mean(axis=0))), \
        {k: float(np.nanmean(v)) for k, v in cover.items()}


def _se(p: float, sims: int) -> float:
    return math.sqrt(max(p, 1e-4) * (1 - p) / sims)


@pytest.mark.parametrize("sims", [pytest.param(2000, id="fast"), pytest.param(20000, id="full", marks=pytest.mark.slow)])
def test_the_whole_page_holds_its_family_wise_error_and_fails_with_the_old_bootstrap(sims):
    fwer, per_part, coverage = simulate(sims, 1)
    old, old_parts, _ = simulate(sims, 2, lr_method="bootstrap")
    print(f"\nwhole page under the global null, {sims} pages, {len(per_part)} parts: family-wise error {fwer:.4f} "
          f"(MC s.e. {_se(fwer, sims):.4f}); with the old bootstrap for the lr optima {old:.4f} "
          f"(s.e. {_se(old, sims):.4f})")
    for name, rate in per_part.items():
        print(f"  {name}: wrong label {rate:.4f}; old: {old_parts.get(name, float('nan')):.4f}")
    for name, share in coverage.items():
        print(f"  coverage of {name}: {share:.4f} (s.e. {_se(share, sims):.4f})")
    assert fwer <= ALPHA + 2 * _se(ALPHA, sims), fwer
    assert old > ALPHA + 3 * _se(ALPHA, sims), old  # the replaced method breaks the page: this test would see it
    for name, share in coverage.items():
        assert share >= 0.95 - 3 * _se(0.95, sims), (name, share)


@pytest.mark.slow
def test_the_preference_test_with_unequal_curvatures_is_a_statement_about_the_two_rates():
    """Where two arms share an optimum but not a curvature, stage 2's preference test can decide a direction: the
    steeper arm does lose more at the lower rate when the rates are not symmetric about the optimum. Measured here
    (docs/claims.md states it), not an error of the test's own hypothesis; at symmetric rates it is 0."""
    rng = np.random.default_rng(7)
    sims = 4000
    where = np.zeros(sims)
    steep = Arm(1.5 + 2 * CURVATURE * (RATES[None, :] - 1.0) ** 2 + 0 * where[:, None], SD)
    mild = Arm(_curve(where, "parabola"), SD)
    lo, hi = np.full(sims, 1), np.full(sims, 3)  # symmetric about the optimum (index 2)
    cells = [steep.fresh(rng, 6, lo), steep.fresh(rng, 6, hi), mild.fresh(rng, 6, lo), mild.fresh(rng, 6, hi)]
    e, s, d = (x[:, 0] for x in _looks(cells, (1, -1, -1, 1), (6,)))
    sym = _fixed_ps(e, s, d, "higher", 0.0)
    rate_sym = float(np.mean(np.minimum(sym["lower"], sym["higher"]) <= ALPHA))
    lo, hi = np.full(sims, 2), np.full(sims, 3)  # the optimum and the rate above it
    cells = [steep.fresh(rng, 6, lo), steep.fresh(rng, 6, hi), mild.fresh(rng, 6, lo), mild.fresh(rng, 6, hi)]
    e, s, d = (x[:, 0] for x in _looks(cells, (1, -1, -1, 1), (6,)))
    asym = _fixed_ps(e, s, d, "higher", 0.0)
    rate_asym = float(np.mean(asym["lower"] <= ALPHA))
    print(f"\nshared optimum, curvatures 2:1, 6 seeds: a direction decided in {rate_sym:.4f} at rates symmetric about "
          f"it, 'lower' (the steeper arm prefers the lower rate) in {rate_asym:.4f} at the optimum and the rate above")
    assert rate_sym <= ALPHA + 3 * _se(ALPHA, sims)
    assert rate_asym > ALPHA + 3 * _se(ALPHA, sims)  # a true difference of preference between these two rates


def test_the_simulated_estimates_are_the_pages():
    """The simulation's stage-2 estimates (`stats.welch_arrays` on the cells) are `estimate_part`'s on the same
    numbers: a confirmation part's arms at their registered rates, an lr_optimum's preference interaction, a
    declared paired part."""
    import dataclasses

    from cemctl.grid.claims import ConfirmSpec, Margin, PartSpec
    from cemctl.report.claims import Arm as PageArm
    from cemctl.report.claims import estimate_part

    rng = np.random.default_rng(3)
    confirm = ConfirmSpec("x", (0, 1, 2))
    a, b = {"model.attention": "cem"}, {"model.attention": "llama"}
    values = {("cem", 0.001): rng.normal(1.5, 0.03, 5), ("cem", 0.004): rng.normal(1.52, 0.03, 5),
              ("llama", 0.001): rng.normal(1.49, 0.01, 5), ("llama", 0.004): rng.normal(1.47, 0.01, 5)}
    arms = [PageArm(f"{k}@{lr}", k, {"model.attention": k, "train.lr": lr, "model.size": "micro"},
                    {s + 3: float(v) for s, v in enumerate(vals)}, [f"{k}{lr}{s}" for s in range(5)])
            for (k, lr), vals in values.items()]
    base = PartSpec("p", "difference", [a, b], "lower", Margin(0.01), rates={"micro": (0.001, 0.004)},
                    confirm=confirm)
    got = estimate_part(base, {"micro": arms}, stage="stage 2").est
    want = stats.welch_arrays((1, -1), [values[("cem", 0.001)], values[("llama", 0.004)]])
    assert (got.effect, got.se, got.df) == pytest.approx(tuple(float(x) for x in want), rel=1e-12)
    pref = dataclasses.replace(base, statistic="lr_optimum", rates={"micro": (0.001, 0.004)})
    got = estimate_part(pref, {"micro": arms}, stage="stage 2").est
    want = stats.welch_arrays((1, -1, -1, 1), [values[k] for k in (("cem", 0.001), ("cem", 0.004),
                                                                  ("llama", 0.001), ("llama", 0.004))])
    assert (got.effect, got.se, got.df) == pytest.approx(tuple(float(x) for x in want), rel=1e-12)
    paired = dataclasses.replace(base, variance="paired")
    got = estimate_part(paired, {"micro": arms}, stage="stage 2").est
    want = stats.paired_arrays(values[("cem", 0.001)] - values[("llama", 0.004)])
    assert (got.effect, got.se, got.df) == pytest.approx(tuple(float(x) for x in want), rel=1e-12)
