"""Plugins: new attention, MLP, preconditioner or task variants without editing cemctl (`cemctl plan`, every command).

    # my_layer.py, beside the grid (or an installed package)
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

The plugin's source is the truth: the file (or package) beside the grid, or the installed
package. `plan` checks it (`load_grid_plugins`): a name that is already taken by an
installed or standard-library module (`json`, `cem_core`, anything importable that is
not the plugin file itself) is refused, and so is a syntax error in any of its files; an
exception or `sys.exit()` while it is imported is one line naming the file and line.

The jobs need a copy they can import wherever they run: `plan` keeps one in the runs
root's `.plugins/` folder (`sync_plugin_copy`), with a manifest that lists each file's
size and sha256 and the folder its source is in. Every command that finds the runs root
(`cemctl.db.runs.resolve_runs_root`) reads the sources first (`add_search_path` of a
copy folder puts the recorded sources before it), so an edit beside the grid is seen by
`status` and `launch` without a re-plan; the commands that write (plan, launch, sync, import:
`refresh_plugin_copy`) refresh the copy from them, a reading command never; `launch`
then snapshots that copy for the jobs. A copy is only replaced while it is still what
cemctl wrote: a file edited inside `.plugins/` is refused with one line saying how to
keep the edit. A source that is gone (a runs folder on another machine) leaves the copy
in use. Plugin folders come after the installed packages on the import path, so a
plugin never hides an installed module.

The variants a plugin registers carry its name (`spec.plugin`). A run's code fingerprint
(`cem_core.fingerprint`) counts the source of the plugins whose variants its config uses
(`used_plugins`), so a plugin edit makes only those runs outdated. Torch-free: a plugin
module should import torch inside its classes' module only.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from cem_core import variants as V
from cem_core.errors import ConfigError
from cem_core.plugin_context import (  # re-exported: the public plugin API names them here
    ENTRY_POINT_GROUP,
    LOADED,
    PluginError,
    ProcessExit,
    canonical,
    current_plugin,
    describe_failure,
    load_entry_points,
    loading,
    parse_names,
)
from cem_core.runfiles import RunFileError, atomic_write_bytes
from cem_core.runfiles.lock import file_lock
from cem_core.runfiles.manifest import DEFAULT_NAME, FileEntry, Manifest, ManifestError, read_manifest, write_manifest

__all__ = [
    "ENTRY_POINT_GROUP", "IMPORTED_DIR", "PLUGINS_DIR", "PluginCopyError", "PluginError", "Untrusted", "add_search_path",
    "canonical", "check_not_taken", "current_plugin", "installed_plugins", "load_entry_points", "load_grid_plugins",
    "load_plugins", "parse_names", "plugin_sources", "sync_plugin_copy", "trust_plugin", "untrusted_plugins",
    "used_plugins",
]

PLUGINS_DIR = ".plugins"  # inside a runs root: the copy of the plugin sources the jobs import
COPY_WHAT = "plugins"  # the purpose the copy's manifest names
IMPORTED_DIR = ".plugins-imported"  # inside a runs root: plugin sources archives brought, inert until trusted
IMPORTED_WHAT = "imported plugin"  # the purpose their manifests name
OWN_PACKAGES = ("cem_core", "cemctl")
_sources: list[Path] = []  # folders plugin sources are imported from (grid folders, recorded sources); last added first
_copies: list[Path] = []  # runs roots' .plugins/ copies: looked in after every source
_on_path: list[str] = []  # what this module put on sys.path
_loaded = LOADED  # module name -> "" or why it failed (the one table, `cem_core.plugin_context.LOADED`)
_untrusted: dict[str, Path] = {}  # plugin -> the folder an archive left it in, waiting for `cemctl trust` (messages)


class PluginCopyError(RunFileError):
    """The runs root's copy of a plugin cannot be refreshed without losing something (one line: how to recover)."""


# ---------------------------------------------------------------------------------------------- the import path

def add_search_path(folder: str | Path) -> None:
    """Look for plugin modules in `folder` (a grid's folder) after the installed packages; the folder added last is
    looked in first. A runs root's `.plugins/` copy adds the sources its manifest records first, and itself after
    every source (the copy is used only where a source is gone)."""
    folder = Path(folder).resolve()
    if folder.name == PLUGINS_DIR:
        for source in _recorded_sources(folder).values():
            _add(_sources, source)
        _add(_copies, folder)
    else:
        _add(_sources, folder)
    _sync_sys_path()


