"""Results from Python (a notebook, a script): pandas DataFrames straight from the results database.

    import cemctl.api as cem
    runs = cem.runs("own", where=["state=done"])      # one row per run: config, results, arm, tags
    arms = cem.arms("own")                              # one row per arm: mean, s.d., 95% interval, n
    curves = cem.curves("own", where=["attn_steps=2"])  # per-step metrics in long form

Every function opens the database read-only (`db`: a path or SQLAlchemy URL; default
$CEMCTL_DB, else ./results.db), never creates, migrates or writes it, and never
imports torch. `experiment=None` covers every experiment. `where` takes the conditions
of `--where` (`"model.attn_steps>=2"`, `"train.lr in 1e-3,2e-3"`, `"note~warmup"`: a run's notes;
`"tag.phase=b"`: a tag).
An arm is every config value but the seed (`cem_core.arms`), labelled by the keys
that vary among the runs selected. Bad input raises `cem_core.errors.CemError` (or
its `ConfigError`) with a one-line message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["arms", "curves", "runs"]


def _reader(db: str | None) -> Any:
    """The database, read-only: a SQLite file through `sqlite3`, anything else through SQLAlchemy."""
    from cemctl.db.read import open_reader
    from cemctl.db.url import resolve_db_url

    return open_reader(resolve_db_url(db))


def runs(experiment: str | None = None, *, db: str | None = None, where: Sequence[str] | None = None,
         scale: str | None = None) -> "pd.DataFrame":
    """One row per run: run_id, experiment, scale, state, reason, arm, arm_label, every config key (dotted),
    the results (test_loss, test_ppl, val_loss, tokens, flops, wall_time_s, ...), tag.NAME columns and note."""
    from cemctl.services.results import runs_table

    return runs_table(_reader(db), experiment, where=where, scale=scale)


def arms(experiment: str | None = None, *, db: str | None = None, where: Sequence[str] | None = None,
         scale: str | None = None, metric: str = "test_loss") -> "pd.DataFrame":
    """One row per arm: label, id, seeds done / planned, `metric` mean, s.d. and 95% t interval over the
    seeds (and the perplexity's, for a loss), params, tokens, FLOPs, tokens/s, wall time, the varying keys."""
    from cemctl.services.results import arms_table_of, runs_table

    return arms_table_of(runs_table(_reader(db), experiment, where=where, scale=scale), metric=metric)


def curves(experiment: str | None = None, *, db: str | None = None, where: Sequence[str] | None = None,
           scale: str | None = None) -> "pd.DataFrame":
    """The per-step metrics in long form: run_id, arm, arm_label, kind (train / val), step, tokens, time_s,
    metric (train_loss, val_loss, lr, grad_norm, tokens_per_s), value."""
    from cemctl.services.results import curves_long, runs_table

    reader = _reader(db)
    return curves_long(reader.engine, runs_table(reader, experiment, where=where, scale=scale))
