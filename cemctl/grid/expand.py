"""Expanding a `GridSpec` into resolved, deduplicated runs (`cemctl plan`, `cemctl launch FILE`).

    plan = load_grid("experiments/fig2a.toml", scale="tiny", overrides={"train.max_steps": 50})
    plan.runs  -> [PlannedRun(run_id, config, axes)]

Runs = product(axes) x zip groups x seeds, plus each `[[extra]]` (its overrides,
its own axes, and the main axes it does not set), minus `[[exclude]]`.
Precedence: dataclass defaults < [base] < scale preset < axes/extra < --set.
Every config is built, validated and resolved with `cem_core.config`; the first
bad one raises `ConfigError` naming the file, the key and the allowed values.
Identical resolved configs collapse to one run (identity = `run_id`). The size
is checked against `MAX_RUNS` before the product is materialised.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from cem_core.config import RunConfig, canonical_json, flatten, resolve, run_id
from cem_core.errors import ConfigError
from cemctl.grid.kinds import DEFAULT_SCALE, MAX_RUNS
from cemctl.grid.fields import Scalar, check_field
from cemctl.grid.spec import SEED_KEY, GridSpec, grid_plugins, parse_grid


@dataclass
class PlannedRun:
    run_id: str
    config: RunConfig  # resolved
    axes: dict[str, Any]  # the keys that vary across the experiment, with this run's values
    marks: list[str] = field(default_factory=list)  # labels of the grid's [[mark]] rules it matches
    position: int = -1  # its place in the grid's whole expansion (kept when a plan keeps only some runs)


@dataclass
class Plan:
    name: str
    description: str
    figure: str
    path: str
    text: str
    sha256: str
    scale: str
    overrides: dict[str, Any]
    runs: list[PlannedRun]
    varied: list[str] = field(default_factory=list)  # axis keys that vary, in file order
    excluded: int = 0  # assignments dropped by [[exclude]]
    duplicates: int = 0  # assignments that resolved to an already listed run
    seeds: list[int] | None = None  # `--seeds` / `--add-seeds`: the seed list that replaced the grid's
    plugins: tuple[str, ...] = ()  # `[experiment] plugins` (their sources are copied into the runs root)
    added_axes: dict[str, list[Any]] = field(default_factory=dict)  # `--axis key=v1,v2`: axes the command line added

    @property
    def plan_overrides(self) -> dict[str, Any]:
        """What makes this plan's key besides the scale: the --set overrides, a --seeds list and the --axis axes
        (recorded with the experiment, so that `launch EXPERIMENT` re-plans the same runs)."""
        return {**self.overrides, **({"--seeds": self.seeds} if self.seeds is not None else {}),
                **({"--axis": self.added_axes} if self.added_axes else {})}


@dataclass
class _Block:
    """One product: fixed overrides x axes (each a list of (key, value) tuples per choice)."""

    overrides: dict[str, Scalar]
    dims: list[list[tuple[tuple[str, Scalar], ...]]]

    def size(self) -> int:
        return math.prod(len(d) for d in self.dims)

    def assignments(self) -> Iterator[dict[str, Scalar]]:
        for combo in itertools.product(*self.dims):
            a = dict(self.overrides)
            for part in combo:
                a.update(part)
            yield a


def _blocks(spec: GridSpec) -> list[_Block]:
    main_dims: dict[str, list[tuple[tuple[str, Scalar], ...]]] = {}
    for k, values in spec.axes.items():
        main_dims[k] = [((k, v),) for v in values]
    for i, group in enumerate(spec.zips):
        keys = list(group)
        n = len(group[keys[0]])
        main_dims[f"zip[{i}]"] = [tuple((k, group[k][j]) for k in keys) for j in range(n)]
    seed_dim = [((SEED_KEY, s),) for s in spec.seeds] if spec.seeds is not None else None
    blocks = [_Block({}, list(main_dims.values()) + ([seed_dim] if seed_dim else []))]  # type: ignore[list-item]
    for extra in spec.extras:
        fixed = set(extra.overrides) | set(extra.axes)
        dims = [d for d in main_dims.values() if not any(k in fixed for k, _ in d[0])]
        dims += [[((k, v),) for v in values] for k, values in extra.axes.items()]
        if seed_dim and SEED_KEY not in fixed:
            dims.append(seed_dim)  # type: ignore[arg-type]
        blocks.append(_Block(dict(extra.overrides), dims))
    return blocks


def _matches(flat: dict[str, Any], rule: dict[str, list[Scalar]]) -> bool:
    return all(k in flat and flat[k] in vals for k, vals in rule.items())


def _excluded(flat: dict[str, Any], rules: list[dict[str, list[Scalar]]]) -> bool:
    return any(_matches(flat, rule) for rule in rules)


def _describe(assignment: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in assignment.items()) or "base"


def _axis_values(spec: GridSpec, key: str) -> list[Scalar]:
    """Every value the grid gives `key` in its axes, zips and extras' axes (in file order, once each)."""
    lists = [spec.axes.get(key, [])] + [z.get(key, []) for z in spec.zips] + [x.axes.get(key, []) for x in spec.extras]
    out: list[Scalar] = []
    for values in lists:
        out += [v for v in values if not any(type(v) is type(o) and v == o for o in out)]
    return out


