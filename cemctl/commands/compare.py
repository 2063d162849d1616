"""`cemctl compare A B [C ...]`: the config keys that differ, what they trained on, the metrics side by side and
each item's difference to the first with its 95% interval.

A, B, ... are run ids (or unique prefixes), arm ids or arm labels (`cemctl status --arms`, the report's arms
table; `key=value` parts in any order); an arm shows its mean +- s.d. over seeds. Items are columns A, B, C
(named in the first lines), as many side by side as the width holds (the others in blocks below), and each
difference is a row of its own, so the tables fit 80 columns whatever the labels and however many items. `--curves FILE` overlays their
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


def _interval(col: str, d: dict) -> str:
    return f"[{_signed(col, d['low'])}, {_signed(col, d['high'])}]" if d["low"] is not None else ""


def _method(d: dict) -> str:
    return "paired" if d["method"] == "paired t" else "Welch" if d["low"] is not None else ""


class CompareView:
    """The items' config keys that differ, what they trained on and their metrics side by side (one column per
    item; as many items per block as the width holds, the blocks one under the other, each with the row names),
    then one row per metric and item of its difference to A with the interval (as narrow whatever the count)."""

    def __init__(self, cmp, width: int | None) -> None:  # noqa: ANN001 - services.compare.Comparison
        from cemctl.commands.views.table import Cell, Column, column_blocks, fit
        from cemctl.records.fields import field

        letters = [string.ascii_uppercase[j % 26] for j in range(len(cmp.items))]
        self.width = width
        self.names = [f"{letters[j]}: " + (f"run {i.name}" if i.kind == "run" else
                                           f"arm '{i.name}' ({len(i.run_ids)} run{'s' if len(i.run_ids) != 1 else ''}"
                                           f"{', ' + i.experiment if i.experiment else ''})")
                      for j, i in enumerate(cmp.items)]
        self.config_rows = [{"what": Cell(k), **{f"i{j}": Cell(v) for j, v in enumerate(vals)}}
                            for k, vals in cmp.differing]
        self.env_rows = [{"what": Cell(field(k).header), **{f"i{j}": Cell(v) for j, v in enumerate(vals)}}
                         for k, vals in cmp.environment]
        arms = [i.kind == "arm" for i in cmp.items]
        self.metric_rows = [{"what": Cell(field(col).header), **{f"i{j}": Cell(_cell(col, v, arms[j]))
                                                                 for j, v in enumerate(vals)}}
                            for col, vals in cmp.metrics]
        what = Column("what", "", required=True)
        items = [Column(f"i{j}", letters[j], shrink_to=8) for j in range(len(cmp.items))]
        side = self.config_rows + self.env_rows + self.metric_rows
        self.layouts = [fit([what, *block], side, width, keep_empty=True)  # one per block of items
                        for block in column_blocks(what, items, side, width)]
        self.diff_rows = []
        for col, ds in cmp.differences:
            first = True
            for j, d in enumerate(ds):
                if j and d is not None:
                    self.diff_rows.append({"what": Cell(field(col).header if first else ""),
                                           "item": Cell(f"{letters[j]} - A"), "diff": Cell(_signed(col, d["effect"])),
                                           "interval": Cell(_interval(col, d)), "method": Cell(_method(d))})
                    first = False
        dcols = [what, Column("item", "", required=True), Column("diff", "difference", align="right", required=True),
                 Column("interval", "95% interval", required=True), Column("method", "by", priority=1)]
        self.diff_layout = fit(dcols, self.diff_rows, width)
        self.identical = cmp.identical
        self.any_arm = any(arms)

    def _heads(self) -> list[str]:
        out = []
        for name in self.names:
            out += textwrap.wrap(name, self.width or 10_000, subsequent_indent="   ") or [name]
        return out

    def _blocks(self) -> list[tuple[str, Any, list]]:
        blocks = []
        side = []
        if not self.identical:
            side.append(("config keys that differ:", self.config_rows))
        if self.env_rows:
            side.append(("trained on (where that differs):", self.env_rows))
        side.append(("metrics (an arm: mean \u00b1 s.d. over its finished seeds):", self.metric_rows))
        for title, rows in side:
            for k, layout in enumerate(self.layouts):
                blocks.append((title if not k else "", layout, rows))
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
            out += [""] + (textwrap.wrap(title, self.width) if self.width and title else [title] if title else [])
            out += render_plain(layout, rows)
        return out

    def rich(self):  # noqa: ANN201
        from rich.console import Group
        from rich.text import Text

        from cemctl.commands.views.table import render_rich

        parts: list[Any] = [Text(h, style="dim") for h in self._heads()]
        if self._same():
            parts.append(Text(self._same(), style="bold"))
        for title, layout, rows in self._blocks():
            parts += [Text("")] + ([Text(title, style="bold")] if title else []) + [render_rich(layout, rows)]
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
    no_sync: bool = typer.Option(False, "--no-sync", help="Use the database as it is, without reading run dirs."),
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
        cmp = compare(db_url(db), runs_dir(runs), list(items), experiment=experiment, where=where, sync=not no_sync)
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
