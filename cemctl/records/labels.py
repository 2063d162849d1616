"""Naming arms and series: the one labelling path of every table, figure and page (`cemctl.records`, `cemctl
report`, `status --arms`, `compare`, `claims`, the dashboard).

    ids, labels = arm_labels(records, nuisance=("train.seed",), order=axes)   # 'attn_steps=2, lr=0.002'
    names = series_names(configs, shown=["model.attn_steps"])                 # 'CEM attention (diag)'

One function names everything, `series_names`: a series is every config equal in all keys but the nuisance ones
and those a figure shows; an arm is a run's whole configuration minus its nuisance keys (`cem_core.arms`), so an
arm's label is `series_names(..., every_key=True)`: every key that varies among the arms shown together, as a grid
file writes it. A variant's display name (a spec's or a plugin's `label`) is how a value is shown, never what
groups runs. Two arms or series never share a name: `ArmLabelCollision` is raised instead (a bug the tests catch).
"""

from __future__ import annotations

from typing import Any, Collection, Mapping, Sequence

from cem_core.arms import arm_id, config_of


def arm_labels(records: Sequence[Mapping[str, Any]], *, nuisance: Sequence[str] = ("train.seed",),
               order: Sequence[str] = ()) -> tuple[list[str | None], list[str | None]]:
    """(arm id, arm label) of each record (a run record or a frame row); (None, None) for one without its config."""
    from cemctl.records.record import RunRecord

    return arms_of([r.config if isinstance(r, RunRecord) else config_of(r) for r in records], nuisance=nuisance,
                   order=order)


def arms_of(configs: Sequence[Mapping[str, Any]], *, nuisance: Sequence[str] = ("train.seed",),
            order: Sequence[str] = (), table: dict[Any, tuple[str, str]] | None = None,
            keys: Sequence[Any] | None = None) -> tuple[list[str | None], list[str | None]]:
    """(arm id, arm label) of each flattened config ({}: none). Named and hashed once per arm: the runs of an arm
    share both (an arm is every key but the nuisance ones). The labels tell apart the arms of `configs`, or are
    looked up in `table` (`arm_table` of every run of their experiment). `keys`: their `arm_key`s, when known."""
    keys = list(keys) if keys is not None else [arm_key(c, nuisance) if c else None for c in configs]
    if table is None or any(k is not None and k not in table for k in keys):
        table = arm_table(configs, nuisance=nuisance, order=order, keys=keys)
    return [table[k][0] if k is not None else None for k in keys], [table[k][1] if k is not None else None for k in keys]


def arm_key(config: Mapping[str, Any], nuisance: Sequence[str]) -> Any:
    """What makes an arm, hashable: a flattened config's items but the nuisance keys (flattened configs list their
    keys in one order)."""
    rest = dict(config)
    for k in nuisance:
        rest.pop(k, None)
    key: Any = tuple(rest.items())
    try:
        hash(key)
    except TypeError:  # a list value: its JSON text
        key = json_key(rest)
    return key


def arm_table(configs: Sequence[Mapping[str, Any]], *, nuisance: Sequence[str] = ("train.seed",),
              order: Sequence[str] = (), keys: Sequence[Any] | None = None) -> dict[Any, tuple[str, str]]:
    """{arm key: (arm id, arm label)} of the arms among `configs` (`keys`: their `arm_key`s where known, else None)."""
    firsts: dict[Any, Mapping[str, Any]] = {}
    for i, c in enumerate(configs):
        if c:
            k = keys[i] if keys is not None else None
            firsts.setdefault(arm_key(c, nuisance) if k is None else k, c)
    return _named(firsts, nuisance, order)


def _named(firsts: Mapping[Any, Mapping[str, Any]], nuisance: Sequence[str],
           order: Sequence[str]) -> dict[Any, tuple[str, str]]:
    labels = series_names(list(firsts.values()), nuisance=nuisance, order=order, every_key=True)
    return {k: (arm_id(c, nuisance), label) for (k, c), label in zip(firsts.items(), labels)}


