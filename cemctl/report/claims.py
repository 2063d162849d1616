"""Claims decided honestly (`cemctl claims`, and the claims table of every report).

    page = evaluate_page(runs, claims)        # runs: runs frame with `scale` (cemctl.report.frame + arms)
    page.parts, page.robustness, page.ladder  # one row per (claim part, scale); the same contrasts elsewhere; sizes
    table = evaluate_claims(runs, claims)     # page.parts
    verdicts = claim_verdicts(table)          # claims: ClaimSpec from the grids' [[claim]] tables

The plan, fixed before any number is seen (printed on every claims page; docs/claims.md says why):

- Arms. A part's selectors must each match exactly one arm (every config value but the seed) per
  setting (scale and model size); a selector matching two is a `PooledArms` refusal on that part's row
  (the other parts are evaluated), and the arms a part compares may differ only in the keys its
  selectors set differently. No two configurations are ever pooled into one cell.
- Three kinds of row. `fixed`: the arms at the rate the selectors pin, decided on the runs there are.
  `stage 1`: a part that chooses a rate per arm (`at = "own_optimum"`, `optimal_loss`, `lr_optimum`):
  each arm's rate by the grid's rule from its lr profile (`choose_rate`), and the contrast at those
  rates on the seeds that chose them, shown as exploratory and never decided (the seeds that chose a
  rate flatter it: the winner's curse). `stage 2`: the part of a confirmation grid (`[confirm]`,
  `cemctl confirm`): each arm at its registered rate, on seeds that chose nothing (an
  `lr_optimum`: both arms at the two chosen rates, the preference interaction); it takes the stage-1
  row's place, which stays beside it.
- Variance. Declared, else Welch (`cemctl.grid.claims.variance_model`); paired and pooled only when
  declared. Several sizes: the mean of the per-size effects (each size's own in the ladder).
- Decision. A part's 95% interval against 0 and its margin: `lower` / `higher` (it excludes 0),
  `close` (within +-margin), `not close` (wholly beyond it), else inconclusive; the verdict says what
  that means for the expectation (holds, contradicted: the opposite, or for a directional claim no
  difference as large as the margin; inconclusive; not run).
- Sequential parts. A part whose experiment was launched `--until-decided` is analysed over its
  recorded looks with the alpha spending of `cemctl.report.sequential`.
- Multiplicity. The step-down over the decisive rows' label hypotheses at one scale (family-wise error
  5%; `cemctl.report.sequential.step_down`); stage-1 rows, robustness rows and the ladder are outside
  the family.
- Robustness. The same contrast under another value of one key the part pins (and, for a part with a
  T >= 2 arm, the step size eta = 1 and 1/T, declared: a row "not run" says what to train), with its
  own interval; the part says when its label depends on it.
- Trend and convergence. Each run's validation-loss slope over the last third of its steps per 10% of
  its budget: the part's gap trend is the contrast of those slopes (Welch interval); the fastest arm's
  fall against the margin is the convergence flag.
- Ladder. A part with runs at two or more sizes: its gap at each size against log2 of the non-embedding
  parameters, with a weighted slope and its interval, and each gap as the compute a Llama baseline
  would need (`ladder`): directional, never a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from cem_core.errors import ConfigError
from cemctl.grid.claims import KIND_KEYS, LR, ClaimSpec, PartSpec, half_octave, profile_advice, variance_model
from cemctl.report.stats import (
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
SELECT_BY = "val_loss"  # stage 1 chooses on validation loss, the contrast is on test loss
EXPERIMENT = "experiment"  # the runs frame's experiments linking a run, joined by ', '
SEED = "train.seed"
SETTING = "model.size"
PARAMS = "params_non_embedding"
COMPUTE = "train_flops"
ALPHA = 0.05
MAX_POWER_SEEDS = 1000  # `--power` searches seed counts up to this
DECIDED = ("holds", "contradicted")
DECISIVE = ("lower", "higher", "close", "not close")
STEPS = {"model.attn_step_size": "model.attn_steps", "model.mlp_step_size": "model.mlp_steps"}


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
    values: dict[int, float]  # seed -> test loss
    run_ids: list[str]
    experiments: frozenset[str] = frozenset()  # the experiments (grids) whose plans link its runs
    seed_runs: dict[int, str] = field(default_factory=dict)  # seed -> run id
    val: dict[int, float] = field(default_factory=dict)  # seed -> validation loss (stage 1 chooses on it)
    params: float = math.nan  # non-embedding parameters
    compute: float = math.nan  # training FLOPs of one run

    @property
    def losses(self) -> list[float]:
        return [self.values[s] for s in sorted(self.values)]

    def only(self, seeds: Sequence[int]) -> "Arm":
        keep = set(seeds)
        return Arm(self.id, self.label, self.config, {s: v for s, v in self.values.items() if s in keep},
                   [self.seed_runs[s] for s in sorted(keep & set(self.seed_runs))], self.experiments,
                   {s: r for s, r in self.seed_runs.items() if s in keep},
                   {s: v for s, v in self.val.items() if s in keep}, self.params, self.compute)


def _num(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x if math.isfinite(x) else math.nan


def _arms(frame: "pd.DataFrame") -> list[Arm]:
    """The arms of runs-frame rows (`arm`, `arm_label`, the config keys, test and validation loss): each arm's config
    read once, from its first row; the runs' own numbers from a few columns."""
    from cem_core.arms import config_of

    out: dict[str, Arm] = {}
    if frame.empty:
        return []
    n = len(frame)

    def col(name: str) -> list[Any]:
        return frame[name].tolist() if name in frame.columns else [None] * n

    arms, seeds, ids, values, vals = col("arm"), col(SEED), col("run_id"), col(VALUE), col(SELECT_BY)
    for i in range(n):
        aid = str(arms[i])
        arm = out.get(aid)
        if arm is None:
            r = frame.iloc[i].to_dict()
            cfg = {k: v for k, v in config_of(r).items() if k != SEED}
            names = frozenset(x.strip() for x in str(r.get(EXPERIMENT) or "").split(",")
                              if x.strip() and str(r.get(EXPERIMENT)) != "nan")
            arm = out[aid] = Arm(aid, str(r["arm_label"]), cfg, {}, [], names, params=_num(r.get(PARAMS)),
                                 compute=_num(r.get(COMPUTE)))
        seed = int(seeds[i])
        arm.values[seed] = float(values[i])
        arm.run_ids.append(str(ids[i]))
        arm.seed_runs[seed] = str(ids[i])
        val = _num(vals[i])
        if math.isfinite(val):
            arm.val[seed] = val
    return list(out.values())


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
    """Per selector, its arms at this setting (one, or one per learning rate for an lr profile); None if one is
    missing. A profile's selectors are matched without their train.lr."""
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
                shown = " | ".join(a.label for a in same[:3]) + (f" | and {len(same) - 3} more" if len(same) > 3 else "")
                raise PooledArms(f"claims.{part.name}", f"arm selector {i + 1} matches {len(same)} arms at setting "
                                 f"{setting}{where}: {shown}; pin the keys that tell them apart")
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


