"""Parsing a grid file into a checked `GridSpec` (`cemctl plan FILE`).

A grid file is TOML a researcher writes by hand:

    [experiment]                 # name (default: file stem), description, figure (a report kind; default
                                 # "generic"), x / hue / metric (the report's main figure: metric against the
                                 # config key x, one line per hue key), nuisance (config keys that do not
                                 # make a different arm; the seed always is one)
    [base]                       # config keys, dotted ("model.attention" = "cem") or nested tables
    [axes]                       # key = [values]: the grid is their product
    [[zip]]                      # key = [values], ...: equal-length lists that move together
    [[extra]]                    # extra runs: overrides on base (+ optional `axes` table); they
                                 # also span the main axes they do not set (e.g. model.size)
    [[exclude]]                  # partial assignment (key = value or [values]) of runs to drop
    [[mark]]                     # label = "...", plus a partial assignment: runs it matches carry the
                                 # label in plan and report (e.g. "beyond the paper")
    [[claim]]                    # claims `cemctl claims` tests on the runs: parts with arm selectors, a
                                 # statistic, an expectation and a margin (cemctl/grid/claims.py)
    seeds = [0, 1]               # -> axis train.seed
    [scale.tiny] / [scale.paper] # base / axes / seeds / exclude overrides, chosen with --scale
    [slurm]                      # job resources for `cemctl launch --executor slurm` (checked by
                                 # cemctl.executors.slurm.SlurmOptions, not here)

Every structural problem raises `ConfigError(key, message, allowed=...)` with the
file as source; values and combinations are checked when runs are built
(`cemctl.grid.expand`), all before anything is written.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cem_core.config import flatten
from cem_core.errors import ConfigError
from cem_core.names import check_experiment_name
from cem_core.plugins import canonical, load_grid_plugins, parse_names
from cem_core.runfiles import RunFileError, read_bytes
from cemctl.grid.claims import check_fresh_seeds, parse_claims, parse_confirm
from cemctl.grid.fields import Scalar, check_field, check_scalar
from cemctl.grid.kinds import DEFAULT_SCALE, FIGURE_KINDS, SCALES

TOP_KEYS = ("experiment", "base", "axes", "zip", "extra", "exclude", "mark", "claim", "confirm", "seeds", "scale",
            "slurm")
EXPERIMENT_KEYS = ("name", "description", "figure", "x", "hue", "metric", "nuisance", "plugins")
METRICS = ("test_loss", "test_ppl", "val_loss", "val_ppl", "test_rmse")  # what a report may plot
SCALE_KEYS = ("base", "axes", "seeds", "exclude")
EXTRA_KEYS = ("axes",)  # besides config keys
SEED_KEY = "train.seed"

@dataclass
class ExtraSpec:
    overrides: dict[str, Scalar]
    axes: dict[str, list[Scalar]]


@dataclass
class MarkSpec:
    label: str
    rule: dict[str, list[Scalar]]


@dataclass
class GridSpec:
    """A parsed grid file at one scale (scale overrides already applied)."""

    path: str
    text: str
    sha256: str
    name: str
    description: str
    figure: str
    scale: str
    base: dict[str, Scalar]
    axes: dict[str, list[Scalar]]
    zips: list[dict[str, list[Scalar]]]
    extras: list[ExtraSpec]
    excludes: list[dict[str, list[Scalar]]]
    seeds: list[int] | None
    scales_defined: list[str] = field(default_factory=list)
    marks: list[MarkSpec] = field(default_factory=list)
    report: "ReportOptions" = field(default_factory=lambda: ReportOptions())
    claims: list[Any] = field(default_factory=list)  # cemctl.grid.claims.ClaimSpec
    confirm: Any = None  # a confirmation grid's [confirm] table (cemctl.grid.claims.ConfirmSpec), else None
    plugins: tuple[str, ...] = ()  # `[experiment] plugins`: modules loaded (and given every run as "plugins")
    cli_axes: list[str] = field(default_factory=list)  # axes the command line added (`--axis`), for error sources


@dataclass(frozen=True)
class ReportOptions:
    """What `[experiment]` says about the report: the main figure's x, hue and metric; the nuisance keys."""

    x: str | None = None
    hue: tuple[str, ...] = ()
    metric: str = "test_loss"
    nuisance: tuple[str, ...] = (SEED_KEY,)


