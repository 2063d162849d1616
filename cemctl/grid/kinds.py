"""Names a grid file may use (`cemctl plan`): report kinds and scale presets.

`REPORT_KINDS` is the registry of `[experiment] figure = ...` values; `cemctl
report` implements one figure per kind.
"""

from __future__ import annotations

REPORT_KINDS: dict[str, str] = {
    "components": "Llama vs CEM sublayer, perplexity vs parameters, pairs linked (Fig. 2a, 2b)",
    "recursion": "CEM sublayer T x preconditioner vs Llama (Fig. 2c, 2d)",
    "lr_sweep": "learning-rate sweep with Akima optimum per size (Fig. 3a)",
    "kq_diagonal": "KQ diagonal none / shared / per_head (Fig. 3b)",
    "reuse_vs_recursion": "T=1 -> T=2 gain of plain reuse vs CEM recursion (Fig. 3c, 4)",
    "gp_table": "Gaussian-process regression test RMSE table (arXiv version)",
    "curves": "loss curves and a final-loss table (demo)",
    "ablation": "one factor at a time, T=1 vs T=2 per arm (the T=2 ablation)",
}

SCALES = ("tiny", "cpu", "gpu", "paper")  # docs: SPEC section 7; README "Experiments"
DEFAULT_SCALE = "tiny"
MAX_RUNS = 100_000  # a grid expanding to more runs is refused before it is materialised
