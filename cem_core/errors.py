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


def _shown_path(filename: str) -> str:
    """A source file as its import path (`my_layer/layers.py`: relative to the longest sys.path entry holding it),
    else as given."""
    import os
    import sys

    real = os.path.realpath(filename)
    best = ""
    for entry in sys.path:
        root = os.path.realpath(entry or os.getcwd())
        if real.startswith(root.rstrip(os.sep) + os.sep) and len(root) > len(best):
            best = root
    return os.path.relpath(real, best) if best else filename


def _user_file(filename: str) -> bool:
    """A file of the user's own code: not cemctl's, not the standard library's or an installed package's, not frozen."""
    import os
    import sysconfig

    if not filename or filename.startswith("<") or not os.path.isfile(filename):
        return False
    real = os.path.realpath(filename)
    if any(part in ("site-packages", "dist-packages") for part in real.split(os.sep)):
        return False
    for key in ("stdlib", "platstdlib"):
        lib = sysconfig.get_paths().get(key)
        if lib and real.startswith(os.path.realpath(lib) + os.sep):
            return False
    return _shown_path(real).split(os.sep)[0] not in ("cem_core", "cemctl")


def error_location(exc: BaseException) -> str:
    """Where the user's code raised `exc`: 'my_layer/layers.py:34' (a SyntaxError's own file and line; else the
    innermost traceback frame in a file of the user's, e.g. a plugin; else the same of its cause), '' when none is."""
    import traceback

    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, SyntaxError) and e.filename and _user_file(e.filename):
            return f"{_shown_path(e.filename)}:{e.lineno}" if e.lineno else _shown_path(e.filename)
        for frame in reversed(traceback.extract_tb(e.__traceback__)):
            if _user_file(frame.filename):
                return f"{_shown_path(frame.filename)}:{frame.lineno}"
        e = e.__cause__ or e.__context__
    return ""


def describe_exception(exc: BaseException, limit: int = 300) -> str:
    """One line: 'SyntaxError: invalid syntax (my_layer/layers.py:34)', the location where the user's code has one."""
    if isinstance(exc, CemError):
        return " ".join(str(exc).split())[:limit]
    message = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
    text = " ".join(f"{type(exc).__name__}: {message}".split())[:limit]
    where = error_location(exc)
    return f"{text} ({where})" if where else text