def _key_list(value: Any, key: str, path: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(k, str) for k in items):
        raise _err(key, "must be a config key or a list of config keys", path)
    for k in items:
        check_field(k, path, key)
    return tuple(dict.fromkeys(items))


def report_options(exp: dict[str, Any], path: str) -> ReportOptions:
    """The `[experiment]` table's report keys, checked (unknown keys and metrics name the allowed ones)."""
    x = exp.get("x")
    if x is not None:
        if not isinstance(x, str):
            raise _err("experiment.x", "must be a config key, e.g. x = \"model.attn_steps\"", path)
        check_field(x, path, "experiment.x")
    hue = _key_list(exp.get("hue", []), "experiment.hue", path)
    metric = exp.get("metric", "test_loss")
    if metric not in METRICS:
        raise _err("experiment.metric", f"unknown metric {metric!r}", path, allowed=METRICS)
    nuisance = _key_list(exp.get("nuisance", []), "experiment.nuisance", path)
    return ReportOptions(x, hue, metric, tuple(dict.fromkeys([SEED_KEY, *nuisance])))


def options_from_text(text: str, path: str = "") -> ReportOptions:
    """The report options of a recorded grid's text (defaults when it cannot be read: it was checked at plan time)."""
    try:
        exp = tomllib.loads(text or "").get("experiment", {})
        return report_options(exp if isinstance(exp, dict) else {}, path)
    except (tomllib.TOMLDecodeError, ConfigError):
        return ReportOptions()


def _err(key: str, message: str, path: str, **kw: Any) -> ConfigError:
    return ConfigError(key, message, source=path, **kw)


