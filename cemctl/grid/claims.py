"""Claims declared in a grid file (`[[claim]]`): what `cemctl claims` tests, as data (`cemctl plan` checks them).

    [[claim]]
    id = "3"
    statement = "T=2 beats T=1 for both CEM sublayers"
    [[claim.part]]
    name = "CEM attention T=2 - T=1 (diag)"
    statistic = "difference"          # difference | interaction | lr_optimum | optimal_loss
    arms = [{ "model.attn_steps" = 2, ... }, { "model.attn_steps" = 1, ... }]
    expect = "lower"                  # lower | higher | close (the statistic's sign, or within +-margin)
    margin = "1%"                     # % of the reference arm's loss, a number in the statistic's unit,
                                      # or "0.5 octave" for an lr_optimum
    at = "own_optimum"                # each arm at the rate stage 1 chooses from its lr profile (the runs
                                      # matching the selector without train.lr) | "fixed" (default: the
                                      # selectors' train.lr)
    choose = "best_sampled"           # stage 1's rule: the sampled rate of lowest mean validation loss
                                      # (default) | "interpolated" (the Akima optimum, on the rate ladder)
    variance = "paired"               # paired | pooled | welch (default: welch)
    changes = ["model.attn_steps", "model.attn_step_size"]   # a part whose arms differ in more than one key
                                      # (an interaction: two) must say so
    reference = 2                     # the arm a relative margin is taken from (default: the last)

Statistics: `difference` = loss(arm 1) - loss(arm 2); `interaction` = (a1 - a2) - (a3 - a4);
`lr_optimum` = log2 of arm 1's optimal learning rate - arm 2's (each arm selects a
learning-rate profile: train.lr is not pinned); `optimal_loss` = the loss at arm 1's optimum
- at arm 2's. Each `arms` entry is a selector (config keys and values); at evaluation
time it must match exactly one arm per setting (`cemctl.report.claims`).

Two stages (docs/claims.md): a part that chooses a rate (`at = "own_optimum"`, `optimal_loss`, `lr_optimum`)
is exploratory on the runs that chose it (stage 1); `cemctl confirm` writes a confirmation grid
(`[confirm]`, `ConfirmSpec`) whose parts carry the chosen `rates` and are decided on fresh seeds (stage 2).

The variance model (`variance_model`), from the declaration and never from the results: a declared `variance`
(or the older `paired = true`) is used as declared; otherwise Welch (each arm its own variance: a rule that holds
whatever the arms' spreads, which the page's simulations check at ninefold unequal noise; pooling assumes them
equal, pairing a seed effect the arms share).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cem_core.config import flatten
from cem_core.errors import ConfigError
from cemctl.grid.fields import check_field, check_scalar

STATISTICS = {"difference": 2, "interaction": 4, "lr_optimum": 2, "optimal_loss": 2}  # name -> number of arms
EXPECTS = ("lower", "higher", "close")
AT = ("own_optimum", "fixed")
VARIANCE = ("paired", "pooled", "welch")
CHOOSE = ("best_sampled", "interpolated")  # stage 1's rules (`cemctl.report.claims.choose_rate`)
CLAIM_KEYS = ("id", "statement", "part")
PART_KEYS = ("name", "statistic", "arms", "expect", "margin", "paired", "reference", "at", "choose", "variance",
             "changes", "rates")
CONFIRM_KEYS = ("of", "stage1_seeds", "choose", "alpha", "power", "registered", "ladder", "transfer")
TRANSFER = ("width", "same")  # how a ladder rung's rate comes from the size stage 1 tuned (`transfer_rate`)
LR = "train.lr"
SWEEP_STATISTICS = ("lr_optimum", "optimal_loss")  # statistics of learning-rate profiles (train.lr not pinned)
# The settings of a sublayer: when the arms differ in the sublayer's kind, they come with it (Llama attention has
# no KQ diagonal to match CEM's), and a part is not said to change them as well.
ATTENTION_KEYS = ("model.attn_steps", "model.attn_step_size", "model.attn_precond", "model.attn_precond_rank",
                  "model.kq_diagonal", "model.cem_position", "model.attn_start")
MLP_KEYS = ("model.mlp_steps", "model.mlp_step_size", "model.mlp_precond", "model.mlp_precond_rank",
            "model.param_match_factor")
KIND_KEYS = {"model.attention": ATTENTION_KEYS, "model.mlp": MLP_KEYS}
CHANGES_ALLOWED = {"difference": 1, "interaction": 2, "lr_optimum": 1, "optimal_loss": 1}
_MARGIN = re.compile(r"^\s*(?P<value>\d+(\.\d+)?)\s*(?P<unit>%|octaves?|nats?)?\s*$")


@dataclass(frozen=True)
class Margin:
    value: float
    relative: bool = False  # a fraction of the reference arm's loss

    def describe(self, unit: str) -> str:
        return f"{self.value * 100:g}% of the reference loss" if self.relative else f"{self.value:g} {unit}"


@dataclass
class PartSpec:
    name: str
    statistic: str
    arms: list[dict[str, Any]]
    expect: str
    margin: Margin
    paired: bool = False  # the declared variance model is "paired" (kept for older callers)
    reference: int = 0  # index into arms
    source: str = ""  # the experiment (grid) that declares it
    at: str = "fixed"  # the primary contrast: "own_optimum" (each arm at its own optimal lr) | "fixed"
    variance: str = ""  # declared variance model ("" = the rule decides: `variance_model`)
    changes: tuple[str, ...] = ()  # the keys the grid says its arms differ in (when more than one)
    choose: str = "best_sampled"  # stage 1's rule for each arm's rate (`CHOOSE`)
    # a confirmation grid's part (stage 2): per setting (model size), the rate of each arm (an lr_optimum: the two
    # rates both arms are tested at, lower first); None for a part of an ordinary grid
    rates: dict[str, tuple[float, ...]] | None = None
    confirm: "ConfirmSpec | None" = None  # the [confirm] table of the grid that declares a stage-2 part
    confirmation: "PartSpec | None" = None  # a stage-1 part: its stage-2 part (`cemctl.services.claims`)

    @property
    def tuned(self) -> bool:
        """Each arm at the rate stage 1 chooses from its lr profile (a loss contrast)."""
        return self.at == "own_optimum" or self.statistic == "optimal_loss"

    @property
    def chooses(self) -> bool:
        """Stage 1 chooses a rate per arm from its profile: a tuned loss contrast or an lr_optimum."""
        return self.rates is None and (self.tuned or self.statistic == "lr_optimum")

    @property
    def fixed_lr(self) -> float | None:
        """The learning rate every selector pins (the fixed contrast), or None."""
        lrs = {sel.get(LR) for sel in self.arms}
        return float(lrs.pop()) if len(lrs) == 1 and None not in lrs else None  # type: ignore[arg-type]

    def declaration(self) -> dict[str, Any]:
        """What the grid declares for this part (its hash says whether the declaration changed; keys added since
        appear only when set, so an older registration keeps its hash)."""
        out = {"name": self.name, "statistic": self.statistic, "arms": self.arms, "expect": self.expect,
               "margin": [self.margin.value, self.margin.relative], "reference": self.reference, "at": self.at,
               "variance": self.variance or ("paired" if self.paired else ""), "changes": sorted(self.changes)}
        if self.choose != "best_sampled":
            out["choose"] = self.choose
        if self.rates is not None:
            out["rates"] = {k: list(v) for k, v in sorted(self.rates.items())}
        return out

    @property
    def unit(self) -> str:
        return "log2(lr)" if self.statistic == "lr_optimum" and self.rates is None else "nats"

    @property
    def coefs(self) -> tuple[float, ...]:
        four = self.statistic == "interaction" or (self.statistic == "lr_optimum" and self.rates is not None)
        return (1.0, -1.0, -1.0, 1.0) if four else (1.0, -1.0)

    def selectors_at(self, setting: str) -> list[dict[str, Any]] | None:
        """A stage-2 part's arms at one setting, each with its rate pinned (an lr_optimum: arm 1 at the lower and
        the higher rate, then arm 2 at both: the preference interaction, docs/claims.md); None where its design has
        no rates for the setting."""
        if self.rates is None or setting not in self.rates:
            return None
        free = [{k: v for k, v in sel.items() if k != LR} for sel in self.arms]
        rates = self.rates[setting]
        if self.statistic == "lr_optimum":
            lo, hi = rates
            return [dict(free[0], **{LR: lo}), dict(free[0], **{LR: hi}), dict(free[1], **{LR: lo}),
                    dict(free[1], **{LR: hi})]
        return [dict(sel, **{LR: r}) for sel, r in zip(free, rates)]


@dataclass
class ConfirmSpec:
    """A confirmation grid's `[confirm]` table (stage 2, written by `cemctl confirm`): the experiment whose
    profiles chose the rates, the seeds that chose them (never trained again here), the rule, the level and the
    power the seeds were planned for, and when the design was made."""

    of: str
    stage1_seeds: tuple[int, ...]
    choose: str = "best_sampled"
    alpha: float = 0.05
    power: float = 0.8
    registered: str = ""
    ladder: tuple[str, ...] = ()  # model sizes trained at a transferred rate: the size ladder, never the decision
    transfer: str = "width"  # the transfer rule of those rates (`TRANSFER`)


@dataclass
class ClaimSpec:
    id: str
    statement: str
    parts: list[PartSpec] = field(default_factory=list)
    source: str = ""  # the grid file that declares it


def changed_keys(selectors: list[dict[str, Any]]) -> list[str]:
    """The keys a part's arms differ in (set differently, or set in some selectors only), a sublayer's own
    settings folded into its kind when the kind differs (Llama vs CEM attention is one change)."""
    keys = set().union(*selectors) if selectors else set()
    differ = {k for k in keys if len({repr(sel.get(k, "<unset>")) for sel in selectors}) > 1}
    for kind, own in KIND_KEYS.items():
        if kind in differ:
            differ -= set(own)
    return sorted(differ)


def variance_model(part: "PartSpec") -> tuple[str, str]:
    """(model, why) of a part's contrast: declared, else Welch (the module docstring)."""
    if part.variance:
        return part.variance, "declared"
    if part.paired:
        return "paired", "declared (paired = true)"
    return "welch", "the rule: each arm its own variance"


