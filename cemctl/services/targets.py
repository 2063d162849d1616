"""Which runs does a target name? One rule set for `cemctl launch`, `eval`, `logs`, `cancel` and `status`.

    resolved = resolve_runs(engine, "fig2c", runs_root, scale="cpu")
    resolved.kind      # "experiment" | "run"
    resolved.runs      # [RunRef(run_id, run_dir)], grid order

A target is, in this order:
1. a grid file (a path that exists, or a name ending in .toml): its experiment
   (the `[experiment] name`, else the file stem), as recorded by `cemctl plan`;
2. a recorded experiment name;
3. a run id, or a unique prefix of one, known to the database or found as a
   folder under the runs root.
A target that is none of these, or an ambiguous prefix, is a one-line error.
A run's folder is always `<runs_root>/<run_id>` (never a folder the database
recorded elsewhere: a copied project acts on its own runs); a folder that is a
symlink out of the runs root is refused (`RunFileError`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cem_core.errors import CemError
from cem_core.names import is_run_name
from cem_core.runfiles import RunFileError


class UnknownTarget(CemError):
    """The target names no grid file, experiment or run."""


@dataclass(frozen=True)
class RunRef:
    run_id: str
    run_dir: Path


@dataclass
class Resolved:
    kind: str  # "experiment" | "run"
    name: str  # the experiment name, or the run id
    runs: list[RunRef] = field(default_factory=list)
    grid_path: str | None = None  # when the target was a grid file


def looks_like_file(target: str) -> bool:
    return target.endswith(".toml") or os.sep in target or Path(target).is_file()


def run_dir_of(run_id: str, runs_root: Path) -> Path:
    """The run's folder, `<runs_root>/<run_id>`; one that is a symlink leading out of the runs root is refused."""
    candidate = Path(runs_root) / run_id
    if candidate.is_symlink():
        target = os.path.realpath(candidate)
        parent = os.path.realpath(candidate.parent)
        if os.path.dirname(target) != parent:
            raise RunFileError(f"{candidate}: refused: the run directory is a symlink out of {candidate.parent} "
                               f"(to {target})")
    return candidate


def experiment_of_grid(path: str) -> str:
    """The experiment name a grid file records (parsed, never planned)."""
    from cemctl.grid.spec import experiment_name

    return experiment_name(path)


def _runs_of_experiment(engine: Any, name: str, runs_root: Path, scale: str | None,
                        in_grid_only: bool = False) -> list[RunRef]:
    from cemctl.db.runs import list_runs

    return [RunRef(r.id, run_dir_of(r.id, runs_root))
            for r in list_runs(engine, experiment=name, scale=scale, in_grid_only=in_grid_only)]


def _find_run(engine: Any, target: str, runs_root: Path) -> RunRef | None:
    from sqlalchemy import select

    from cemctl.db.engine import read_session
    from cemctl.db.models import Run

    with read_session(engine) as s:
        exact = s.get(Run, target)
        if exact is not None:
            return RunRef(exact.id, run_dir_of(exact.id, runs_root))
        like = target.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = list(s.execute(select(Run.id).where(Run.id.like(like, escape="\\")).limit(6)))
    if len(rows) == 1:
        return RunRef(rows[0][0], run_dir_of(rows[0][0], runs_root))
    if len(rows) > 1:
        shown = ", ".join(sorted(r[0] for r in rows)[:5])
        raise UnknownTarget(f"run: {target!r} matches {len(rows)} runs ({shown}, ...); give more of the id")
    root = Path(runs_root)
    if (root / target).is_dir() or (root / target).is_symlink():
        return RunRef(target, run_dir_of(target, root))
    matches = sorted(p.name for p in root.glob(f"{target}*") if not p.name.startswith(".") and p.is_dir()) \
        if root.is_dir() else []
    if len(matches) == 1:
        return RunRef(matches[0], run_dir_of(matches[0], root))
    if len(matches) > 1:
        raise UnknownTarget(f"run: {target!r} matches {len(matches)} runs ({', '.join(matches[:5])}, ...); "
                            "give more of the id")
    return None


def resolve_runs(engine: Any, target: str, runs_root: Path | str, *, scale: str | None = None,
                 runs_only: bool = False, in_grid_only: bool = False) -> Resolved:
    """The runs `target` names (see the module docstring). `runs_only`: only a run id (or prefix) is accepted.
    `in_grid_only`: an experiment's runs that are still in its grid (not those an edited grid left behind)."""
    from cemctl.db.runs import get_experiment, list_experiments

    from cemctl.db.runs import resolve_runs_root

    runs_root = resolve_runs_root(engine, runs_root)
    if not runs_only:
        if looks_like_file(target):
            name = experiment_of_grid(target)
            if get_experiment(engine, name) is None:
                raise UnknownTarget(f"{target}: experiment {name!r} is not planned yet (run `cemctl plan {target}`)")
            return Resolved("experiment", name, _runs_of_experiment(engine, name, runs_root, scale, in_grid_only),
                            grid_path=target)
        if get_experiment(engine, target) is not None:
            return Resolved("experiment", target, _runs_of_experiment(engine, target, runs_root, scale, in_grid_only))
    if is_run_name(target):
        ref = _find_run(engine, target, runs_root)
        if ref is not None:
            return Resolved("run", ref.run_id, [ref])
    if runs_only:
        raise UnknownTarget(f"run: no run {target!r} in the results database or {runs_root} "
                            "(see `cemctl status` for run ids)")
    known = ", ".join(e.name for e in list_experiments(engine)) or "none yet; run cemctl plan FILE"
    raise UnknownTarget(f"{target!r} is not a grid file, an experiment or a run (experiments: {known}; "
                        "see `cemctl status` for run ids)")
