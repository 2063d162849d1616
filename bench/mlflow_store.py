"""An MLflow tracking store holding the same runs as the bench's cemctl database (`bench/speed.py`'s anchor).

Every run of `bench/dbgen.py`'s database becomes an MLflow run of an experiment of the same name: 20 params (the
seed as `seed`, then 19 more keys of its config, each as its flattened key) and 10 metrics (its results: test and
validation loss and perplexity, parameters, FLOPs, tokens, wall time), the values cemctl holds. The experiments
are created by MLflow itself (`MlflowClient`: its schema, at its current migration); the runs are then written by
bulk SQL into MLflow's tables (`runs`, `params`, `metrics`, `latest_metrics`, `tags`), as `dbgen` writes cemctl's,
so that generating 10,000 runs takes seconds, not the hours of 10,000 client calls. Cached beside the cemctl
database, keyed by its size and MLflow's version.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

PARAM_KEYS = 20
METRICS = ("test_loss", "test_ppl", "val_loss", "val_ppl", "params_total", "params_non_embedding",
           "flops_per_token", "train_flops", "tokens", "wall_time_s")


@dataclass
class MlflowStore:
    root: Path
    db_path: Path
    runs: int
    params: int
    metrics: int
    version: str


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        else:
            out[name] = value
    return out


def build(cache_dir: Path, big: Any, *, log: Callable[[str], None] = print) -> MlflowStore:
    """The cached MLflow store holding `big`'s runs (a `bench.dbgen.BigDb`), generated on first use."""
    import mlflow

    root = Path(cache_dir) / f"mlflow-{mlflow.__version__}-{big.root.name}"
    marker = root / "complete.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        return MlflowStore(root, root / "mlflow.db", info["runs"], PARAM_KEYS, len(METRICS), mlflow.__version__)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    src = sqlite3.connect(big.db_path)
    rows = src.execute(
        "SELECT r.id, r.config_json, e.name, " + ", ".join(f"s.{m}" for m in METRICS) + " FROM runs r "
        "JOIN experiment_runs er ON er.run_id = r.id JOIN experiments e ON e.id = er.experiment_id "
        "JOIN results s ON s.run_id = r.id ORDER BY e.name, r.id").fetchall()
    src.close()
    db_path = root / "mlflow.db"
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(f"sqlite:///{db_path}")
    client = MlflowClient()
    experiments = {name: client.create_experiment(name, artifact_location=str(root / "artifacts" / name))
                   for name in dict.fromkeys(r[2] for r in rows)}
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("BEGIN")
    now_ms = int(time.time() * 1000)
    keys: list[str] | None = None
    for i, (rid, config_json, experiment, *values) in enumerate(rows):
        flat = _flat(json.loads(config_json))
        if keys is None:  # the same 19 keys for every run (those of the first, sorted), after the seed
            keys = [k for k in sorted(flat) if k != "train.seed"][: PARAM_KEYS - 1]
        run_uuid = uuid.UUID(int=i + 1).hex
        conn.execute(
            "INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, "
            "start_time, end_time, source_version, lifecycle_stage, artifact_uri, experiment_id, deleted_time) "
            "VALUES (?, ?, 'LOCAL', '', '', 'bench', 'FINISHED', ?, ?, '', 'active', ?, ?, NULL)",
            (run_uuid, rid, now_ms - 60_000, now_ms, str(root / "artifacts" / run_uuid), int(experiments[experiment])))
        params = [("seed", str(flat.get("train.seed")), run_uuid)] + [(k, str(flat.get(k)), run_uuid) for k in keys]
        conn.executemany("INSERT INTO params (key, value, run_uuid) VALUES (?, ?, ?)", params)
        metrics = [(name, float(v), now_ms, run_uuid, 0, 0) for name, v in zip(METRICS, values) if v is not None]
        conn.executemany("INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?, ?, ?, ?, ?, ?)",
                         metrics)
        conn.executemany("INSERT INTO latest_metrics (key, value, timestamp, run_uuid, step, is_nan) "
                         "VALUES (?, ?, ?, ?, ?, ?)", metrics)
        conn.execute("INSERT INTO tags (key, value, run_uuid) VALUES ('mlflow.runName', ?, ?)", (rid, run_uuid))
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()
    elapsed = round(time.perf_counter() - t0, 1)
    log(f"[mlflow store] {len(rows):,} runs in {elapsed:.0f} s")
    marker.write_text(json.dumps({"runs": len(rows), "generate_s": elapsed}))
    return MlflowStore(root, db_path, len(rows), PARAM_KEYS, len(METRICS), mlflow.__version__)
