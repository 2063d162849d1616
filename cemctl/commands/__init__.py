"""CLI command modules; each exposes `register(app)` (used by `cemctl/cli.py`).

`register_all` also gives every command the two things `cemctl --help` and `cemctl CMD --help` show about it
in one place, so that they read the same everywhere:

- `SHORT_HELP`: its whole first sentence, short enough for the command list at 80 columns (click cuts a longer
  one with "...");
- `METAVARS`: each option's placeholder names the values it takes (`--executor local|slurm`, `--db URL|PATH`),
  never a type (`<str>`, `<int range>`) or a Python name (`{target}`): options and arguments without an explicit
  metavar get theirs from this table, else from their name's ending (`--timeout-min MINUTES`, `--reports-dir DIR`),
  else from their name (`RUN`).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import typer

# Order is the order of `cemctl --help`.
COMMAND_MODULES = ("demo", "plan", "data", "launch", "status", "serve", "report", "claims", "compare", "export", "tag",
                   "archive", "sync", "logs", "cancel", "eval", "keys", "forget")

# The first sentence of each command, as `cemctl --help` lists it (at most 60 characters: the list fits 80 columns).
SHORT_HELP = {
    "demo": "Run plan, launch, status and report on the demo grid.",
    "plan": "Expand and validate a grid, record its runs and their cost.",
    "data": "Prepare, list and clean the tokenized corpora.",
    "launch": "Launch every run of a grid that is not done (idempotent).",
    "status": "Show the state, progress, losses and errors of every run.",
    "serve": "Serve a live, read-only results dashboard in the browser.",
    "report": "Write an experiment's figures, tables and index.",
    "claims": "Test the grids' claims on the finished runs.",
    "confirm": "Make a claim's confirmation grid from its lr profiles.",
    "compare": "Show runs or arms side by side: what differs, the metrics.",
    "export": "Export runs or curves: CSV, Parquet, JSON lines, TensorBoard.",
    "tag": "Set or remove tags on a run or an experiment's runs.",
    "note": "Add a note to a run (kept in its tags.json).",
    "archive": "Write experiments' runs into one archive (no checkpoints).",
    "import": "Import an archive, every file checked against its hash.",
    "trust": "List or trust the plugin sources archives brought.",
    "sync": "Rebuild the database from the run directories.",
    "logs": "Show a run's logs.",
    "cancel": "Stop runs and mark them cancelled.",
    "eval": "Test perplexity of trained CEM models at other depths T.",
    "keys": "List every config key and run field, with its meaning.",
    "forget": "Remove an experiment planned by mistake (never a result).",
}

# (command or "*", option) -> placeholder. The command is the one `cemctl CMD` names ("data prepare" for a subcommand).
METAVARS = {
    ("*", "--db"): "URL|PATH",
    ("*", "--runs-dir"): "DIR",
    ("*", "--executor"): "local|slurm",
    ("*", "--set"): "KEY=VALUE",
    ("*", "--where"): "'KEY OP VALUE'",
    ("*", "--seeds"): "0-7|0,1,5",
    ("*", "--gpus"): "0,1,...|none",
    ("*", "--device"): "cpu|cuda|cuda:N",
    ("*", "--sublayer"): "both|attention|mlp",
    ("*", "--steps"): "1,2,4,...",
    ("*", "--state"): "STATE,...",
    ("*", "--columns"): "COLUMN,...",
    ("*", "--sort"): "[-]COLUMN",
    ("*", "--sbatch"): "FLAG[=VALUE]",
    ("*", "--run"): "RUN",
    ("*", "--experiment"): "EXPERIMENT",
    ("*", "--remove"): "NAME",
    ("*", "--grid"): "FILE",
    ("*", "--cache-dir"): "DIR",
    ("*", "--mfu"): "0..1",
    ("*", "--gpu-tflops"): "TFLOP/S",
    ("*", "--cpu-gflops"): "GFLOP/S",
    ("*", "--curves"): "FILE.png",
    ("*", "--plugins"): "MODULE,...",
    ("export", "--format"): "csv|parquet|jsonl|tensorboard",
    ("report", "--format"): "png,pdf,svg",
    ("export", "--out"): "FILE|DIR",
    ("archive", "--out"): "FILE.tar.gz",
    ("confirm", "--out"): "FILE.toml",
    ("confirm", "--power"): "0..1",
    ("confirm", "--ladder"): "SIZE,...",
    ("confirm", "--transfer"): "width|same",
    ("*", "--out"): "DIR",
}
_SUFFIXES = (("-s", "SECONDS"), ("-min", "MINUTES"), ("-gb", "GB"), ("-hours", "HOURS"), ("-dir", "DIR"))


def _option_metavar(command: str, decls: tuple[str, ...], annotation: Any) -> str:
    long = next((d for d in decls if d.startswith("--")), decls[0] if decls else "")
    long = long.split("/")[0]
    for key in ((command, long), ("*", long)):
        if key in METAVARS:
            return METAVARS[key]
    for suffix, name in _SUFFIXES:
        if long.endswith(suffix):
            return name
    if "int" in str(annotation):
        return "N"
    return long.lstrip("-").upper().replace("-", "_")


def set_placeholders(command: str, callback: Any) -> None:
    """Give the options and arguments of a command's callback their placeholders (`METAVARS`), where none is set."""
    from typer.models import ArgumentInfo, OptionInfo

    for param in inspect.signature(callback).parameters.values():
        info = param.default
        if isinstance(info, OptionInfo) and info.metavar is None:
            if param.annotation in (bool, "bool") or getattr(info, "is_flag", None):
                continue
            info.metavar = _option_metavar(command, tuple(info.param_decls or ()), param.annotation)
        elif isinstance(info, ArgumentInfo) and info.metavar is None:
            info.metavar = param.name.upper()


def _finish(app: typer.Typer, prefix: str = "") -> None:
    for cmd in app.registered_commands:
        name = cmd.name or (cmd.callback.__name__ if cmd.callback else "")
        if cmd.short_help is None and name in SHORT_HELP and not prefix:
            cmd.short_help = SHORT_HELP[name]
        if cmd.callback is not None:
            set_placeholders(f"{prefix}{name}", cmd.callback)
    from typer.models import DefaultPlaceholder

    for group in app.registered_groups:
        if isinstance(group.short_help, (DefaultPlaceholder, type(None))) and group.name in SHORT_HELP and not prefix:
            group.short_help = SHORT_HELP[group.name]
        if group.typer_instance is not None:
            _finish(group.typer_instance, f"{prefix}{group.name} ")


def _plain_argument_usage() -> None:
    """Typer writes a required argument as `{TARGET}` in a usage line; cemctl writes `TARGET` (and `ITEMS...` for a
    list), as click does. Only arguments given a placeholder here are changed."""
    from typer.core import TyperArgument

    original = TyperArgument.make_metavar
    if getattr(original, "_cemctl", False):
        return

    def make_metavar(self: Any, *args: Any, **kwargs: Any) -> str:
        var = original(self, *args, **kwargs)
        if self.metavar is not None and var == f"{{{self.metavar}}}":
            var = self.metavar
        if self.metavar is not None and self.nargs != 1 and not var.rstrip("]").endswith("..."):
            var = f"{var[:-1]}...]" if var.endswith("]") else f"{var}..."
        return var

    make_metavar._cemctl = True  # type: ignore[attr-defined]
    TyperArgument.make_metavar = make_metavar  # type: ignore[method-assign]


def register_all(app: typer.Typer) -> None:
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"cemctl.commands.{name}")
        module.register(app)
    _finish(app)
    _plain_argument_usage()
