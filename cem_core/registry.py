"""Name -> implementation registries for every variant (attention, MLP, preconditioner, ...).

Used by `cem_core.model` (and by the executors and report kinds on the cemctl
side). Unknown names raise a `ConfigError` that names the config key and lists
the known names.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from cem_core.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named set of variants; `key` is the config field that selects one."""

    def __init__(self, kind: str, key: str) -> None:
        self.kind = kind
        self.key = key
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(self.key, f"unknown {self.kind} {name!r}", value=name, allowed=self.names()) from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
