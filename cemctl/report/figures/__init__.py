"""Registry of figure kinds for `cemctl report` (the `figure` key of an experiment file).

Each kind is a module `cemctl.report.figures.<kind>` with
`render(runs: DataFrame, curves: DataFrame | None) -> ReportParts`. Modules are
imported on demand so looking a kind up stays cheap.

`EXTRA_FIGURES` are drawn for ANY experiment whose runs have their data, in
addition to its figure kind: each is a module `cemctl.report.figures.<name>`
with `load(engine, run_ids) -> DataFrame` and `render(runs, data) -> ReportParts`
(empty parts when there is no data); `extra_parts(engine, runs)` collects them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Callable

from cem_core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from cemctl.report.parts import ReportParts

FIGURE_KINDS: dict[str, str] = {
    "components": "Fig. 2a/2b: test perplexity against parameters, CEM linked to its Llama baseline",
    "recursion": "Fig. 2c/2d: test perplexity against recursion steps T per preconditioner",
    "lr_sweep": "Fig. 3a: learning-rate sweep with Akima-interpolated optima",
    "kq_diagonal": "Fig. 3b: KQ diagonal none / shared / per-head",
    "reuse_vs_recursion": "Fig. 3c/4: T=1 -> T=2 gain of plain reuse vs CEM recursion",
    "gp_table": "GP study: test RMSE mean +- s.d. per kernel and T",
    "curves": "demo: training loss against tokens, test perplexity per variant",
    "ablation": "one factor at a time: test loss per arm at T=1 and T=2, T=2 - T=1 paired by seed",
}

RenderFn = Callable[["pd.DataFrame", "pd.DataFrame | None"], "ReportParts"]


def get_figure_kind(name: str, *, key: str = "experiment.figure") -> RenderFn:
    """The `render` function of figure kind `name`; unknown names raise ConfigError listing the known ones."""
    if name not in FIGURE_KINDS:
        raise ConfigError(key, f"unknown figure kind {name!r}", value=name, allowed=list(FIGURE_KINDS))
    module = importlib.import_module(f"cemctl.report.figures.{name}")
    return module.render


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
