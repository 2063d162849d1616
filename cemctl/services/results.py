"""Results as tables, for people and programs (`cemctl.api`, `cemctl export`, `cemctl compare`).

    engine = open_readonly_db(url)
    runs = runs_table(engine, "fig2c", where=["attn_steps>=2"])   # one row per run
    arms = arms_table_of(runs)                                      # one row per arm
    long = curves_long(engine, runs)                                # per-step metrics in long form

`runs_table`: the run records (`cemctl.records`: every field of the catalogue that
`cemctl keys` lists, every config key (dotted), `tag.NAME` per tag and `note`). Arms
follow `cem_core.arms` (the experiment's nuisance keys when one experiment is asked
for), labelled by the keys that vary among the experiment's arms. Read-only, torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence


if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from sqlalchemy.engine import Engine

    from cemctl.db.read import Reader

CURVE_METRICS = ("train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s")


def runs_table(engine: "Engine | Reader", experiment: str | None = None, *, where: Sequence[str] | None = None,
               scale: str | None = None) -> "pd.DataFrame":
    """One row per run (of `experiment`, else of every experiment, each run once) meeting `where`: the run
    record of `cemctl.records` as a frame (every catalogue field, config key and tag)."""
    from cemctl.records import select_records

    return select_records(engine, experiment, where=where, scale=scale).frame()


def arms_table_of(runs: "pd.DataFrame", *, metric: str = "test_loss") -> "pd.DataFrame":
    """One row per arm of a `runs_table`: the arms table of `cemctl report` plus the arm's varying config keys."""
    from cemctl.report.arms import ARM, arms_table
    from cemctl.report.generic import varying

    table = arms_table(runs, metric=metric)
    if table.empty:
        return table
    keys = varying(runs)
    firsts = runs.groupby(ARM, sort=False).first()
    for key in keys:
        table[key] = [firsts.at[aid, key] for aid in table["arm id"]]
    return table


def curves_long(engine: "Engine", runs: "pd.DataFrame", metrics: Sequence[str] = CURVE_METRICS) -> "pd.DataFrame":
    """The per-step metrics of the runs in long form: run_id, arm, arm_label, kind, step, tokens, time_s,
    metric, value (one row per run, step and metric)."""
    import pandas as pd

    from cemctl.db.frames import metrics_frame

    columns = ["run_id", "arm", "arm_label", "kind", "step", "tokens", "time_s", "metric", "value"]
    ids = list(runs["run_id"]) if not runs.empty else []
    parts = [metrics_frame(engine, ids[i:i + 500]) for i in range(0, len(ids), 500)]
    raw = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if raw.empty:
        return pd.DataFrame(columns=columns)
    raw = raw[raw["kind"].isin(["train", "val"])]
    long = raw.melt(id_vars=["run_id", "kind", "step", "tokens", "time_s"],
                    value_vars=[m for m in metrics if m in raw.columns], var_name="metric", value_name="value")
    long = long[long["value"].notna()]
    arms = runs.set_index("run_id")[["arm", "arm_label"]]
    long = long.join(arms, on="run_id")
    return long[columns].sort_values(["run_id", "metric", "step"], kind="stable").reset_index(drop=True)
