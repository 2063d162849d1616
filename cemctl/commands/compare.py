"""`cemctl compare A B [C ...]`: the config keys that differ, what they trained on, the metrics side by side and
each item's difference to the first with its 95% interval.

A, B, ... are run ids (or unique prefixes), arm ids or arm labels (`cemctl status --arms`, the report's arms
table; `key=value` parts in any order); an arm shows its mean +- s.d. over seeds. Items are columns A, B, C
(named in the first lines), so the tables fit 80 columns whatever the labels. `--curves FILE` overlays their
training curves (PNG, PDF or SVG by the file's suffix). Library: `cemctl.services.compare`.
"""

from __future__ import annotations

import json
import string
import textwrap
from pathlib import Path
from typing import Any, List, Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, db_url, output_width, print_view, runs_dir


def _fmt(col: str):  # noqa: ANN202 - the catalogue field's formatter
    from cemctl.records import formats as F
    from cemctl.records.fields import field

    return F.by_kind(field(col).kind)


def _cell(col: str, v: dict, arm: bool) -> str:
    if "text" in v:
        return v["text"]
    if not v["n"]:
        return ""
    fmt = _fmt(col)
    text = fmt(v["mean"])
    if v["sd"]:  # a spread over seeds (none for one seed, or a count every seed shares)
        text += f" \u00b1 {fmt(v['sd'])}"
    return text + (f" (n={v['n']})" if arm else "")


def _signed(col: str, x: float) -> str:
    text = _fmt(col)(abs(x))
    return ("-" if x < 0 else "+") + text


def _diff_cell(col: str, d: dict | None) -> str:
    if d is None:
        return ""
    text = _signed(col, d["effect"])
    if d["low"] is not None:
        text += f" [{_signed(col, d['low'])}, {_signed(col, d['high'])}]"
    return text + (" paired" if d["method"] == "paired t" else " Welch" if d["low"] is not None else "")


class CompareView:
    def __init__(self, cmp, width: int | None) -> None:  # noqa: ANN001 - services.compare.Comparison
        from cemctl.commands.views.table import Cell, Column, fit
        from cemctl.records.fields import field

        letters = list(string.ascii_uppercase)
        n = len(cmp.items)
        self.width = width
        self.names = [f"{letters[j % 26]}: " + (f"run {i.name}" if i.kind == "run" else
                                                  f"arm '{i.name}' ({len(i.run_ids)} run{'s' if len(i.run_ids) != 1 else ''}"
                                                  f"{', ' + i.experiment if i.experiment else ''})")
                      for j, i in enumerate(cmp.items)]
        cols = [Column("what", "", required=True)] + [Column(f"i{j}", letters[j % 26], required=True, shrink_to=8)
                                                      for j in range(n)]
        self.config_rows = [{"what": Cell(k), **{f"i{j}": Cell(v) for j, v in enumerate(vals)}}
                            for k, vals in cmp.differing]
        self.env_rows = [{"what": Cell(field(k).header), **{f"i{j}": Cell(v) for j, v in enumerate(vals)}}
                         for k, vals in cmp.environment]
        arms = [i.kind == "arm" for i in cmp.items]
        self.metric_rows = [{"what": Cell(field(col).header), **{f"i{j}": Cell(_cell(col, v, arms[j]))
                                                                 for j, v in enumerate(vals)}}
                            for col, vals in cmp.metrics]
        self.layout = fit(cols, self.config_rows + self.env_rows + self.metric_rows, width, keep_empty=True)
        dcols = [Column("what", "", required=True)] + [Column(f"d{j}", f"{letters[j % 26]} - A", required=True,
                                                               shrink_to=10) for j in range(1, n)]
        self.diff_rows = [{"what": Cell(field(col).header), **{f"d{j}": Cell(_diff_cell(col, d))
                                                              for j, d in enumerate(ds) if j}}
                          for col, ds in cmp.differences if any(d is not None for d in ds[1:])]
        self.diff_layout = fit(dcols, self.diff_rows, width, keep_empty=True)
        self.identical = cmp.identical
        self.any_arm = any(arms)

    def _heads(self) -> list[str]:
        out = []
        for name in self.names:
            out += textwrap.wrap(name, self.width or 10_000, subsequent_indent="   ") or [name]
        return out

    def _blocks(self) -> list[tuple[str, Any, list]]:
        blocks = []
        if not self.identical:
            blocks.append(("config keys that differ:", self.layout, self.config_rows))
        if self.env_rows:
            blocks.append(("trained on (where that differs):", self.layout, self.env_rows))
        blocks.append(("metrics (an arm: mean \u00b1 s.d. over its finished seeds):", self.layout, self.metric_rows))
        if self.diff_rows:
            blocks.append(("difference to A, 95% interval (paired by seed when both arms share seeds and "
                           "parameters, else Welch):", self.diff_layout, self.diff_rows))
        return blocks

    def _same(self) -> str:
        return "the configs are identical" + (" (apart from the seed)" if self.any_arm else "") if self.identical else ""

    def plain_lines(self) -> list[str]:
        from cemctl.commands.views.table import render_plain

        out = self._heads()
        if self._same():
            out.append(self._same())
        for title, layout, rows in self._blocks():
            out += [""] + (textwrap.wrap(title, self.width) if self.width else [title]) + render_plain(layout, rows)
        return out

    def rich(self):  # noqa: ANN201
        from rich.console import Group
        from rich.text import Text

        from cemctl.commands.views.table import render_rich

        parts: list[Any] = [Text(h, style="dim") for h in self._heads()]
        if self._same():
            parts.append(Text(self._same(), style="bold"))
        for title, layout, rows in self._blocks():
            parts += [Text(""), Text(title, style="bold"), render_rich(layout, rows)]
        return Group(*parts)


