"""cemctl: plan, launch, watch and report CEM experiments (`cemctl --help`)."""

from __future__ import annotations


def _version() -> str:
    """The installed distribution's version: one version string, from the package metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cemctl")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


__version__ = _version()
