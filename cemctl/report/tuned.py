"""Contrasts of arms each at its own optimal learning rate (a claim part with `at = "own_optimum"`).

    prof = Profile.of(lrs, {seed: {lr: loss}})        # one arm's lr profile at one setting (or a reason it is none)
    est = tuned_estimate([prof_a, prof_b], coefs=(1, -1), variance="welch")

Each arm of the part has a learning-rate profile: its runs at every rate (the selector without train.lr),
seeds that finished at every rate of it. The arm's optimum is the minimum of the Akima interpolant of the
seed-mean profile in log(lr) (`cemctl.report.optimum`, the paper's method), and the loss there is the arm's
tuned loss; the per-seed optima (each seed's own profile) are reported beside it. The tuning is accounted for
by the jackknife over seeds: leaving one seed out moves the mean profile, and the optimum is found again
(where it lies and how low it is), so the variance includes the noise of choosing the rate, not only the
noise of the loss at a chosen rate. Intervals are t intervals with the jackknife standard error:

- `welch` (the rule's choice for tuned arms): each arm's jackknife variance, Satterthwaite's df over the
  arms (n_g - 1 each);
- `paired`: the jackknife of the contrast itself over the seeds every arm finished (df n - 1);
- `pooled`: the arms' per-seed jackknife variances pooled (df = sum of n_g - 1).

The jackknife of the mean profile's optimum was chosen over the mean of per-seed optima by simulation
(tests/test_claims_tuned.py): a single seed's minimum is biased low by the noise it picks (the winner's
curse), and the bias differs between arms whose profiles are noisier, so intervals built on per-seed optima
lose coverage as seeds are added (88% at 12 seeds when one arm's profile is four times noisier); the mean
profile's minimum is biased by a 1/sqrt(n) fraction of that and keeps 94-96%. An optimum at the edge of a
profile is a bound, not a value: the interval is left open on that side and the profile should be extended.
Fewer than 3 rates, or an optimum between rates a whole octave apart, give no estimate or a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from cemctl.report.stats import TEstimate

MIN_RATES = 3
MIN_SEEDS = 2


@dataclass
class Profile:
    lrs: list[float]  # increasing
    seeds: list[int]
    values: np.ndarray  # (seeds, lrs) losses
    run_ids: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # why rates or seeds were left out
    # (low, high): the profile's first / last rate was added by the until-decided loop's extension (`edge_side`)
    extended: tuple[bool, bool] = (False, False)
    _cache: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, table: Mapping[float, Mapping[int, float]], run_ids: Sequence[str] = ()) -> "Profile | str":
        """The profile of {lr: {seed: loss}}: the rates with at least two finished seeds, and the seeds finished
        at every one of them; a string saying why there is none."""
        rates = sorted(lr for lr, by_seed in table.items() if len(by_seed) >= MIN_SEEDS)
        dropped = [f"lr {lr:g}: {len(table[lr])} seed" for lr in sorted(table) if lr not in rates]
        if len(rates) < MIN_RATES:
            return f"{len(rates)} learning rate{'s' if len(rates) != 1 else ''} with two or more seeds " \
                   f"(an own-optimum profile needs {MIN_RATES})"
        seeds = sorted(set.intersection(*[set(table[lr]) for lr in rates]))
        while len(seeds) < MIN_SEEDS and len(rates) > MIN_RATES:  # drop the rate missing most seeds
            worst = min(rates, key=lambda lr: (len(table[lr]), lr))
            rates.remove(worst)
            dropped.append(f"lr {worst:g}: seeds missing")
            seeds = sorted(set.intersection(*[set(table[lr]) for lr in rates]))
        if len(seeds) < MIN_SEEDS:
            return "fewer than two seeds finished at every learning rate of the profile"
        values = np.array([[table[lr][s] for lr in rates] for s in seeds], dtype=float)
        return cls(rates, seeds, values, list(run_ids), dropped)

    @property
    def n(self) -> int:
        return len(self.seeds)

    def _minima(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The Akima minima of the seed-mean profile, of each leave-one-seed-out mean profile and of each seed's
        own profile, in one batch: rows 0, 1..n, n+1..2n (`jackknife_minima`)."""
        if getattr(self, "_cache", None) is None:
            self._cache = jackknife_minima(self.lrs, self.values, per_seed=True)
        return self._cache

    def optimum(self) -> tuple[float, float, str]:
        """(lr, loss, edge) of the seed-mean profile's Akima minimum; edge as `edge_side` names it."""
        lr, loss, at_edge = (v[0] for v in self._minima())
        return float(lr), float(loss), str(edge_side(self.lrs, lr, at_edge, extended=self.extended))

    def leave_one_out(self) -> np.ndarray:
        """The tuned loss with each seed left out (n,)."""
        return self._minima()[1][1:self.n + 1]

    def per_seed(self) -> tuple[np.ndarray, np.ndarray]:
        """Each seed's own optimum: (lrs, losses)."""
        lr, loss, _ = self._minima()
        return lr[self.n + 1:], loss[self.n + 1:]

    def jackknife_var(self) -> float:
        return float(jackknife_var(self.leave_one_out()))

    def spacing_octaves(self) -> float:
        return float(max(math.log2(b / a) for a, b in zip(self.lrs, self.lrs[1:])))


