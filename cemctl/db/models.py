"""Typed SQLAlchemy models of the results database (`cemctl plan`, `launch`, `status`, `report`, `sync`).

Tables (read them with pandas: `pd.read_sql_table("runs", engine)` or the
helpers in `cemctl.db.frames`). Every time column is a float in unix seconds
(`time.time()`), the unit the run directory files use.

- `experiments`: one row per experiment (unique `name`, one grid file: another
  file claiming the name is refused); `scale` / `overrides_json` of its last plan.
- `experiment_runs`: experiment <-> run links, one set per plan key (scale, the
  `--set` overrides as canonical JSON): re-planning one key replaces that key's
  links only, so runs of every scale and override set stay reachable. Each link
  holds the run's varied axes (`axes_json`), position in the grid and the
  labels of the grid's [[mark]] rules it matches (`marks_json`).
- `runs`: one row per run; `id` = `cem_core.config.run_id` (content hash of the
  resolved config), so a Llama baseline shared by two figures is one run.
  Holds the state and the summary columns `cemctl status` shows.
- `run_events`: every state transition (time, state, reason, attempt, host).
- `metrics`: one row per (run_id, kind, step, series) (kind = train | val | energy | system;
  series "" except for energy lines: "<layer>/<sublayer>/<t>", and system samples: "<attempt>.<sample>");
  wide columns for the known keys, anything else in `extra_json`.
- `results`: the terminal `result.json` of a run, one row per run.
- `run_tags`: a run's tags and notes (`cemctl tag`, `cemctl note`), mirrored from its tags.json.
- `evals`: test-time recursion evaluations (`cemctl eval`, the run's evals.json):
  one row per (run_id, attn_steps, mlp_steps) with the test loss/perplexity and
  FLOPs per token at those recursion depths.
- `run_environment`: what a run trained on (its environment.json, `cem_core.runfiles.environment`): one row per
  run, the latest attempt's host, CPU, GPU, versions, code and peak memory as columns, the whole record in
  `environment_json`. Its system samples are `metrics` rows of kind "system".
- `result_history`: a run's earlier results, read from the result.json kept in its set-aside folders
  (`.outdated-*`, `.damaged-*`: `launch --rerun-outdated`, `--redo-damaged`), so before and after a code
  change can be compared (`compare RUN --history`).
- `schema_version`: the version the file was migrated to (`cemctl.db.migrations`).

Every table keyed by a run id (a foreign key to `runs.id`) but `experiment_runs` (the plan's
links) is a projection of the run's folder: `cemctl.db.projection` finds them from this schema
and rebuilds them in one transaction; a table that keeps rows of its own says so in
`__table_args__` info (`{"projection": {"keep_where": (column, value)}}`), and a table whose rows a
rebuild marks stale instead of deleting says which column marks them (`{"projection": {"stale_column": column}}`).
"""

from __future__ import annotations

from typing import Optional

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Run states and their sets: the run-directory contract (cem_core.runfiles), re-exported here.
from cem_core.runfiles import ACTIVE_STATES as ACTIVE_STATES  # noqa: F401 - re-exported
from cem_core.runfiles import RESULT_STATES as RESULT_STATES  # noqa: F401
from cem_core.runfiles import RUN_STATES as RUN_STATES  # noqa: F401
from cem_core.runfiles import TERMINAL_STATES as TERMINAL_STATES  # noqa: F401



class Base(DeclarativeBase):
    pass


class SchemaVersion(Base):
    __tablename__ = "schema_version"
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    applied_at: Mapped[float] = mapped_column(Float)


