"""Names a grid file may use (`cemctl plan`): figure kinds and scales, one registry each.

`FIGURE_KINDS` holds the values of `[experiment] figure = ...`; each entry points
lazily at the `render(runs, curves) -> ReportParts` of its module in
`cemctl.report.figures`, so planning validates the name without importing the
report code. `SCALES` holds the `--scale` presets a grid file may define.
"""

from __future__ import annotations

from cem_core.registry import Registry

FIGURE_KINDS: Registry = Registry("figure kind", "experiment.figure")
for _name, _description in (
    ("generic", "any grid: the arms table, the metric against the grid's x axis, training curves per arm"),
    ("components", "Fig. 2a/2b: test perplexity against parameters, CEM linked to its Llama baseline"),
    ("recursion", "Fig. 2c/2d: test perplexity against recursion steps T per preconditioner"),
    ("lr_sweep", "Fig. 3a: learning-rate sweep with Akima-interpolated optima"),
    ("kq_diagonal", "Fig. 3b: KQ diagonal none / shared / per-head"),
    ("reuse_vs_recursion", "Fig. 3c/4: T=1 -> T=2 gain of plain reuse vs CEM recursion"),
    ("gp_table", "GP study: test RMSE mean +- s.d. per kernel and T"),
    ("curves", "demo: training loss against tokens, test perplexity per variant"),
    ("ablation", "one factor at a time: test loss per arm at T=1 and T=2, T=2 - T=1 paired by seed"),
):
    FIGURE_KINDS.register_lazy(_name, f"cemctl.report.figures.{_name}:render", _description)

SCALES: Registry = Registry("scale", "--scale")
SCALES.add("tiny", "tiny", "a CPU smoke test in minutes (demo, CI): proves the pipeline, not the claims")
SCALES.add("cpu", "cpu", "a workstation: byte-level micro models until the curves flatten, 3 seeds")
SCALES.add("gpu", "gpu", "one GPU in an afternoon: 20M/40M at context 1024, Chinchilla budgets, 3 seeds")
SCALES.add("paper", "paper", "Table 1 sizes, SlimPajama, the Llama tokenizer, Chinchilla budgets")
DEFAULT_SCALE = "tiny"
MAX_RUNS = 100_000  # a grid expanding to more runs is refused before it is materialised