def compare_command(
    items: List[str] = typer.Argument(..., help="Two or more run ids (or prefixes), arm ids or arm labels."),
    experiment: Optional[str] = typer.Option(None, "--experiment", "-e", help="Look arm labels up in this experiment "
                                             "only (default: every experiment)."),
    where: Optional[List[str]] = typer.Option(None, "--where", help="Only runs meeting FIELD OP VALUE (repeatable)."),
    curves: Optional[str] = typer.Option(None, "--curves", help="Also write their training curves to this image file "
                                         "(.png, .pdf or .svg)."),
    history: bool = typer.Option(False, "--history", help="One run against its own earlier results (set aside by "
                                 "launch --rerun-outdated or --redo-damaged): code, state, losses, difference."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Show the config keys that differ between runs or arms, their metrics and differences with intervals."""
    with cli_errors():
        from cem_core.errors import ConfigError
        from cemctl.services.compare import compare, curves_figure

        if history:
            _print_history(list(items), experiment, db, as_json)
            return
        if curves is not None and Path(curves).suffix.lower() not in (".png", ".pdf", ".svg"):
            raise ConfigError("--curves", f"{curves!r} must end in .png, .pdf or .svg", allowed=[".png", ".pdf", ".svg"])
        cmp = compare(db_url(db), runs_dir(runs), list(items), experiment=experiment, where=where)
        if curves is not None:
            from cemctl.report.outfile import write_owned_file

            fig = curves_figure(db_url(db), cmp)
            write_owned_file(Path(curves), lambda p: fig.savefig(p, dpi=150, format=Path(curves).suffix[1:].lower(),
                                                                 bbox_inches="tight"))
    if as_json:
        typer.echo(json.dumps(cmp.to_json(), default=str))
        return
    _, width = output_width()
    print_view(CompareView(cmp, width))
    if curves is not None:
        typer.echo(f"curves written to {curves}")


def _print_history(items: list[str], experiment: str | None, db: str | None, as_json: bool) -> None:
    from cem_core.errors import ConfigError
    from cemctl.commands.views.table import Cell, Column, fit
    from cemctl.records import formats as F
    from cemctl.services.compare import run_history

    if len(items) != 1:
        raise ConfigError("--history", "give exactly one run", allowed=["RUN (a run id or unique prefix)"])
    hist = run_history(db_url(db), items[0], experiment=experiment)
    if as_json:
        typer.echo(json.dumps({"run_id": hist.run_id, "results": hist.rows}, default=str))
        return
    cols = [Column("when", "when", required=True), Column("folder", "kept in", shrink_to=10, priority=6),
            Column("code", "code", required=True), Column("state", "state", required=True),
            Column("test", "test", align="right", required=True), Column("val", "val", align="right", priority=4),
            Column("diff", "test - current", align="right", required=True)]
    rows = [{"when": Cell(F.timestamp(h["set_aside_at"])), "folder": Cell(h["folder"]),
             "code": Cell(h["code_fingerprint"] or "unknown"), "state": Cell(h["state"] or ""),
             "test": Cell(F.loss(h["test_loss"])), "val": Cell(F.loss(h["val_loss"])),
             "diff": Cell("" if h["current"] or h["test_loss_minus_current"] is None else
                          f"{h['test_loss_minus_current']:+.4f}")} for h in hist.rows]
    _, width = output_width()

    class _View:
        def __init__(self) -> None:
            self.layout = fit(cols, rows, width)

        def plain_lines(self) -> list[str]:
            from cemctl.commands.views.table import render_plain

            return [f"run {hist.run_id}: {len(rows) - 1} earlier result(s), then the current one"] + \
                render_plain(self.layout, rows)

        def rich(self):  # noqa: ANN201
            from rich.console import Group
            from rich.text import Text

            from cemctl.commands.views.table import render_rich

            return Group(Text(self.plain_lines()[0], style="bold"), render_rich(self.layout, rows))

    print_view(_View())


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)
