"""The one registry mechanism for every named choice (variants, tokenizers, corpora, executors, figure kinds, scales).

    ATTENTION = Registry("attention", "model.attention")
    ATTENTION.register_lazy("cem", "cem_core.model.attention:CEMAttention", "T gradient steps on ...")
    ATTENTION.check("cem")        # validates without importing anything (torch-free commands)
    ATTENTION.get("cem")          # imports cem_core.model.attention, returns CEMAttention
    ATTENTION.names(); ATTENTION.describe("cem")

Entries are either objects (`register(name)` as a decorator, or `add(name,
obj)`) or lazy "module:attribute" strings, resolved on first `get`. Unknown
names raise a `ConfigError` that names the config key and lists the known
names, so every command validates names the same way.

`Registry(kind, key, builtins="cem_core.variants")`: the module that declares the
registry's own entries, imported (once) before the registry is first read or added
to, so that cemctl's own names are always there first (a plugin never takes one).
It is named, not imported, because that module sits above the registry; the same
way a lazy entry names the module that implements it.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, Iterator, TypeVar

from cem_core.errors import ConfigError
from cem_core.plugin_context import load_entry_points

T = TypeVar("T")


class _Lazy:
    __slots__ = ("target",)

    def __init__(self, target: str) -> None:
        if ":" not in target:
            raise ValueError(f"lazy registry target must be 'module:attribute', got {target!r}")
        self.target = target

    def load(self) -> Any:
        module, _, attr = self.target.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


class Registry(Generic[T]):
    """A named set of choices; `key` is the config field or option that selects one."""

    def __init__(self, kind: str, key: str, *, builtins: str = "") -> None:
        self.kind = kind
        self.key = key
        self._items: dict[str, Any] = {}
        self._descriptions: dict[str, str] = {}
        self._specs: dict[str, Any] = {}  # name -> its spec (cem_core.spec), for the variant registries
        self._builtins = builtins  # the module declaring the registry's own entries (imported on first use)

    def _ensure_builtins(self) -> None:
        if self._builtins:
            module, self._builtins = self._builtins, ""  # first: that module registers into this registry
            try:
                importlib.import_module(module)
            except BaseException:
                self._builtins = module
                raise

    def _put(self, name: str, entry: Any, description: str) -> None:
        self._ensure_builtins()
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._items[name] = entry
        self._descriptions[name] = description

    def register(self, name: str, description: str = "") -> Callable[[T], T]:
        """Decorator: register the decorated object under `name`."""
        def deco(obj: T) -> T:
            self._put(name, obj, description)
            return obj

        return deco

    def add(self, name: str, obj: T, description: str = "") -> T:
        self._put(name, obj, description)
        return obj

    def register_lazy(self, name: str, target: str, description: str = "") -> None:
        """Register "module:attribute", imported only when `get(name)` asks for it."""
        self._put(name, _Lazy(target), description)

    def register_spec(self, spec: Any) -> None:
        """Register a variant's spec (`cem_core.spec`): its module lazily, its description, the spec itself."""
        self._put(spec.name, _Lazy(spec.module), spec.description)
        self._specs[spec.name] = spec

    def spec(self, name: Any, *, key: str | None = None) -> Any:
        """The spec of a registered variant (nothing is imported); a ConfigError listing the names otherwise."""
        self.check(name, key=key)
        return self._specs[name]

    def specs(self) -> list[Any]:
        self._ensure_builtins()
        return [self._specs[n] for n in self._items if n in self._specs]

    def check(self, name: Any, *, key: str | None = None) -> str:
        """`name` if it is registered (nothing is imported), else a ConfigError listing the known names. A name not
        found loads the installed plugins' entry points first (once per process: `cem_core.plugin_context`)."""
        self._ensure_builtins()
        if isinstance(name, str) and name not in self._items and self._specs:
            load_entry_points()
        if not isinstance(name, str) or name not in self._items:
            raise ConfigError(key or self.key, f"unknown {self.kind} {name!r}", value=name, allowed=self.names())
        return name

    def get(self, name: str, *, key: str | None = None) -> T:
        self.check(name, key=key)
        entry = self._items[name]
        if isinstance(entry, _Lazy):
            entry = self._items[name] = entry.load()
        return entry

    def describe(self, name: str) -> str:
        self.check(name)
        return self._descriptions.get(name, "")

    def names(self) -> tuple[str, ...]:
        self._ensure_builtins()
        return tuple(self._items)

    def __contains__(self, name: object) -> bool:
        self._ensure_builtins()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self._ensure_builtins()
        return iter(self._items)

    def __len__(self) -> int:
        self._ensure_builtins()
        return len(self._items)
