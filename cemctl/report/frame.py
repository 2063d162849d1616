"""Results as tidy pandas DataFrames: the one loader of `cemctl report`.

- `runs_frame(records)`: the run record's frame (`cemctl.records`: every field of the
  catalogue, the flattened resolved config, tags) from plain records: synthetic data.
  From the database the runs come from `cemctl.records.load_records(...).frame()`.
- `curves_frame(records)`: `CURVE_COLUMNS` (run_id, step, tokens, train_loss, val_loss).

`load_curves` reads the curves through `pd.read_sql` on the SQLAlchemy engine;
figure functions only ever see these frames, so they are tested on synthetic frames.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from cem_core.config import flatten

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

CURVE_COLUMNS = ("run_id", "step", "tokens", "train_loss", "val_loss")


def _config_dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, (str, bytes)):
        config = json.loads(config)
    return flatten(dict(config))


def runs_frame(records: Iterable[Mapping[str, Any]]) -> "pd.DataFrame":
    """A runs frame (the run record's frame, `cemctl.records.records_frame`) from plain records {run_id, state,
    config (dict or JSON), [reason], result fields..., [extra: {key: scalar}]}: synthetic data and tests. Missing
    fields are NaN/None; integer fields use pandas' nullable Int64."""
    from cemctl.records import records_frame
    from cemctl.records.fields import RUN_FIELDS

    out = []
    for rec in records:
        row: dict[str, Any] = {f.name: None for f in RUN_FIELDS}
        row.update({"run_id": str(rec["run_id"]), "state": str(rec.get("state") or "planned"),
                    "reason": rec.get("reason"), "in_grid": True, "outdated": False})
        row.update(_config_dict(rec.get("config", rec.get("config_json"))))
        for key, value in rec.items():
            if key in ("run_id", "state", "reason", "config", "config_json", "extra"):
                continue
            row["train_flops" if key == "flops" else key] = value
        for key, value in (rec.get("extra") or {}).items():  # e.g. test_rmse of a GP run
            if row.get(key) is None:
                row[key] = value
        out.append(row)
    frame = records_frame(out)
    if not any(r.get("arm") for r in out):  # arms are the record's (or `report.arms.with_arms`'s) to name
        frame = frame.drop(columns=["arm", "arm_label"])
    return frame


def curves_frame(records: "Iterable[Mapping[str, Any]] | pd.DataFrame") -> "pd.DataFrame":
    """Curves frame: one row per (run, step) with train and/or validation loss (from records or a frame)."""
    import pandas as pd

    if isinstance(records, pd.DataFrame):  # a frame's columns as they are, never a dict per row and back
        frame = records.reindex(columns=list(CURVE_COLUMNS))
    else:
        frame = pd.DataFrame(list(records), columns=list(CURVE_COLUMNS))
    for col in ("train_loss", "val_loss"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame["step"] = pd.to_numeric(frame["step"], errors="coerce").astype("Int64")
    frame["tokens"] = pd.to_numeric(frame["tokens"], errors="coerce").astype(float)
    return frame.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------
# From the results database (runs: `cemctl.records.load_records`, the one run record)


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
    return curves_frame(merged)


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
    return curves_frame(merged)
