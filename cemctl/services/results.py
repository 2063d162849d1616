"""Results as tables, for people and programs (`cemctl.api`, `cemctl export`, `cemctl compare`).

    engine = open_readonly_db(url)
    runs = runs_table(engine, "fig2c", where=["attn_steps>=2"])   # one row per run
    arms = arms_table_of(runs)                                      # one row per arm
    long = curves_long(engine, runs)                                # per-step metrics in long form

`runs_table`: run_id, experiment, scale, state, reason, arm (id), arm_label, every
config key (dotted), the results (test_loss, test_ppl, val_loss, tokens, FLOPs,
wall_time_s, ...), and the run's tags (`tag.NAME`) and notes (`note`). Arms follow
`cem_core.arms` (the experiment's nuisance keys when one experiment is asked for),
labelled by the keys that vary among the runs selected. Read-only, torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from cem_core.errors import CemError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from sqlalchemy.engine import Engine

CURVE_METRICS = ("train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s")


def _experiment(engine: "Engine", name: str) -> Any:
    from cemctl.db.runs import get_experiment, list_experiments

    exp = get_experiment(engine, name)
    if exp is None:
        known = ", ".join(e.name for e in list_experiments(engine)) or "none yet; run cemctl plan FILE"
        raise CemError(f"experiment: unknown experiment {name!r} (known: {known})")
    return exp


def runs_table(engine: "Engine", experiment: str | None = None, *, where: Sequence[str] | None = None,
               scale: str | None = None) -> "pd.DataFrame":
    """One row per run (of `experiment`, else of every experiment), with arms, tags and notes; `where` filters."""
    from cemctl.grid.spec import ReportOptions, options_from_text
    from cemctl.grid.where import filter_frame, parse_where
    from cemctl.report.arms import with_arms
    from cemctl.report.frame import load_runs

    conds = parse_where(where)
    options, order = ReportOptions(), []
    if experiment is not None:
        exp = _experiment(engine, experiment)
        options = options_from_text(exp.grid_text, exp.grid_path)
        from cemctl.db.runs import run_axes

        order = list(dict.fromkeys(k for a in run_axes(engine, experiment).values() for k in a))
    frame = load_runs(engine, experiment, scale=scale, unlinked=experiment is None)
    if experiment is None and not frame.empty:  # each run once (a run planned at two scales keeps its first)
        frame = frame.drop_duplicates("run_id").reset_index(drop=True)
    frame = _with_tags(engine, frame)
    frame = with_arms(frame, nuisance=options.nuisance, order=order)
    first = [c for c in ("run_id", "experiment", "scale", "state", "reason", "arm", "arm_label") if c in frame.columns]
    frame = frame[first + [c for c in frame.columns if c not in first]]
    return filter_frame(frame, conds).reset_index(drop=True)


def _with_tags(engine: "Engine", frame: "pd.DataFrame") -> "pd.DataFrame":
    """`tag.NAME` columns and a `note` column from the runs' tags and notes (`cemctl tag`, `cemctl note`)."""
    from cemctl.db.tags import tags_of

    if frame.empty:
        return frame.assign(note=[])
    tags = tags_of(engine, list(frame["run_id"]))
    names = sorted({k for t in tags.values() for k in t.tags})
    out = frame.copy()
    for name in names:
        out[f"tag.{name}"] = [tags.get(rid).tags.get(name) if rid in tags else None for rid in out["run_id"]]
    out["note"] = [" | ".join(n["text"] for n in tags[rid].notes) if rid in tags else "" for rid in out["run_id"]]
    return out


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
