"""Plugins: new attention, MLP, preconditioner or task variants without editing cemctl (`cemctl plan`, every command).

    # my_layer.py, beside the grid (or any importable module)
    from cem_core.spec import AttentionSpec, register
    register(AttentionSpec(name="gated_cem", module="my_layer:GatedCEMAttention", ...))

    # grid.toml
    [experiment]
    plugins = ["my_layer"]          # every run of the grid gets "plugins" = "my_layer"
    [axes]
    "model.attention" = ["cem", "gated_cem"]

A plugin is a Python module that calls `cem_core.spec.register(...)` when it is
imported. Two ways to name one:

- the config key `plugins` (comma-separated module names; `[experiment] plugins`
  sets it for every run of a grid): the modules are imported before the config is
  validated, by every process that reads it (plan, the trainer, eval, report);
- an installed distribution's entry point in the group `cemctl.plugins`: loaded the
  first time a name is not found in a registry (a report of a plugin variant needs no
  config key then).

Where a module named in a grid is found: the grid file's folder first (`plan` puts it
on the import path), then the runs root's `.plugins/` folder (plan copies each plugin's
source there, so that status, report and the jobs find it wherever they run), then the
installed packages. A plugin that cannot be imported, raises on import, or registers a
name already taken is one line naming the plugin and the reason (exit 2), never a
traceback. The variants a plugin registers carry its name (`spec.plugin`), and the
code fingerprint of a run counts the plugin's source (`cem_core.fingerprint`).
Torch-free: a plugin module should import torch inside its classes' module only.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Iterable

from cem_core import variants as V
from cem_core.errors import ConfigError
from cem_core.plugin_context import (  # re-exported: the public plugin API names them here
    ENTRY_POINT_GROUP,
    LOADED,
    PluginError,
    canonical,
    current_plugin,
    describe_failure,
    load_entry_points,
    loading,
    parse_names,
)
from cem_core.runfiles import RunFileError, atomic_write_bytes

__all__ = [
    "ENTRY_POINT_GROUP", "PLUGINS_DIR", "PluginError", "add_search_path", "canonical", "copy_sources",
    "current_plugin", "load_entry_points", "load_plugins", "parse_names", "plugin_sources", "used_plugins",
]

PLUGINS_DIR = ".plugins"  # inside a runs root: the plugin sources plan copied
_search: list[Path] = []  # folders looked in before the installed packages (add_search_path)
_loaded = LOADED  # module name -> "" or why it failed (the one table, `cem_core.plugin_context.LOADED`)


def add_search_path(folder: str | Path) -> None:
    """Look for plugin modules in `folder` (a grid's folder, a runs root's .plugins/) before the installed packages;
    the folder added last is looked in first."""
    folder = Path(folder).resolve()
    if folder in _search:
        _search.remove(folder)
    _search.append(folder)


def _import(name: str, search: Iterable[Path]) -> None:
    for folder in [*_search, *(Path(f).resolve() for f in search)]:
        if folder.is_dir():
            if str(folder) in sys.path:
                sys.path.remove(str(folder))
            sys.path.insert(0, str(folder))
    try:
        with loading(name):
            importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise PluginError(name, "no such module (put it beside the grid file, in the runs root's "
                              f"{PLUGINS_DIR}/ folder, or install it)") from None
        raise PluginError(name, f"failed on import: {describe_failure(e, _search)}") from None
    except PluginError:
        raise
    except ConfigError as e:  # register() refused a spec: the reason names the variant
        raise PluginError(name, e.message if e.key == "plugin" else str(e)) from None
    except Exception as e:  # noqa: BLE001 - a plugin's own bug: one line, never a traceback
        raise PluginError(name, f"failed on import: {describe_failure(e, _search)}") from None


def load_plugins(names: Any, *, search: Iterable[Path] = ()) -> tuple[str, ...]:
    """Import each plugin module once (the grid folder and `.plugins/` folders in `search` come first on the import
    path); returns the names. A plugin that failed once fails again with the same line."""
    names = parse_names(names)
    for name in names:
        if name in _loaded:
            if _loaded[name]:
                raise PluginError(name, _loaded[name])
            continue
        try:
            _import(name, search)
        except PluginError as e:
            _loaded[name] = e.message.split(": ", 1)[1]
            raise
        _loaded[name] = ""
    return names


def used_plugins(cfg: Any) -> tuple[str, ...]:
    """The plugin modules a config's numbers depend on: its `plugins` and the plugin of every variant it uses."""
    names = set(parse_names(getattr(cfg, "plugins", "")))
    m = cfg.model
    for registry, name in ((V.ATTENTION, m.attention), (V.MLPS, m.mlp), (V.PRECONDITIONERS, m.attn_precond),
                           (V.PRECONDITIONERS, m.mlp_precond), (V.TASKS, cfg.task)):
        if name in registry:
            plugin = getattr(registry.spec(name), "plugin", "")
            if plugin:
                names.add(plugin)
    return tuple(sorted(names))


def _installed(path: Path) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in path.parts)


def plugin_sources(name: str) -> list[tuple[str, Path]]:
    """(path relative to the import root, file) of a plugin's source: a module file, or every .py file of its
    top-level package. Installed distributions (site-packages) are not copied: every job finds them as they are."""
    top = name.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.origin is None or _installed(Path(spec.origin)):
        return []
    if spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0])
        return [(f"{top}/{p.relative_to(root).as_posix()}", p) for p in sorted(root.rglob("*.py"))
                if "__pycache__" not in p.parts]
    origin = Path(spec.origin)
    return [(origin.name, origin)] if origin.suffix == ".py" else []


def copy_sources(names: Iterable[str], dest: Path) -> list[str]:
    """Copy the plugins' sources into `dest` (a runs root's `.plugins/`), so that status, report and the jobs
    import the code that was planned wherever they run; returns the relative paths written. Each file is
    replaced atomically by the current source (the code fingerprint notices a change)."""
    dest = Path(dest)
    real_dest = Path(os.path.realpath(dest.parent)) / dest.name
    written = []
    for name in parse_names(",".join(names)):
        for rel, path in plugin_sources(name):
            target = dest / rel
            if Path(os.path.realpath(target)) != real_dest / rel:  # a link on the way: never write through it
                raise RunFileError(f"{target}: refused: a symbolic link where cemctl keeps the plugin sources it "
                                   f"copies (to {os.path.realpath(target)}); remove it and plan again")
            data = path.read_bytes()
            try:
                same = target.is_file() and target.read_bytes() == data
            except OSError:
                same = False
            if not same:
                target.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(target, data)
                written.append(rel)
    return written
