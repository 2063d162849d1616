"""Seeds in rounds until the claims are decided: a group-sequential design with alpha spending.

    c = boundaries((0.2, 0.4, 1.0), alphas)         # two-sided z critical values per look, for each level
    ps = sequential_label_ps(effects, ses, dfs, margin, info)   # each label's p-value over the looks so far
    est = SeqEstimate(looks, info, max_seeds)       # an Estimate whose labels and intervals hold at every look
    decision = next_round(parts, ...)               # the loop's pure decision: stop (and why) or which arms get seeds

The design (docs/claims.md says why this one):

- Looks. After each round of seeds every part is estimated on the runs finished so far (the same paired,
  pooled, Welch or tuned estimate a fixed design uses). Look j of a part has information fraction
  t_j = n_j / N (n_j seeds per arm, N = the design's `--max-seeds`, capped at 1); a look that adds no seed to
  the part is not a look.
- Spending. Lan-DeMets' O'Brien-Fleming-type spending function, two-sided:
  each side spends 2 - 2 Phi(z_{1-a/4} / sqrt(t)) of its a/2 (gsDesign's sfLDOF), so the first looks spend
  almost nothing (with 3 of 16 seeds a part must be decided at about 5.2 standard errors) and the last look
  tests at nearly the fixed design's level (five equal looks: 4.877, 3.357, 2.680, 2.290, 2.031 at a = 0.05).
  The boundaries c_j(a) solve P(no crossing before j, |Z_j| >= c_j) = alpha(t_j) - alpha(t_{j-1}) for the
  canonical joint distribution of the z statistics (Brownian motion at the information fractions), computed by
  the Armitage-McPherson-Rowe recursion on a grid (Simpson's rule). With t statistics the z boundary is moved to
  the same tail probability of each look's own t distribution (c_t = F_t^-1(Phi(c))).
- Labels. Every label of a part (lower, higher, close, not close) is decided at level a when some look's
  repeated confidence interval, effect_j +- c_j(a) se_j, lies in the label's region (below 0, above 0, within
  +-margin, beyond it); the label's p-value is the least such a over the looks so far. For one look at t = 1 it
  is the fixed design's two-sided t p-value exactly.
- Multiplicity. The page's step-down procedure (`step_down`: Holm over the parts' label hypotheses, counting
  the ones that can still be true, Shaffer's S1), the same as for a fixed design: as in the graphical
  group-sequential procedures of Maurer & Bretz (2013), a hypothesis's p-value is the least level at which
  its spending boundaries are crossed at some look, so a part decided stays decided (p-values over more
  looks only fall, and the procedure is monotone in them).
- Rounds. Only the arms of parts still undecided get more seeds; the loop stops when every part of the
  experiment is decided, when the next round would pass the seed cap N or the budget of run-hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

SPENDING = "Lan-DeMets O'Brien-Fleming"
ALPHA_GRID = np.geomspace(1e-10, 1.0, 301)  # the levels the p-value table is computed at
NODES = 101  # Simpson nodes of the recursion's grid (odd)
LABELS = ("lower", "higher", "close", "not close")


def spend(t: Any, alpha: Any) -> Any:
    """alpha(t) spent by information fraction t (capped at 1) of a two-sided level-alpha design: each side spends
    Lan-DeMets' O'Brien-Fleming-type function at alpha/2, 2 - 2 Phi(z_{1-alpha/4} / sqrt(t)) (gsDesign's sfLDOF)."""
    from scipy.stats import norm

    t = np.minimum(np.asarray(t, dtype=float), 1.0)
    z = norm.isf(np.asarray(alpha, dtype=float) / 4)
    return 4 * norm.sf(z / np.sqrt(t))


def _simpson(n: int) -> np.ndarray:
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return w / (3 * (n - 1))  # for nodes on [0, 1]: multiply by the interval's length


def boundaries(info: Sequence[float], alphas: Any) -> np.ndarray:
    """Two-sided z critical values c[a, j] of the spending design at information fractions `info` (increasing,
    in (0, 1]) for each level in `alphas`; inf where a look spends nothing (its fraction did not grow)."""
    from scipy.stats import norm

    t = np.minimum(np.asarray(info, dtype=float), 1.0)
    a = np.atleast_1d(np.asarray(alphas, dtype=float))
    if t.ndim != 1 or t.size == 0 or np.any(t <= 0) or np.any(np.diff(t) < 0):
        raise ValueError("information fractions must be positive and non-decreasing")
    spent = spend(t[None, :], a[:, None])  # (A, K) cumulative
    c = np.full((a.size, t.size), np.inf)
    c[:, 0] = norm.isf(np.minimum(spent[:, 0], 1.0) / 2)
    nodes = np.linspace(-1.0, 1.0, NODES)
    w = _simpson(NODES) * 2.0  # Simpson weights on [-1, 1]
    b = c[:, 0] * math.sqrt(t[0])  # the boundary on the score scale S = Z sqrt(t)
    s = b[:, None] * nodes[None, :]  # (A, G)
    g = norm.pdf(s / math.sqrt(t[0])) / math.sqrt(t[0])  # the sub-density of S_1 where the design continues
    mass = g * (w[None, :] * b[:, None])  # its probability mass per node
    for j in range(1, t.size):
        delta = t[j] - t[j - 1]
        target = spent[:, j] - spent[:, j - 1]
        if delta <= 0:
            continue  # no new information: this look spends nothing (c stays inf), the density is unchanged
        sd = math.sqrt(delta)

        def crossing(cj: np.ndarray) -> np.ndarray:
            bj = (cj * math.sqrt(t[j]))[:, None]
            inside = norm.cdf((bj - s) / sd) - norm.cdf((-bj - s) / sd)
            return np.sum(mass * (1.0 - inside), axis=1)

        lo, hi = np.zeros(a.size), np.full(a.size, 40.0)
        for _ in range(60):  # crossing() falls as c grows: bisection, every level at once
            mid = (lo + hi) / 2
            above = crossing(mid) > target
            lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        cj = (lo + hi) / 2
        cj = np.where(target > 0, cj, np.inf)
        c[:, j] = cj
        bj = np.where(np.isfinite(cj), cj * math.sqrt(t[j]), 40.0 * math.sqrt(t[j]))
        y = bj[:, None] * nodes[None, :]
        kernel = norm.pdf((y[:, :, None] - s[:, None, :]) / sd) / sd  # (A, G_new, G_old)
        g = np.einsum("agh,ah->ag", kernel, mass)
        s, mass = y, g * (w[None, :] * bj[:, None])
    return c


@lru_cache(maxsize=256)
def _table(info: tuple[float, ...]) -> np.ndarray:
    return boundaries(info, ALPHA_GRID)


@lru_cache(maxsize=1024)
def critical_values(info: tuple[float, ...], level: float) -> np.ndarray:
    """c_j at one level (for intervals)."""
    return boundaries(info, [level])[0]


def _key(info: Sequence[float]) -> tuple[float, ...]:
    return tuple(round(min(float(x), 1.0), 9) for x in info)


def look_levels(u: Any, info: Sequence[float]) -> np.ndarray:
    """For z-scale margins u[..., j] (how far look j's statistic is past the label's edge, in standard errors
    on the normal scale), the least level at which look j decides the label: inf{a : c_j(a) <= u}."""
    table = _table(_key(info))  # (A, K): c falls as a grows
    u = np.asarray(u, dtype=float)
    out = np.ones(u.shape)
    log_a = np.log(ALPHA_GRID)
    for j in range(table.shape[1]):
        cj = table[:, j]
        ok = np.isfinite(cj)
        if not ok.any():
            continue
        x, y = cj[ok][::-1], log_a[ok][::-1]  # c increasing, log a decreasing
        uj = u[..., j]
        level = np.exp(np.interp(uj, x, y, left=0.0, right=float(log_a[ok][0])))
        level = np.where(uj < x[0], 1.0, level)  # not decided even at a = 1
        level = np.where(np.isfinite(uj), level, 1.0)  # a look without an estimate decides nothing
        if not np.isfinite(cj).all():  # levels where this look spends nothing
            level = np.maximum(level, ALPHA_GRID[~ok].max(initial=0.0))
        out[..., j] = np.minimum(level, 1.0)
    return out


def _to_z(x: Any, df: Any) -> np.ndarray:
    """A t statistic (df) moved to the normal quantile with the same tail (df inf: itself; no df: NaN)."""
    from scipy.stats import norm, t

    x, df = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(df, dtype=float))
    out = np.full(x.shape, np.nan)
    use = np.isfinite(df) & (df > 0)
    with np.errstate(invalid="ignore", over="ignore"):
        out[use] = norm.isf(t.sf(x[use], df[use]))
    normal = np.isinf(df) & (df > 0)
    out[normal] = x[normal]
    return out