def _bad_values(flat: dict[str, Any], key: str, values: list[Scalar]) -> list[Scalar]:
    """The values of `values` that `key` cannot take in the run `flat` (the same config error)."""
    bad = []
    for v in values:
        try:
            resolve(RunConfig.from_dict({**flat, key: v}))
        except ConfigError as e:
            if e.key == key:
                bad.append(v)
    return bad


def expand(spec: GridSpec, overrides: dict[str, Any] | None = None, *, max_runs: int = MAX_RUNS) -> Plan:
    """Build every run of the grid; raises ConfigError (with the file) on the first problem."""
    overrides = dict(overrides or {})
    for k in overrides:
        check_field(k, "--set", "--set")
    blocks = _blocks(spec)
    total = sum(b.size() for b in blocks)
    if total > max_runs:
        raise ConfigError("axes", f"the grid expands to {total} runs, more than the limit of {max_runs}; split it or shrink the axes", source=spec.path)
    runs: dict[str, PlannedRun] = {}
    assigned: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    excluded = duplicates = 0
    cache: dict[str, tuple[str, RunConfig]] = {}
    defaults = flatten(RunConfig().to_dict())  # [[exclude]] may name keys left at their defaults
    plugin_values: dict[Any, tuple[str, ...]] = {}  # every `plugins` value the runs name -> its checked names
    for block in blocks:
        for assignment in block.assignments():
            flat = {**spec.base, **assignment}
            if spec.excludes and _excluded({**defaults, **flat}, spec.excludes):
                excluded += 1
                continue
            flat.update(overrides)
            if flat.get("plugins") and flat["plugins"] not in plugin_values:  # as [experiment] plugins are checked
                source = "--set" if "plugins" in overrides else "--axis" if "plugins" in spec.cli_axes else spec.path
                plugin_values[flat["plugins"]] = grid_plugins(flat["plugins"], spec.path, "plugins", source)
            key = canonical_json({k: [type(v).__name__, v] for k, v in flat.items()})
            if key in cache:
                rid, cfg = cache[key]
            else:
                try:
                    cfg = resolve(RunConfig.from_dict(flat))
                except ConfigError as e:
                    source = "--set" if e.key in overrides else "--axis" if e.key in spec.cli_axes else spec.path
                    shown = {k: flat[k] for k in assignment}  # the run's values after the --set overrides
                    where = f" (in run {_describe(shown)})" if assignment else ""
                    if e.key in assignment and e.key not in overrides:  # an axis: name every bad value, not one
                        bad = _bad_values(flat, e.key, _axis_values(spec, e.key))
                        if len(bad) > 1:
                            where += f"; every bad value of {e.key}: {', '.join(repr(v) for v in bad)}"
                    raise ConfigError(e.key, e.message + where, value=e.value, allowed=e.allowed, source=source) from None
                rid = run_id(cfg)
                cache[key] = (rid, cfg)
            for k in assignment:
                if k not in order:
                    order.append(k)
            if rid in runs:
                duplicates += 1
                continue
            runs[rid] = PlannedRun(rid, cfg, {}, position=len(runs))
            assigned[rid] = assignment
    # The keys that vary across the experiment, valued from each resolved config.
    values: dict[str, dict[str, Any]] = {rid: flatten(pr.config.to_dict()) for rid, pr in runs.items()}
    varied = [k for k in order if len({repr(v.get(k)) for v in values.values()}) > 1]
    for rid, pr in runs.items():
        pr.axes = {k: values[rid].get(k) for k in varied}
        pr.marks = [m.label for m in spec.marks if _matches(values[rid], m.rule)]
    if not runs:
        raise ConfigError("exclude", "drops every run of the grid", source=spec.path)
    return Plan(
        name=spec.name, description=spec.description, figure=spec.figure, path=spec.path, text=spec.text,
        sha256=spec.sha256, scale=spec.scale, overrides=overrides, runs=list(runs.values()), varied=varied,
        excluded=excluded, duplicates=duplicates,
        plugins=tuple(dict.fromkeys([*spec.plugins, *(n for names in plugin_values.values() for n in names)])),
    )