# ---------------------------------------------------------------------------------------------------------------
# Series names of figures and tables: the fewest varying keys that tell the arms apart, by the specs' names.

_ARCH_ORDER = ("model.attention", "model.mlp", "model.attn_steps", "model.mlp_steps", "model.attn_precond",
               "model.mlp_precond", "model.kq_diagonal")
KQ_TEXT = {"none": "no diagonal", "shared": "shared diagonal", "per_head": "per-head diagonal"}


def _spec(kind: str, name: Any) -> Any:
    from cem_core import variants as V

    reg = {"attention": V.ATTENTION, "mlp": V.MLPS, "precond": V.PRECONDITIONERS}[kind]
    try:
        return reg.spec(str(name))
    except Exception:  # noqa: BLE001 - a name no spec here knows (a plugin not loaded): shown by its name
        return None


def _family(kind: str, name: Any) -> str:
    spec = _spec(kind, name)
    return getattr(spec, "family", str(name)) if spec is not None else str(name)


def _label(kind: str, name: Any) -> str:
    spec = _spec(kind, name)
    return getattr(spec, "label", str(name)) if spec is not None else str(name)


def arch_keys() -> tuple[str, ...]:
    """The keys that describe a run's architecture: the sublayer choices and every key a variant spec reads."""
    from cem_core import variants as V

    keys = list(_ARCH_ORDER)
    for reg in (V.ATTENTION, V.MLPS):
        for name in reg.names():
            try:
                uses = reg.spec(name).uses or ()
            except Exception:  # noqa: BLE001
                continue
            keys += [u if "." in u else f"model.{u}" for u in uses]
    return tuple(dict.fromkeys(keys))


def pairing_keys(columns: Sequence[str]) -> list[str]:
    """The config keys a component figure pairs a variant with its Llama baseline on: every key but the
    architecture's (`arch_keys`, from the specs) and the seed."""
    arch = set(arch_keys())
    return [c for c in columns if c not in arch and c != "train.seed"]


def value_text(key: str, value: Any, *, prefix: bool = True) -> str:
    """How a value is shown in a label: a variant by its spec's label, a T as 'T=2', others as `short=value`."""
    from cem_core.arms import format_value, short_names

    if key == "model.attention":
        return _label("attention", value)
    if key == "model.mlp":
        return _label("mlp", value)
    if key in ("model.attn_precond", "model.mlp_precond"):
        text = _label("precond", value)
        text = text if value != "identity" else "no preconditioner"
        return ("MLP " if key == "model.mlp_precond" and prefix else "") + text
    if key == "model.kq_diagonal":
        return KQ_TEXT.get(str(value), str(value))
    if key == "model.attn_steps":
        return f"attention T={format_value(value)}"
    if key == "model.mlp_steps":
        return f"MLP T={format_value(value)}"
    return f"{short_names([key])[key]}={format_value(value)}"


def _arch_phrase(config: Mapping[str, Any], keys: Sequence[str]) -> str:
    """'Llama', 'CEM attention (T=2)', 'full CEM (attention T=2, diag+low-rank)': the run's architecture named by its
    variants' families and labels, with the chosen architecture keys that apply to it."""
    attn, mlp = config.get("model.attention", "llama"), config.get("model.mlp", "llama")
    fa, fm = _family("attention", attn), _family("mlp", mlp)
    details: list[str] = []
    for key in keys:
        if key in ("model.attention", "model.mlp"):
            continue
        value = config.get(key)
        side_attn = key.startswith("model.attn") or key in ("model.kq_diagonal", "model.cem_position")
        applies = (fa != "baseline") if side_attn else (fm != "baseline") if key.startswith("model.mlp") or \
            key == "model.param_match_factor" else True
        if not applies:
            continue
        text = value_text(key, value, prefix=not (fa == "baseline" and key.startswith("model.mlp")))
        if key == "model.attn_steps" and fm == "baseline":
            text = f"T={value}"
        if key == "model.mlp_steps" and fa == "baseline":
            text = f"T={value}"
        details.append(text)
    if fa == "baseline" and fm == "baseline":
        name = "Llama"
    elif fm == "baseline":
        name = _label("attention", attn)
    elif fa == "baseline":
        name = _label("mlp", mlp)
    elif fa == fm == "cem":
        name = "full CEM" + (", param-matched MLP" if "param" in _label("mlp", mlp) else "")
    else:
        name = f"{_label('attention', attn)} + {_label('mlp', mlp)}"
    return name + (f" ({', '.join(details)})" if details else "")


