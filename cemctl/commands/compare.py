"""`cemctl compare A B [C ...]`: the config keys that differ, then the metrics side by side.

A, B, ... are run ids (or unique prefixes), arm ids or arm labels (`cemctl status --arms`,
the report's arms table); an arm shows its mean +- s.d. over seeds. `--curves FILE`
overlays their training curves (PNG, PDF or SVG by the file's suffix). Library:
`cemctl.services.compare`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, db_url, output_width, print_view, runs_dir


def _cell(col: str, v: dict, arm: bool) -> str:
    from cemctl.commands.views import formats as F

    if "text" in v:
        return v["text"]
    if not v["n"]:
        return ""
    fmt = {"test_loss": F.loss, "val_loss": F.loss, "test_ppl": F.ppl, "wall_time_s": lambda x: f"{x:.1f}"}.get(col, F.count)
    text = fmt(v["mean"])
    if v["sd"]:  # a spread over seeds (none for one seed, or a count every seed shares)
        text += f" \u00b1 {fmt(v['sd'])}"
    return text + (f" (n={v['n']})" if arm else "")


class CompareView:
    def __init__(self, cmp, width: int | None) -> None:  # noqa: ANN001 - services.compare.Comparison
        from cemctl.commands.views.table import Cell, Column, fit
        from cemctl.services.compare import METRICS

        names = [i.text for i in cmp.items]
        labels = dict(METRICS)
        cols = [Column("what", "", required=True)] + [Column(f"i{j}", n, required=True, shrink_to=8)
                                                      for j, n in enumerate(names)]
        self.config_rows = [{"what": Cell(k), **{f"i{j}": Cell(v) for j, v in enumerate(vals)}}
                            for k, vals in cmp.differing]
        arms = [i.kind == "arm" for i in cmp.items]
        self.metric_rows = [{"what": Cell(labels[col]), **{f"i{j}": Cell(_cell(col, v, arms[j]))
                                                           for j, v in enumerate(vals)}}
                            for col, vals in cmp.metrics]
        self.layout = fit(cols, self.config_rows + self.metric_rows, width, keep_empty=True)
        self.identical = cmp.identical
        self.kinds = "; ".join(f"{i.text}: run {i.name}" if i.kind == "run" else
                               f"{i.text}: arm of {len(i.run_ids)} run{'s' if len(i.run_ids) != 1 else ''}"
                               for i in cmp.items)

    def plain_lines(self) -> list[str]:
        from cemctl.commands.views.table import render_plain

        out = [self.kinds]
        if self.identical:
            out.append("the configs are identical" + (" (apart from the seed)" if "arm" in self.kinds else ""))
        else:
            out += ["config keys that differ:"] + render_plain(self.layout, self.config_rows)
        return out + ["", "metrics:"] + render_plain(self.layout, self.metric_rows)

    def rich(self):  # noqa: ANN201
        from rich.console import Group
        from rich.text import Text

        from cemctl.commands.views.table import render_rich

        parts = [Text(self.kinds, style="dim")]
        if self.identical:
            parts.append(Text("the configs are identical" + (" (apart from the seed)" if "arm" in self.kinds else ""),
                              style="bold"))
        else:
            parts += [Text("config keys that differ:", style="bold"), render_rich(self.layout, self.config_rows)]
        return Group(*parts, Text(""), Text("metrics:", style="bold"), render_rich(self.layout, self.metric_rows))


def compare_command(
    items: List[str] = typer.Argument(..., help="Two or more run ids (or prefixes), arm ids or arm labels."),
    experiment: Optional[str] = typer.Option(None, "--experiment", "-e", help="Look arm labels up in this experiment."),
    where: Optional[List[str]] = typer.Option(None, "--where", help="Only runs meeting KEY OP VALUE (repeatable)."),
    curves: Optional[str] = typer.Option(None, "--curves", help="Also write their training curves to this image file "
                                         "(.png, .pdf or .svg)."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Show only the config keys that differ between runs or arms, then their metrics side by side."""
    with cli_errors():
        from cem_core.errors import ConfigError
        from cemctl.services.compare import compare, curves_figure

        if curves is not None and Path(curves).suffix.lower() not in (".png", ".pdf", ".svg"):
            raise ConfigError("--curves", f"{curves!r} must end in .png, .pdf or .svg", allowed=[".png", ".pdf", ".svg"])
        cmp = compare(db_url(db), runs_dir(runs), list(items), experiment=experiment, where=where)
        if curves is not None:
            from cemctl.report.outfile import write_owned_file

            fig = curves_figure(db_url(db), cmp)
            write_owned_file(Path(curves), lambda p: fig.savefig(p, dpi=150, format=Path(curves).suffix[1:].lower()))
    if as_json:
        typer.echo(json.dumps(cmp.to_json(), default=str))
        return
    _, width = output_width()
    print_view(CompareView(cmp, width))
    if curves is not None:
        typer.echo(f"curves written to {curves}")


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)
