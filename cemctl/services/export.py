"""Export runs to files other tools read (`cemctl export EXPERIMENT|--where ... --format F -o OUT`).

    export_runs(url, "fig2c", fmt="parquet", out="fig2c.parquet")                 # one row per run
    export_runs(url, None, where=["tag.phase=b"], fmt="csv", out="b.csv", curves=True)   # per-step, long form
    export_runs(url, "own", fmt="tensorboard", out="tb/")                         # one event folder per run

Rows: `cemctl.services.results.runs_table` (run id, experiment, scale, state, arm and
its label, every config key, the results, tags and notes); `curves=True`: the
per-step metrics in long form (`curves_long`). Formats: csv, parquet (pyarrow),
jsonl, and tensorboard: a folder with one subfolder per run (named by its run id)
holding an event file with the scalars train/loss, val/loss, train/lr and
train/tokens_per_s against the optimizer step, which TensorBoard (and any tool that
reads its files) loads; it needs the `tensorboard` extra. The output is replaced only
if an earlier export wrote it (`cemctl.report.outfile` for a file, `cemctl.report.outdir`
for the TensorBoard folder), unless `force`. Read-only on the database, torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from cem_core.errors import CemError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

FORMATS = ("csv", "parquet", "jsonl", "tensorboard")
TB_SCALARS = {"train_loss": "train/loss", "val_loss": "val/loss", "lr": "train/lr", "tokens_per_s": "train/tokens_per_s"}


@dataclass
class ExportResult:
    out: Path
    fmt: str
    rows: int
    runs: int


def _write_frame(frame: "pd.DataFrame", fmt: str, path: Path) -> None:
    if fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "jsonl":
        frame.to_json(path, orient="records", lines=True, date_format="iso", default_handler=str)
    else:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError("--format", "parquet needs pyarrow (pip install 'cemctl[parquet]')",
                              allowed=[f for f in FORMATS if f != "parquet"]) from None
        frame.to_parquet(path, index=False)


def export_runs(url: str, experiment: str | None = None, *, where: Sequence[str] | None = None, fmt: str = "csv",
                out: Path | str, curves: bool = False, scale: str | None = None, force: bool = False) -> ExportResult:
    from cemctl.db.engine import open_readonly_db
    from cemctl.services.results import curves_long, runs_table

    if fmt not in FORMATS:
        raise ConfigError("--format", f"unknown format {fmt!r}", value=fmt, allowed=FORMATS)
    if experiment is None and not where:
        raise ConfigError("export", "name an experiment or select runs with --where", allowed=["EXPERIMENT", "--where"])
    out = Path(out)
    if fmt == "tensorboard":
        from cemctl.report.outdir import check_output_dir

        check_output_dir(out, what="export")  # before any work: never replace what an export did not write
    else:
        from cemctl.report.outfile import check_writable

        check_writable(out, force=force)
    engine = open_readonly_db(url)
    runs = runs_table(engine, experiment, where=where, scale=scale)
    if runs.empty:
        raise CemError(f"export: no runs {'of ' + experiment if experiment else ''} meet the selection")
    if fmt == "tensorboard":
        long = curves_long(engine, runs)
        _write_tensorboard(runs, long, out)
        return ExportResult(out, fmt, len(long), len(runs))
    frame = curves_long(engine, runs) if curves else runs
    from cemctl.report.outfile import write_owned_file

    write_owned_file(out, lambda tmp: _write_frame(frame, fmt, tmp), force=force)
    return ExportResult(out, fmt, len(frame), len(runs))


def _write_tensorboard(runs: "pd.DataFrame", long: "pd.DataFrame", out: Path) -> None:
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise ConfigError("--format", "tensorboard needs the tensorboard package (pip install 'cemctl[tensorboard]')",
                          allowed=[f for f in FORMATS if f != "tensorboard"]) from None
    import shutil

    from cemctl.report.outdir import check_output_dir, new_build_dir, swap_in

    out = check_output_dir(out, what="export")
    tmp = new_build_dir(out)
    try:
        by_run = dict(tuple(long.groupby("run_id", sort=False))) if not long.empty else {}
        for rid in runs["run_id"]:
            folder = tmp / rid
            folder.mkdir()
            writer = EventFileWriter(str(folder))
            rows = by_run.get(rid)
            if rows is not None:
                for r in rows.itertuples(index=False):
                    tag = TB_SCALARS.get(r.metric)
                    if tag is None:
                        continue
                    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(r.value))])
                    wall = float(r.time_s) if r.time_s == r.time_s and r.time_s is not None else 0.0
                    writer.add_event(event_pb2.Event(wall_time=wall, step=int(r.step), summary=summary))
            writer.close()
        swap_in(tmp, out, what="export")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
