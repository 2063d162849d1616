"""What every layer needs to know about plugins, and nothing more: which plugin is importing now, how a plugin
list is spelled, the error a plugin turns into, and the installed entry points (`cem_core.plugins` does the rest).

    with loading("my_layer"):      # while a plugin module is imported
        current_plugin()           # -> "my_layer": `cem_core.spec.register` tags the specs it adds
    canonical(["b", "a, b"])       # -> "a,b": the config form of `plugins`
    load_entry_points()            # the installed `cemctl.plugins` entry points, once per process

A leaf: it imports only `cem_core.errors` and the standard library, so the config types
(`cem_core.schema`), the registry mechanism (`cem_core.registry`) and `register`
(`cem_core.spec`) read it without importing anything above them. Torch-free.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import traceback
from pathlib import Path
from typing import Any, Iterable, Iterator

from cem_core.errors import CemError, ConfigError

ENTRY_POINT_GROUP = "cemctl.plugins"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

_loading: contextvars.ContextVar[str] = contextvars.ContextVar("cemctl_plugin_loading", default="")
LOADED: dict[str, str] = {}  # module name -> "" (imported) or the one-line reason it failed (once per process)
_entry_points_done = False


class PluginError(ConfigError):
    """A plugin that cannot be loaded (one line: the plugin, the reason)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__("plugins", f"{name}: {message}", value=name)


def current_plugin() -> str:
    """The plugin being imported right now ("" outside a plugin import): `register` tags its specs with it."""
    return _loading.get()


@contextlib.contextmanager
def loading(name: str) -> Iterator[None]:
    """Mark the block as the import of plugin `name` (what `current_plugin` answers inside it)."""
    token = _loading.set(name)
    try:
        yield
    finally:
        _loading.reset(token)


def parse_names(value: Any, *, key: str = "plugins") -> tuple[str, ...]:
    """'a, b.c' or ["a", "b.c"] -> ("a", "b.c") (sorted, unique); a name that is not a module path raises."""
    if value is None or value == "":
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ConfigError(key, f"must be a list of module names, got {type(value).__name__}", value=value)
    names = set()
    for item in items:
        name = item.strip() if isinstance(item, str) else item
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(key, f"{name!r} is not a module name", value=name,
                              allowed="dotted Python module names, e.g. my_layer or mypkg.variants")
        names.add(name)
    return tuple(sorted(names))


def canonical(value: Any, *, key: str = "plugins") -> str:
    """The config form of a plugin list: sorted, unique, comma-separated ("" for none)."""
    return ",".join(parse_names(value, key=key))


def _where(filename: str, roots: Iterable[Path]) -> str:
    """A source file as a user finds it: relative to the folder it was imported from, else its full path."""
    path = Path(os.path.abspath(filename))
    for root in roots:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            continue
    return str(path)


class ProcessExit(BaseException):
    """A plugin called os._exit while being imported (`cem_core.plugins` raises this instead, so the command ends
    with a line saying so: an exit 0 with nothing done would read as success)."""

    def __init__(self, code: object) -> None:
        super().__init__(f"called os._exit({code!r}) while being imported")


def describe_failure(exc: BaseException, roots: Iterable[Path] = ()) -> str:
    """One line for an exception raised while a plugin was imported: what it was, and the plugin's file and line
    (the innermost frame inside `roots`, the folders plugins are imported from; else the innermost frame)."""
    if isinstance(exc, CemError):
        return str(exc)
    roots = [Path(os.path.abspath(r)) for r in roots]
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{_where(exc.filename, roots)}, line {exc.lineno}" if exc.lineno else _where(exc.filename, roots)
        return f"syntax error in {where}: {' '.join(str(exc.msg).split())}"[:400]
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if any(_inside(f.filename, r) for r in roots)]
    frame = (mine or frames or [None])[-1]  # type: ignore[list-item]
    where = f" ({_where(frame.filename, roots)}:{frame.lineno})" if frame is not None else ""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}) while being imported{where}"
    if isinstance(exc, ProcessExit):
        return f"{exc}{where}"
    try:
        said = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose own __str__ fails: its type is what there is to say
        said = "(its message cannot be shown)"
    text = " ".join(f"{type(exc).__name__}: {said}".split())
    return text[:300] + where


def _inside(filename: str, root: Path) -> bool:
    try:
        Path(os.path.abspath(filename)).relative_to(root)
        return True
    except ValueError:
        return False


def load_entry_points() -> list[str]:
    """Load the installed `cemctl.plugins` entry points (once per process); returns their names."""
    global _entry_points_done
    if _entry_points_done:
        return []
    _entry_points_done = True
    from importlib.metadata import entry_points  # lazy for speed: only when a name is not found

    done = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        with loading(ep.module):
            try:
                ep.load()
            except ConfigError as e:
                raise PluginError(f"{ep.name} (entry point {ep.value})",
                                  e.message if e.key == "plugin" else str(e)) from None
            except (Exception, SystemExit) as e:  # noqa: BLE001 - a plugin's own bug: one line, never a traceback
                raise PluginError(f"{ep.name} (entry point {ep.value})", f"failed on import: {describe_failure(e)}") \
                    from None
        LOADED.setdefault(ep.module, "")
        done.append(ep.name)
    return done
