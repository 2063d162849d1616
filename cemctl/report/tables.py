"""Markdown, CSV and LaTeX tables for `cemctl report`.

CSV keeps full precision (it round-trips: `read_table_csv(write_csv(df))` equals
`df`); Markdown and LaTeX show 4 significant digits. The Markdown and LaTeX
writers are small and local (no `tabulate`/`jinja2` dependency).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from cem_core.names import printable

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

TABLE_FORMATS = ("csv", "md", "tex")


def format_cell(value: Any) -> str:
    """Human-readable cell: '' for missing, ints as is, floats with 4 significant digits."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) or type(value).__name__.startswith("float"):
        v = float(value)
        if math.isnan(v):
            return ""
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3e}"
        if v.is_integer() and abs(v) >= 1000:
            return f"{v:.0f}"
        return f"{v:.4g}"
    if type(value).__name__.startswith("int"):
        return str(int(value))
    text = str(value)
    return "" if text in ("nan", "<NA>", "None") else text


def _rows(frame: "pd.DataFrame") -> Iterable[list[str]]:
    for record in frame.itertuples(index=False, name=None):
        yield [format_cell(v) for v in record]


def to_markdown(frame: "pd.DataFrame") -> str:
    """A GitHub-flavoured Markdown table (pipes in cells escaped; control characters escaped; `<`, `>` and `&`
    as entities, so a cell is never raw HTML)."""
    import html

    def esc(s: str) -> str:
        return html.escape(printable(s.replace("\n", " ")), quote=False).replace("|", "\\|")

    header = [esc(str(c)) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in _rows(frame):
        lines.append("| " + " | ".join(esc(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "\u00b1": r"$\pm$", "\u2013": "--"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(frame: "pd.DataFrame", *, caption: str = "", label: str = "") -> str:
    """A booktabs `table` environment (needs \\usepackage{booktabs})."""
    numeric = [frame[c].dtype.kind in "iuf" for c in frame.columns]
    spec = "".join("r" if isnum else "l" for isnum in numeric)
    lines = [r"\begin{table}[t]", r"\centering", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(latex_escape(str(c)) for c in frame.columns) + r" \\", r"\midrule"]
    for row in _rows(frame):
        lines.append(" & ".join(latex_escape(c) for c in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines.append(rf"\caption{{{latex_escape(caption)}}}")
    if label:
        lines.append(rf"\label{{{label}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def csv_safe(frame: "pd.DataFrame") -> "pd.DataFrame":
    """`frame` with the control characters of its text cells (and column names) escaped (`printable`): a CSV
    opened in a terminal or a spreadsheet shows them, never obeys them. Numbers are untouched."""
    from pandas.api.types import is_string_dtype

    out = frame.copy()
    out.columns = [printable(c) if isinstance(c, str) else c for c in out.columns]
    for col in out.columns:
        if out[col].dtype == object or is_string_dtype(out[col].dtype):
            out[col] = out[col].map(lambda v: printable(v) if isinstance(v, str) else v)
    return out


def write_csv(frame: "pd.DataFrame", path: Path) -> Path:
    csv_safe(frame).to_csv(path, index=False)
    return path


def read_table_csv(path: Path) -> "pd.DataFrame":
    """Read a table written by `write_csv` back (exact floats)."""
    import pandas as pd

    return pd.read_csv(path)


def write_table(frame: "pd.DataFrame", out_dir: Path, name: str, *, caption: str = "",
                csv: "pd.DataFrame | None" = None) -> dict[str, Path]:
    """Write `name`.csv (`csv` when given: the full-precision version of `frame`), `name`.md and `name`.tex
    into `out_dir`; returns {format: path}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": write_csv(frame if csv is None else csv, out_dir / f"{name}.csv")}
    md = out_dir / f"{name}.md"
    md.write_text(to_markdown(frame))
    tex = out_dir / f"{name}.tex"
    tex.write_text(to_latex(frame, caption=caption, label=f"tab:{name}"))
    paths["md"], paths["tex"] = md, tex
    return paths