def _err(key: str, message: str, path: str, **kw: Any) -> ConfigError:
    return ConfigError(key, message, source=path or None, **kw)


def parse_margin(value: Any, statistic: str, where: str, path: str) -> Margin:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return Margin(float(value))
    m = _MARGIN.match(str(value)) if isinstance(value, str) else None
    if m is None:
        raise _err(where, f"must be a number, a percentage ('1%') or octaves ('0.5 octave'), got {value!r}", path)
    amount, unit = float(m.group("value")), (m.group("unit") or "").rstrip("s")
    if unit == "%":
        if statistic == "lr_optimum":
            raise _err(where, "an lr_optimum margin is in octaves, e.g. '0.5 octave'", path)
        return Margin(amount / 100, relative=True)
    if unit == "octave" and statistic != "lr_optimum":
        raise _err(where, "octaves are for lr_optimum parts; give '1%' or a number of nats", path)
    return Margin(amount)


def _selector(item: Any, where: str, path: str) -> dict[str, Any]:
    if not isinstance(item, dict) or not item:
        raise _err(where, "must be a table of config keys and values, e.g. { \"model.attn_steps\" = 2 }", path)
    out = {}
    for key, value in flatten(item).items():
        check_field(key, path, where)
        out[key] = check_scalar(key, value, path, where)
    return out