# ---------------------------------------------------------------------------------------------- stage 1: the rate


@dataclass
class Choice:
    """One arm's rate chosen from its lr profile by the rule (stage 1)."""

    lr: float  # the chosen rate (interpolated: on the half-octave ladder, maybe not sampled)
    sampled: float  # the sampled rate nearest to it (where the exploratory contrast is made)
    edge: str  # '' | 'low' | 'high': the chosen rate is the profile's lowest / highest (it may lie beyond); 'both':
    # the arm ran at one rate
    rates: list[float]  # the profile's rates
    by: str  # what it was chosen by
    runner_up: float = math.nan  # the next best sampled rate
    gap: float = math.nan  # its mean validation loss above the chosen one's


def choose_rate(group: Sequence[Arm], rule: str = "best_sampled") -> Choice | None:
    """Stage 1's rule on one arm's profile (`group`: the arm at each rate). `best_sampled`: the rate of lowest mean
    validation loss among those with the arm's full seed count (`cemctl.report.lr_choice.choose`, the figures'
    rule); `interpolated`: the minimum of the Akima interpolant of those means in log(lr) (3 rates or more),
    rounded to the half-octave ladder. None without a finished run."""
    from cemctl.report.lr_choice import choose
    from cemctl.report.optimum import akima_optimum

    table = {float(a.config.get(LR) or 0): [(a.val.get(s), v) for s, v in a.values.items()] for a in group
             if a.values}
    if not table:
        return None
    lr, by, _, means = choose(table)  # type: ignore[arg-type]
    rates = sorted(table)
    others = sorted((m, r) for r, m in means.items() if r != lr)
    runner, gap = (others[0][1], others[0][0] - means[lr]) if others else (math.nan, math.nan)
    chosen, at_edge = lr, lr in (rates[0], rates[-1]) and len(rates) > 1
    if rule == "interpolated" and len(means) >= 3:
        lrs = sorted(means)
        opt = akima_optimum(lrs, [means[r] for r in lrs])
        chosen, at_edge = half_octave(opt.lr, 0), opt.at_edge
        by += ", interpolated (Akima) and put on the half-octave ladder"
    edge = ("low" if chosen <= rates[0] * (1 + 1e-9) else "high") if at_edge and len(rates) > 1 else ""
    if len(rates) == 1:
        edge = "both"  # one rate: no profile to choose from
    sampled = min(rates, key=lambda r: abs(math.log(r / chosen)))
    return Choice(chosen, sampled, edge, rates, by, runner, gap)


# ---------------------------------------------------------------------------------------------- one contrast


@dataclass
class Estimated:
    """A part's contrast (combined over the settings it has runs at), with each setting's own estimate."""

    est: Estimate | None
    runs: list[str] = field(default_factory=list)
    refs: list[float] = field(default_factory=list)  # the reference arm's loss per setting
    info: dict[str, Any] = field(default_factory=dict)
    why: str = ""  # why there is no estimate, when there is none
    arm_runs: list[list[str]] = field(default_factory=list)  # per arm: the runs the contrast used
    settings: dict[str, Estimate] = field(default_factory=dict)  # setting -> its estimate
    arm_sizes: dict[str, tuple[float, float]] = field(default_factory=dict)  # setting -> (params, compute)
    choices: dict[str, list[Choice]] = field(default_factory=dict)  # stage 1: per setting, each arm's choice


def _fixed(part: PartSpec, arms: list[Arm], model: str, coefs: Sequence[float] | None = None
           ) -> tuple[Estimate | None, float, dict[str, Any]]:
    coefs = tuple(coefs or part.coefs)
    ref_arm = arms[min(part.reference, len(arms) - 1)]
    ref = sum(ref_arm.losses) / len(ref_arm.losses)
    info: dict[str, Any] = {"arm_sds": [_sd(a.losses) for a in arms]}
    if model == "paired":
        common = sorted(set.intersection(*[set(a.values) for a in arms]))
        diffs = [sum(c * a.values[s] for c, a in zip(coefs, arms)) for s in common]
        info["paired_sd"] = _sd(diffs)
        return (paired_estimate(diffs) if len(diffs) >= 2 else None), ref, info
    if min(len(a.values) for a in arms) < 2:
        return None, ref, info
    groups = [(c, a.losses) for c, a in zip(coefs, arms)]
    if model == "pooled":
        s2, df = pooled_variance([a.losses for a in arms])
        info.update(pooled_sd=math.sqrt(s2) if df else math.nan, stratum_arms=sum(len(a.values) >= 2 for a in arms))
        if df > 0:
            return pooled_estimate(groups, s2, df), ref, info
    return welch_estimate(groups), ref, info


