"""Per-step and per-evaluation rows of the results database as pandas frames (`cemctl report`, the API).

Runs themselves are read only through the run record (`cemctl.records.load_records`, or
`cemctl.api.runs` from a notebook); these are the rows keyed by a run below it.

    metrics_frame(engine, run_ids, kind="val")
    evals_frame(engine, run_ids)        # test-time recursion evaluations (`cemctl eval`)
    energy_frame(engine, run_ids)       # energy lines (`train.energy_layers`), one row per (run, step, layer, sublayer, t)
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from sqlalchemy import select
from sqlalchemy.engine import Engine

from cemctl.db.engine import read_session
from cemctl.db.models import Eval, Metric


def metrics_frame(engine: Engine, run_ids: Iterable[str], kind: str | None = None) -> Any:
    """Metric rows of the runs (columns of the `metrics` table), ordered by run, kind, step."""
    import pandas as pd

    ids = list(run_ids)
    with read_session(engine) as s:
        q = select(Metric.__table__).where(Metric.run_id.in_(ids))
        if kind is not None:
            q = q.where(Metric.kind == kind)
        q = q.order_by(Metric.run_id, Metric.kind, Metric.step)
        result = s.execute(q)
        return pd.DataFrame(result.fetchall(), columns=list(result.keys()))


def evals_frame(engine: Engine, run_ids: Iterable[str] | None = None) -> Any:
    """Rows of the `evals` table (all runs when `run_ids` is None), ordered by run, attn_steps, mlp_steps."""
    import pandas as pd

    ids = None if run_ids is None else list(run_ids)
    chunks: list[list[str] | None] = [None] if ids is None else [ids[i:i + 500] for i in range(0, len(ids), 500)] or [[]]
    rows: list[Any] = []
    columns = [c.name for c in Eval.__table__.columns]
    with read_session(engine) as s:
        for chunk in chunks:  # keep the IN list short
            q = select(Eval.__table__)
            if chunk is not None:
                q = q.where(Eval.run_id.in_(chunk))
            rows += s.execute(q).fetchall()
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["run_id", "attn_steps", "mlp_steps"], kind="stable").reset_index(drop=True)


ENERGY_COLUMNS = ("run_id", "step", "tokens", "layer", "sublayer", "t", "energy", "descent_frac")


def energy_frame(engine: Engine, run_ids: Iterable[str]) -> Any:
    """The energy metrics lines of the runs (kind "energy"), with layer, sublayer, t, energy and
    descent_frac read from `extra_json`; ordered by run, step, layer, sublayer, t."""
    import pandas as pd

    ids = list(run_ids)
    records = []
    with read_session(engine) as s:
        for i in range(0, len(ids), 500):
            q = (select(Metric.run_id, Metric.step, Metric.tokens, Metric.extra_json)
                 .where(Metric.run_id.in_(ids[i:i + 500]), Metric.kind == "energy"))
            for rid, step, tokens, extra in s.execute(q):
                d = json.loads(extra or "{}")
                records.append({"run_id": rid, "step": step, "tokens": tokens, "layer": d.get("layer"),
                                "sublayer": d.get("sublayer"), "t": d.get("t"), "energy": d.get("energy"),
                                "descent_frac": d.get("descent_frac")})
    frame = pd.DataFrame.from_records(records, columns=list(ENERGY_COLUMNS))
    for col in ("energy", "descent_frac"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    for col in ("layer", "t"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    frame = frame.dropna(subset=["layer", "t"])
    return frame.sort_values(["run_id", "step", "layer", "sublayer", "t"], kind="stable").reset_index(drop=True)
