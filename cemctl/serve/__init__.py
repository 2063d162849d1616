"""`cemctl serve`: a live, read-only results dashboard in the browser.

    server = start(url, runs_root, host="127.0.0.1", port=8765)   # the database opened read-only
    print(server.url); server.serve_forever()

Layers: `cemctl.commands.serve` (the command) -> `cemctl.serve` (HTTP, pages: `app.py`, `server.py`,
`templates/`, `static/`) -> `cemctl.services.dashboard` (the pages' data, read through `cemctl.records`).
Standard library HTTP server, Jinja2 templates (already a dependency of torch), a vendored uPlot
(`static/uPlot.iife.min.js`, MIT) and the dashboard's own small script: nothing is fetched from
the network. docs/design.md ("The dashboard") gives the choice and the guarantees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def start(url: str, runs_root: Path | str | None, *, host: str = "127.0.0.1", port: int = 8765,
          reports_dir: Path | str | None = None, timeout_s: float | None = None) -> Any:
    """Open the database read-only and bind the server (not yet serving): `DatabaseError` (one line) for a database
    that cannot be read, OSError for a port that is taken."""
    from cemctl.serve.app import Dashboard
    from cemctl.serve.server import is_loopback, make_server
    from cemctl.services.dashboard import open_source

    src = open_source(url, runs_root, reports_dir, timeout_s=timeout_s)
    app = Dashboard(src, loopback=is_loopback(host))
    server = make_server(app, host, port)
    warm_up(app)
    return server


def warm_up(app: Any) -> None:
    """Import what the pages use and compile the templates now, so the first page a user opens is not the one
    that pays for pandas, scipy and Jinja (about a second on a laptop)."""
    import pandas  # noqa: F401
    import cemctl.report.arms  # noqa: F401 - the arms table
    import cemctl.report.generic  # noqa: F401
    import cemctl.report.stats  # noqa: F401
    import cemctl.services.dashboard.charts  # noqa: F401
    import cemctl.services.results  # noqa: F401
    import cemctl.services.status  # noqa: F401
    from scipy import stats  # noqa: F401 - the t intervals

    for name in ("index.html", "overview.html", "experiment.html", "live.html", "run.html", "compare.html", "parallel.html",
                 "claims.html", "arms.html", "claims_summary.html", "error.html"):
        app.env.get_template(name)