class Experiment(Base):
    __tablename__ = "experiments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    figure: Mapped[str] = mapped_column(String(64), default="")  # report kind (cemctl.grid.kinds)
    grid_path: Mapped[str] = mapped_column(Text, default="")
    grid_sha256: Mapped[str] = mapped_column(String(64), default="")
    grid_text: Mapped[str] = mapped_column(Text, default="")
    scale: Mapped[str] = mapped_column(String(32), default="tiny")
    overrides_json: Mapped[str] = mapped_column(Text, default="{}")  # --set key=value
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class ExperimentRun(Base):
    __tablename__ = "experiment_runs"
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True)
    scale: Mapped[str] = mapped_column(String(32), primary_key=True, default="")
    overrides_json: Mapped[str] = mapped_column(String(2000), primary_key=True, default="{}")  # canonical --set
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    axes_json: Mapped[str] = mapped_column(Text, default="{}")  # {"model.size": "nano", ...}
    position: Mapped[int] = mapped_column(Integer, default=0)
    marks_json: Mapped[str] = mapped_column(Text, default="[]")  # ["beyond the paper", ...]
    planned_at: Mapped[Optional[float]] = mapped_column(Float)
    __table_args__ = (Index("ix_experiment_runs_run_id", "run_id"),)


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    config_json: Mapped[str] = mapped_column(Text)  # resolved RunConfig.to_dict(), canonical JSON
    state: Mapped[str] = mapped_column(String(16), default="planned")
    state_reason: Mapped[Optional[str]] = mapped_column(Text)
    state_at: Mapped[Optional[float]] = mapped_column(Float)  # when `state` was last set
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    executor: Mapped[Optional[str]] = mapped_column(String(32))
    job_id: Mapped[Optional[str]] = mapped_column(String(128))
    host: Mapped[Optional[str]] = mapped_column(String(255))
    pid: Mapped[Optional[int]] = mapped_column(Integer)
    run_dir: Mapped[Optional[str]] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[Optional[float]] = mapped_column(Float)
    finished_at: Mapped[Optional[float]] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[Optional[float]] = mapped_column(Float)
    error: Mapped[Optional[str]] = mapped_column(Text)
    # Summary columns for `cemctl status` (from heartbeat.json / metrics.jsonl / result.json)
    total_steps: Mapped[Optional[int]] = mapped_column(Integer)
    last_step: Mapped[Optional[int]] = mapped_column(Integer)
    tokens: Mapped[Optional[int]] = mapped_column(BigInteger)
    last_train_loss: Mapped[Optional[float]] = mapped_column(Float)
    last_val_loss: Mapped[Optional[float]] = mapped_column(Float)
    tokens_per_s: Mapped[Optional[float]] = mapped_column(Float)
    params_total: Mapped[Optional[int]] = mapped_column(BigInteger)
    params_non_embedding: Mapped[Optional[int]] = mapped_column(BigInteger)
    flops_per_token: Mapped[Optional[int]] = mapped_column(BigInteger)
    # Incremental ingest: bytes of metrics.jsonl / events.jsonl already read, and a
    # fingerprint of the bytes before that offset (a rewritten file is re-read).
    metrics_offset: Mapped[int] = mapped_column(BigInteger, default=0)
    metrics_fingerprint: Mapped[str] = mapped_column(String(64), default="")
    events_offset: Mapped[int] = mapped_column(BigInteger, default=0)
    events_fingerprint: Mapped[str] = mapped_column(String(64), default="")
    events_lines: Mapped[int] = mapped_column(Integer, default=0)
    result_mtime: Mapped[Optional[float]] = mapped_column(Float)  # result.json last ingested
    config_mtime: Mapped[Optional[float]] = mapped_column(Float)  # config.json last checked against the run id
    evals_mtime: Mapped[Optional[float]] = mapped_column(Float)  # evals.json last ingested
    environment_mtime: Mapped[Optional[float]] = mapped_column(Float)  # environment.json last ingested
    __table_args__ = (Index("ix_runs_state", "state"),)