def label_statistics(effect: Any, se: Any, margin: float) -> dict[str, np.ndarray]:
    """The t-scale distance of each label's region from the estimate: a label holds at critical value c when its
    statistic exceeds c (lower: -e/se; higher: e/se; close: the nearer of the two margins; not close: the
    farther one, past the margin)."""
    e, s = np.asarray(effect, dtype=float), np.asarray(se, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {"lower": -e / s, "higher": e / s}
        if margin > 0:
            out["close"] = np.minimum((margin - e) / s, (margin + e) / s)
            out["not close"] = np.maximum((e - margin) / s, (-margin - e) / s)
    bad = ~(np.isfinite(s) & (s > 0))
    return {k: np.where(bad, np.nan, v) for k, v in out.items()}


def label_levels(effect: Any, se: Any, df: Any, margin: float, info: Sequence[float]) -> dict[str, np.ndarray]:
    """Each label's least deciding level at each look (last axis; shapes (..., K) broadcast, K = len(info))."""
    return {label: look_levels(_to_z(x, df), info) for label, x in label_statistics(effect, se, margin).items()}


def sequential_label_ps(effect: Any, se: Any, df: Any, margin: float, info: Sequence[float]) -> dict[str, np.ndarray]:
    """Each label's p-value over the looks (last axis) so far: min over looks of the least level that decides
    it. Shapes (..., K) broadcast; `info` has K fractions."""
    return {label: levels.min(axis=-1) for label, levels in label_levels(effect, se, df, margin, info).items()}


PRECEDENCE = {"lower": ("lower", "higher", "close"), "higher": ("higher", "lower", "close"),
              "close": ("close", "not close", "lower", "higher")}


def step_down(label_ps: Mapping[str, Any], expects: Sequence[str], margins: Sequence[float], alpha: float = 0.05
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Multiplicity over the parts (last axis) of a page: Holm's step-down procedure over the parts' label
    hypotheses, with the number of hypotheses that can still be true counted from their logic (Shaffer's S1).

    A directional part (expect lower/higher) has two hypotheses: its direction (p = the smaller of the lower and
    higher p-values, each already two-sided, so the pair is one two-sided test) and, with a margin, `close`;
    at most one of them can be a true null (the effect is 0, or at least the margin), so the part counts 1
    until both are rejected. A `close` part has `close` and `not close`, which can both be true only at
    |effect| = margin: it counts 2, then 1. Step k tests the k-th smallest p-value at alpha / (the count with
    every earlier hypothesis rejected). Counting a part that was rejected through one label as gone (plain Holm
    over parts) would let its other labels, and every later part, be tested at levels the family cannot pay
    for: with 8 parts and 15 seeds that design made a wrong decisive verdict in 6% of null pages.

    Returns (decided, label, adjusted p, level), each of shape (..., m): a decided part's label is the first
    rejected one in the expectation's order of precedence (as `stats.decide`); its level is the one its label
    was decided at, else that of its smallest p-value."""
    first = np.asarray(next(iter(label_ps.values())), dtype=float)
    shape = first.shape
    m = shape[-1]

    def p_of(label: str) -> np.ndarray:
        if label not in label_ps:
            return np.ones(shape)
        return np.nan_to_num(np.asarray(label_ps[label], dtype=float), nan=1.0)

    hyps: list[tuple[int, str, np.ndarray]] = []  # (part, kind, p)
    lower, higher, close, far = p_of("lower"), p_of("higher"), p_of("close"), p_of("not close")
    for j, expect in enumerate(expects):
        if expect == "close":
            hyps += [(j, "close", close[..., j]), (j, "not close", far[..., j])]
        else:
            hyps.append((j, "direction", np.minimum(lower[..., j], higher[..., j])))
            if margins[j] > 0:
                hyps.append((j, "close", close[..., j]))
    if not hyps:
        empty = np.zeros(shape, dtype=bool)
        return empty, np.full(shape, "", dtype=object), np.ones(shape), np.full(shape, np.nan)
    p = np.stack([h[2] for h in hyps], axis=-1)  # (..., H)
    part = np.array([h[0] for h in hyps])
    members = np.bincount(part, minlength=m)
    order = np.argsort(p, axis=-1, kind="stable")
    flat_p = np.take_along_axis(p, order, axis=-1)
    gone = np.zeros(shape, dtype=int)  # hypotheses of each part counted as rejected so far
    counts, levels_sorted = [], []
    base = np.broadcast_to(np.array([2 if e == "close" else 1 for e in expects]), shape)
    for k in range(p.shape[-1]):
        open_count = np.where(gone >= members, 0, np.where(base == 2, 2 - gone, 1))
        t = np.maximum(open_count.sum(axis=-1), 1)
        counts.append(t)
        levels_sorted.append(alpha / t)
        idx = order[..., k]
        np.put_along_axis(gone, part[idx][..., None], np.take_along_axis(gone, part[idx][..., None], axis=-1) + 1,
                          axis=-1)
    t_sorted = np.stack(counts, axis=-1)
    adj_sorted = np.minimum(np.maximum.accumulate(np.minimum(1.0, t_sorted * flat_p), axis=-1), 1.0)
    adj = np.empty_like(p)
    np.put_along_axis(adj, order, adj_sorted, axis=-1)
    lev = np.empty_like(p)
    np.put_along_axis(lev, order, np.stack(levels_sorted, axis=-1), axis=-1)
    rejected = adj <= alpha
    decided = np.zeros(shape, dtype=bool)
    label = np.full(shape, "", dtype=object)
    p_adj = np.ones(shape)
    level = np.full(shape, np.nan)
    best = np.full(shape, np.inf)
    for h, (j, k_, _) in enumerate(hyps):
        p_adj[..., j] = np.minimum(p_adj[..., j], adj[..., h])
        smaller = p[..., h] < best[..., j]
        level[..., j] = np.where(smaller & ~decided[..., j], lev[..., h], level[..., j])
        best[..., j] = np.minimum(best[..., j], p[..., h])
    for j, expect in enumerate(expects):
        named = {}
        for h, (jj, k_, _) in enumerate(hyps):
            if jj != j:
                continue
            if k_ == "direction":
                sign = np.where(lower[..., j] <= higher[..., j], "lower", "higher")
                for lab in ("lower", "higher"):
                    named[lab] = (rejected[..., h] & (sign == lab), lev[..., h])
            else:
                named[k_] = (rejected[..., h], lev[..., h])
        for lab in reversed(PRECEDENCE[expect]):  # the first in precedence wins
            if lab in named:
                hit, lv = named[lab]
                label[..., j] = np.where(hit, lab, label[..., j])
                level[..., j] = np.where(hit, lv, level[..., j])
                decided[..., j] |= hit
    return decided, label, p_adj, level


@dataclass
class Look:
    effect: float
    se: float
    df: float
    n: int  # seeds per arm at this look
    method: str = ""


@dataclass
class SeqEstimate:
    """A part estimated at several looks of a group-sequential design (an `Estimate` for `stats.decide`)."""

    looks: list[Look]
    max_seeds: int
    method: str = ""
    info: tuple[float, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.info = _key([min(1.0, lk.n / self.max_seeds) for lk in self.looks])
        if not self.method:
            base = self.looks[-1].method if self.looks else ""
            self.method = f"{base}, sequential".strip(", ")

    @property
    def effect(self) -> float:
        return self.looks[-1].effect if self.looks else math.nan

    @property
    def se(self) -> float:
        return self.looks[-1].se if self.looks else math.nan

    @property
    def df(self) -> float:
        return self.looks[-1].df if self.looks else math.nan

    @property
    def n(self) -> int:
        return self.looks[-1].n if self.looks else 0

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.array([lk.effect for lk in self.looks]), np.array([lk.se for lk in self.looks]),
                np.array([lk.df for lk in self.looks]))

    def label_ps(self, expect: str, margin: float) -> dict[str, float]:
        e, s, d = self._arrays()
        ps = sequential_label_ps(e, s, d, margin, self.info)
        if expect != "close":
            ps.pop("not close", None)
        return {k: float(v) for k, v in ps.items() if math.isfinite(float(v))}

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """The repeated confidence intervals at `level` intersected over the looks (they hold jointly)."""
        from scipy.stats import norm, t

        e, s, d = self._arrays()
        c = critical_values(self.info, round(1 - level, 12))
        lo, hi = -math.inf, math.inf
        for ej, sj, dj, cj in zip(e, s, d, c):
            if not (np.isfinite(cj) and sj > 0 and dj > 0):
                continue
            ct = float(t.isf(norm.sf(cj), dj))
            lo, hi = max(lo, ej - ct * sj), min(hi, ej + ct * sj)
        if lo > hi:  # the looks disagree beyond their joint level: show the last look's
            ej, sj, dj, cj = e[-1], s[-1], d[-1], c[-1]
            ct = float(t.isf(norm.sf(cj), dj)) if np.isfinite(cj) else math.inf
            lo, hi = ej - ct * sj, ej + ct * sj
        return (lo if math.isfinite(lo) else math.nan, hi if math.isfinite(hi) else math.nan)

    def p_above(self, threshold: float) -> float:  # for callers that ask one side (power): the last look's
        return math.nan

    def p_below(self, threshold: float) -> float:
        return math.nan


# ---------------------------------------------------------------------------------------------- the loop's decision


@dataclass
class Design:
    """A recorded until-decided design: its parts (experiment, claim, part), the seed cap N and its looks (the
    finished runs at each look)."""

    experiment: str
    scale: str
    max_seeds: int
    family: frozenset[tuple[str, str, str]]
    looks: list[frozenset[str]] = field(default_factory=list)
    alpha: float = 0.05
    # the rates the loop added beyond a profile's edge: {"lr", "edge", "selector" (the arm), "part", "arm", ...}
    extensions: tuple[Mapping[str, Any], ...] = ()


@dataclass
class RoundDecision:
    stop: str  # "" (go on) | "decided" | "cannot be decided by more seeds" | "seed cap" | "budget" | "nothing to run"
    seeds: int  # seeds per arm the next round brings the undecided parts' arms to
    undecided: list[str]  # the parts still undecided
    arms: list[str]  # the arms that get seeds (keys given by the caller)
    message: str = ""


def next_round(parts: Sequence[Mapping[str, Any]], *, arm_seeds: Mapping[str, int], max_seeds: int,
               round_seeds: int, spent_hours: float, budget_hours: float | None,
               hours_per_run: float, runs_per_seed: Mapping[str, int] | None = None,
               arm_hours: Mapping[str, float] | None = None, unfinished_round: int | None = None) -> RoundDecision:
    """The until-decided loop's decision after a look. `parts`: the family's parts of this experiment, each
    {"key": str, "decided": bool, "arms": [arm keys], "blocked": why more seeds cannot decide it ('' if they
    can)}; `arm_seeds`: seeds each arm has finished; a round brings every arm of an undecided part that more
    seeds can decide to min(the most seeds among them + round_seeds, max_seeds); `runs_per_seed`: runs an arm
    trains per seed (its profile's learning rates; default 1); `arm_hours`: an arm's mean run-hours from its own
    finished runs, `hours_per_run` for an arm with none (the next round's cost is theirs, not every run's);
    `unfinished_round`: the seeds per arm of a recorded round whose runs did not all finish (a session that ended
    mid-round): the next round completes it, never goes past it because one arm got ahead. A part that cannot be
    decided by more seeds gets none, and every decision says so: the loop stops for it when it is the last undecided ("cannot be decided by
    more seeds"), never as if it were decided. Pure: no runs, no files."""
    open_ = [p for p in parts if not p.get("decided")]
    blocked = [p for p in open_ if p.get("blocked")]
    undecided = [p for p in open_ if not p.get("blocked")]
    names = [str(p["key"]) for p in undecided]
    note = "" if not blocked else \
        "; " + "; ".join(f"{p['key']}: {p['blocked']}" for p in blocked)
    if not undecided:
        if blocked:
            others = "every other part is decided" if len(blocked) < len(parts) else "no part is decided"
            return RoundDecision("cannot be decided by more seeds", 0, [str(p["key"]) for p in blocked], [],
                                 f"{others}{note}")
        return RoundDecision("decided", 0, [], [], "every part is decided")
    arms = sorted({a for p in undecided for a in p["arms"]})
    have = max((arm_seeds.get(a, 0) for a in arms), default=0)
    target = min(have + round_seeds, max_seeds)
    if unfinished_round and any(arm_seeds.get(a, 0) < unfinished_round for a in arms):
        target = min(unfinished_round, max_seeds)
    need = {a: max(0, target - arm_seeds.get(a, 0)) for a in arms}
    need = {a: k for a, k in need.items() if k > 0}
    if not need:
        return RoundDecision("seed cap", target, names, [],
                             f"{len(names)} part{'s' if len(names) != 1 else ''} undecided at the cap of "
                             f"{max_seeds} seeds per arm{note}")
    per_arm = {a: k * (runs_per_seed or {}).get(a, 1) for a, k in need.items()}
    new_runs = sum(per_arm.values())
    cost = sum(n * (arm_hours or {}).get(a, hours_per_run) for a, n in per_arm.items())
    if budget_hours is not None and spent_hours + cost > budget_hours:
        return RoundDecision("budget", target, names, [],
                             f"the next round ({new_runs} runs, about {cost:.2f} run-hours) would pass the budget "
                             f"of {budget_hours:g} run-hours ({spent_hours:.2f} spent){note}")
    return RoundDecision("", target, names, sorted(need),
                         f"{new_runs} run{'s' if new_runs != 1 else ''}: {len(need)} arm{'s' if len(need) != 1 else ''} "
                         f"to {target} seeds{note}")
