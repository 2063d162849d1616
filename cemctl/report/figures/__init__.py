"""Figure kinds for `cemctl report` (the `figure` key of an experiment file).

Each kind is a module `cemctl.report.figures.<kind>` with
`render(runs: DataFrame, curves: DataFrame | None) -> ReportParts`, registered
lazily in `cemctl.grid.kinds.FIGURE_KINDS` (imported on demand), and `SHOWN`: the config
keys it plots on its axes, panels or markers (its x first: the metric figure's x when the
grid names none). Every kind colours a series by the report's
palette (`cemctl.report.generic.palette_of(runs).color_for(row)`), never by its own.

`EXTRA_FIGURES` are drawn for ANY experiment whose runs have their data, in
addition to its figure kind: each is a module `cemctl.report.figures.<name>`
with `load(engine, run_ids) -> DataFrame` and `render(runs, data) -> ReportParts`
(empty parts when there is no data); `extra_parts(engine, runs)` collects them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Callable

from cemctl.grid.kinds import FIGURE_KINDS

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from cemctl.report.parts import ReportParts

RenderFn = Callable[["pd.DataFrame", "pd.DataFrame | None"], "ReportParts"]


def get_figure_kind(name: str, *, key: str = "experiment.figure") -> RenderFn:
    """The `render` function of figure kind `name`; unknown names raise ConfigError listing the known ones."""
    return FIGURE_KINDS.get(name, key=key)


def kind_shown(name: str) -> tuple[str, ...]:
    """The config keys figure kind `name` shows on its own axes, panels or markers (its module's `SHOWN`): the report's
    palette never colours by them (`cemctl.report.generic.Palette`)."""
    import sys

    render = get_figure_kind(name)
    return tuple(getattr(sys.modules.get(render.__module__), "SHOWN", ()))


EXTRA_FIGURES: dict[str, str] = {
    "test_time": "test perplexity against evaluation-time recursion steps T (`cemctl eval`), FLOPs/token on a second axis",
    "energy": "energy against recursion step t per CEM layer/sublayer (`train.energy_layers`) and its descent fraction",
}


def extra_parts(engine: object, runs: "pd.DataFrame") -> "ReportParts":
    """The EXTRA_FIGURES parts for the runs of `runs` (read from the results database)."""
    from cemctl.report.parts import ReportParts

    parts = ReportParts()
    ids = list(runs["run_id"]) if "run_id" in runs.columns else []
    for name in EXTRA_FIGURES:
        module = importlib.import_module(f"cemctl.report.figures.{name}")
        parts.extend(module.render(runs, module.load(engine, ids)))
    return parts