def parse_claims(value: Any, path: str, *, strict: bool = True, confirm: "ConfirmSpec | None" = None
                 ) -> list[ClaimSpec]:
    """The `[[claim]]` tables of a grid file, checked (one line naming the key and the allowed values).
    `strict=False` (a grid recorded by an older cemctl, `recorded_claims`): a part changing more than one key
    without saying so is read, not refused (the refusal is for planning). `confirm`: the grid's [confirm] table
    (its parts carry `rates`, and only its parts may)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _err("claim", "must be an array of tables ([[claim]])", path)
    claims: list[ClaimSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        where = f"claim[{i}]"
        if not isinstance(raw, dict):
            raise _err(where, "must be a table", path)
        for k in raw:
            if k not in CLAIM_KEYS:
                raise _err(f"{where}.{k}", "unknown key", path, allowed=CLAIM_KEYS)
        cid, statement = raw.get("id"), raw.get("statement")
        if not isinstance(cid, (str, int)) or isinstance(cid, bool) or not str(cid).strip() or len(str(cid)) > 20:
            raise _err(f"{where}.id", "must be a short name or number (1-20 characters)", path)
        if str(cid) in seen:
            raise _err(f"{where}.id", f"claim {cid!r} is declared twice", path)
        seen.add(str(cid))
        if not isinstance(statement, str) or not statement.strip() or not statement.isprintable():
            raise _err(f"{where}.statement", "must be the claim in one line of text", path)
        parts = raw.get("part")
        if not isinstance(parts, list) or not parts:
            raise _err(f"{where}.part", "needs at least one [[claim.part]]", path)
        claim = ClaimSpec(str(cid), statement.strip(), source=path)
        for j, p in enumerate(parts):
            claim.parts.append(_part(p, f"{where}.part[{j}]", path, strict, confirm))
        claims.append(claim)
    return claims


def _part(raw: Any, where: str, path: str, strict: bool = True, confirm: "ConfirmSpec | None" = None) -> PartSpec:
    if not isinstance(raw, dict):
        raise _err(where, "must be a table", path)
    for k in raw:
        if k not in PART_KEYS:
            raise _err(f"{where}.{k}", "unknown key", path, allowed=PART_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip() or not name.isprintable() or len(name) > 200:
        raise _err(f"{where}.name", "must be a short printable description", path)
    statistic = raw.get("statistic", "difference")
    if statistic not in STATISTICS:
        raise _err(f"{where}.statistic", f"unknown statistic {statistic!r}", path, allowed=tuple(STATISTICS))
    arms = raw.get("arms")
    if not isinstance(arms, list) or len(arms) != STATISTICS[statistic]:
        raise _err(f"{where}.arms", f"a {statistic} needs {STATISTICS[statistic]} arm selectors, got "
                   f"{len(arms) if isinstance(arms, list) else type(arms).__name__}", path)
    selectors = [_selector(a, f"{where}.arms[{k}]", path) for k, a in enumerate(arms)]
    if statistic in SWEEP_STATISTICS and any(LR in s for s in selectors):
        raise _err(f"{where}.arms", "an lr sweep statistic takes the learning rate from the runs: do not pin train.lr",
                   path)
    expect = raw.get("expect")
    if expect not in EXPECTS:
        raise _err(f"{where}.expect", f"unknown expectation {expect!r}", path, allowed=EXPECTS)
    margin = parse_margin(raw.get("margin", "1%" if statistic != "lr_optimum" else "0.5 octave"), statistic,
                          f"{where}.margin", path)
    paired = raw.get("paired", False)
    if not isinstance(paired, bool):
        raise _err(f"{where}.paired", "must be true or false", path)
    reference = raw.get("reference", len(selectors))
    if not isinstance(reference, int) or isinstance(reference, bool) or not 1 <= reference <= len(selectors):
        raise _err(f"{where}.reference", f"must be an arm number from 1 to {len(selectors)}", path)
    at = raw.get("at", "own_optimum" if statistic == "optimal_loss" else "fixed")
    if at not in AT:
        raise _err(f"{where}.at", f"unknown contrast {at!r}", path, allowed=AT)
    if statistic == "lr_optimum" and "at" in raw:
        raise _err(f"{where}.at", "an lr_optimum compares the optima themselves; `at` is for loss contrasts", path)
    if statistic == "optimal_loss" and at != "own_optimum":
        raise _err(f"{where}.at", "an optimal_loss is each arm at its own optimum", path, allowed=("own_optimum",))
    variance = raw.get("variance", "")
    if variance != "" and variance not in VARIANCE:
        raise _err(f"{where}.variance", f"unknown variance model {variance!r}", path, allowed=VARIANCE)
    if variance and paired and variance != "paired":
        raise _err(f"{where}.variance", f"says {variance!r} but paired = true; give one of them", path)
    changes = raw.get("changes", [])
    if not isinstance(changes, list) or not all(isinstance(k, str) for k in changes):
        raise _err(f"{where}.changes", "must be a list of config keys, e.g. [\"model.attn_steps\"]", path)
    for k in changes:
        check_field(k, path, f"{where}.changes")
    choose = raw.get("choose", "best_sampled")
    if choose not in CHOOSE:
        raise _err(f"{where}.choose", f"unknown rule {choose!r}", path, allowed=CHOOSE)
    rates = _rates(raw.get("rates"), statistic, len(selectors), f"{where}.rates", path, confirm)
    if rates is not None:  # a stage-2 part: the rates are its own, never the selectors'
        selectors = [{k: v for k, v in sel.items() if k != LR} for sel in selectors]
    differ = changed_keys(selectors)
    if changes and sorted(set(changes)) != differ:
        raise _err(f"{where}.changes", f"lists {sorted(set(changes))} but the arms differ in {differ}", path)
    if len(differ) > CHANGES_ALLOWED[statistic] and not changes and strict:
        one = "an interaction two" if statistic == "interaction" else "one"
        raise _err(f"{where}.arms", f"the arms differ in {len(differ)} keys ({', '.join(differ)}); a {statistic} "
                   f"changes {one}: split the part, or say so with changes = {_toml_list(differ)}", path)
    return PartSpec(name.strip(), statistic, selectors, expect, margin, paired or variance == "paired",
                    reference - 1, at=at, variance=variance or ("paired" if paired else ""),
                    changes=tuple(sorted(set(changes))), choose=choose, rates=rates, confirm=confirm)


def _rates(value: Any, statistic: str, arms: int, where: str, path: str, confirm: "ConfirmSpec | None"
           ) -> dict[str, tuple[float, ...]] | None:
    """A stage-2 part's `rates = { micro = [0.0014, 0.004] }`: per model size, each arm's rate (an lr_optimum: the
    lower and the higher rate both arms are tested at)."""
    if value is None:
        if confirm is not None:
            raise _err(where, "a part of a confirmation grid ([confirm]) needs the rates stage 1 chose, e.g. "
                       "rates = { micro = [0.0014, 0.004] } (`cemctl confirm` writes them)", path)
        return None
    if confirm is None:
        raise _err(where, "only a confirmation grid ([confirm], written by `cemctl confirm`) pins each arm's "
                   "rate; an ordinary grid's selectors pin train.lr, or at = \"own_optimum\" lets stage 1 choose", path)
    want = 2 if statistic == "lr_optimum" else arms
    if not isinstance(value, dict) or not value:
        raise _err(where, "must be a table of model sizes, each a list of learning rates", path)
    out = {}
    for size, lrs in value.items():
        if not (isinstance(lrs, list) and len(lrs) == want and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in lrs)):
            raise _err(f"{where}.{size}", f"must be {want} positive learning rates, got {lrs!r}", path)
        if statistic == "lr_optimum" and not lrs[0] < lrs[1]:
            raise _err(f"{where}.{size}", "an lr_optimum is tested at two rates, the lower first", path)
        out[str(size)] = tuple(float(v) for v in lrs)
    return out


def parse_confirm(value: Any, path: str) -> ConfirmSpec | None:
    """A grid's `[confirm]` table (a confirmation grid, stage 2), checked; None without one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _err("confirm", "must be a table ([confirm])", path)
    for k in value:
        if k not in CONFIRM_KEYS:
            raise _err(f"confirm.{k}", "unknown key", path, allowed=CONFIRM_KEYS)
    of, seeds = value.get("of"), value.get("stage1_seeds")
    if not isinstance(of, str) or not of.strip():
        raise _err("confirm.of", "must name the experiment whose lr profiles chose the rates", path)
    if not (isinstance(seeds, list) and seeds and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                      for x in seeds)):
        raise _err("confirm.stage1_seeds", "must list the seeds that chose the rates, e.g. [0, 1, 2]", path)
    choose = value.get("choose", "best_sampled")
    if choose not in CHOOSE:
        raise _err("confirm.choose", f"unknown rule {choose!r}", path, allowed=CHOOSE)
    nums = {}
    for key, default in (("alpha", 0.05), ("power", 0.8)):
        v = value.get(key, default)
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1):
            raise _err(f"confirm.{key}", f"must be a number between 0 and 1, got {v!r}", path)
        nums[key] = float(v)
    registered = value.get("registered", "")
    if not isinstance(registered, str):
        raise _err("confirm.registered", "must be a date, e.g. \"2026-11-28\"", path)
    ladder = value.get("ladder", [])
    if not (isinstance(ladder, list) and all(isinstance(x, str) and x for x in ladder)):
        raise _err("confirm.ladder", "must list model sizes, e.g. [\"nano\", \"mini\"]", path)
    transfer = value.get("transfer", "width")
    if transfer not in TRANSFER:
        raise _err("confirm.transfer", f"unknown transfer rule {transfer!r}", path, allowed=TRANSFER)
    return ConfirmSpec(of.strip(), tuple(sorted(set(seeds))), choose, nums["alpha"], nums["power"], registered,
                       tuple(ladder), transfer)