def load_grid(
    path: str | Path, scale: str = DEFAULT_SCALE, overrides: dict[str, Any] | None = None, *, max_runs: int = MAX_RUNS,
    seeds: list[int] | None = None, add_seeds: int = 0, axes: dict[str, list[Any]] | None = None,
) -> Plan:
    """Parse, validate and expand a grid file: the one entry point for grid files. `seeds` replaces the grid's
    seed list; `add_seeds` extends it with that many new seeds (the next integers); `axes` (`--axis`) adds axes to
    the grid's (or replaces the values of one it has), checked like the file's."""
    spec = parse_grid(path, scale)
    add_axes(spec, axes or {}, overrides or {})
    chosen = with_seeds(spec, seeds, add_seeds)
    if chosen is not None:
        from cemctl.grid.claims import check_fresh_seeds

        check_fresh_seeds(spec.confirm, chosen, "--seeds" if seeds is not None else "--add-seeds")
        spec.seeds = chosen
    plan = expand(spec, overrides, max_runs=max_runs)
    plan.seeds = chosen
    plan.added_axes = {k: list(v) for k, v in (axes or {}).items()}
    return plan


def add_axes(spec: GridSpec, axes: dict[str, list[Any]], overrides: dict[str, Any]) -> None:
    """Add the command line's axes (`--axis`) to a parsed grid: a new axis comes after the file's, one the file has
    gets the command line's values; refused (ConfigError naming --axis) where the key is also --set, varied by a
    [[zip]], or the seed of a grid with `seeds = [...]`."""
    from cemctl.grid.fields import check_scalar

    for key, values in axes.items():
        check_field(key, "--axis", "--axis")
        if key in overrides:
            raise ConfigError(key, "is both --set and --axis; give one", source="--axis")
        zipped = [i for i, z in enumerate(spec.zips) if key in z]
        if zipped:
            raise ConfigError(key, f"is varied by zip[{zipped[0]}] of {spec.path}; change it there", source="--axis")
        if key == SEED_KEY and spec.seeds is not None:
            raise ConfigError(key, f"{spec.path} lists its seeds (seeds = [...]); use --seeds 0,1,2", source="--axis")
        spec.axes[key] = [check_scalar(key, v, "--axis", "--axis") for v in values]
        spec.cli_axes.append(key)


def with_seeds(spec: GridSpec, seeds: list[int] | None, add_seeds: int) -> list[int] | None:
    """The seed list a launch asks for (None: the grid's own); refused where the grid varies the seed otherwise."""
    if seeds is None and not add_seeds:
        return None
    if SEED_KEY in spec.axes or any(SEED_KEY in z for z in spec.zips):
        raise ConfigError("--seeds", f"{spec.path} varies {SEED_KEY} in its axes; give seeds = [...] in the grid instead")
    if seeds is not None and add_seeds:
        raise ConfigError("--add-seeds", "give --seeds or --add-seeds, not both")
    if seeds is not None:
        return seeds
    current = spec.seeds if spec.seeds is not None else [int(spec.base.get(SEED_KEY, 0))]
    start = max(current) + 1
    return list(current) + list(range(start, start + add_seeds))


def parse_seeds(text: str) -> list[int]:
    """'0-7' -> [0..7]; '0,1,5' -> [0, 1, 5]; '0-2,5' -> [0, 1, 2, 5] (ConfigError naming the form otherwise)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ConfigError("--seeds", f"must be seed numbers like 0-7 or 0,1,2,5, got {text!r}", allowed=["0-7", "0,1,5"])
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first or last - first > 10_000:
            raise ConfigError("--seeds", f"bad range {part!r} in {text!r}", allowed=["0-7", "0,1,5"])
        out += [s for s in range(first, last + 1) if s not in out]
    if not out:
        raise ConfigError("--seeds", "needs at least one seed", allowed=["0-7", "0,1,5"])
    return out
