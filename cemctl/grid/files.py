"""Where a grid file named on the command line is (`cemctl plan fig2c`, `cemctl launch`, `cemctl demo`).

    path = find_grid("fig2c")          # ./fig2c, ./experiments/fig2c.toml, or the packaged grid
    names = packaged_grids()           # {"fig2a": Path(...), ...}: the grids shipped in the wheel

A target that is an existing path is that file. Otherwise a bare name (no path
separator) is looked up as `experiments/<name>.toml` in the working folder, then
among the grids the package ships (`cemctl/experiments`, the repository's top-level
`experiments/` folder, found by importlib.resources), so `cemctl plan fig2c` works
from any folder after a plain `pip install`.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

GRID_SUFFIX = ".toml"


def packaged_grids() -> dict[str, Path]:
    """The grid files shipped with the package, by name (file stem)."""
    root = resources.files("cemctl") / "experiments"
    out: dict[str, Path] = {}
    try:
        entries = list(root.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return out
    for entry in entries:
        if entry.name.endswith(GRID_SUFFIX) and entry.is_file():
            out[entry.name[: -len(GRID_SUFFIX)]] = Path(str(entry))
    return dict(sorted(out.items()))


def find_grid(target: str) -> Path | None:
    """The grid file `target` names, or None when it names none (it may be an experiment or a run)."""
    path = Path(target)
    if path.is_file() or os.path.lexists(path):
        return path
    if os.sep in target or (os.altsep and os.altsep in target):
        return None
    name = target[: -len(GRID_SUFFIX)] if target.endswith(GRID_SUFFIX) else target
    local = Path("experiments") / f"{name}{GRID_SUFFIX}"
    if local.is_file():
        return local
    return packaged_grids().get(name)