def _add(folders: list[Path], folder: Path) -> None:
    if folder in folders:
        folders.remove(folder)
    folders.append(folder)


def _sync_sys_path() -> None:
    for entry in _on_path:
        while entry in sys.path:
            sys.path.remove(entry)
    _on_path[:] = [str(f) for f in [*reversed(_sources), *reversed(_copies)]]
    sys.path.extend(_on_path)  # after the installed packages: a plugin never hides an installed module
    importlib.invalidate_caches()


def _import(name: str, search: Iterable[Path]) -> None:
    check_not_taken(name)  # whoever named it (a config read from a run folder too)
    for folder in search:
        _add(_sources, Path(folder).resolve())
    _sync_sys_path()
    check_syntax(name)
    try:
        with loading(name), _no_process_exit():
            importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            top = name.split(".")[0]
            if top in _untrusted:
                raise PluginError(name, f"an archive brought it ({_untrusted[top]}), and nothing from an archive runs "
                                  f"until you trust it: read its files, then `cemctl trust {top}`") from None
            raise PluginError(name, "no such module (put it beside the grid file, or install it)") from None
        raise PluginError(name, f"failed on import: {describe_failure(e, _import_roots())}") from None
    except PluginError:
        raise
    except ConfigError as e:  # register() refused a spec: the reason names the variant
        raise PluginError(name, e.message if e.key == "plugin" else str(e)) from None
    except SyntaxError as e:
        raise PluginError(name, describe_failure(e, _import_roots())) from None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - a plugin's own bug or exit (any kind): one line, never a traceback
        raise PluginError(name, f"failed on import: {describe_failure(e, _import_roots())}") from None


@contextlib.contextmanager
def _no_process_exit() -> Iterator[None]:
    import posix

    def refuse(code: Any = 0) -> None:
        raise ProcessExit(code)

    saved = os._exit
    os._exit = posix._exit = refuse  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit = posix._exit = saved


def _import_roots() -> list[Path]:
    return [*_sources, *_copies]


def load_plugins(names: Any, *, search: Iterable[Path] = ()) -> tuple[str, ...]:
    """Import each plugin module once (the folders in `search` are added as sources first); returns the names. Every
    file of a plugin must parse (`check_syntax`). A plugin that failed once fails again with the same line."""
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


def load_grid_plugins(names: Any, folder: str | Path) -> tuple[str, ...]:
    """A grid's `[experiment] plugins`, found beside the grid (`folder`) or installed: names that belong to another
    module refused (`check_name`), every file parsed, each imported; one `PluginError` line otherwise."""
    names = parse_names(names)
    folder = Path(folder).resolve()
    add_search_path(folder)
    for name in names:
        check_name(name, folder)
    return load_plugins(names)


# ---------------------------------------------------------------------------------------------- checks at plan

def _beside(folder: Path, top: str) -> Path | None:
    """The plugin `top` in `folder`: its module file or its package folder (None when there is none)."""
    for path in (folder / f"{top}.py", folder / top):
        if path.is_file() or (path.is_dir() and not path.name.startswith(".")):
            return path
    return None


def _found_elsewhere(top: str, exclude: Iterable[Path]) -> str | None:
    """Where `top` is imported from when the plugin folders are not on the path (None when nowhere)."""
    module = sys.modules.get(top)
    excluded = {Path(p).resolve() for p in exclude}
    if module is not None:
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", []) or []), None)
        if where is None:
            return f"the built-in module {top!r}"
        if not any(_inside(Path(where), p) for p in excluded):
            return str(where)
    path = [p for p in sys.path if Path(os.path.abspath(p or ".")).resolve() not in excluded]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(top, path) if finder is importlib.machinery.PathFinder else find(top, None)
        except Exception:  # noqa: BLE001 - a third-party finder's own failure: it finds nothing here
            continue
        if spec is not None:
            where = spec.origin if spec.origin not in (None, "built-in", "frozen") else None
            if where is None and spec.submodule_search_locations:
                where = next(iter(spec.submodule_search_locations), None)
            return str(where or f"the {spec.origin or 'built-in'} module {top!r}")
    return None


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.abspath(path)).resolve().relative_to(folder)
        return True
    except ValueError:
        return False