def transfer_rate(lr: float, rule: str, d_from: int, d_to: int) -> float:
    """A ladder rung's rate from the rate chosen at another size: `same`, or `width` (Adam's rate for a wider
    model's hidden matrices scales as 1/width, muP's rule), put on the half-octave ladder."""
    return half_octave(lr if rule == "same" else lr * d_from / d_to, 0)


def check_fresh_seeds(confirm: ConfirmSpec | None, seeds: Any, path: str) -> None:
    """A confirmation grid trains fresh seeds only: one line (exit 2) naming the stage-1 seeds it would reuse."""
    if confirm is None or seeds is None:
        return
    reused = sorted(set(int(s) for s in seeds) & set(confirm.stage1_seeds))
    if reused:
        raise ConfigError("seeds", f"would train seed{'s' if len(reused) > 1 else ''} "
                          f"{', '.join(map(str, reused))} again, which chose the rates in stage 1 ({confirm.of}: "
                          f"seeds {', '.join(map(str, confirm.stage1_seeds))}); a confirmation trains fresh seeds "
                          "only", source=path or None)


def recorded_claims(text: str, path: str = "") -> list[ClaimSpec]:
    """The [[claim]] tables of a recorded grid's text, read as `cemctl claims` and reports read them: leniently
    ([] when the text has none or cannot be read now); a confirmation grid's parts carry its [confirm] table."""
    import tomllib

    try:
        doc = tomllib.loads(text or "")
        return parse_claims(doc.get("claim"), path, strict=False, confirm=parse_confirm(doc.get("confirm"), path))
    except (tomllib.TOMLDecodeError, ConfigError):
        return []