def _combine(estimates: list[Estimate]) -> Estimate:
    """The mean of per-setting estimates (independent settings)."""
    if len(estimates) == 1:
        return estimates[0]
    se = math.sqrt(sum(e.se ** 2 for e in estimates)) / len(estimates)
    return TEstimate(sum(e.effect for e in estimates) / len(estimates), se, min(e.df for e in estimates),
                     estimates[0].method, min(e.n for e in estimates), _open(estimates))


def _open(estimates: Sequence[Any]) -> str:
    sides = {getattr(e, "censored", "") for e in estimates} - {""}
    return "both" if "both" in sides or {"low", "high"} <= sides else (sides.pop() if sides else "")


def estimate_part(part: PartSpec, arms_by: Mapping[str, list[Arm]], *, stage: str, scale: str = "",
                  selectors: Sequence[dict[str, Any]] | None = None) -> Estimated:
    """The part's contrast at every setting with runs. `stage`: 'fixed' (the selectors' rate), 'stage 1' (each arm
    at the rate its profile chooses, on the seeds that chose it: exploratory) or 'stage 2' (a confirmation part:
    each arm at its registered rate; `arms_by` holds only fresh seeds)."""
    model, _ = variance_model(part)
    out = Estimated(None)
    ests: list[Estimate] = []
    for s, arms in arms_by.items():
        sel = selectors
        if stage == "stage 2":
            sel = part.selectors_at(s) if selectors is None else selectors
            if sel is None:
                continue
        where = f"{scale or '-'}/{s}"
        chosen = _select(part, arms, where, sweep=stage == "stage 1", selectors=sel)
        if chosen is None:
            continue
        if stage == "stage 1":
            choices = [choose_rate(group, part.choose) for group in chosen]
            if any(c is None for c in choices):
                continue
            at = [next(a for a in group if math.isclose(float(a.config.get(LR) or 0), c.sampled, rel_tol=1e-9))  # type: ignore[union-attr]
                  for group, c in zip(chosen, choices)]  # type: ignore[union-attr]
            common = sorted(set.intersection(*[set(a.values) for a in at]))
            at = [a.only(common) if model == "paired" else a for a in at]
            out.choices[s] = choices  # type: ignore[assignment]
            if part.statistic == "lr_optimum":
                c1, c2 = choices
                est: Estimate | None = TEstimate(math.log2(c1.lr / c2.lr), math.nan, 0, "chosen rates",  # type: ignore[union-attr]
                                                 min(len(a.values) for a in at))
                ref = math.nan
                info: dict[str, Any] = {}
            else:
                est, ref, info = _fixed(part, at, model)
                if est is not None:
                    # an arm at an edge of its profile may do better beyond it: its term of the contrast could be
                    # lower (a positive coefficient: open below) or higher (negative: open above)
                    sides = {("low" if coef > 0 else "high") if c.edge else ""  # type: ignore[union-attr]
                             for c, coef in zip(choices, part.coefs)}
                    est.censored = _open([TEstimate(0, 0, 0, "", 0, x) for x in sides])
            used = [list(a.run_ids) for a in at]
        else:
            arms_at = [group[0] for group in chosen]
            est, ref, info = _fixed(part, arms_at, model)
            used = [list(a.run_ids) for a in arms_at]
        if est is None:
            out.why = out.why or "fewer than two finished seeds in an arm"
            continue
        out.settings[s] = est
        ref_arm = (at if stage == "stage 1" else [g[0] for g in chosen])[min(part.reference, len(chosen) - 1)]
        out.arm_sizes[s] = (ref_arm.params, ref_arm.compute)
        if stage == "stage 2" and part.confirm is not None and s in part.confirm.ladder:
            continue  # a rung at a transferred rate: the ladder's, never the decision's
        ests.append(est)
        out.runs += [r for group in used for r in group]
        out.refs.append(ref)
        out.info = info
        out.arm_runs = [a + b for a, b in zip(out.arm_runs, used)] if out.arm_runs else used
    if ests:
        out.est, out.why = _combine(ests), ""
        out.info["model"] = model
    elif not out.why:
        out.why = "no runs" if not out.runs else "not enough finished seeds"
    return out


def _margin(part: PartSpec, refs: Sequence[float]) -> float:
    if part.margin.relative:
        refs = [r for r in refs if math.isfinite(r)]
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
    """Seeds per arm for 80% power at the margin: at the part's adjusted level, at 5%, and at the ends of the 80%
    confidence interval of the s.d. the estimate rests on (optimistic, pessimistic)."""
    none = {"seeds_for_80pct_power": None, "seeds_unadjusted": None, "seeds_low": None, "seeds_high": None}
    if est is None or not margin > 0 or not math.isfinite(margin) or not math.isfinite(getattr(est, "se", math.nan)):
        return none
    model = info.get("model", "welch")
    df = float(getattr(est, "df", math.nan))
    if model == "paired":
        sd, kw = info.get("paired_sd", math.nan), {"method": "paired t"}
    elif model == "pooled":
        sd, kw = info.get("pooled_sd", math.nan), {"method": "pooled t", "coefs": tuple(coefs),  # type: ignore[dict-item]
                                                   "stratum_arms": int(info.get("stratum_arms", len(coefs)))}  # type: ignore[dict-item]
    else:
        sds = [float(s) for s in info.get("arm_sds", [])]
        if not sds or not all(math.isfinite(s) for s in sds):
            return none
        sd, kw = 1.0, {"method": "Welch", "coefs": tuple(coefs)}  # type: ignore[dict-item]
    if not math.isfinite(sd):
        return none
    lo, hi = sd_range(sd, df) if math.isfinite(df) and df > 0 else (math.nan, math.nan)

    def need(scale: float, alpha: float) -> int | None:
        if not math.isfinite(scale):
            return None
        if kw["method"] == "Welch":
            return seeds_for_power(max_n=MAX_POWER_SEEDS, expect=expect, margin=margin, alpha=alpha,
                                   arm_sds=[s * scale for s in info["arm_sds"]], **kw)  # type: ignore[arg-type]
        return seeds_for_power(max_n=MAX_POWER_SEEDS, expect=expect, margin=margin, alpha=alpha, sd=sd * scale, **kw)  # type: ignore[arg-type]

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


