"""The data of `cemctl serve`'s pages (the HTTP server and its templates are `cemctl.serve`).

    src = open_source(url, runs_root)                           # the database read-only (source.py)
    experiments_overview(src)                                   # tables.py: experiments, runs (live), arms,
    runs_table(src, "fig2c", Selection(where=["attn_steps>=2"], sort="-test_loss"))   # a run, compare, claims
    metric_chart(src, "fig2c", sel, x="model.attn_steps")       # charts.py: chart data the page draws

Every fact about a run comes from the run record (`cemctl.records`); nothing here queries the
database itself. Read-only, torch-free.
"""

from cemctl.services.dashboard.source import Source, open_source, readonly_url
from cemctl.services.dashboard.tables import NotFound, Selection

__all__ = ["NotFound", "Selection", "Source", "open_source", "readonly_url"]
