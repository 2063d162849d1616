"""cemctl: plan, launch, watch and report CEM experiments (`cemctl --help`)."""

from __future__ import annotations

from typing import Any


def _version() -> str:
    """The installed distribution's version: one version string, from the package metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cemctl")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> Any:  # `cemctl.__version__`, read lazily (metadata costs ~50 ms at start-up)
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'cemctl' has no attribute {name!r}")