def check_not_taken(name: str) -> None:
    """Refuse a plugin named like a module of Python's standard library or of cemctl itself: no config, grid or
    archive makes cemctl import one of those as a plugin."""
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise PluginError(name, f"{top!r} is the name of a module of Python's standard library; give the plugin "
                          "another name")
    if top in OWN_PACKAGES:
        raise PluginError(name, f"{top!r} is the name of cemctl's own package; give the plugin another name")


def installed_plugins() -> set[str]:
    """The top-level modules installed distributions declare as cemctl plugins (entry points; nothing imported)."""
    from importlib.metadata import entry_points

    return {ep.value.split(":")[0].split(".")[0] for ep in entry_points(group=ENTRY_POINT_GROUP)}


def check_name(name: str, folder: Path) -> None:
    """Refuse a plugin whose top-level name belongs to another module: Python's standard library, cemctl's own
    packages, or (for a plugin beside the grid) any module importable without the plugin folders."""
    top = name.split(".")[0]
    check_not_taken(name)
    own = _beside(folder, top)
    if own is None:
        return  # an installed plugin (or none: the import says so)
    other = _found_elsewhere(top, [folder, *_sources, *_copies])
    if other is not None:
        raise PluginError(name, f"{top!r} is also the name of an installed module ({other}), which Python would import "
                          f"instead of {own}; give the plugin another name")


def check_syntax(name: str) -> None:
    """Every .py file of the plugin (its top-level package: also the files its __init__ does not import) parses;
    one `PluginError` line naming the file and line otherwise."""
    top = name.split(".")[0]
    root = _root_of(top)
    if root is None:
        return
    for rel, path in plugin_sources(top, root):
        try:
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        except SyntaxError as e:
            raise PluginError(name, describe_failure(e, [root])) from None
        except (ValueError, UnicodeDecodeError) as e:  # NUL bytes, a bad encoding
            raise PluginError(name, f"cannot compile {rel}: {' '.join(str(e).split())}") from None
        except OSError as e:
            raise PluginError(name, f"cannot read {rel}: {e.strerror or e}") from None


def _root_of(top: str) -> Path | None:
    """The folder the plugin `top` is imported from (where its source is), None when it is not found or installed."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        location = Path(next(iter(spec.submodule_search_locations)))
        root = location.parent
    elif spec.origin and spec.origin.endswith(".py"):
        root = Path(spec.origin).parent
    else:
        return None
    return None if _installed(root) else root.resolve()


# ---------------------------------------------------------------------------------------------- what a run uses

def used_variants(cfg: Any) -> list[tuple[str, Any]]:
    """(config key, spec) of every registered variant a config uses: its attention, MLP, preconditioners and task."""
    m = cfg.model
    out = []
    for key, registry, name in (("model.attention", V.ATTENTION, m.attention), ("model.mlp", V.MLPS, m.mlp),
                                ("model.attn_precond", V.PRECONDITIONERS, m.attn_precond),
                                ("model.mlp_precond", V.PRECONDITIONERS, m.mlp_precond), ("task", V.TASKS, cfg.task)):
        if isinstance(name, str) and name in registry:
            out.append((key, registry.spec(name)))
    return out


def unread_keys(cfg: Any) -> tuple[str, ...]:
    """The model.* keys a config sets that build nothing in its model: a key some attention or MLP variant reads
    (its spec's `uses`) that the config's own attention and MLP do not (`model.attn_steps` of a Llama), and a
    `*_precond_rank` whose preconditioner has no rank (`model.mlp_precond_rank` with `mlp_precond = "diag"`). Two
    runs that differ only in these train the same model (`cemctl plan` says so)."""
    m = cfg.model
    variant_keys = {u for reg in (V.ATTENTION, V.MLPS) for spec in reg.specs() for u in (spec.uses or ())}
    used = dict(used_variants(cfg))
    read = {u for key in ("model.attention", "model.mlp") if key in used for u in (used[key].uses or ())}
    unread = variant_keys - read
    for side in ("attn", "mlp"):
        precond = used.get(f"model.{side}_precond")
        if f"{side}_precond_rank" in read and precond is not None and not getattr(precond, "reads_rank", True):
            unread.add(f"{side}_precond_rank")
    return tuple(sorted(f"model.{k}" for k in unread if hasattr(m, k)))


def reader_of(key: str) -> str:
    """The config key whose value decides whether `key` is read (`unread_keys` names it): a sublayer's preconditioner
    for its `*_precond_rank`, else the sublayer whose variants' specs use the key ('model.mlp' for
    model.param_match_factor); '' for a key no variant reads."""
    name = key.removeprefix("model.")
    if name.endswith("_precond_rank"):
        return f"model.{name.removesuffix('_precond_rank')}_precond"
    for config_key, reg in (("model.attention", V.ATTENTION), ("model.mlp", V.MLPS)):
        if any(name in (spec.uses or ()) for spec in reg.specs()):
            return config_key
    return ""


def used_plugins(cfg: Any) -> tuple[str, ...]:
    """The plugin modules a config's numbers depend on: the plugin of every variant it uses (its attention, MLP,
    preconditioners and task). A plugin the config loads but whose names it does not use is not one of them."""
    return tuple(sorted({getattr(spec, "plugin", "") for _, spec in used_variants(cfg)} - {""}))


def loaded_plugins(cfg: Any) -> tuple[str, ...]:
    """What `used_plugins` returned before it counted only the names a config uses (every plugin the config loads,
    too): the code fingerprints of runs trained before are judged with it as well (`cemctl.db.outdated`)."""
    return tuple(sorted({*parse_names(getattr(cfg, "plugins", "")), *used_plugins(cfg)}))


# ---------------------------------------------------------------------------------------------- sources and the copy

def _installed(path: Path) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in path.parts)


def plugin_sources(name: str, root: str | Path | None = None) -> list[tuple[str, Path]]:
    """(path relative to the import root, file) of a plugin's source: a module file, or every .py file of its
    top-level package, in `root` (default: where it is imported from). Installed distributions (site-packages)
    have none: every job finds them as they are."""
    top = name.split(".")[0]
    root = Path(root) if root is not None else _root_of(top)
    if root is None:
        return []
    package = root / top
    if package.is_dir() and not package.is_symlink():
        return [(f"{top}/{p.relative_to(package).as_posix()}", p) for p in sorted(package.rglob("*.py"))
                if "__pycache__" not in p.parts and p.is_file()]
    module = root / f"{top}.py"
    return [(module.name, module)] if module.is_file() else []


def _recorded_sources(copy: Path) -> dict[str, Path]:
    """The source folder of each plugin the copy's manifest records (those that still hold the plugin)."""
    try:
        manifest = read_manifest(copy, DEFAULT_NAME, what=COPY_WHAT)
    except ManifestError:
        return {}
    return {top: folder for top, folder in _sources_of(manifest, copy.parent).items() if _beside(folder, top)}