def _toml_list(keys: list[str]) -> str:
    return "[" + ", ".join(f'"{k}"' for k in keys) + "]"


# ---------------------------------------------------------------------------------------------- lr profiles

HALF_OCTAVE = 0.5
MIN_PROFILE = 3  # learning rates an arm's profile needs before its optimum is estimated


def half_octave(lr: float, steps: int) -> float:
    """lr moved by `steps` half-octaves on the grids' ladder (0.001 x 2^(k/2): 0.0007, 0.001, 0.0014, 0.002,
    0.0028, 0.004, 0.0057, ...), written as the grids write it (two significant digits, one when that is
    within 2%)."""
    import math

    k = round(2 * math.log2(lr / 1e-3)) + steps
    value = 1e-3 * 2 ** (k / 2)
    exp = int(math.floor(math.log10(value)))
    one = round(value, -exp)
    return one if abs(one - value) <= 0.02 * value else round(value, 1 - exp)


def profile_advice(lrs: list[float], *, low_edge: bool = False, high_edge: bool = False) -> list[float]:
    """The learning rates to add to a profile: half-octave neighbours until it has MIN_PROFILE points, and one
    more beyond an edge the optimum sits at."""
    have = sorted(set(lrs))
    add: list[float] = []
    if not have:
        return add
    lo, hi, step = have[0], have[-1], 0
    while len(have) + len(add) < MIN_PROFILE:  # alternate below and above the points there are
        step += 1
        add.append(half_octave(lo, -((step + 1) // 2)) if step % 2 else half_octave(hi, step // 2))
    if low_edge:
        add.append(half_octave(min(have + add), -1))
    if high_edge:
        add.append(half_octave(max(have + add), 1))
    return sorted(set(add) - set(have))


def selector_matches(config: dict[str, Any], selector: dict[str, Any]) -> bool:
    """A flat, resolved config is in the arm a selector names: every key it sets has that value (numbers compared as
    numbers; the same rule as `cemctl.report.claims`)."""
    import math

    for key, want in selector.items():
        have = config.get(key)
        if isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(have, (int, float)) \
                and not isinstance(have, bool):
            if not math.isclose(float(have), float(want), rel_tol=1e-12, abs_tol=0.0):
                return False
        elif str(have) != str(want):
            return False
    return True


def profile_notes(runs: list[tuple[dict[str, Any], str]], claims: list[ClaimSpec], scale: str) -> list[str]:
    """For every part whose primary contrast is at each arm's own optimum: the arms whose lr profile among the
    planned runs (flat config, setting) has fewer than MIN_PROFILE rates or gaps wider than half an octave,
    with the rates to add (`cemctl plan` shows them; the grid is not edited). Arms no planned run matches are
    left to the grid that plans them."""
    import math

    notes: list[str] = []
    for claim in claims:
        for part in claim.parts:
            if not part.tuned:
                continue
            for k, selector in enumerate(part.arms):
                free = {key: v for key, v in selector.items() if key != LR}
                by_setting: dict[str, set[float]] = {}
                for config, setting in runs:
                    if selector_matches(config, free):
                        by_setting.setdefault(setting, set()).add(float(config.get(LR) or 0))
                for setting, lrs in sorted(by_setting.items()):
                    where = f"claim {claim.id}, {part.name!r}, arm {k + 1} ({scale}{'/' + setting if setting else ''})"
                    have = sorted(lrs)
                    chain = best = 1  # the longest run of rates half an octave apart
                    for a, b in zip(have, have[1:]):
                        chain = chain + 1 if math.log2(b / a) <= HALF_OCTAVE * 1.15 else 1
                        best = max(best, chain)
                    if len(have) < MIN_PROFILE:
                        add = profile_advice(have)
                        notes.append(f"{where}: its own-optimum profile has {len(have)} learning rate"
                                     f"{'s' if len(have) != 1 else ''} ({', '.join(f'{v:g}' for v in have)}), "
                                     f"needs {MIN_PROFILE} at half-octave spacing: extend the profile with train.lr = "
                                     f"{', '.join(f'{v:g}' for v in add)}")
                    elif best < MIN_PROFILE:
                        fill = [half_octave(a, 1) for a, b in zip(have, have[1:])
                                if math.log2(b / a) > HALF_OCTAVE * 1.15]
                        notes.append(f"{where}: no {MIN_PROFILE} of its rates are half an octave apart "
                                     f"({', '.join(f'{v:g}' for v in have)}): add train.lr = "
                                     f"{', '.join(f'{v:g}' for v in fill)}")
    return notes


def unmatched_selectors(claims: list[ClaimSpec], configs: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(claim index, part index, arm index) of every selector that no config (a run of the grid) matches."""
    out = []
    for i, claim in enumerate(claims):
        for j, part in enumerate(claim.parts):
            for k, selector in enumerate(part.arms):
                if not any(selector_matches(c, selector) for c in configs):
                    out.append((i, j, k))
    return out


def describe_selector(selector: dict[str, Any]) -> str:
    """'{ model.attn_steps = 3, model.attention = "cem" }' (as a grid file writes it)."""
    import json

    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in selector.items()) + " }"


def clashes(claims: list[ClaimSpec], others: list[tuple[str, str, list[ClaimSpec]]]) -> ConfigError | None:
    """The first way this grid's claims collide with other experiments' (name, grid file, claims): a claim id is one
    claim across the project (grids may declare parts of it, as fig2c and fig2d do for claim 3, with the same
    statement), and no part is declared twice (a grid planned twice would count every part twice in Holm's family)."""
    for i, claim in enumerate(claims):
        for name, path, theirs in others:
            for other in theirs:
                if other.id != claim.id:
                    continue
                where = f"experiment {name} ({path or 'no grid file'})"
                if other.statement != claim.statement:
                    return ConfigError(f"claim[{i}].id", f"claim {claim.id!r} is already declared by {where} with "
                                       f"another statement ({other.statement!r}); claim ids are unique across the "
                                       "project: give this claim its own id")
                ours_confirm = claim.parts[0].confirm if claim.parts else None
                theirs_confirm = other.parts[0].confirm if other.parts else None
                if ours_confirm is not None and ours_confirm.of == name:
                    continue  # a confirmation grid declares the parts of the experiment it confirms
                if theirs_confirm is not None and ours_confirm is None:
                    continue  # a stage-1 grid re-planned beside its confirmation
                names = {p.name for p in other.parts}
                for j, part in enumerate(claim.parts):
                    if part.name in names:
                        return ConfigError(f"claim[{i}].part[{j}].name", f"part {part.name!r} of claim {claim.id!r} "
                                           f"is already declared by {where}: the same grid planned twice? `cemctl "
                                           f"forget {name}` removes that one, or give this claim its own id")
    return None
