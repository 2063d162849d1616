"""CLI command modules; each exposes `register(app)` (used by `cemctl/cli.py`)."""

from __future__ import annotations

import importlib

import typer

# Order is the order of `cemctl --help`.
COMMAND_MODULES = ("demo", "plan", "data", "launch", "status", "serve", "report", "claims", "compare", "export", "tag", "archive",
                   "sync", "logs", "cancel", "eval", "keys")


def register_all(app: typer.Typer) -> None:
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"cemctl.commands.{name}")
        module.register(app)
