"""`cemctl report` end to end: grid file -> plan in a real SQLite database -> run dirs -> report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cemctl.cli import app
from cemctl.db.engine import open_db
from cemctl.db.runs import record_plan
from cemctl.grid.expand import load_grid
from cemctl.records import load_records
from cemctl.report.frame import load_curves

GRID = """
seeds = [0, 1, 2]

[experiment]
name = "mini_components"
description = "Llama vs CEM attention, tiny"
figure = "components"

[base]
"model.size" = "nano"
"train.max_steps" = 4

[axes]
"model.attention" = ["llama", "cem"]
"""


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj))


def _finish(run_dir: Path, ppl: float, *, state: str = "done", error: str | None = None, steps: int = 4) -> None:
    lines = []
    for step in range(1, steps + 1):
        lines.append({"kind": "train", "step": step, "tokens": step * 1000, "train_loss": 6.0 - step * 0.3,
                      "lr": 0.002, "grad_norm": 1.0, "tokens_per_s": 1e4, "time_s": step * 0.1})
    lines.append({"kind": "val", "step": steps, "tokens": steps * 1000, "val_loss": math.log(ppl), "time_s": 1.0})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    _write_json(run_dir / "result.json", {
        "state": state, "test_loss": math.log(ppl) if state == "done" else None,
        "test_ppl": ppl if state == "done" else None, "val_loss": math.log(ppl), "val_ppl": ppl,
        "params_total": 1000, "params_non_embedding": 100, "flops_per_token": 10, "train_flops": 1e6,
        "tokens": steps * 1000, "steps": steps, "wall_time_s": 1.0, "error": error,
        "diverged_step": 3 if state == "diverged" else None})


@pytest.fixture()
def planned(tmp_path):
    grid = tmp_path / "mini_components.toml"
    grid.write_text(GRID)
    plan = load_grid(grid)
    db = tmp_path / "results.db"
    runs_root = tmp_path / "runs"
    engine = open_db(f"sqlite:///{db}")
    record_plan(engine, plan, runs_root)
    return {"plan": plan, "db": db, "runs": runs_root, "engine": engine, "tmp": tmp_path}


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_report_from_database_lists_missing_and_failed(planned):
    plan, runs_root = planned["plan"], planned["runs"]
    ids = [r.run_id for r in plan.runs]
    assert len(ids) == 6
    for i, pr in enumerate(plan.runs[:4]):
        (runs_root / pr.run_id).mkdir(parents=True, exist_ok=True)
        _finish(runs_root / pr.run_id, 30.0 + i)
    (runs_root / ids[4]).mkdir(parents=True, exist_ok=True)
    _finish(runs_root / ids[4], 50.0, state="failed", error="Traceback...\nRuntimeError: boom")
    out = planned["tmp"] / "rep"
    result = _cli("report", "mini_components", "--db", str(planned["db"]), "--runs-dir", str(runs_root),
                  "--out", str(out), "--format", "png")
    assert result.exit_code == 0, result.output
    assert str(out / "index.md") in " ".join(result.output.split())
    md = (out / "index.md").read_text()
    assert "failed: RuntimeError: boom" in md
    assert ids[5] in md and "no result yet (state planned)" in md
    assert (out / "figures" / "components.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "figures" / "training_curves.png").exists()
    assert "mini_components.toml" in md

    runs = load_records(planned["engine"], "mini_components").frame()
    assert list(runs["run_id"]) == ids  # grid order
    assert runs["state"].tolist()[:5] == ["done"] * 4 + ["failed"]
    assert runs["test_ppl"].tolist()[:4] == [30.0, 31.0, 32.0, 33.0]
    assert {"model.attention", "train.seed", "train.lr", "params_total", "tokens", "train_flops"} <= set(runs.columns)
    curves = load_curves(planned["engine"], ids)
    assert set(curves["run_id"]) == set(ids[:5])
    one = curves[curves["run_id"].eq(ids[0])]
    assert one["step"].tolist() == [1, 2, 3, 4] and one["val_loss"].notna().sum() == 1


def test_unknown_experiment_exits_2_with_one_line(planned):
    result = _cli("report", "nope", "--db", str(planned["db"]), "--runs-dir", str(planned["runs"]))
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "unknown experiment 'nope'" in lines[0] and "mini_components" in lines[0]


def test_no_finished_runs_exits_2_with_one_line(planned):
    out = planned["tmp"] / "rep"
    result = _cli("report", "mini_components", "--db", str(planned["db"]), "--runs-dir", str(planned["runs"]),
                  "--out", str(out))
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no finished runs" in lines[0] and "6 planned" in lines[0]
    assert not out.exists()


def test_missing_database_and_bad_format_exit_2(tmp_path):
    result = _cli("report", "x", "--db", str(tmp_path / "none.db"))
    assert result.exit_code == 2 and "no results database" in result.output
    assert not (tmp_path / "none.db").exists()
    result = _cli("report", "x", "--db", str(tmp_path / "none.db"), "--format", "png,gif")
    assert result.exit_code == 2 and "gif" in result.output and "svg" in result.output


def test_gp_report_reads_rmse_from_result_json(tmp_path):
    from pathlib import Path as _P

    from cemctl.services.plan import plan_experiment
    from cemctl.report.tables import read_table_csv

    grid = _P(__file__).resolve().parents[1] / "experiments" / "gp.toml"
    db = f"sqlite:///{tmp_path / 'results.db'}"
    runs_root = tmp_path / "runs"
    plan = plan_experiment(grid, db_url=db, runs_root=runs_root).plan
    expected: dict[tuple[str, int], list[float]] = {}
    for i, pr in enumerate(plan.runs):
        cfg = pr.config
        rmse = 0.1 * cfg.model.mlp_steps + 0.01 * cfg.train.seed + (0.5 if cfg.gp.kernel == "gibbs" else 0.0)
        expected.setdefault((cfg.gp.kernel, cfg.model.mlp_steps), []).append(rmse)
        _write_json(runs_root / pr.run_id / "result.json", {
            "state": "done", "test_loss": rmse ** 2, "test_ppl": None, "val_loss": rmse ** 2, "val_ppl": None,
            "params_total": 500, "params_non_embedding": 400, "flops_per_token": 10, "train_flops": 1e5,
            "tokens": 100, "steps": 2, "wall_time_s": 1.0, "error": None, "diverged_step": None,
            "test_rmse": rmse, "val_rmse": rmse, "bayes_rmse": 0.05})
    out = tmp_path / "rep"
    result = _cli("report", plan.name, "--db", db, "--runs-dir", str(runs_root), "--out", str(out),
                  "--format", "png", "--no-curves")
    assert result.exit_code == 0, result.output
    table = read_table_csv(out / "tables" / "gp_rmse.csv")
    assert len(table) == len(expected)
    for row in table.to_dict("records"):
        vals = expected[(row["kernel"], row["T"])]
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        assert row["test RMSE (mean)"] == pytest.approx(mean)
        assert row["test RMSE (s.d.)"] == pytest.approx(std)
        assert row["n seeds"] == len(vals) and row["exact GP RMSE"] == pytest.approx(0.05)
    best = table[table["best T"]]
    assert sorted(best["T"]) == [1, 1]  # lowest RMSE at T=1 for both kernels in this made-up data
    assert (out / "figures" / "gp_rmse.png").exists() and not (out / "figures" / "training_curves.png").exists()


def test_where_selects_runs(planned):
    plan, runs_root = planned["plan"], planned["runs"]
    for i, pr in enumerate(plan.runs):
        (runs_root / pr.run_id).mkdir(parents=True, exist_ok=True)
        _finish(runs_root / pr.run_id, 30.0 + i)
    out = planned["tmp"] / "rep"
    result = _cli("report", "mini_components", "--db", str(planned["db"]), "--runs-dir", str(runs_root),
                  "--out", str(out), "--format", "png", "--where", "model.attention=llama", "--where", "train.seed=0")
    assert result.exit_code == 0, result.output
    runs_csv = (out / "runs.csv").read_text().splitlines()
    assert len(runs_csv) == 2  # header + the one Llama run with seed 0
    bad = _cli("report", "mini_components", "--db", str(planned["db"]), "--where", "model.atention=llama")
    assert bad.exit_code == 2 and "model.atention" in bad.output and "model.attention" in bad.output
