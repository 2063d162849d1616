"""`cemctl keys [PATTERN] [--section config|fields] [--json]`: every config key and run field, with what it means.

A config key: its type, default, allowed values or range, meaning and the variants that read
it (`cem_core.keydoc`); a run field: its type, unit, where it comes from and meaning
(`cemctl.records.fields`), the names `--where`, `--columns`, `--sort`, export and the API use.
"""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any, Optional

import typer

from cemctl.commands.common import cli_errors, output_width


def _fmt(value: Any) -> str:
    from cemctl.records.formats import value as fmt_value

    if isinstance(value, str):
        return json.dumps(value)
    return fmt_value(value)


def render(listing: dict[str, list[dict[str, Any]]], width: int) -> list[str]:
    """Each key on one line (name, type, default, allowed) and its meaning wrapped below, indented."""
    lines: list[str] = []
    indent = "    "
    wrap = max(30, width - len(indent))
    listing = {k: v for k, v in listing.items() if v or not any(listing.values())}  # a pattern: matching sections
    if listing.get("config") is not None:
        lines.append(f"config keys ({len(listing['config'])}): grid files, --set, --axis")
        for r in listing["config"]:
            head = f"  {r['key']}  {r['type']} = {_fmt(r['default'])}"
            if r["allowed"]:
                head += f"  ({r['allowed']})"
            lines += textwrap.wrap(head, width, subsequent_indent=indent + "  ") or [head]
            text = r["meaning"] + (f" [{r['unit']}]" if r["unit"] else "")
            if r["read_by"]:
                text += "; read by " + ", ".join(r["read_by"])
            lines += [indent + t for t in textwrap.wrap(text, wrap)]
    if listing.get("fields") is not None:
        if lines:
            lines.append("")
        lines.append(f"run fields ({len(listing['fields'])}): --where, --columns, --sort, export, the API")
        for r in listing["fields"]:
            names = [r["short"]] if r["short"] != r["field"] else []
            names += [a for a in r["aliases"] if a not in names]
            head = f"  {r['field']}  {r['type']}" + (f" [{r['unit']}]" if r["unit"] else "") + f"  from {r['source']}"
            if names:
                head += "  (also: " + ", ".join(names) + ")"
            lines += textwrap.wrap(head, width, subsequent_indent=indent + "  ") or [head]
            lines += [indent + t for t in textwrap.wrap(r["meaning"], wrap)]
    return lines


def register(app: typer.Typer) -> None:
    @app.command("keys")
    def keys(
        pattern: str = typer.Argument("", help="Only keys and fields whose name or meaning contains this."),
        section: str = typer.Option("all", "--section", metavar="all|config|fields",
                                    help="Config keys, run fields or both."),
        plugins: Optional[str] = typer.Option(None, "--plugins", help="Also the names these plugin modules register "
                                              "(comma-separated, as a grid's `plugins` key)."),
        as_json: bool = typer.Option(False, "--json", help="Every key and field as JSON."),
    ) -> None:
        """List every config key (type, default, allowed values, meaning) and every run field."""
        with cli_errors():
            from cemctl.services.keys import keys_listing

            listing = keys_listing(pattern, section=section, plugins=plugins or "")
            if as_json:
                print(json.dumps(listing, default=str, indent=1))
                return
            tty, width = output_width()
            sys.stdout.write("\n".join(render(listing, width or 100)) + "\n")