class RunEvent(Base):
    __tablename__ = "run_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    time: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    attempt: Mapped[Optional[int]] = mapped_column(Integer)
    host: Mapped[Optional[str]] = mapped_column(String(255))
    pid: Mapped[Optional[int]] = mapped_column(Integer)
    # source: "file" (a line of events.jsonl, `line` = its 0-based index) or
    # "derived" (a state the database derived, e.g. stale from an old heartbeat).
    source: Mapped[str] = mapped_column(String(16), default="file")
    line: Mapped[Optional[int]] = mapped_column(Integer)
    __table_args__ = (
        UniqueConstraint("run_id", "line", name="uq_run_events_run_line"),
        Index("ix_run_events_run_id_time", "run_id", "time"),
        # the database's own judgements (stale, found by sync) are its history, not read from a file: kept
        {"info": {"projection": {"keep_where": ("source", "derived")}}},
    )


class Metric(Base):
    __tablename__ = "metrics"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))  # train | val | energy | ...
    step: Mapped[int] = mapped_column(Integer)
    # Several lines of one kind at one step: "" for train/val; energy lines are
    # "<layer>/<sublayer>/<t>" (one per layer, sublayer and recursion step).
    series: Mapped[str] = mapped_column(String(64), default="")
    tokens: Mapped[Optional[int]] = mapped_column(BigInteger)
    time_s: Mapped[Optional[float]] = mapped_column(Float)
    train_loss: Mapped[Optional[float]] = mapped_column(Float)
    val_loss: Mapped[Optional[float]] = mapped_column(Float)
    lr: Mapped[Optional[float]] = mapped_column(Float)
    grad_norm: Mapped[Optional[float]] = mapped_column(Float)
    tokens_per_s: Mapped[Optional[float]] = mapped_column(Float)
    extra_json: Mapped[Optional[str]] = mapped_column(Text)  # other keys of the line
    __table_args__ = (UniqueConstraint("run_id", "kind", "step", "series", name="uq_metrics_run_kind_step_series"),)


class Result(Base):
    __tablename__ = "results"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    test_loss: Mapped[Optional[float]] = mapped_column(Float)
    test_ppl: Mapped[Optional[float]] = mapped_column(Float)
    val_loss: Mapped[Optional[float]] = mapped_column(Float)
    val_ppl: Mapped[Optional[float]] = mapped_column(Float)
    params_total: Mapped[Optional[int]] = mapped_column(BigInteger)
    params_non_embedding: Mapped[Optional[int]] = mapped_column(BigInteger)
    flops_per_token: Mapped[Optional[int]] = mapped_column(BigInteger)
    train_flops: Mapped[Optional[float]] = mapped_column(Float)
    tokens: Mapped[Optional[int]] = mapped_column(BigInteger)
    steps: Mapped[Optional[int]] = mapped_column(Integer)
    wall_time_s: Mapped[Optional[float]] = mapped_column(Float)
    error: Mapped[Optional[str]] = mapped_column(Text)
    diverged_step: Mapped[Optional[int]] = mapped_column(Integer)
    code_fingerprint: Mapped[Optional[str]] = mapped_column(String(32))  # the model code that trained it
    result_json: Mapped[str] = mapped_column(Text, default="{}")
    recorded_at: Mapped[float] = mapped_column(Float)


class Eval(Base):
    """One test-time recursion evaluation of a finished run (`cemctl eval`; RUN_DIR/evals.json)."""

    __tablename__ = "evals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    attn_steps: Mapped[int] = mapped_column(Integer)  # recursion steps evaluated (attention)
    mlp_steps: Mapped[int] = mapped_column(Integer)  # recursion steps evaluated (MLP)
    eval_steps: Mapped[Optional[int]] = mapped_column(Integer)  # the T asked for (`--steps`)
    sublayer: Mapped[str] = mapped_column(String(16), default="both")  # what was varied: attention | mlp | both
    test_loss: Mapped[Optional[float]] = mapped_column(Float)
    test_ppl: Mapped[Optional[float]] = mapped_column(Float)
    test_tokens: Mapped[Optional[int]] = mapped_column(BigInteger)
    flops_per_token: Mapped[Optional[int]] = mapped_column(BigInteger)  # forward FLOPs/token at these depths
    trained_attn_steps: Mapped[Optional[int]] = mapped_column(Integer)
    trained_mlp_steps: Mapped[Optional[int]] = mapped_column(Integer)
    evaluated_at: Mapped[Optional[float]] = mapped_column(Float)  # when the evaluation ran
    recorded_at: Mapped[float] = mapped_column(Float)  # when it was ingested
    __table_args__ = (UniqueConstraint("run_id", "attn_steps", "mlp_steps", name="uq_evals_run_attn_mlp"),)