def _sources_of(manifest: Manifest | None, runs_root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    recorded = manifest.extra.get("sources") if manifest is not None else None
    for top, where in (recorded.items() if isinstance(recorded, dict) else ()):
        if not isinstance(where, dict):
            continue
        for key in ("relative", "path"):  # relative to the runs root first: a project copied elsewhere
            value = where.get(key)
            if isinstance(value, str) and value:
                folder = (runs_root / value) if key == "relative" else Path(value)
                if _beside(folder, top):
                    out[top] = folder.resolve()
                    break
        else:
            if isinstance(where.get("path"), str):
                out.setdefault(top, Path(where["path"]))
    return out


def _digest(data: bytes) -> FileEntry:
    return FileEntry(len(data), hashlib.sha256(data).hexdigest())


def sync_plugin_copy(runs_root: str | Path, names: Iterable[str] = (), *, folders: dict[str, Path] | None = None) -> list[str]:
    """Make the runs root's `.plugins/` copy what the sources are now: the plugins `names` (just loaded from their
    sources), those of `folders` (plugin -> its source folder: what `trust_plugin` adds) and every plugin the copy's
    manifest records. Returns the relative paths written or removed.

    A file is replaced or removed only while it is still what cemctl wrote (its manifest entry); a file edited in
    the copy, or one an older cemctl wrote without a manifest that differs from its source, raises
    `PluginCopyError` (one line saying how to keep the edit), and nothing is written. A source that is gone leaves
    its copy as it is. Nothing at all is written when the copy is current."""
    root = Path(runs_root)
    dest = root / PLUGINS_DIR
    real_dest = Path(os.path.realpath(root)) / PLUGINS_DIR
    if os.path.islink(dest) or (dest.exists() and not dest.is_dir()):
        raise PluginCopyError(f"{dest}: refused: a symbolic link or a file where cemctl keeps the copy of the plugin "
                              f"sources the jobs import (to {os.path.realpath(dest)}); remove it and plan again")
    manifest = _copy_manifest(dest)
    sources = _sources_of(manifest, root)
    for name in names:
        top = name.split(".")[0]
        folder = _root_of(top)
        if folder is not None and not _inside(folder, real_dest) and folder.name != PLUGINS_DIR:
            sources[top] = folder
    sources.update({top: Path(folder).resolve() for top, folder in (folders or {}).items()})
    wanted = {top: folder for top, folder in sources.items() if _beside(folder, top)}
    if not wanted and manifest is None:
        return []
    plan = _copy_plan(dest, manifest, wanted)
    if plan is None:
        return []
    with file_lock(dest / ".lock", make_parents=True):
        manifest = _copy_manifest(dest)
        plan = _copy_plan(dest, manifest, wanted)  # again, under the lock: another command may have done it
        if plan is None:
            return []
        writes, removals, entries = plan
        for rel in removals:
            os.unlink(dest / rel)
        for rel, data in writes.items():
            target = dest / rel
            if Path(os.path.realpath(target.parent)) != (real_dest / rel).parent:
                raise PluginCopyError(f"{target}: refused: a symbolic link on the way to where cemctl keeps the "
                                      f"plugin copies (to {os.path.realpath(target.parent)}); remove it and plan again")
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target, data)
        recorded = {top: {"path": str(folder), "relative": os.path.relpath(folder, root.resolve())}
                    for top, folder in sorted(sources.items())}
        write_manifest(dest, what=COPY_WHAT, files=entries, extra={"sources": recorded})
    return sorted([*writes, *removals])


