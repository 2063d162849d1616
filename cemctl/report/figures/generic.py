"""Figure kind `generic` (the default for a grid that names none), for `cemctl report`.

Every report already starts with the parts any grid gets (`cemctl.report.generic`: the
arms table, the metric against the grid's x, the training curves per arm); this kind
adds nothing of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemctl.report.parts import ReportParts

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def render(runs: "pd.DataFrame", curves: "pd.DataFrame | None" = None) -> ReportParts:
    return ReportParts()
