"""index.md and a static index.html per experiment (`cemctl report`).

Both embed every figure (PNG, with links to the other formats) and table
(inline, with links to CSV and LaTeX), and state the date, the git commit of the
code, the grid file the experiment came from, the run counts, how seeds are
shown, notes, and the missing and failed runs with their reasons.
"""

from __future__ import annotations

import html
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cem_core.names import printable
from cemctl.report.tables import to_markdown

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def git_commit(path: Path | None = None) -> str:
    """`git rev-parse HEAD` of the repository holding `path` (default: this package), or 'unknown'."""
    where = path or Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else "unknown"


@dataclass
class IndexFigure:
    name: str
    caption: str
    files: dict[str, str]  # format -> file name relative to the index


@dataclass
class IndexTable:
    name: str
    caption: str
    frame: "pd.DataFrame"
    files: dict[str, str]


@dataclass
class IndexContent:
    title: str
    header: list[tuple[str, str]]  # (key, value) lines
    notes: list[str] = field(default_factory=list)
    figures: list[IndexFigure] = field(default_factory=list)
    tables: list[IndexTable] = field(default_factory=list)
    problems: "pd.DataFrame | None" = None  # missing and failed runs
    lead: list[IndexTable] = field(default_factory=list)  # tables shown first (the arms table)


def _links(files: dict[str, str], skip: str = "") -> list[tuple[str, str]]:
    return [(fmt, f) for fmt, f in files.items() if fmt != skip]


def md_text(text: object) -> str:
    """User text as Markdown prose: control characters escaped, and `<`, `>`, `&` as entities (Markdown passes
    raw HTML through: a description holding `<script>` must stay text)."""
    return html.escape(printable(text), quote=False)


def render_markdown(c: IndexContent) -> str:
    out = [f"# {md_text(c.title)}", ""]
    out += [f"- **{md_text(k)}**: {md_text(v)}" for k, v in c.header]
    out.append("")
    if c.notes:
        out += ["## Notes", ""] + [f"- {md_text(n)}" for n in c.notes] + [""]
    for t in c.lead:
        out += [f"## {t.name.capitalize()}", "", md_text(t.caption), "", to_markdown(t.frame).rstrip(), ""]
        out += ["Files: " + ", ".join(f"[{fmt.upper()}]({p})" for fmt, p in _links(t.files, "md")), ""]
    if c.figures:
        out += ["## Figures", ""]
        for f in c.figures:
            out += [f"### {f.name}", ""]
            if "png" in f.files:
                out += [f"![{f.name}]({f.files['png']})", ""]
            out += [md_text(f.caption), ""]
            links = _links(f.files, "png")
            if links:
                out += ["Files: " + ", ".join(f"[{fmt.upper()}]({p})" for fmt, p in links), ""]
    if c.tables:
        out += ["## Tables", ""]
        for t in c.tables:
            out += [f"### {t.name}", "", md_text(t.caption), "", to_markdown(t.frame).rstrip(), ""]
            out += ["Files: " + ", ".join(f"[{fmt.upper()}]({p})" for fmt, p in _links(t.files, "md")), ""]
    out += ["## Missing and failed runs", ""]
    if c.problems is None or c.problems.empty:
        out += ["None: every planned run finished.", ""]
    else:
        out += [f"{len(c.problems)} run(s) have no usable result and are left out of the figures:", "",
                to_markdown(c.problems).rstrip(), ""]
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:0.85em;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 7px}
th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee}figcaption{font-size:0.9em;color:#444}
dt{font-weight:bold;float:left;clear:left;width:9em}dd{margin-left:10em}"""


def render_html(c: IndexContent) -> str:
    def e(text: object) -> str:
        return html.escape(printable(text))

    out = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">", f"<title>{e(c.title)}</title>",
           f"<style>{_CSS}</style></head><body>", f"<h1>{e(c.title)}</h1>", "<dl>"]
    out += [f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in c.header]
    out.append("</dl>")
    if c.notes:
        out += ["<h2>Notes</h2>", "<ul>"] + [f"<li>{e(n)}</li>" for n in c.notes] + ["</ul>"]
    for t in c.lead:
        links = " ".join(f"<a href=\"{e(p)}\">{e(fmt.upper())}</a>" for fmt, p in _links(t.files, "md"))
        out += [f"<h2 id=\"tab-{e(t.name)}\">{e(t.name.capitalize())}</h2>", f"<p>{e(t.caption)} {links}</p>",
                _html_table(t.frame)]
    if c.figures:
        out.append("<h2>Figures</h2>")
        for f in c.figures:
            out.append(f"<h3 id=\"fig-{e(f.name)}\">{e(f.name)}</h3><figure>")
            if "png" in f.files:
                out.append(f"<img src=\"{e(f.files['png'])}\" alt=\"{e(f.name)}\">")
            links = " ".join(f"<a href=\"{e(p)}\">{e(fmt.upper())}</a>" for fmt, p in _links(f.files, "png"))
            out.append(f"<figcaption>{e(f.caption)} {links}</figcaption></figure>")
    if c.tables:
        out.append("<h2>Tables</h2>")
        for t in c.tables:
            links = " ".join(f"<a href=\"{e(p)}\">{e(fmt.upper())}</a>" for fmt, p in _links(t.files, "md"))
            out += [f"<h3 id=\"tab-{e(t.name)}\">{e(t.name)}</h3>", f"<p>{e(t.caption)} {links}</p>",
                    _html_table(t.frame)]
    out.append("<h2>Missing and failed runs</h2>")
    if c.problems is None or c.problems.empty:
        out.append("<p>None: every planned run finished.</p>")
    else:
        out += [f"<p>{len(c.problems)} run(s) have no usable result and are left out of the figures:</p>",
                _html_table(c.problems)]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _html_table(frame: "pd.DataFrame") -> str:
    from cemctl.report.tables import format_cell

    head = "".join(f"<th>{html.escape(printable(col))}</th>" for col in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(printable(format_cell(v)))}</td>" for v in row) + "</tr>"
                   for row in frame.itertuples(index=False, name=None))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