class RunTags(Base):
    """A run's tags and notes (`cemctl tag`, `cemctl note`), mirrored from its tags.json (schema v7)."""

    __tablename__ = "run_tags"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tags_json: Mapped[str] = mapped_column(Text, default="{}")
    notes_json: Mapped[str] = mapped_column(Text, default="[]")
    file_mtime: Mapped[Optional[float]] = mapped_column(Float)  # tags.json when it was read
    recorded_at: Mapped[float] = mapped_column(Float)
    # what the user wrote is never forgotten by a rebuild: the row is marked to be read again (file_mtime NULL) and
    # replaced only once tags.json can be read (`cemctl.db.ingest_files._ingest_tags`)
    __table_args__ = ({"info": {"projection": {"stale_column": "file_mtime"}}},)


class RunEnvironment(Base):
    """What a run trained on, mirrored from its environment.json (schema v9): the latest attempt's fields."""

    __tablename__ = "run_environment"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[Optional[int]] = mapped_column(Integer)
    hostname: Mapped[Optional[str]] = mapped_column(String(255))
    cpu_model: Mapped[Optional[str]] = mapped_column(String(255))
    cpu_count: Mapped[Optional[int]] = mapped_column(Integer)
    device: Mapped[Optional[str]] = mapped_column(String(32))
    gpu_model: Mapped[Optional[str]] = mapped_column(String(255))
    gpu_memory_bytes: Mapped[Optional[int]] = mapped_column(BigInteger)
    driver_version: Mapped[Optional[str]] = mapped_column(String(64))
    cuda_version: Mapped[Optional[str]] = mapped_column(String(64))
    torch_version: Mapped[Optional[str]] = mapped_column(String(64))
    python_version: Mapped[Optional[str]] = mapped_column(String(64))
    cemctl_version: Mapped[Optional[str]] = mapped_column(String(64))
    code_fingerprint: Mapped[Optional[str]] = mapped_column(String(64))
    code_snapshot: Mapped[Optional[str]] = mapped_column(String(64))
    peak_host_rss_bytes: Mapped[Optional[int]] = mapped_column(BigInteger)
    peak_gpu_allocated_bytes: Mapped[Optional[int]] = mapped_column(BigInteger)
    started_at: Mapped[Optional[float]] = mapped_column(Float)
    ended_at: Mapped[Optional[float]] = mapped_column(Float)
    environment_json: Mapped[str] = mapped_column(Text, default="{}")  # the whole checked record
    file_mtime: Mapped[Optional[float]] = mapped_column(Float)  # environment.json when it was read
    recorded_at: Mapped[float] = mapped_column(Float)


class ResultHistory(Base):
    """An earlier result of a run: result.json of one of its set-aside folders (schema v10)."""

    __tablename__ = "result_history"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    folder: Mapped[str] = mapped_column(String(128))  # .outdated-20261125T101500Z, .damaged-...
    state: Mapped[Optional[str]] = mapped_column(String(16))
    test_loss: Mapped[Optional[float]] = mapped_column(Float)
    val_loss: Mapped[Optional[float]] = mapped_column(Float)
    code_fingerprint: Mapped[Optional[str]] = mapped_column(String(32))
    set_aside_at: Mapped[Optional[float]] = mapped_column(Float)  # when the folder was made (from its name)
    result_json: Mapped[str] = mapped_column(Text, default="{}")
    __table_args__ = (UniqueConstraint("run_id", "folder", name="uq_result_history_run_folder"),)