def _check_table(value: Any, key: str, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _err(key, f"must be a table, got {type(value).__name__}", path)
    return value


def _check_keys(d: dict[str, Any], allowed: tuple[str, ...], where: str, path: str) -> None:
    for k in d:
        if k not in allowed:
            raise _err(f"{where}.{k}" if where else k, "unknown key", path, allowed=allowed)


def _config_table(value: Any, path: str, where: str) -> dict[str, Scalar]:
    flat = flatten(_check_table(value, where, path))
    out: dict[str, Scalar] = {}
    for k, v in flat.items():
        check_field(k, path, where)
        out[k] = check_scalar(k, v, path, where)
    return out


def _axes_table(value: Any, path: str, where: str, *, unique: bool = True) -> dict[str, list[Scalar]]:
    flat = flatten(_check_table(value, where, path))
    out: dict[str, list[Scalar]] = {}
    for k, v in flat.items():
        check_field(k, path, where)
        if not isinstance(v, list):
            raise _err(k, f"must be a list of values in {where}, got {type(v).__name__} {v!r}"[:200], path)
        if not v:
            raise _err(k, f"is an empty axis in {where} (give at least one value)", path)
        values = [check_scalar(k, x, path, where) for x in v]
        if unique and len(set(map(repr, values))) != len(values):
            raise _err(k, f"has repeated values in {where}: {values}"[:200], path)
        out[k] = values
    return out


def _seeds(value: Any, path: str, where: str) -> list[int]:
    if not isinstance(value, list) or not value:
        raise _err(where, "must be a non-empty list of integers, e.g. seeds = [0, 1, 2]", path)
    for s in value:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise _err(where, f"must hold integers >= 0, got {s!r}", path)
    if len(set(value)) != len(value):
        raise _err(where, f"has repeated seeds: {value}", path)
    return list(value)


def _rule(flat: dict[str, Any], path: str, where: str) -> dict[str, list[Scalar]]:
    """A partial assignment (key = value or [values]) that matches runs."""
    rule: dict[str, list[Scalar]] = {}
    for k, v in flat.items():
        check_field(k, path, where)
        vals = v if isinstance(v, list) else [v]
        rule[k] = [check_scalar(k, x, path, where) for x in vals]
    return rule


def _excludes(value: Any, path: str, where: str) -> list[dict[str, list[Scalar]]]:
    if not isinstance(value, list):
        raise _err(where, "must be an array of tables ([[exclude]])", path)
    out = []
    for i, item in enumerate(value):
        flat = flatten(_check_table(item, f"{where}[{i}]", path))
        if not flat:
            raise _err(f"{where}[{i}]", "is empty (it would drop every run)", path)
        out.append(_rule(flat, path, where))
    return out


def _marks(value: Any, path: str) -> list[MarkSpec]:
    if not isinstance(value, list):
        raise _err("mark", "must be an array of tables ([[mark]])", path)
    out = []
    for i, item in enumerate(value):
        item = dict(_check_table(item, f"mark[{i}]", path))
        label = item.pop("label", None)
        if not isinstance(label, str) or not label.strip() or len(label) > 200 or not label.isprintable():
            raise _err(f"mark[{i}].label", "must be a short printable text (1-200 characters)", path)
        flat = flatten(item)
        if not flat:
            raise _err(f"mark[{i}]", "names no config key (it would mark every run)", path)
        out.append(MarkSpec(label.strip(), _rule(flat, path, f"mark[{i}]")))
    return out


MAX_GRID_BYTES = 4 << 20  # a grid file is hand-written TOML; anything larger is refused unread


def parse_toml(path: str | Path) -> tuple[dict[str, Any], str]:
    """The TOML document and its text; syntax errors become one-line ConfigErrors with the line.

    Only a regular file under `MAX_GRID_BYTES` is read, opened without blocking (a FIFO,
    a device or a link to one is refused, never waited on); an empty file is an error.
    """
    try:
        raw = read_bytes(path, max_bytes=MAX_GRID_BYTES)
    except FileNotFoundError:
        raise ConfigError("file", "no such grid file", source=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("file", "is a directory, not a grid file", source=str(path)) from None
    except RunFileError as e:
        raise ConfigError("file", str(e).split(": ", 1)[-1] + " (a grid file must be a regular TOML file)",
                          source=str(path)) from None
    except OSError as e:
        raise ConfigError("file", f"cannot read: {e.strerror or e}", source=str(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError("file", f"is not UTF-8 text ({e.reason} at byte {e.start})", source=str(path)) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("toml", f"syntax error: {e}", source=str(path)) from None
    except RecursionError:
        raise ConfigError("toml", "nested too deeply", source=str(path)) from None
    if not doc:
        raise ConfigError("file", "is empty (a grid file needs at least an [experiment] or [base] table)",
                          source=str(path))
    return doc, text


def experiment_name(path: str | Path) -> str:
    """The experiment a grid file names (`[experiment] name`, else its file stem), checked."""
    doc, _ = parse_toml(path)
    exp = _check_table(doc.get("experiment", {}), "experiment", str(path))
    return check_experiment_name(exp.get("name", Path(path).stem), str(path))


def parse_grid(path: str | Path, scale: str = DEFAULT_SCALE, *, strict_claims: bool = True) -> GridSpec:
    """Read and structurally check a grid file, with the `[scale.<scale>]` overrides applied (`strict_claims=False`:
    a recorded grid's claims read as `cemctl.grid.claims.recorded_claims` reads them)."""
    spath = str(path)
    doc, text = parse_toml(path)
    _check_keys(doc, TOP_KEYS, "", spath)
    exp = _check_table(doc.get("experiment", {}), "experiment", spath)
    _check_keys(exp, EXPERIMENT_KEYS, "experiment", spath)
    name = check_experiment_name(exp.get("name", Path(path).stem), spath)
    description = exp.get("description", "")
    if not isinstance(description, str):
        raise _err("experiment.description", "must be a string", spath)
    figure = exp.get("figure", "generic")
    if figure not in FIGURE_KINDS:
        raise _err("experiment.figure", f"unknown report kind {figure!r}", spath, allowed=FIGURE_KINDS.names())

    scales = _check_table(doc.get("scale", {}), "scale", spath)
    for sname, sval in scales.items():
        if sname not in SCALES:
            raise _err(f"scale.{sname}", "unknown scale", spath, allowed=SCALES.names())
        _check_keys(_check_table(sval, f"scale.{sname}", spath), SCALE_KEYS, f"scale.{sname}", spath)
    if scale not in SCALES or (scales and scale not in scales):
        raise _err("--scale", f"unknown scale {scale!r} for this grid", spath, allowed=list(scales) or SCALES.names())
    preset = scales.get(scale, {})

    plugins = _plugins(exp.get("plugins"), spath)
    base = _config_table(doc.get("base", {}), spath, "base")
    base.update(_config_table(preset.get("base", {}), spath, f"scale.{scale}.base"))
    if plugins:  # every run names them: the trainer, report and status import them before reading its config
        base["plugins"] = canonical([*plugins, *filter(None, canonical(base.get("plugins", "")).split(","))])
    axes = _axes_table(doc.get("axes", {}), spath, "axes")
    axes.update(_axes_table(preset.get("axes", {}), spath, f"scale.{scale}.axes"))

    zips = []
    raw_zips = doc.get("zip", [])
    if not isinstance(raw_zips, list):
        raise _err("zip", "must be an array of tables ([[zip]])", spath)
    for i, z in enumerate(raw_zips):
        group = _axes_table(z, spath, f"zip[{i}]", unique=False)
        if not group:
            raise _err(f"zip[{i}]", "is empty", spath)
        lengths = {k: len(v) for k, v in group.items()}
        if len(set(lengths.values())) > 1:
            raise _err(f"zip[{i}]", f"lists must have equal lengths, got {lengths}", spath)
        zips.append(group)

    seeds = None
    if "seeds" in doc:
        seeds = _seeds(doc["seeds"], spath, "seeds")
    if "seeds" in preset:
        seeds = _seeds(preset["seeds"], spath, f"scale.{scale}.seeds")

    seen: dict[str, str] = {k: "axes" for k in axes}
    for i, group in enumerate(zips):
        for k in group:
            if k in seen:
                raise _err(k, f"is varied twice (in {seen[k]} and zip[{i}])", spath)
            seen[k] = f"zip[{i}]"
    if seeds is not None and SEED_KEY in seen:
        raise _err(SEED_KEY, f"is varied twice (seeds and {seen[SEED_KEY]})", spath)

    extras = []
    raw_extras = doc.get("extra", [])
    if not isinstance(raw_extras, list):
        raise _err("extra", "must be an array of tables ([[extra]])", spath)
    for i, item in enumerate(raw_extras):
        item = dict(_check_table(item, f"extra[{i}]", spath))
        extra_axes = _axes_table(item.pop("axes", {}), spath, f"extra[{i}].axes")
        overrides = _config_table(item, spath, f"extra[{i}]")
        if not overrides and not extra_axes:
            raise _err(f"extra[{i}]", "is empty (give config overrides and/or an axes table)", spath)
        both = set(overrides) & set(extra_axes)
        if both:
            raise _err(sorted(both)[0], f"is both set and varied in extra[{i}]", spath)
        extras.append(ExtraSpec(overrides, extra_axes))

    excludes = _excludes(doc.get("exclude", []), spath, "exclude")
    excludes += _excludes(preset.get("exclude", []), spath, f"scale.{scale}.exclude")
    confirm = parse_confirm(doc.get("confirm"), spath)
    check_fresh_seeds(confirm, seeds, spath)
    return GridSpec(
        path=spath, text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), name=name.strip(),
        description=description, figure=figure, scale=scale, base=base, axes=axes, zips=zips,
        extras=extras, excludes=excludes, seeds=seeds, scales_defined=list(scales),
        marks=_marks(doc.get("mark", []), spath), report=report_options(exp, spath),
        claims=parse_claims(doc.get("claim"), spath, strict=strict_claims, confirm=confirm), plugins=plugins,
        confirm=confirm,
    )


def _plugins(value: Any, path: str) -> tuple[str, ...]:
    """`[experiment] plugins`: `grid_plugins` of them."""
    return () if value is None else grid_plugins(value, path, "experiment.plugins", path)


def grid_plugins(value: Any, path: str, key: str, source: str) -> tuple[str, ...]:
    """Plugins a grid names (`[experiment] plugins`, or the config key `plugins` in [base], an axis, `--set` or
    `--axis`): check the names (`cem_core.plugins.check_name`: never a module of the standard library, of cemctl, or
    one installed under a plugin's name), then import each (the grid's folder first on the import path) so that the
    variants they register are known before any run is validated; one line naming `key` and `source` if not."""
    try:
        names = parse_names(value, key=key)
        return load_grid_plugins(names, Path(path).resolve().parent)
    except ConfigError as e:
        where = key if e.key in ("plugins", key) else e.key
        raise ConfigError(where, e.message, value=e.value, allowed=e.allowed, source=source) from None