def gap_trend(arm_runs: Sequence[Sequence[str]], slopes: Mapping[str, float] | None, coefs: Sequence[float]
              ) -> tuple[float, float, float]:
    """The trend of a part's gap over the last third of training, per 10% of the budget: the contrast of its runs'
    validation-loss slopes (each arm's mean), with a Welch 95% interval (NaN without two slopes per arm).
    Negative: the gap shrinks toward arm 1 (arm 1's loss falls faster)."""
    if not slopes or len(arm_runs) != len(coefs):
        return math.nan, math.nan, math.nan
    groups = []
    for c, runs in zip(coefs, arm_runs):
        known = [slopes[r] for r in dict.fromkeys(runs) if r in slopes and math.isfinite(slopes[r])]
        if len(known) < 2:
            return math.nan, math.nan, math.nan
        groups.append((c, known))
    est = welch_estimate(groups)
    lo, hi = est.interval(1 - ALPHA)
    return est.effect, lo, hi


# ---------------------------------------------------------------------------------------------- robustness


def _variants(part: PartSpec) -> list[str]:
    """The keys whose other values make robustness rows: pinned to one value by every selector that names them
    (a sublayer's settings pinned on its CEM arms only count), not the seed, not a sublayer kind, not a step size
    (`step_size_selectors` sets it per arm), and not the rate of a part whose stage 1 or 2 sets each arm's rate."""
    keys = []
    for k in sorted({k for sel in part.arms for k in sel} - {SEED} - set(KIND_KEYS) - set(STEPS)):
        if k == LR and (part.chooses or part.rates is not None):
            continue
        if len({repr(sel[k]) for sel in part.arms if k in sel}) == 1:
            keys.append(k)
    return keys


def step_size_selectors(part: PartSpec) -> tuple[str, str, list[dict[str, Any]]] | None:
    """A part with a T >= 2 arm: (key, '1/T' | '1', its selectors) at the other step size of eta = 1 and 1/T (each
    arm at 1/T where the part is at 1, at 1 where it is at 1/T); None without such an arm or where the selectors do
    not name the step size and its steps."""
    for size_key, steps_key in STEPS.items():
        named = [sel for sel in part.arms if size_key in sel and steps_key in sel]
        if not named or max(int(sel[steps_key]) for sel in named) < 2:
            continue
        at_one = all(math.isclose(float(sel[size_key]), 1.0) for sel in named)
        out = []
        for sel in part.arms:
            if size_key in sel and steps_key in sel:
                t = int(sel[steps_key])
                sel = dict(sel, **{size_key: (1.0 / t if at_one else 1.0)})
            out.append(sel)
        return size_key, "1/T" if at_one else "1", out
    return None


def robustness(part: PartSpec, arms_by: Mapping[str, list[Arm]], *, stage: str, scale: str, margin: float
               ) -> list[dict[str, Any]]:
    """The part's contrast under every other value of one key it pins but does not contrast, where the runs hold
    one arm per selector, and at the other step size of a T >= 2 arm (a 'not run' row when no run has it): a row
    each (own 95% interval, unadjusted label). A stage-1 part whose selectors pin one rate gives the fixed contrast
    there too (the paper's protocol: every arm at the baseline's rate). `arms_by`: the runs the row's stage uses
    (stage 2: the fresh seeds)."""
    import dataclasses

    def estimate(selectors: list[dict[str, Any]], how: str) -> Estimated:
        if how == "stage 2":
            return estimate_part(dataclasses.replace(part, arms=selectors), arms_by, stage=how, scale=scale)
        return estimate_part(part, arms_by, stage=how, scale=scale, selectors=selectors)

    def row(key: str, value: Any, selectors: list[dict[str, Any]], how: str) -> dict[str, Any] | None:
        try:
            e = estimate(selectors, how)
        except PooledArms:
            return None
        if e.est is None or not math.isfinite(e.est.effect):
            return None
        d = decide(e.est, part.expect, margin if math.isfinite(margin) else 0.0, ALPHA)
        low, high = _interval(e.est, 1 - ALPHA)
        return {"key": key, "value": value, "effect": e.est.effect, "ci95_low": low, "ci95_high": high,
                "method": e.est.method, "n": e.est.n, "label": d.label, "runs": ",".join(sorted(set(e.runs)))}

    rows: list[dict[str, Any]] = []
    if part.statistic == "lr_optimum" and stage != "stage 2":
        return rows
    present = [a.config for arms in arms_by.values() for a in arms]
    for key in _variants(part):
        base = next(sel[key] for sel in part.arms if key in sel)
        values = sorted({v for cfg in present if (v := cfg.get(key)) is not None and str(v) != str(base)}, key=str)
        for value in values:
            r = row(key, value, [dict(sel, **{key: value}) if key in sel else dict(sel) for sel in part.arms], stage)
            if r is not None:
                rows.append(r)
    if stage == "stage 1" and part.fixed_lr is not None:
        r = row(LR, part.fixed_lr, [dict(sel) for sel in part.arms], "fixed")
        if r is not None:
            r["value"] = f"{part.fixed_lr:g} (every arm)"
            rows.append(r)
    eta = step_size_selectors(part)
    if eta is not None:
        key, value, selectors = eta
        r = row(key, value, selectors, stage)
        rows.append(r if r is not None else {"key": key, "value": value, "effect": math.nan, "ci95_low": math.nan,
                                             "ci95_high": math.nan, "method": "", "n": 0, "label": "not run",
                                             "runs": ""})
    return rows