def _render(config: Mapping[str, Any], keys: Sequence[str]) -> str:
    arch = [k for k in keys if k in set(arch_keys())]
    rest = [k for k in keys if k not in set(arch)]
    parts = ([_arch_phrase(config, arch)] if arch else []) + [value_text(k, config.get(k)) for k in rest]
    return ", ".join(parts) or "all runs"


def series_names(configs: Sequence[Mapping[str, Any]], *, shown: Sequence[str] = (),
                 nuisance: Sequence[str] = ("train.seed",), order: Sequence[str] = (), modal: bool = False,
                 always_arch: bool = False, every_key: bool = False) -> list[str]:
    """The name of each config's series in a figure or table. A series is every config equal in all keys but the
    nuisance ones and those the figure `shown`s (its x, its panels): one line, one legend entry, one colour. Its
    name is made of the fewest keys that vary among the series and tell them apart, architecture keys first, then
    the grid's `order`; rendered by the specs' names ("Llama", "CEM attention (T=2)") and `short=value` for the
    rest; a key constant among them never appears. `modal`: name each series only by the keys whose value differs
    from the most common one ("defaults" when none: one-factor-at-a-time grids). `always_arch`: name the
    architecture even when every series has the same ("Llama, lr=0.002": a figure's baseline lines beside its
    variants). `every_key`: an arm's label: every varying key (the grid's `order` first, then alphabetically) as
    `short=value`, written as a grid file writes it ("all runs" when none varies). Two series never share a name:
    ArmLabelCollision (a bug the tests catch)."""
    from cem_core.arms import ArmLabelCollision, format_value, short_names, varying_keys

    configs = [dict(c) for c in configs]
    hidden = set(nuisance) | set(shown_with_dims(configs, shown))
    sids = [json_key({k: v for k, v in c.items() if k not in hidden}) for c in configs]
    firsts: dict[str, Mapping[str, Any]] = {}
    for sid, c in zip(sids, configs):
        firsts.setdefault(sid, c)
    series = list(firsts.values())
    candidates = varying_keys(series, tuple(hidden), order)
    if every_key:
        short = short_names(candidates)
        spelled = {sid: ", ".join(f"{short[k]}={format_value(c.get(k))}" for k in candidates) or "all runs"
                   for sid, c in firsts.items()}
        if len(set(spelled.values())) < len(spelled):
            raise ArmLabelCollision(f"two arms would share a label: the varying keys {', '.join(candidates)} print "
                                    "alike")
        return [spelled[sid] for sid in sids]
    arch = [k for k in arch_keys() if k in candidates]
    ordered = arch + [k for k in order if k in candidates and k not in arch] + \
        [k for k in candidates if k not in arch and k not in order]
    ordered = [k for k in ordered if k not in SIZE_DIMS] + [k for k in ordered if k in SIZE_DIMS]  # a size first
    modes = {k: _mode(series, k) for k in ordered} if modal else {}

    family_varies = any(k in candidates for k in ("model.attention", "model.mlp"))
    arch_set = set(arch_keys())

    raw_short = short_names(ordered)

    def render(c: Mapping[str, Any], keys: Sequence[str], plain: bool | str = False) -> str:
        if plain == "raw":  # values as a grid file writes them: two values a spec labels alike stay apart
            return ", ".join(f"{raw_short[k]}={format_value(c.get(k))}" for k in keys) or "all runs"
        plain = plain or not family_varies  # the variant is the same for every series: name what differs only
        if modal:
            keys = [k for k in keys if json_key(c.get(k)) != modes[k]]
            if not keys:
                return "defaults"
            if not {"model.attention", "model.mlp"} & set(keys):  # the variant is the defaults': name the change
                plain = True
        if plain and always_arch and not modal:
            return ", ".join([_arch_phrase(c, [k for k in keys if k in arch_set]),
                              *(value_text(k, c.get(k)) for k in keys if k not in arch_set)])
        if plain:
            return ", ".join(value_text(k, c.get(k)) for k in keys) or "all runs"
        return _render(c, keys)

    def distinct(keys: Sequence[str], plain: bool | str = False) -> bool:
        names = [render(c, keys, plain) for c in series]
        return len(set(names)) == len(names)

    chosen: list[str] = []
    for k in ordered:  # greedy: add keys in priority order until the names tell every series apart
        if distinct(chosen):
            break
        chosen.append(k)
    for k in list(chosen):  # then drop any key the others do without
        trial = [c for c in chosen if c != k]
        if distinct(trial):
            chosen = trial
    plain: bool | str = False
    if not distinct(chosen):  # the specs' phrasing hides a difference: every varying key, as key=value
        chosen, plain = ordered, True
        if not distinct(chosen, plain):  # two values a spec (a plugin's) labels alike: their names in the grid
            plain = "raw"
        if not distinct(chosen, plain):
            raise ArmLabelCollision(f"two series would share a name: the varying keys {', '.join(ordered) or '(none)'} "
                                    f"do not tell them apart")
    chosen = [k for k in ordered if k in chosen]
    if len(series) == 1 and not modal:  # one series: named by its architecture (what differs from the defaults),
        if {"model.attention", "model.mlp"} & hidden and len(configs) > 1:  # unless the figure's x is the variant:
            return ["all runs"] * len(configs)  # then it holds several (naming it by the first one's said 'Llama')
        return [single_name(series[0], exclude=hidden)] * len(configs)
    by_sid = {sid: render(c, chosen, plain) for sid, c in firsts.items()}
    return [by_sid[sid] for sid in sids]


