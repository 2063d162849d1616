"""Results as tidy pandas DataFrames: the one loader of `cemctl report`.

- `runs_frame(records)`: one row per run: `run_id`, `state`, `reason`, the flattened
  resolved config (`task`, `model.attention`, ..., `train.lr`, `train.seed`), then
  `RESULT_COLUMNS` (params, tokens, FLOPs, perplexities, losses, error, diverged step).
- `curves_frame(records)`: `CURVE_COLUMNS` (run_id, step, tokens, train_loss, val_loss).

The database loaders (`load_runs`, `load_curves`) read through `pd.read_sql` on
the SQLAlchemy engine and build the same frames; figure functions only ever see
these frames, so they are tested on synthetic frames.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from cem_core.config import flatten

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

RESULT_COLUMNS = (
    "params_total", "params_non_embedding", "flops_per_token", "tokens", "flops", "steps",
    "test_ppl", "val_ppl", "test_loss", "val_loss", "wall_time_s", "error", "diverged_step",
)
INT_RESULT_COLUMNS = ("params_total", "params_non_embedding", "flops_per_token", "tokens", "steps", "diverged_step")
CURVE_COLUMNS = ("run_id", "step", "tokens", "train_loss", "val_loss")


def _config_dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, (str, bytes)):
        config = json.loads(config)
    return flatten(dict(config))


def runs_frame(records: Iterable[Mapping[str, Any]]) -> "pd.DataFrame":
    """Tidy runs frame from records {run_id, state, config (dict or JSON), [reason], result fields...,
    [extra: {key: scalar}]} (extra keys become columns when they name no other column).

    Missing result fields are NaN/None; integer columns use pandas' nullable Int64.
    """
    import pandas as pd

    rows, config_keys, extra_keys = [], {}, {}
    for rec in records:
        cfg = _config_dict(rec.get("config", rec.get("config_json")))
        config_keys.update(dict.fromkeys(cfg))
        row: dict[str, Any] = {"run_id": str(rec["run_id"]), "state": str(rec.get("state") or "planned"),
                               "reason": rec.get("reason")}
        row.update(cfg)
        for col in RESULT_COLUMNS:
            row[col] = rec.get(col)
        for key, value in (rec.get("extra") or {}).items():  # e.g. test_rmse of a GP run
            if key not in row:
                row[key] = value
                extra_keys[key] = None
        rows.append(row)
    cfg_cols = sorted(config_keys, key=lambda k: (k != "task", k))
    columns = ["run_id", "state", "reason"] + cfg_cols + list(RESULT_COLUMNS) + list(extra_keys)
    frame = pd.DataFrame(rows, columns=columns)
    for col in RESULT_COLUMNS:
        if col in ("error",):
            frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
        elif col in INT_RESULT_COLUMNS:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
        else:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    return frame


def curves_frame(records: Iterable[Mapping[str, Any]]) -> "pd.DataFrame":
    """Curves frame: one row per (run, step) with train and/or validation loss."""
    import pandas as pd

    frame = pd.DataFrame(list(records), columns=list(CURVE_COLUMNS))
    for col in ("train_loss", "val_loss"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame["step"] = pd.to_numeric(frame["step"], errors="coerce").astype("Int64")
    frame["tokens"] = pd.to_numeric(frame["tokens"], errors="coerce").astype(float)
    return frame.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------
# From the results database (cemctl.db)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def load_runs(engine: Any, experiment: str | None, *, scale: str | None = None,
              unlinked: bool = False) -> "pd.DataFrame":
    """The runs frame of one experiment (grid order; each run once), read with `pd.read_sql` from the
    `experiment_runs`, `runs` and `results` tables; only the runs planned at `scale` when given.
    With `experiment=None`: the runs of every experiment, each (run, scale) once (`cemctl claims`).
    Result values come from `results` (the run's result.json) with the run row's summary as
    fallback; scalar keys of result.json the table has no column for (e.g. `test_rmse`) become
    columns too. `scale`, `experiment` (the experiments linking it) and `marks` (the grid's [[mark]]
    labels, "; "-joined) are columns, and `in_grid`: False for a run an edited grid no longer holds
    (kept when it has an outcome: a finished result never vanishes from a report; one that never ran
    is left out, it will not run). `unlinked` (with `experiment=None`): also the runs no experiment
    links (a database rebuilt by `cemctl sync` from run folders alone), with an empty experiment and scale.
    """
    import pandas as pd
    from sqlalchemy import func, literal, null, select

    from cemctl.db.models import Experiment, ExperimentRun, Result, Run
    from cemctl.db.runs import in_grid_case, join_latest, latest_plans

    results = (
        func.coalesce(Result.params_total, Run.params_total).label("params_total"),
        func.coalesce(Result.params_non_embedding, Run.params_non_embedding).label("params_non_embedding"),
        func.coalesce(Result.flops_per_token, Run.flops_per_token).label("flops_per_token"),
        func.coalesce(Result.tokens, Run.tokens).label("tokens"),
        Result.train_flops.label("flops"), Result.steps, Result.test_ppl, Result.val_ppl, Result.test_loss,
        Result.val_loss, Result.wall_time_s, Result.error, Result.diverged_step, Result.result_json,
    )
    latest = latest_plans()
    stmt = (
        select(
            Run.id.label("run_id"), Run.state, Run.state_reason.label("reason"), Run.config_json,
            Run.error.label("run_error"), ExperimentRun.position, ExperimentRun.scale.label("scale"),
            Experiment.name.label("experiment"), ExperimentRun.marks_json, ExperimentRun.planned_at, *results,
            in_grid_case(latest).label("in_grid"),
        )
        .select_from(ExperimentRun)
        .join(Experiment, Experiment.id == ExperimentRun.experiment_id)
        .join(Run, Run.id == ExperimentRun.run_id)
        .outerjoin(Result, Result.run_id == Run.id)
        .order_by(ExperimentRun.planned_at.desc(), ExperimentRun.position)
    )
    stmt = join_latest(stmt, latest)
    if experiment is not None:
        stmt = stmt.where(Experiment.name == experiment)
    if scale is not None:
        stmt = stmt.where(ExperimentRun.scale == scale)
    with engine.connect() as conn:
        raw = pd.read_sql(stmt, conn)
        if unlinked and experiment is None and scale is None:
            lone = (select(Run.id.label("run_id"), Run.state, Run.state_reason.label("reason"), Run.config_json,
                           Run.error.label("run_error"), literal(0).label("position"), literal("").label("scale"),
                           literal("").label("experiment"), literal("[]").label("marks_json"),
                           null().label("planned_at"), *results, literal(1).label("in_grid"))
                    .select_from(Run).outerjoin(Result, Result.run_id == Run.id)
                    .where(Run.id.not_in(select(ExperimentRun.run_id))).order_by(Run.created_at))
            extra = pd.read_sql(lone, conn)
            if not extra.empty:
                raw = pd.concat([raw, extra], ignore_index=True) if not raw.empty else extra
    raw = raw.sort_values("in_grid", ascending=False, kind="stable")  # a run in some grid is taken from that link
    records, seen = [], set()
    names: dict[Any, list[str]] = {}
    for rec in raw.to_dict("records"):
        key = rec["run_id"] if experiment is not None else (rec["run_id"], rec["scale"])
        names.setdefault(key, [])
        if rec["experiment"] and rec["experiment"] not in names[key]:
            names[key].append(rec["experiment"])
        if key in seen:  # linked by several plan keys (or experiments): once, from its latest plan
            continue
        seen.add(key)
        in_grid = bool(rec.pop("in_grid"))
        if not in_grid and rec["state"] not in ("done", "diverged", "failed", "damaged"):
            continue  # left the grid before it ran: it never will
        rec = {k: (None if isinstance(v, float) and v != v else v) for k, v in rec.items()}
        rec["error"] = rec.get("error") or rec.pop("run_error", None)
        extra = json.loads(rec.pop("result_json", None) or "{}")
        rec["extra"] = {k: v for k, v in extra.items() if _scalar(v) and k not in rec and k != "state"}
        marks = json.loads(rec.pop("marks_json", None) or "[]")
        rec["extra"]["marks"] = "; ".join(str(m) for m in marks)
        rec["extra"]["scale"] = rec.pop("scale", None) or ""
        rec["extra"]["in_grid"] = in_grid
        rec["extra"]["experiment"] = names[key]  # joined below, once every link was seen
        rec.pop("experiment", None)
        records.append(rec)
    for rec in records:
        rec["extra"]["experiment"] = ", ".join(rec["extra"]["experiment"])
    return runs_frame(records)


def load_curves(engine: Any, run_ids: Iterable[str]) -> "pd.DataFrame":
    """Training and validation losses of the runs, one row per (run, step), read with `pd.read_sql`."""
    import pandas as pd
    from sqlalchemy import select

    from cemctl.db.models import Metric

    ids = list(run_ids)
    if not ids:
        return curves_frame([])
    parts = []
    with engine.connect() as conn:
        for i in range(0, len(ids), 500):  # keep the IN list short
            stmt = (select(Metric.run_id, Metric.kind, Metric.step, Metric.tokens, Metric.train_loss, Metric.val_loss)
                    .where(Metric.run_id.in_(ids[i:i + 500]), Metric.kind.in_(("train", "val"))))
            parts.append(pd.read_sql(stmt, conn))
    raw = pd.concat(parts, ignore_index=True)
    if raw.empty:
        return curves_frame([])
    merged = raw.groupby(["run_id", "step"], as_index=False, sort=True).agg(
        tokens=("tokens", "max"), train_loss=("train_loss", "first"), val_loss=("val_loss", "first"))
    return curves_frame(merged.to_dict("records"))


def curves_from_run_dirs(runs_root: Any, run_ids: Iterable[str]) -> "pd.DataFrame":
    """The same curves read from `<runs_root>/<run_id>/metrics.jsonl` (a truncated last line is skipped), through
    the confined run-file reader: a metrics file linked out of its run, a FIFO or a device is skipped, unread."""
    from pathlib import Path

    from cem_core import runfiles

    rows = []
    for rid in run_ids:
        try:
            data = runfiles.read_run_file(Path(runs_root) / rid, runfiles.METRICS_FILE, max_bytes=runfiles.MAX_LOG_BYTES)
        except (OSError, runfiles.RunFileError):
            continue
        for line in data.decode(errors="replace").splitlines():
            try:
                m = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(m, dict):
                continue
            if m.get("kind") == "train":
                rows.append({"run_id": rid, "step": m.get("step"), "tokens": m.get("tokens"),
                             "train_loss": m.get("train_loss"), "val_loss": None})
            elif m.get("kind") == "val":
                rows.append({"run_id": rid, "step": m.get("step"), "tokens": m.get("tokens"), "train_loss": None,
                             "val_loss": m.get("val_loss")})
    if not rows:
        return curves_frame([])
    import pandas as pd

    merged = pd.DataFrame(rows).groupby(["run_id", "step"], as_index=False, sort=True).agg(
        tokens=("tokens", "max"), train_loss=("train_loss", "first"), val_loss=("val_loss", "first"))
    return curves_frame(merged.to_dict("records"))