def jackknife_minima(lrs: Sequence[float], values: np.ndarray, *, per_seed: bool = False
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Akima minima (lr, loss, at an edge) of the seed-mean profile and of each leave-one-seed-out mean
    profile of `values` (..., seeds, rates), along a new axis before the last: index 0 the mean, 1..n the
    jackknife, then (per_seed) n+1..2n each seed's own. Any leading shape: one arm, or thousands of simulated
    ones (`tests/test_claims_sequential.py` runs the page's estimator through here)."""
    from cemctl.report.optimum import akima_minima

    v = np.asarray(values, dtype=float)
    n = v.shape[-2]
    total = v.sum(axis=-2, keepdims=True)
    rows = [total / n, (total - v) / (n - 1)] + ([v] if per_seed else [])
    lr, loss, edge = akima_minima(lrs, np.concatenate(rows, axis=-2))
    return np.asarray(lr, dtype=float), np.asarray(loss, dtype=float), np.asarray(edge, dtype=bool)


def edge_side(lrs: Sequence[float], lr: np.ndarray, at_edge: np.ndarray, *,
              extended: tuple[bool, bool] = (False, False)) -> np.ndarray:
    """Where minima at `lr` sit in the profile `lrs`: '' (bracketed: from the second to the second-last rate, where
    the interpolant's slopes come from data on both sides), 'low' | 'high' (at the first or last rate: the true
    optimum may lie beyond it, so the loss there bounds the tuned loss from above) or 'near low' | 'near high' (in
    an end interval: the interpolant there extrapolates its end slope, and on a curve much steeper on one side of
    the optimum it dips below the data by more than the seeds' noise, tests/test_claims_tuned.py; its value is no
    bound either way).

    `extended` (low, high): that end rate was added by an extension, which stops at the first rate that makes the
    optimum look bracketed; on a flat, noisy profile that is often noise short of the true optimum. There a minimum
    with only one rate beyond it on that side is 'provisional low' | 'provisional high': treated as at that edge
    (its loss bounds the tuned loss from above, the loop extends once more) until a second rate beyond it ran."""
    lr, at_edge = np.asarray(lr, dtype=float), np.asarray(at_edge, dtype=bool)
    low_point = at_edge & np.isclose(lr, lrs[0])
    out = np.where(low_point, "low", np.where(at_edge, "high", ""))
    out = np.where((out == "") & (lr < lrs[1] * (1 - 1e-9)), "near low", out)
    out = np.where((out == "") & (lr > lrs[-2] * (1 + 1e-9)), "near high", out)
    if extended[0] and len(lrs) >= 3:
        out = np.where((out == "") & (lr < lrs[2] * (1 - 1e-9)), "provisional low", out)
    if extended[1] and len(lrs) >= 3:
        out = np.where((out == "") & (lr > lrs[-3] * (1 + 1e-9)), "provisional high", out)
    return out


def jackknife_var(loo: np.ndarray) -> np.ndarray:
    """The jackknife variance of an estimate from its leave-one-out values (last axis)."""
    n = loo.shape[-1]
    return (n - 1) / n * np.sum((loo - loo.mean(axis=-1, keepdims=True)) ** 2, axis=-1)


def tuned_arrays(coefs: Sequence[float], losses: Sequence[np.ndarray], loos: Sequence[np.ndarray],
                 edges: Sequence[np.ndarray], variance: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(effect, se, df, censored) of sum_g c_g (tuned loss of arm g) from each arm's tuned loss, its leave-one-seed-
    out tuned losses (..., n_g) and the edge its optimum sits at (module docstring: welch, pooled, paired; paired
    needs the same seeds in every arm, in the same order). Any leading shape."""
    effect = sum(c * np.asarray(x, dtype=float) for c, x in zip(coefs, losses))
    ns = [np.shape(x)[-1] for x in loos]
    if variance == "paired":
        var = jackknife_var(sum(c * np.asarray(x, dtype=float) for c, x in zip(coefs, loos)))
        df = np.full(np.shape(effect), ns[0] - 1.0)
    else:
        vars_ = [jackknife_var(np.asarray(x, dtype=float)) for x in loos]
        if variance == "pooled":
            dof = sum(n - 1 for n in ns)
            s2 = sum((n - 1) * n * v for n, v in zip(ns, vars_)) / dof  # per-seed variance, pooled
            var = s2 * sum(c * c / n for c, n in zip(coefs, ns))
            df = np.full(np.shape(effect), float(dof))
        else:
            terms = [c * c * v for c, v in zip(coefs, vars_)]
            var = sum(terms)
            with np.errstate(divide="ignore", invalid="ignore"):
                df = np.where(var > 0, var ** 2 / sum(t * t / (n - 1) for t, n in zip(terms, ns)), 0.0)
    se = np.where(var > 0, np.sqrt(np.where(var > 0, var, 1.0)), np.nan)
    return effect, se, df, censored_side(coefs, edges)


def censored_side(coefs: Sequence[float], edges: Sequence[np.ndarray]) -> np.ndarray:
    """The side a contrast's interval is open on: an arm at an edge of its profile may have its true optimum lower
    still, so the contrast may be lower (its coefficient > 0) or higher (< 0); an arm whose optimum lies in an end
    interval (`edge_side`: 'near ...') has a tuned loss biased either way: both sides."""
    edges = [np.asarray(e, dtype=object) for e in edges]
    near = sum(np.char.startswith(e.astype(str), "near") for e in edges) > 0
    open_low = sum((e != "") & (c > 0) for c, e in zip(coefs, edges)) > 0
    open_high = sum((e != "") & (c < 0) for c, e in zip(coefs, edges)) > 0
    both = near | (open_low & open_high)
    return np.where(both, "both", np.where(open_low, "low", np.where(open_high, "high", "")))


@dataclass
class TunedInfo:
    optima: list[float]  # each arm's optimal lr
    losses: list[float]  # each arm's tuned loss
    edges: list[str]  # '' | 'low' | 'high' per arm
    seed_optima: list[list[float]]  # per arm, each seed's own optimal lr
    n: list[int]  # seeds per arm


def tuned_estimate(profiles: Sequence[Profile], coefs: Sequence[float], variance: str = "welch"
                   ) -> tuple[TEstimate, TunedInfo]:
    """sum_g c_g (tuned loss of arm g) with a jackknife t interval (see the module docstring); censored on the
    side an arm at the edge of its profile leaves open."""
    opts = [p.optimum() for p in profiles]
    effect = float(sum(c * o[1] for c, o in zip(coefs, opts)))
    ns = [p.n for p in profiles]
    info = TunedInfo([o[0] for o in opts], [o[1] for o in opts], [o[2] for o in opts],
                     [list(p.per_seed()[0]) for p in profiles], ns)
    method = {"paired": "paired jackknife t", "pooled": "pooled jackknife t"}.get(variance, "Welch jackknife t")
    if variance == "paired":
        common = sorted(set.intersection(*[set(p.seeds) for p in profiles]))
        if len(common) < 2:
            return TEstimate(effect, math.nan, 0, method, len(common), str(censored_side(coefs, info.edges))), info
        loos = [Profile(p.lrs, common, p.values[[p.seeds.index(s) for s in common]]).leave_one_out()
                for p in profiles]
    else:
        loos = [p.leave_one_out() for p in profiles]
    _, se, df, censored = tuned_arrays(coefs, [o[1] for o in opts], loos, info.edges, variance)
    n = len(common) if variance == "paired" else min(ns)
    est = TEstimate(effect, float(se), float(df), method, n, str(censored))
    return est, info