SIZE_DIMS = ("model.d_model", "model.n_layers", "model.n_heads", "model.d_mlp", "model.context_len")


def shown_with_dims(configs: Sequence[Mapping[str, Any]], shown: Sequence[str]) -> list[str]:
    """The keys a figure shows: `shown`, and with a size the dims it determines among these configs (a size is its
    dims: series are never split, nor colours chosen, by `context_len=64` beside `size=nano`)."""
    out = list(dict.fromkeys(shown))
    if "model.size" in out:
        out += [k for k in SIZE_DIMS if k not in out and _determined(configs, k, "model.size")]
    return out


def _determined(configs: Sequence[Mapping[str, Any]], key: str, by: str) -> bool:
    """Whether `key` has one value for each value of `by` among the configs (a size's dims, resolved from it)."""
    seen: dict[str, str] = {}
    return all(seen.setdefault(json_key(c.get(by)), json_key(c.get(key))) == json_key(c.get(key)) for c in configs)


def single_name(config: Mapping[str, Any], *, exclude: Collection[str] = ()) -> str:
    """A run's architecture named on its own: its variants, and the architecture keys away from their default
    (but those in `exclude`: what a figure shows on its axes)."""
    from cem_core.identity import V1_DEFAULTS

    keys = [k for k in _ARCH_ORDER[2:] if k in config and k not in exclude and config.get(k) != V1_DEFAULTS.get(k)]
    return _arch_phrase(config, keys)


def _mode(configs: Sequence[Mapping[str, Any]], key: str) -> str:
    from collections import Counter

    counts = Counter(json_key(c.get(key)) for c in configs)
    return counts.most_common(1)[0][0]


def json_key(value: Any) -> str:
    import json

    if isinstance(value, float) and value != value:
        return "NaN"
    return json.dumps(value, sort_keys=True, default=str)
