"""Domain errors shared by cem_core and cemctl (used by every command).

`ConfigError` is the one error bad input turns into: it names the key (dotted),
the offending value and the allowed values, and renders as a single line. The
CLI prefixes the file name and exits with code 2.
"""

from __future__ import annotations

from typing import Any, Iterable


class CemError(Exception):
    """Base class of every error cemctl turns into a clean one-line message."""


class ConfigError(CemError, ValueError):
    """A bad configuration value: names the key, the value and what is allowed."""

    def __init__(
        self,
        key: str,
        message: str,
        *,
        value: Any = None,
        allowed: Iterable[Any] | str | None = None,
        source: str | None = None,
    ) -> None:
        self.key = key
        self.message = message
        self.value = value
        if allowed is not None and not isinstance(allowed, str):
            allowed = ", ".join(str(a) for a in allowed)
        self.allowed = allowed
        self.source = source
        super().__init__(self.one_line())

    def with_source(self, source: str) -> "ConfigError":
        """The same error, attributed to a file (grid file, config file)."""
        return ConfigError(self.key, self.message, value=self.value, allowed=self.allowed, source=source)

    def one_line(self) -> str:
        where = f"{self.source}: " if self.source else ""
        allowed = f" (allowed: {self.allowed})" if self.allowed else ""
        text = f"{where}{self.key}: {self.message}{allowed}"
        return " ".join(text.split())  # never more than one line


class RunDiverged(CemError):
    """A training run produced a non-finite loss."""

    def __init__(self, step: int, loss: float) -> None:
        self.step = step
        self.loss = loss
        super().__init__(f"non-finite loss {loss} at step {step}")
