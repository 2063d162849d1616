"""Figure kinds for `cemctl report` (the `figure` key of an experiment file).

Each kind is a module `cemctl.report.figures.<kind>` with
`render(runs: DataFrame, curves: DataFrame | None) -> ReportParts`, registered
lazily in `cemctl.grid.kinds.FIGURE_KINDS` (imported on demand).

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