def _copy_manifest(dest: Path) -> Manifest | None:
    if not os.path.lexists(dest / DEFAULT_NAME):
        return None
    try:
        return read_manifest(dest, DEFAULT_NAME, what=COPY_WHAT)
    except ManifestError as e:
        raise PluginCopyError(f"{e}; the copy of the plugin sources cannot be refreshed without it: remove "
                              f"{dest} (the sources beside the grid are the truth) and plan again") from None


def _copy_plan(dest: Path, manifest: Manifest | None,
               wanted: dict[str, Path]) -> tuple[dict[str, bytes], list[str], dict[str, FileEntry]] | None:
    """(files to write, files to remove, the manifest's entries afterwards), None when the copy is current."""
    listed = dict(manifest.files) if manifest is not None else {}
    entries = dict(listed)
    writes: dict[str, bytes] = {}
    removals: list[str] = []
    for top, folder in wanted.items():
        source = {rel: path for rel, path in plugin_sources(top, folder)}
        for rel, path in source.items():
            data = path.read_bytes()
            new = _digest(data)
            have = _current(dest / rel)
            if have != new:
                _may_replace(dest / rel, have, listed.get(rel), path)
                writes[rel] = data
            entries[rel] = new
        for rel in [r for r in listed if _top_of(r) == top and r not in source]:  # a file the source no longer has
            have = _current(dest / rel)
            if have is not None:
                _may_replace(dest / rel, have, listed[rel], folder / rel)
                removals.append(rel)
            entries.pop(rel)
    if not writes and not removals and manifest is not None and _same_sources(manifest, wanted) and entries == listed:
        return None
    return writes, removals, entries


def _top_of(rel: str) -> str:
    return rel.split("/")[0].removesuffix(".py")


def _same_sources(manifest: Manifest, wanted: dict[str, Path]) -> bool:
    recorded = manifest.extra.get("sources")
    if not isinstance(recorded, dict):
        return False
    return all(isinstance(recorded.get(top), dict) and recorded[top].get("path") == str(folder)
               for top, folder in wanted.items())


def _current(path: Path) -> FileEntry | None:
    """Size and sha256 of a file of the copy (None when it is not there; a link or a special file raises)."""
    if not os.path.lexists(path):
        return None
    if os.path.islink(path) or not path.is_file():
        raise PluginCopyError(f"{path}: refused: not a regular file where cemctl keeps a copy of a plugin source; "
                              "remove it and plan again")
    return _digest(path.read_bytes())


def _may_replace(path: Path, have: FileEntry | None, recorded: FileEntry | None, source: Path) -> None:
    """Raise unless the copy's file is absent or exactly what cemctl wrote (its manifest entry)."""
    if have is None or have == recorded:
        return
    if recorded is None:
        why = "no manifest of cemctl's lists it (an older cemctl copied it at plan), and it differs from its source"
    else:
        why = "it was edited after cemctl copied it"
    raise PluginCopyError(f"{path}: refused: {why} {source}, which plan, status and the jobs read now; to keep "
                          f"the edit, copy it into {source}; then delete {path} and run the command again")


