"""`cemctl eval RUN|EXPERIMENT --steps 1,2,4,8 [--sublayer attention|mlp|both]`: test-time recursion scaling.

Evaluates the final weights of a finished CEM run with other numbers of
recursive steps T (library: `cem_core.train.recursion_eval.evaluate_steps`,
which writes RUN_DIR/evals.json), ingests the rows into the results database
(`evals` table) and prints T against test perplexity and FLOPs per token.
`cemctl report` then draws them for the run's experiments.

RUN is a run id (or a run directory); EXPERIMENT evaluates every finished run
of the experiment that has CEM sublayers and skips the others with a note.
Unknown runs, runs that are not done and models without a CEM sublayer are
refused with one line and exit code 2. torch is imported only when the command runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, console, db_url, err_console, fail, runs_dir


@dataclass
class Target:
    kind: str  # "run" | "experiment"
    name: str
    run_dirs: list[Path] = field(default_factory=list)


def resolve_target(engine: Any, target: str, runs_root: Path) -> Target:
    """An experiment name, a run id known to the database, a run id under runs_root, or a run directory."""
    from cem_core.train.recursion_eval import EvalRefused
    from cemctl.db.runs import get_experiment, get_run, list_runs

    def run_dir_of(run: Any) -> Path:
        recorded = Path(run.run_dir) if run.run_dir else None
        return recorded if recorded is not None and recorded.is_dir() else runs_root / run.id

    if get_experiment(engine, target) is not None:
        return Target("experiment", target, [run_dir_of(r) for r in list_runs(engine, experiment=target)])
    run = get_run(engine, target)
    if run is not None:
        return Target("run", target, [run_dir_of(run)])
    for candidate in (runs_root / target, Path(target)):
        if "/" not in target and candidate == Path(target) and not candidate.is_dir():
            continue
        if (candidate / "config.json").is_file():
            return Target("run", candidate.name, [candidate])
    raise EvalRefused(f"unknown run or experiment {target!r}: no experiment or run of that name in the results "
                      f"database and no run directory {str(runs_root / target)!r}")


def _count(value: float) -> str:
    """233600 -> '234k' (3 significant digits)."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.3g}"


def _table(rows: list[dict[str, Any]], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", caption="* = the T the model was trained with",
                  caption_justify="left")
    for col in ("run", "varied", "T", "attn/MLP T", "test ppl", "vs trained", "FLOPs/token"):
        table.add_column(col, justify="left" if col in ("run", "varied") else "right", no_wrap=True)
    for r in rows:
        ppl = r.get("test_ppl")
        base = r.get("_trained_ppl")
        delta = f"{ppl - base:+.3f}" if ppl is not None and base is not None else ""
        trained = r["attn_steps"] == r["trained_attn_steps"] and r["mlp_steps"] == r["trained_mlp_steps"]
        table.add_row(r["_run"], r["sublayer"], f"{r['eval_steps']}{'*' if trained else ''}",
                      f"{r['attn_steps']}/{r['mlp_steps']}", f"{ppl:.3f}" if ppl is not None else "non-finite",
                      delta, _count(float(r["flops_per_token"])))
    return table


def eval_command(
    target: str = typer.Argument(..., help="Run id (or run directory) or experiment name."),
    steps: str = typer.Option(..., "--steps", help="Recursion steps T to evaluate, comma-separated (e.g. 1,2,4,8)."),
    sublayer: str = typer.Option("both", "--sublayer", help="Which CEM sublayer's T to vary: attention, mlp or both "
                                 "(both = every CEM sublayer the model has)."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda or cuda:N \\[default: $CEMCTL_DEVICE, else CUDA when available]."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Test perplexity of trained CEM models at other recursion depths T (stored in the database for `report`)."""
    with cli_errors():
        from cem_core.errors import ConfigError
        from cem_core.train.recursion_eval import SUBLAYERS, EvalRefused, check_evaluable, parse_steps
        from cemctl.db import ingest_run, open_db

        step_list = parse_steps(steps)
        if sublayer not in SUBLAYERS:
            raise ConfigError("--sublayer", f"unknown sublayer {sublayer!r}", value=sublayer, allowed=SUBLAYERS)
        engine = open_db(db_url(db))
        tgt = resolve_target(engine, target, runs_dir(runs))
        todo, notes = [], []
        for rd in tgt.run_dirs:
            try:
                check_evaluable(rd, sublayer)
                todo.append(rd)
            except EvalRefused as e:
                if tgt.kind == "run":
                    raise
                notes.append(f"skipped {rd.name}: {e}")
        for note in notes:
            err_console.print(note, markup=False)
        if not todo:
            raise EvalRefused(f"experiment {tgt.name!r}: no finished run with a CEM sublayer to evaluate "
                              f"({len(tgt.run_dirs)} runs, all skipped)")
        from cem_core.train.recursion_eval import evaluate_steps
        from cemctl.db.rundir import read_json

        shown: list[dict[str, Any]] = []
        done_runs = 0
        for rd in todo:
            try:
                rows = evaluate_steps(rd, step_list, sublayer=sublayer, device=device)
            except EvalRefused as e:  # e.g. an unreadable final checkpoint: the other runs still count
                if tgt.kind == "run":
                    raise
                notes.append(f"failed {rd.name}: {e}")
                err_console.print(notes[-1], markup=False)
                continue
            ingest_run(engine, rd)
            done_runs += 1
            trained_ppl = (read_json(rd / "result.json") or {}).get("test_ppl")
            shown += [{**r, "_run": rd.name, "_trained_ppl": trained_ppl} for r in rows]
    if not shown:
        fail(f"experiment {tgt.name!r}: no run could be evaluated ({len(notes)} skipped or failed)")
    console.print(_table(shown, f"test-time recursion: {tgt.kind} {tgt.name}"))
    console.print(f"{len(shown)} evaluations of {done_runs} run(s) stored in evals.json and the results database"
                  + (f"; {len(notes)} run(s) skipped or failed" if notes else ""), markup=False, highlight=False,
                  soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
