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
    """Tidy runs frame from records {run_id, state, config (dict or JSON), [reason], result fields...}.

    Missing result fields are NaN/None; integer columns use pandas' nullable Int64.
    """
    import pandas as pd

    rows, config_keys = [], {}
    for rec in records:
        cfg = _config_dict(rec.get("config", rec.get("config_json")))
        config_keys.update(dict.fromkeys(cfg))
        row: dict[str, Any] = {"run_id": str(rec["run_id"]), "state": str(rec.get("state") or "planned"),
                               "reason": rec.get("reason")}
        row.update(cfg)
        for col in RESULT_COLUMNS:
            row[col] = rec.get(col)
        rows.append(row)
    cfg_cols = sorted(config_keys, key=lambda k: (k != "task", k))
    columns = ["run_id", "state", "reason"] + cfg_cols + list(RESULT_COLUMNS)
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