# ---------------------------------------------------------------------------------------------- sources from archives

@dataclass(frozen=True)
class Untrusted:
    """A plugin's sources an archive brought (`cemctl import`), kept inert: nothing imports them, and the jobs' copy
    does not take them, until `trust_plugin`."""
    name: str  # the plugin's top-level name
    folder: Path  # <runs>/.plugins-imported/<digest>
    files: dict[str, FileEntry]  # path relative to `folder` -> size and sha256: exactly what trusting takes
    archive: str  # the archive's file name


def untrusted_plugins(runs_root: str | Path) -> list[Untrusted]:
    """The plugin sources archives left in `runs_root` that the jobs' copy does not take from their folder (sorted
    by name, then folder). Reads manifests only; a folder without a readable one of cemctl's is not listed."""
    root = Path(runs_root)
    imported = root / IMPORTED_DIR
    if not imported.is_dir():
        return []
    try:
        copy = read_manifest(root / PLUGINS_DIR, DEFAULT_NAME, what=COPY_WHAT)
    except ManifestError:
        copy = None
    trusted = {(top, folder) for top, folder in _sources_of(copy, root).items()}
    out = []
    for folder in sorted(p for p in imported.iterdir() if not p.name.startswith(".") and p.is_dir()):
        try:
            manifest = read_manifest(folder, DEFAULT_NAME, what=IMPORTED_WHAT)
        except ManifestError:
            continue
        archive = str(manifest.extra.get("archive", ""))
        for top in sorted({_top_of(rel) for rel in manifest.files}):
            if (top, folder.resolve()) not in trusted:
                files = {rel: e for rel, e in sorted(manifest.files.items()) if _top_of(rel) == top}
                out.append(Untrusted(top, folder, files, archive))
    return out


def note_untrusted(runs_root: str | Path) -> None:
    """Remember which plugins wait for trust in `runs_root`, so that a config naming one says so (never imports)."""
    for u in untrusted_plugins(runs_root):
        _untrusted.setdefault(u.name, u.folder)


def trust_plugin(runs_root: str | Path, name: str) -> Untrusted:
    """Trust the plugin `name` an archive brought: its files, checked again against the sha256s `untrusted_plugins`
    listed, become the source of the jobs' copy (`sync_plugin_copy`), so commands and jobs import it from now on.
    Nothing is imported here. A `ConfigError` line when there is no such plugin or its folder changed."""
    root = Path(runs_root)
    name = name.split(".")[0]  # a plugin is trusted whole: its top-level package
    waiting = untrusted_plugins(root)
    found = [u for u in waiting if u.name == name]
    if not found:
        raise ConfigError("trust", f"no plugin {name!r} from an archive waits for trust in {root / IMPORTED_DIR}",
                          value=name, allowed=sorted({u.name for u in waiting}) or None)
    if len(found) > 1:
        raise ConfigError("trust", f"archives brought {len(found)} versions of the plugin {name!r} "
                          f"({', '.join(str(u.folder) for u in found)}); remove all but the one to trust", value=name)
    u = found[0]
    try:
        check_name(name, u.folder)  # never a name Python would take for another module
    except PluginError as e:
        raise ConfigError("trust", f"{e.message}; nothing was trusted", value=name) from None
    top = u.folder / name if (u.folder / name).is_dir() else u.folder / f"{name}.py"
    found_files = {p.relative_to(u.folder).as_posix() for p in ([top] if top.is_file() else top.rglob("*"))
                   if not p.is_dir()}
    extra = sorted(found_files - set(u.files))  # a planted __pycache__/*.pyc would run instead of its source
    have = {rel: _digest(path.read_bytes()) for rel, path in plugin_sources(name, u.folder)}
    if extra or have != u.files:
        changed = extra or sorted(set(have) ^ set(u.files) | {r for r in have if r in u.files and have[r] != u.files[r]})
        raise ConfigError("trust", f"{u.folder / changed[0]} is not a file the archive brought (sha256s in "
                          f"{u.folder / DEFAULT_NAME}); nothing was trusted", value=name)
    sync_plugin_copy(root, folders={name: u.folder})
    _untrusted.pop(name, None)
    return u
