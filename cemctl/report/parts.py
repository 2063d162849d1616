"""What a figure kind returns to `cemctl report`: figures, tables and notes.

A figure kind (`cemctl/report/figures/<kind>.py`) is a pure function
`render(runs, curves) -> ReportParts` of the tidy frames from
`cemctl.report.frame`; `cemctl.report.build` writes the parts to disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure


@dataclass
class FigurePart:
    name: str  # file stem, e.g. "fig2a_components"
    figure: "Figure"
    caption: str


@dataclass
class TablePart:
    name: str  # file stem
    frame: "pd.DataFrame"  # what the index, Markdown and LaTeX show
    caption: str
    csv: "pd.DataFrame | None" = None  # what the CSV holds, when more than `frame` (full precision, every column)
    lead: bool = False  # shown at the top of the index, before the figures (the arms table)


@dataclass
class ReportParts:
    figures: list[FigurePart] = field(default_factory=list)
    tables: list[TablePart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # caveats shown in the index (missing baselines, ...)

    def extend(self, other: "ReportParts") -> "ReportParts":
        self.figures += other.figures
        self.tables += other.tables
        self.notes += other.notes
        return self

    def is_empty(self) -> bool:
        return not self.figures and not self.tables

    def meta(self) -> dict[str, Any]:
        return {"figures": [f.name for f in self.figures], "tables": [t.name for t in self.tables]}
