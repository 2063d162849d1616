"""What runs trained on and their system samples, read from the database (for the dashboard, compare, export).

    environment_of(engine, ["a1b2c3d4e5f6", ...]) -> {run_id: {"hostname": ..., "gpu_model": ..., ...}}
    system_frame(engine, run_ids) -> DataFrame: run_id, step, tokens, time_s, attempt, sample, unix_s, + SYSTEM_METRICS

`environment_of` returns the checked environment.json record of each run that has one
(fields: `cem_core.runfiles.environment.ENVIRONMENT_FIELDS`, plus `earlier_attempts`,
the records of the run's earlier attempts); a run without one (trained before it was
recorded) is absent from the dict. `system_frame` reads the `metrics` rows of kind
"system" (one per sample, ordered by run, attempt and sample: the order they were taken in), with the
measurements of `SYSTEM_METRICS` as columns (null where the machine could not say).
Read-only, torch-free.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from sqlalchemy import select
from sqlalchemy.engine import Engine

from cem_core.runfiles.environment import ENVIRONMENT_FIELDS, SYSTEM_KIND, SYSTEM_METRICS
from cemctl.db.engine import read_session
from cemctl.db.models import Metric, RunEnvironment

SYSTEM_COLUMNS = ("run_id", "step", "tokens", "time_s", "attempt", "sample", "unix_s", *SYSTEM_METRICS)
ENVIRONMENT_KEYS = tuple(ENVIRONMENT_FIELDS)  # the fields a record may hold (besides earlier_attempts)


def environment_of(engine: Engine, run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{run id: its environment record} for the runs that recorded one."""
    ids = list(dict.fromkeys(run_ids))
    out: dict[str, dict[str, Any]] = {}
    with read_session(engine) as s:
        for i in range(0, len(ids), 500):
            q = select(RunEnvironment.run_id, RunEnvironment.environment_json).where(
                RunEnvironment.run_id.in_(ids[i:i + 500]))
            for rid, text in s.execute(q):
                try:
                    record = json.loads(text or "{}")
                except ValueError:
                    continue
                if isinstance(record, dict):
                    out[rid] = record
    return out


def system_frame(engine: Engine, run_ids: Iterable[str]) -> Any:
    """The system samples of the runs (metrics of kind "system"), one row per sample."""
    import pandas as pd

    ids = list(dict.fromkeys(run_ids))
    records = []
    with read_session(engine) as s:
        for i in range(0, len(ids), 500):
            q = (select(Metric.run_id, Metric.step, Metric.tokens, Metric.time_s, Metric.extra_json)
                 .where(Metric.run_id.in_(ids[i:i + 500]), Metric.kind == SYSTEM_KIND))
            for rid, step, tokens, time_s, extra in s.execute(q):
                try:
                    d = json.loads(extra or "{}")
                except ValueError:
                    d = {}
                row = {"run_id": rid, "step": step, "tokens": tokens, "time_s": time_s}
                for key in ("attempt", "sample", "unix_s", *SYSTEM_METRICS):
                    value = d.get(key) if isinstance(d, dict) else None
                    row[key] = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
                records.append(row)
    frame = pd.DataFrame.from_records(records, columns=list(SYSTEM_COLUMNS))
    for col in ("time_s", "unix_s", *SYSTEM_METRICS):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("float64")
    return frame.sort_values(["run_id", "attempt", "sample"], kind="stable").reset_index(drop=True)
