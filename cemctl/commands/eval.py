"""`cemctl eval` (not implemented yet)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Adds nothing until the command is implemented."""
