"""Export runs to files other tools read (`cemctl export EXPERIMENT|--where ... --format F -o OUT`).

    export_runs(url, "fig2c", fmt="parquet", out="fig2c.parquet")                 # one row per run
    export_runs(url, None, where=["tag.phase=b"], fmt="csv", out="b.csv", curves=True)   # per-step, long form
    export_runs(url, "own", fmt="tensorboard", out="tb/")                         # one event folder per run

Rows: `cemctl.services.results.runs_table` (run id, experiment, scale, state, arm and
its label, every config key, the results, tags and notes); `curves=True`: the
per-step metrics in long form (`curves_long`). Formats: csv, parquet (pyarrow),
jsonl, and tensorboard (`_write_tensorboard`; it needs the `tensorboard` extra): a
folder `<arm label>/seed=<n>/` per run (file-name-safe; arms whose labels read alike
get their arm id appended, so two arms never share a folder) holding one event file:
every curve metric (train/loss, val/loss, train/lr, train/grad_norm,
train/tokens_per_s), the run's system samples (system/cpu_process_pct, system/rss_bytes,
...; `cemctl.db.environment.system_frame`) and its final result/test_loss, in step
order; and the run's config keys as TensorBoard hparams (session start info, written
with tensorboard's own hparams summary API), with the experiment's hparams and
metrics at the top folder. The count printed is what TensorBoard's EventAccumulator
reads back. The output is replaced only
if an earlier export wrote it (`cemctl.report.outfile` for a file, `cemctl.report.outdir`
for the TensorBoard folder), unless `force`. Read-only on the database, torch-free.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.errors import CemError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

FORMATS = ("csv", "parquet", "jsonl", "tensorboard")
TB_SCALARS = {"train_loss": "train/loss", "val_loss": "val/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
              "tokens_per_s": "train/tokens_per_s"}
TB_RESULTS = ("test_loss",)  # written once per finished run, at its last step, as result/<name>
EXTRAS = {"parquet": "pyarrow", "tensorboard": "tensorboard"}  # format -> the module its extra (cemctl[format]) installs


def installed_formats() -> list[str]:
    """The formats this installation can write (an extra's format only when its package is importable)."""
    import importlib.util

    return [f for f in FORMATS if f not in EXTRAS or importlib.util.find_spec(EXTRAS[f]) is not None]


def format_error(fmt: str, message: str) -> ConfigError:
    """`--format`: the formats installed here as the allowed ones, and how to install the others."""
    have = installed_formats()
    missing = [f for f in FORMATS if f not in have]
    hint = ("; not installed here: " + ", ".join(f"{f} (pip install 'cemctl[{f}]')" for f in missing)) if missing else ""
    return ConfigError("--format", message + hint, value=fmt, allowed=have)


@dataclass
class ExportResult:
    out: Path
    fmt: str
    rows: int  # tensorboard: scalar events written
    runs: int
    hparams: int = 0  # tensorboard: runs whose config was written as hparams
    text: str | None = None  # `out` "-": the csv or jsonl for standard output (the command prints it)


STDOUT = "-"  # `--out -`: standard output (csv and jsonl)


def _write_frame(frame: "pd.DataFrame", fmt: str, path: Path | None) -> str | None:
    """Write `frame` to `path`; with None, return it as text (csv, jsonl)."""
    if fmt == "csv":
        return frame.to_csv(path, index=False)
    if fmt == "jsonl":
        return frame.to_json(path, orient="records", lines=True, date_format="iso", default_handler=str)
    else:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise format_error("parquet", "cannot write parquet") from None
        frame.to_parquet(path, index=False)
    return None


def export_runs(url: str, experiment: str | None = None, *, where: Sequence[str] | None = None, fmt: str = "csv",
                out: Path | str, curves: bool = False, scale: str | None = None, force: bool = False,
                runs_root: Path | str | None = None) -> ExportResult:
    """Write the selected runs' records (or their curves, or a TensorBoard folder) to `out`. `runs_root`: first
    bring the database up to date with these run folders (the same incremental sync as `status`)."""
    from cemctl.services.results import curves_long

    if fmt not in FORMATS:
        raise format_error(fmt, f"unknown format {fmt!r}")
    if fmt not in installed_formats():  # before any work
        raise format_error(fmt, f"cannot write {fmt}")
    if experiment is None and not where:
        raise ConfigError("export", "name an experiment or select runs with --where", allowed=["EXPERIMENT", "--where"])
    to_stdout = str(out) == STDOUT
    if to_stdout and fmt not in ("csv", "jsonl"):
        raise ConfigError("--out", f"'-' is standard output, which takes csv or jsonl, not {fmt}; give a "
                          f"{'folder' if fmt == 'tensorboard' else 'file'}", value=STDOUT, allowed=["csv", "jsonl"])
    out = Path(out)
    if to_stdout:
        pass
    elif fmt == "tensorboard":
        from cemctl.report.outdir import check_output_dir

        check_output_dir(out, what="export")  # before any work: never replace what an export did not write
    else:
        from cemctl.report.outfile import check_writable

        check_writable(out, force=force)
    if runs_root is not None:
        from cemctl.services.status.query import sync_before_reading

        sync_before_reading(url, runs_root, experiment)
    from cemctl.db.read import open_reader
    from cemctl.records import select_records

    reader = open_reader(url)
    recs = select_records(reader, experiment, where=where, scale=scale)
    if not len(recs):
        raise CemError(f"export: no runs {'of ' + experiment if experiment else ''} meet the selection")
    if fmt == "csv" and not curves:  # the records as they are: no frame (and no pandas) to build
        return _write_csv(recs.records, out, to_stdout, force)
    engine = reader.engine
    runs = recs.frame()
    if fmt == "tensorboard":
        from cemctl.db.environment import system_frame

        scalars, hparams = _write_tensorboard(runs, curves_long(engine, runs), out,
                                              system=system_frame(engine, list(runs["run_id"])))
        return ExportResult(out, fmt, scalars, len(runs), hparams=hparams)
    frame = curves_long(engine, runs) if curves else runs
    if to_stdout:
        return ExportResult(out, fmt, len(frame), len(runs), text=_write_frame(frame, fmt, None))
    from cemctl.report.outfile import write_owned_file

    def write(tmp: Path) -> None:
        _write_frame(frame, fmt, tmp)

    write_owned_file(out, write, force=force)
    return ExportResult(out, fmt, len(frame), len(runs))


def _write_csv(records: Sequence[Any], out: Path, to_stdout: bool, force: bool) -> ExportResult:
    import io

    from cemctl.records.load import write_records_csv

    if to_stdout:
        text = io.StringIO()
        write_records_csv(records, text)
        return ExportResult(out, "csv", len(records), len(records), text=text.getvalue())
    from cemctl.report.outfile import write_owned_file

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            write_records_csv(records, f)

    write_owned_file(out, write, force=force)
    return ExportResult(out, "csv", len(records), len(records))


_SAFE = re.compile(r"[^A-Za-z0-9._=+,-]+")
MAX_NAME_CHARS = 100


def _safe_name(text: str) -> str:
    """`text` as one portable file name: letters, digits and . _ = + , - (', ' -> ','); never '', '.' or '..'."""
    name = _SAFE.sub("_", str(text).replace(", ", ",")).strip("_.")[:MAX_NAME_CHARS]
    return name or "all"


def tensorboard_folders(runs: "pd.DataFrame") -> dict[str, str]:
    """{run id: its folder, "<arm label>/seed=<n>"}: distinct for distinct runs, and two arms never share a
    label folder (labels that read alike once made safe, or alike but for case, get their arm id appended)."""
    arms: dict[str, set[str]] = {}
    rows = runs.to_dict("records")
    for r in rows:
        arms.setdefault(_safe_name(r.get("arm_label") or "").casefold(), set()).add(str(r.get("arm") or r["run_id"]))
    out: dict[str, str] = {}
    taken: set[str] = set()
    for r in rows:
        label = _safe_name(r.get("arm_label") or "")
        if len(arms[label.casefold()]) > 1:
            label = f"{label[:MAX_NAME_CHARS - 13]}~{str(r.get('arm') or r['run_id'])[:12]}"
        seed = _plain(r.get("train.seed"))
        leaf = f"seed={int(seed)}" if isinstance(seed, (int, float)) and not isinstance(seed, bool) else f"run={r['run_id']}"
        folder = f"{label}/{leaf}"
        if folder.casefold() in taken:  # two runs of one arm with one seed (another nuisance key): the run id tells
            folder = f"{label}/{leaf}~{r['run_id']}"
        taken.add(folder.casefold())
        out[r["run_id"]] = folder
    return out


def _plain(value: Any) -> Any:
    """A config value as TensorBoard's hparams take it (bool, int, float, str), or None to leave it out."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalars
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def _hparams_of(runs: "pd.DataFrame") -> tuple[dict[str, dict[str, Any]], list[str]]:
    """({run id: {config key: value}}, the keys, those that vary among the runs first)."""
    from cemctl.report.arms import config_of

    per_run = {r["run_id"]: {k: v for k, v in ((k, _plain(v)) for k, v in config_of(r).items()) if v is not None}
               for r in runs.to_dict("records")}
    keys = list(dict.fromkeys(k for h in per_run.values() for k in h))
    varying = [k for k in keys if len({repr(h.get(k)) for h in per_run.values()}) > 1]
    return per_run, varying + [k for k in keys if k not in varying]


def _scalar_rows(rid: str, long_rows: Any, system_rows: Any, result: dict[str, Any]) -> list[tuple[int, str, float, float]]:
    """(step, tag, wall time, value) of one run, in step order (then tag, then time)."""
    from cem_core.runfiles.environment import SYSTEM_METRICS

    def wall(t: Any) -> float:
        return float(t) if t is not None and t == t else 0.0

    out: list[tuple[int, str, float, float]] = []
    if long_rows is not None:
        for r in long_rows.itertuples(index=False):
            tag = TB_SCALARS.get(r.metric, f"{r.kind}/{r.metric}")
            out.append((int(r.step), tag, wall(r.time_s), float(r.value)))
    if system_rows is not None:
        for r in system_rows.to_dict("records"):
            for name in SYSTEM_METRICS:
                value = r.get(name)
                if value is not None and value == value:
                    out.append((int(r["step"]), f"system/{name}", wall(r.get("time_s")), float(value)))
    last = max((s for s, *_ in out), default=None)
    last_wall = max((w for *_, w, _v in out), default=0.0)
    steps = result.get("steps")
    step = int(steps) if isinstance(steps, (int, float)) and steps == steps else last
    for name in TB_RESULTS:
        value = _plain(result.get(name))
        if step is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                and result.get("state") == "done":
            out.append((step, f"result/{name}", last_wall, float(value)))
    return sorted(out, key=lambda e: (e[0], e[1], e[2]))


def _write_tensorboard(runs: "pd.DataFrame", long: "pd.DataFrame", out: Path,
                       system: "pd.DataFrame | None" = None) -> tuple[int, int]:
    """Write the event folders (see the module docstring); returns (scalar events written, runs with hparams)."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.hparams import summary_v2 as hp
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise format_error("tensorboard", "cannot write tensorboard") from None
    import shutil

    from cemctl.report.outdir import check_output_dir, new_build_dir, swap_in

    out = check_output_dir(out, what="export")
    tmp = new_build_dir(out)
    folders = tensorboard_folders(runs)
    hparams, keys = _hparams_of(runs)
    scalars = written_hparams = 0
    tags: set[str] = set()
    try:
        by_run = dict(tuple(long.groupby("run_id", sort=False))) if not long.empty else {}
        by_run_system = dict(tuple(system.groupby("run_id", sort=False))) if system is not None and not system.empty else {}
        for r in runs.to_dict("records"):
            rid = r["run_id"]
            folder = tmp / folders[rid]
            folder.mkdir(parents=True)
            writer = EventFileWriter(str(folder))
            writer.add_event(event_pb2.Event(wall_time=0.0, summary=hp.hparams_pb(
                hparams[rid], trial_id=folders[rid])))
            written_hparams += 1
            for step, tag, wall, value in _scalar_rows(rid, by_run.get(rid), by_run_system.get(rid), r):
                summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
                writer.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary))
                scalars += 1
                tags.add(tag)
            writer.close()
        _write_hparams_config(tmp, hp, event_pb2, EventFileWriter, hparams, keys, sorted(tags))
        swap_in(tmp, out, what="export")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return scalars, written_hparams


def _write_hparams_config(folder: Path, hp: Any, event_pb2: Any, writer_class: Any,
                          hparams: dict[str, dict[str, Any]], keys: list[str], tags: list[str]) -> None:
    """The experiment's hparams (each key with the values it takes) and metrics, at the top folder."""
    params = []
    for key in keys:
        values = sorted({h[key] for h in hparams.values() if key in h}, key=repr)
        kinds = {bool if isinstance(v, bool) else float if isinstance(v, (int, float)) else str for v in values}
        kind = next(iter(kinds)) if len(kinds) == 1 else None
        domain = hp.Discrete(sorted({kind(v) for v in values})) if kind is not None else None
        params.append(hp.HParam(key, domain))
    config = hp.hparams_config_pb(hparams=params, metrics=[hp.Metric(t) for t in tags])
    writer = writer_class(str(folder))
    writer.add_event(event_pb2.Event(wall_time=0.0, summary=config))
    writer.close()
