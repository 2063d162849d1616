"""Figures, tables and an index per experiment from the results database (`cemctl report`).

Layers (each importable on its own; nothing here imports torch):

- `frame`      results database -> tidy pandas DataFrames (one row per run; curves)
- `aggregate`  seed aggregation (mean, sample s.d. with ddof=1, min, max, n) and
               matching of each variant to its Llama baseline of the same dims
- `optimum`    Akima-interpolated optimum of a learning-rate sweep (in log-lr)
- `figures/`   one module per figure kind (the `figure` key of an experiment
               file), chosen by name from `figures.FIGURE_KINDS`
- `tables`     Markdown / CSV / LaTeX writers
- `index`      index.md and a static index.html per experiment
- `build`      the one entry point `report_experiment(...)` the CLI calls

Heavy libraries (pandas, matplotlib, scipy) are imported inside the modules that
need them, never by `cemctl --help`.
"""

from __future__ import annotations