def sign_summary(effect: float, label: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """One line: does the part's label hold in the other settings (and the step size of a T >= 2 arm)?"""
    if not math.isfinite(effect):
        return ""
    run = [r for r in rows if r["label"] != "not run"]
    out = []
    if run:
        sign = 1 if effect > 0 else -1
        same = [r for r in run if (r["effect"] > 0) == (sign > 0)]
        text = f"sign {'+' if sign > 0 else '-'} in {len(same) + 1} of {len(run) + 1} settings"
        if len(same) < len(run):
            text += "; other sign: " + ", ".join(f"{_short(r['key'])}={r['value']} {r['effect']:+.3f}"
                                                 for r in run if r not in same)
        out.append(text)
    for r in rows:
        if r["key"] in STEPS:
            if r["label"] == "not run":
                out.append(f"{_short(r['key'])}={r['value']} not run")
            elif label in DECISIVE and r["label"] != label:
                out.append(f"depends on the step size: {_short(r['key'])}={r['value']} reads {r['label']}")
    return "; ".join(out)


def _short(key: str) -> str:
    return key.split(".")[-1]


# ---------------------------------------------------------------------------------------------- the ladder


def llama_curve(arms_by: Mapping[str, list[Arm]]) -> tuple[float, float, int] | None:
    """(intercept, slope in nats per doubling of training compute, sizes) of the Llama baseline's test loss against
    log2 of its training FLOPs: at each size its best arm (the lowest mean validation loss, as stage 1 chooses),
    a least-squares line over the sizes; None with fewer than two sizes."""
    points = []
    for arms in arms_by.values():
        llama = [a for a in arms if a.config.get("model.attention") == "llama" and a.config.get("model.mlp") == "llama"
                 and a.values and math.isfinite(a.compute) and a.compute > 0]
        if not llama:
            continue

        def key(a: Arm) -> float:
            vals = list(a.val.values()) or list(a.values.values())
            return sum(vals) / len(vals)

        best = min(llama, key=key)
        points.append((math.log2(best.compute), sum(best.losses) / len(best.losses)))
    xs = {round(x, 6) for x, _ in points}
    if len(xs) < 2:
        return None
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope, len(xs)


def ladder_slope(points: Sequence[tuple[float, TEstimate]]) -> tuple[float, float, float, float]:
    """(slope, se, df, 95% half-width) of per-size gaps against log2 of the parameters, weighted by 1/se^2; df by
    Satterthwaite over the sizes' own df (two sizes: the difference of the gaps over the doublings between them)."""
    from cemctl.report.tdist import t_quantile

    w = [1.0 / e.se ** 2 for _, e in points]
    sw = sum(w)
    mx = sum(wi * x for wi, (x, _) in zip(w, points)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, (x, _) in zip(w, points))
    if not sxx > 0:
        return math.nan, math.nan, math.nan, math.nan
    c = [wi * (x - mx) / sxx for wi, (x, _) in zip(w, points)]
    slope = sum(ci * e.effect for ci, (_, e) in zip(c, points))
    terms = [ci * ci * e.se ** 2 for ci, (_, e) in zip(c, points)]
    var = sum(terms)
    df = var ** 2 / sum(t * t / e.df for t, (_, e) in zip(terms, points) if e.df > 0)
    half = t_quantile(0.975, df) * math.sqrt(var) if df > 0 else math.nan
    return slope, math.sqrt(var), df, half


def compute_equivalent(gap: float, low: float, high: float, curve: tuple[float, float, int] | None
                       ) -> tuple[float, float, float]:
    """A gap in nats as the multiple of its training compute at which the Llama baseline's loss would be as much
    higher (> 1: the arm is worth more compute than it used; < 1: less), with the ends of the gap's interval
    (the curve's own uncertainty is not in it); NaN without a falling curve."""
    if curve is None or not curve[1] < 0 or not math.isfinite(gap):
        return math.nan, math.nan, math.nan

    def mult(g: float) -> float:
        return 2 ** (g / curve[1]) if math.isfinite(g) else math.nan

    ends = sorted(m for m in (mult(low), mult(high)))
    return mult(gap), ends[0], ends[1]


def ladder_rows(claim: ClaimSpec, part: PartSpec, scale: str, prim: Estimated, stage: str,
                curve: tuple[float, float, int] | None) -> list[dict[str, Any]]:
    """One row per size of a part measured at two or more (nats only): the gap, its interval, the size's
    non-embedding parameters and the Llama-compute equivalent; the slope per doubling of parameters on each."""
    sizes = [(s, e) for s, e in prim.settings.items() if isinstance(e, TEstimate) and math.isfinite(e.se)
             and e.se > 0 and math.isfinite(prim.arm_sizes.get(s, (math.nan,))[0])]
    if len(sizes) < 2 or part.unit != "nats":
        return []
    points = [(math.log2(prim.arm_sizes[s][0]), e) for s, e in sizes]
    slope, se, df, half = ladder_slope(points)
    rows = []
    ladder = part.confirm.ladder if stage == "stage 2" and part.confirm is not None else ()
    for s, e in sorted(sizes, key=lambda se_: prim.arm_sizes[se_[0]][0]):
        lo, hi = _interval(e, 1 - ALPHA)
        mult, mlo, mhi = compute_equivalent(e.effect, lo, hi, curve)
        rows.append({"claim": claim.id, "part": part.name, "scale": scale, "stage": stage, "size": s,
                     "params_non_embedding": prim.arm_sizes[s][0], "effect": e.effect, "ci95_low": lo,
                     "ci95_high": hi, "n": e.n, "compute_x": mult, "compute_x_low": mlo, "compute_x_high": mhi,
                     "slope_per_doubling": slope, "slope_low": slope - half, "slope_high": slope + half,
                     "slope_df": df, "llama_per_compute_doubling": curve[1] if curve is not None else math.nan,
                     "rate": f"transferred ({part.confirm.transfer})" if s in ladder and part.confirm else "chosen"})
    return rows


# ---------------------------------------------------------------------------------------------- numbers as text


def decimals(effect: float, low: float, high: float) -> int:
    """The decimals an effect supports: two significant digits of its interval's half-width (the distance to the
    finite end of an interval open on one side); three significant digits of the effect without an interval."""
    if math.isnan(low) or math.isnan(high):
        low = high = math.nan
    ends = [abs(x - effect) for x in (low, high) if math.isfinite(x)]
    if math.isfinite(low) and math.isfinite(high):
        ends = [(high - low) / 2]
    h = max(ends) if ends else abs(effect)
    if not (math.isfinite(h) and h > 0):
        return 3
    return max(0, min(6, (1 if ends else 2) - math.floor(math.log10(h))))


def effect_text(effect: float, low: float = math.nan, high: float = math.nan, unit: str = "nats") -> str:
    """'+0.068 [+0.041, +0.094]', rounded to what the interval supports; an interval open on a side is written
    open ('(-inf, +0.094]'); learning-rate optima in octaves on the ladder's half-octave steps."""
    if not math.isfinite(effect):
        return "not run"
    if unit == "log2(lr)" and not (math.isfinite(low) or math.isfinite(high)):
        return f"{effect:+.1f} octaves"
    k = decimals(effect, low, high)
    text = f"{effect:+.{k}f}"
    if math.isnan(low) or math.isnan(high):
        return text
    lo = "(-inf" if low == -math.inf else f"[{low:+.{k}f}"
    hi = "+inf)" if high == math.inf else f"{high:+.{k}f}]"
    return f"{text} {lo}, {hi}"


# ---------------------------------------------------------------------------------------------- the page


@dataclass
class Page:
    parts: "pd.DataFrame"  # one row per (part, scale)
    robustness: "pd.DataFrame"  # one row per (part, scale, other setting of one key)
    ladder: "pd.DataFrame | None" = None  # one row per (part, scale, size) of a part at two sizes or more


def _sequential(part: PartSpec, current: Estimated, design: "Design", look_arms: list[dict[str, list[Arm]]], *,
                stage: str, scale: str) -> Estimate | None:
    """The part over the design's looks (and the runs there are now, when they add seeds)."""
    from cemctl.report.sequential import Look, SeqEstimate

    if not isinstance(current.est, TEstimate):
        return None
    looks: list[Look] = []
    estimates = []
    for arms_by in look_arms:
        try:
            estimates.append(estimate_part(part, arms_by, stage=stage, scale=scale).est)
        except PooledArms:
            continue
    for e in [*estimates, current.est]:
        if not (isinstance(e, TEstimate) and math.isfinite(e.se) and e.se > 0):
            continue
        if not looks or e.n > looks[-1].n:
            looks.append(Look(e.effect, e.se, e.df, e.n, e.method))
    if not looks:
        return None
    return SeqEstimate(looks, design.max_seeds)


def _rates_text(prim: Estimated, part: PartSpec, stage: str) -> str:
    """Each arm's rate the primary row used ('0.0014 / 0.004'; per size where they differ)."""
    if stage == "stage 1":
        per = [" / ".join(f"{c.lr:.2g}" for c in choices) for choices in prim.choices.values()]
    elif stage == "stage 2" and part.rates is not None:
        per = [" / ".join(f"{r:.2g}" for r in rates) for _, rates in sorted(part.rates.items())]
    else:
        return f"{part.fixed_lr:g}" if part.fixed_lr is not None else ""
    return "; ".join(dict.fromkeys(per))


def _advice(prim: Estimated) -> str:
    out = []
    for choices in prim.choices.values():
        for k, c in enumerate(choices):
            if c.edge:
                add = profile_advice(c.rates, low_edge=c.edge in ("low", "both"), high_edge=c.edge in ("high", "both"))
                where = "its only rate" if c.edge == "both" else \
                    f"the {'lowest' if c.edge == 'low' else 'highest'} of its profile"
                out.append(f"arm {k + 1}'s rate {c.lr:g} is {where}: extend the profile with train.lr = "
                           f"{', '.join(f'{v:g}' for v in add)}")
    return "; ".join(dict.fromkeys(out))


def _fresh_arms(frame: "pd.DataFrame", settings: Sequence[str], exclude: Sequence[int] = (),
                only: Sequence[int] | None = None) -> dict[str, list[Arm]]:
    """{setting: its arms} of the runs, without the seeds in `exclude` (stage 2: those that chose the rates) or with
    only those in `only` (stage 1 beside its confirmation: never the fresh seeds)."""
    if frame.empty:
        return {s: [] for s in settings}
    seeds = frame[SEED].astype(int)
    mask = ~seeds.isin(list(exclude)) if exclude else seeds == seeds
    if only is not None:
        mask &= seeds.isin(list(only))
    kept = frame[mask]
    size = kept[SETTING].astype(str) if SETTING in kept.columns else None
    return {s: _arms(kept[size == s] if size is not None else kept) for s in settings}


def evaluate_page(runs: "pd.DataFrame", claims: Sequence[ClaimSpec], *, scales: Sequence[str] | None = None,
                  power: bool = False,
                  slopes: "Mapping[str, float] | Callable[[list[str]], Mapping[str, float]] | None" = None,
                  declared: Mapping[tuple[str, str, str], str] | None = None,
                  designs: Sequence["Design"] = (), seed: int = 0) -> Page:
    """Every part at every scale: the primary row (stage 2 where a confirmation grid declares the part, else the
    part's fixed or stage-1 contrast) unadjusted and adjusted, stage 1 beside a confirmed part, robustness rows,
    the gap's trend and convergence (`slopes`: run id -> change of the validation loss per 10% of the budget over
    the last third, or a function of the run ids the rows used that returns it), the registration label (`declared`: (experiment, claim, part) -> label), the group-sequential
    analysis of parts of an experiment launched `--until-decided` (`designs`), and the size ladder. A part that
    cannot be evaluated (a selector matching two arms) says why on its own row; the others are evaluated."""
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
    ladder: list[dict[str, Any]] = []
    for scale in present:
        at = done[done["scale"].astype(str) == scale]
        settings = sorted(set(at[SETTING].astype(str))) if SETTING in at.columns and not at.empty else []
        cache: dict[Any, dict[str, list[Arm]]] = {}

        def arms_of(frame: "pd.DataFrame", exclude: Sequence[int] = (), key: Any = None,
                    only: Sequence[int] | None = None) -> dict[str, list[Arm]]:
            if key is not None and key in cache:
                return cache[key]
            out = _fresh_arms(frame, settings, exclude, only)
            if key is not None:
                cache[key] = out
            return out

        arms_by = arms_of(at, key="all")
        curve = llama_curve(arms_by)
        scale_designs = [d for d in designs if d.scale == scale]
        family = []
        for claim in claims:
            for part in claim.parts:
                rows.append(_part_row(claim, part, scale, at, arms_by, arms_of, scale_designs, declared,
                                      robust_rows, ladder, curve, power))
                family.append(len(rows) - 1)
        _adjust(rows, family, power)
    _trends(rows, slopes)
    parts = pd.DataFrame(rows)
    if power and not parts.empty and "seeds_for_80pct_power" in parts.columns:
        parts["seeds_for_80pct_power"] = parts["seeds_for_80pct_power"].astype(object)
    robust = pd.DataFrame(robust_rows, columns=["claim", "part", "scale", "key", "value", "effect", "ci95_low",
                                                "ci95_high", "method", "n", "label", "runs"])
    return Page(parts, robust, pd.DataFrame(ladder))


def _part_row(claim: ClaimSpec, part: PartSpec, scale: str, at: "pd.DataFrame", arms_by: dict[str, list[Arm]],
              arms_of: Callable[..., dict[str, list[Arm]]], designs: Sequence["Design"],
              declared: Mapping[tuple[str, str, str], str] | None,
              robust_rows: list[dict[str, Any]], ladder: list[dict[str, Any]],
              curve: tuple[float, float, int] | None, power: bool) -> dict[str, Any]:
    source = part.source or claim.source
    confirm = part.confirmation if part.rates is None else part
    primary = confirm if confirm is not None else part
    psource = primary.source or source
    stage = "stage 2" if confirm is not None else ("stage 1" if part.chooses else "fixed")
    row: dict[str, Any] = {
        "claim": claim.id, "statement": claim.statement, "part": part.name, "scale": scale, "experiment": source,
        "statistic": part.statistic, "stage": stage, "expect": part.expect, "unit": primary.unit,
        "margin_rule": primary.margin.describe(primary.unit), "confirmed_by": confirm.source if confirm else "",
        "declared": (declared or {}).get((psource, claim.id, part.name), ""),
    }
    model, why = variance_model(primary)
    row.update(variance=model, variance_rule=why)
    pool, seeds = arms_by, ()
    if stage == "stage 2":
        seeds = tuple(confirm.confirm.stage1_seeds) if confirm is not None and confirm.confirm else ()  # type: ignore[assignment]
        pool = arms_of(at, seeds, key=("fresh", seeds))
    try:
        prim = estimate_part(primary, pool, stage=stage, scale=scale)
        first = estimate_part(part, arms_of(at, only=seeds, key=("stage 1", seeds)),
                              stage="stage 1" if part.chooses else "fixed", scale=scale) \
            if stage == "stage 2" and part.rates is None else None
    except PooledArms as e:
        why = e.message if hasattr(e, "message") else str(e)
        prim, first = Estimated(None, why=why), None
        row["error"] = why
    design = next((d for d in designs if (psource, claim.id, part.name) in d.family), None)
    sequential = ""
    if design is not None and prim.est is not None and stage != "stage 1":
        seq = _sequential(primary, prim, design,
                          [arms_of(at[at["run_id"].isin(ids)], seeds) for ids in design.looks], stage=stage,
                          scale=scale)
        if seq is not None:
            prim.est = seq
            sequential = f"{len(seq.looks)} look{'s' if len(seq.looks) != 1 else ''} at " + \
                ", ".join(str(lk.n) for lk in seq.looks) + f" of {design.max_seeds} seeds"
    est = prim.est
    margin = _margin(primary, prim.refs)
    use_margin = margin if math.isfinite(margin) else 0.0
    d = decide(est, part.expect, use_margin, ALPHA)
    low, high = _interval(est, 1 - ALPHA) if est is not None else (math.nan, math.nan)
    decisive = stage != "stage 1" and est is not None and math.isfinite(d.p)
    try:
        vrows = robustness(primary, pool, stage=stage, scale=scale, margin=margin)
    except PooledArms:
        vrows = []
    for r in vrows:
        robust_rows.append({"claim": claim.id, "part": part.name, "scale": scale, **r})
    ladder += ladder_rows(claim, primary, scale, prim, stage, curve)
    p_of = min(d.candidates, key=d.candidates.get) if d.candidates else ""  # type: ignore[arg-type]
    row.update({
        "model": ", ".join(f"{size} {p / 1e6:.2g}M" if math.isfinite(p) else size
                           for size, (p, _) in sorted(prim.arm_sizes.items(), key=lambda kv: kv[1][0])
                           if not (primary.confirm is not None and size in primary.confirm.ladder)),
        "margin": margin, "rates": _rates_text(prim, primary, stage) if est is not None else "",
        "effect": est.effect if est is not None else math.nan, "ci95_low": low, "ci95_high": high,
        "method": est.method if est is not None else "", "df": getattr(est, "df", math.nan),
        "n": est.n if est is not None else 0, "sizes": len(prim.settings), "p": d.p if decisive else math.nan,
        "p_of": p_of if decisive else "", "label": d.label, "verdict": d.verdict if decisive else (
            "not run" if est is None else "inconclusive"),
        "decisive": decisive, "open": getattr(est, "censored", "") if est is not None else "",
        "runs": ",".join(sorted(set(prim.runs))), "why_not_run": prim.why if est is None else "",
        "advice": _advice(prim) if stage == "stage 1" else (_advice(first) if first is not None else ""),
        "robustness": sign_summary(est.effect if est is not None else math.nan, d.label, vrows),
        "_arm_runs": prim.arm_runs,
        "sequential": sequential,
    })
    if stage == "stage 1" and est is not None:
        row["why_exploratory"] = "rates chosen on these seeds"
    if first is not None and first.est is not None:
        fd = decide(first.est, part.expect, use_margin, ALPHA)
        flo, fhi = _interval(first.est, 1 - ALPHA)
        row.update(stage1_effect=first.est.effect, stage1_low=flo, stage1_high=fhi, stage1_label=fd.label,
                   stage1_rates=_rates_text(first, part, "stage 1" if part.chooses else "fixed"))
    row["_ps"] = dict(d.candidates) if decisive else {}
    row["_est"], row["_info"], row["_coefs"], row["_coefs_trend"] = est, prim.info, primary.coefs, primary.coefs
    return row


def _trends(rows: list[dict[str, Any]], slopes: "Mapping[str, float] | Callable[[list[str]], Mapping[str, float]] | None"
            ) -> None:
    """Each row's convergence and gap trend from its runs' slopes (`slopes` a callable: asked once, for the runs the
    rows used, not for every run there is)."""
    used = sorted({r for row in rows for runs in row["_arm_runs"] for r in runs})
    if callable(slopes):
        slopes = slopes(used) if used else {}
    for row in rows:
        arm_runs = row.pop("_arm_runs")
        nats = row["unit"] == "nats"
        fall, conv = convergence(arm_runs, slopes, row["margin"] if nats else math.nan)
        trend, tlo, thi = gap_trend(arm_runs, slopes, row.pop("_coefs_trend")) if nats else (math.nan,) * 3
        row.update(fall_per_10pct=fall, convergence=conv, trend=trend, trend_low=tlo, trend_high=thi)


def _adjust(rows: list[dict[str, Any]], family: list[int], power: bool) -> None:
    """The adjusted columns of one scale's rows: the step-down over the decisive rows' label hypotheses
    (`cemctl.report.sequential.step_down`), each part's label at the level it was decided at."""
    import numpy as np

    from cemctl.report.sequential import LABELS, step_down
    from cemctl.report.stats import CONTRADICTS, HOLDS

    live = [i for i in family if rows[i]["decisive"] and rows[i]["_ps"]]
    result: dict[int, tuple[bool, str, float, float]] = {}
    if live:
        ps = {lab: np.array([rows[i]["_ps"].get(lab, np.nan) for i in live]) for lab in LABELS}
        margins = [rows[i]["margin"] if math.isfinite(rows[i]["margin"]) else 0.0 for i in live]
        decided, labels, adjusted, levels = step_down(ps, [rows[i]["expect"] for i in live], margins, ALPHA)
        result = {i: (bool(dd), str(lab), float(pa), float(lv))
                  for i, dd, lab, pa, lv in zip(live, decided, labels, adjusted, levels)}
    for i in family:
        row = rows[i]
        row.pop("_ps", None)
        est, info, coefs = row.pop("_est"), row.pop("_info"), row.pop("_coefs")
        decided_, label, p_adj, level = result.get(i, (False, "", math.nan, math.nan))
        if power:
            row.update(power_needs(est, info, row["expect"], row["margin"], coefs,
                                   level if math.isfinite(level) else ALPHA / max(1, len(live))))
        if i not in result:
            row.update(p_holm=math.nan, holm_low=math.nan, holm_high=math.nan, holm_level=math.nan,
                       label_holm="not run" if row["verdict"] == "not run" else "inconclusive",
                       verdict_holm=row["verdict"])
            continue
        low, high = _interval(est, 1 - level)
        if decided_:
            verdict = "holds" if label in HOLDS[row["expect"]] else \
                ("contradicted" if label in CONTRADICTS[row["expect"]] else "inconclusive")
        else:
            label, verdict = "inconclusive", "inconclusive"
        row.update(p_holm=p_adj, holm_low=low, holm_high=high, label_holm=label, verdict_holm=verdict,
                   holm_level=level)


def evaluate_claims(runs: "pd.DataFrame", claims: Sequence[ClaimSpec], *, scales: Sequence[str] | None = None,
                    power: bool = False, **kw: Any) -> "pd.DataFrame":
    """One row per (claim part, scale): the estimate and interval, unadjusted and adjusted decisions
    (`evaluate_page(...).parts`)."""
    return evaluate_page(runs, claims, scales=scales, power=power, **kw).parts


def claim_verdicts(table: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (claim, scale) from the adjusted part verdicts: holds (every part holds), contradicted
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
