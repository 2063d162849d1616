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
        own profile, in one batch: rows 0, 1..n, n+1..2n."""
        from cemctl.report.optimum import akima_minima

        if getattr(self, "_cache", None) is None:
            n = self.n
            total = self.values.sum(axis=0, keepdims=True)
            batch = np.concatenate([total / n, (total - self.values) / (n - 1), self.values], axis=0)
            lr, loss, edge = akima_minima(self.lrs, batch)
            self._cache = (np.asarray(lr, dtype=float), np.asarray(loss, dtype=float), np.asarray(edge, dtype=bool))
        return self._cache

    def optimum(self) -> tuple[float, float, str]:
        """(lr, loss, edge) of the seed-mean profile's Akima minimum; edge '' | 'low' | 'high'."""
        lr, loss, at_edge = (v[0] for v in self._minima())
        edge = "" if not bool(at_edge) else ("low" if math.isclose(float(lr), self.lrs[0]) else "high")
        return float(lr), float(loss), edge

    def leave_one_out(self) -> np.ndarray:
        """The tuned loss with each seed left out (n,)."""
        return self._minima()[1][1:self.n + 1]

    def per_seed(self) -> tuple[np.ndarray, np.ndarray]:
        """Each seed's own optimum: (lrs, losses)."""
        lr, loss, _ = self._minima()
        return lr[self.n + 1:], loss[self.n + 1:]

    def jackknife_var(self) -> float:
        loo = self.leave_one_out()
        n = self.n
        return float((n - 1) / n * np.sum((loo - loo.mean()) ** 2))

    def spacing_octaves(self) -> float:
        return float(max(math.log2(b / a) for a, b in zip(self.lrs, self.lrs[1:])))


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
        n = len(common)
        if n < 2:
            est = TEstimate(effect, math.nan, 0, method, n)
        else:
            loo = np.zeros(n)
            for c, p in zip(coefs, profiles):
                keep = [p.seeds.index(s) for s in common]
                sub = Profile(p.lrs, common, p.values[keep])
                loo = loo + c * sub.leave_one_out()
            var = (n - 1) / n * float(np.sum((loo - loo.mean()) ** 2))
            est = TEstimate(effect, math.sqrt(var), n - 1, method, n)
    else:
        vars_ = [p.jackknife_var() for p in profiles]
        if variance == "pooled":
            df = sum(n - 1 for n in ns)
            s2 = sum((n - 1) * n * v for n, v in zip(ns, vars_)) / df  # per-seed variance, pooled
            var = s2 * sum(c * c / n for c, n in zip(coefs, ns))
        else:
            terms = [c * c * v for c, v in zip(coefs, vars_)]
            var = sum(terms)
            df = var ** 2 / sum(t * t / (n - 1) for t, n in zip(terms, ns)) if var > 0 else 0
        est = TEstimate(effect, math.sqrt(var) if var > 0 else math.nan, df, method, min(ns))
    # an arm at an edge: its true optimum may be lower still, so the contrast may be lower (c > 0) or higher (c < 0)
    open_low = any(e and c > 0 for c, e in zip(coefs, info.edges))
    open_high = any(e and c < 0 for c, e in zip(coefs, info.edges))
    est.censored = "both" if open_low and open_high else ("low" if open_low else ("high" if open_high else ""))
    return est, info
