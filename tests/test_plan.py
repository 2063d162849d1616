"""`cemctl plan`: records runs idempotently, writes config.json, shows paper-scale counts, never imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cem_core.config import RunConfig, run_id
from cemctl.cli import app
from cemctl.db import list_runs, open_db, set_state
from helpers import assert_clean_error, cli, finish_run, tiny_grid

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "experiments" / "demo.toml"


def plan(tmp_path: Path, *args: str):
    result = CliRunner().invoke(
        app, ["plan", *args, "--db", str(tmp_path / "results.db"), "--runs-dir", str(tmp_path / "runs")]
    )
    assert result.exit_code == 0, result.output
    return result


def test_plan_records_runs_and_writes_their_configs(tmp_path):
    out = json.loads(plan(tmp_path, str(DEMO), "--json").stdout)
    assert out["experiment"] == "demo" and out["new_runs"] == 4 and len(out["runs"]) == 4
    for row in out["runs"]:
        cfg_path = tmp_path / "runs" / row["run_id"] / "config.json"
        cfg = RunConfig.from_dict(json.loads(cfg_path.read_text()))
        assert run_id(cfg) == row["run_id"]  # the saved config is the resolved one the id hashes
        assert row["params_total"] > row["params_non_embedding"] > 0 and row["train_flops"] > 0
        assert row["tokens"] == cfg.train.max_steps * cfg.train.batch_seqs * cfg.model.context_len
    engine = open_db(f"sqlite:///{tmp_path / 'results.db'}")
    runs = list_runs(engine, experiment="demo")
    assert [r.id for r in runs] == [r["run_id"] for r in out["runs"]]
    assert {r.state for r in runs} == {"planned"}


def test_replanning_is_idempotent_and_keeps_states(tmp_path):
    first = json.loads(plan(tmp_path, str(DEMO), "--json").stdout)
    engine = open_db(f"sqlite:///{tmp_path / 'results.db'}")
    rid = first["runs"][0]["run_id"]
    set_state(engine, rid, "failed", "out of memory", executor="local")
    second = json.loads(plan(tmp_path, str(DEMO), "--json").stdout)
    assert second["new_runs"] == 0 and [r["run_id"] for r in second["runs"]] == [r["run_id"] for r in first["runs"]]
    assert {r["run_id"]: r["state"] for r in second["runs"]}[rid] == "failed"
    assert len(list_runs(engine)) == 4
    third = json.loads(plan(tmp_path, str(DEMO), "--json", "--set", "train.max_steps=60").stdout)
    assert third["new_runs"] == 4 and third["overrides"] == {"train.max_steps": 60}
    # Every override set stays reachable (re-planning with --set used to unlink the first 4 runs).
    assert len(list_runs(engine)) == 8 and len(list_runs(engine, experiment="demo")) == 8


def test_table_output_names_the_varied_axes(tmp_path):
    out = plan(tmp_path, str(ROOT / "experiments" / "fig2c.toml")).stdout
    assert "attn_steps" in out and "attn_precond" in out and "GPU-h" in out
    assert out.count("new") >= 20


def test_paper_scale_parameter_counts_match_table_1(tmp_path):
    out = json.loads(plan(tmp_path, str(ROOT / "experiments" / "fig2a.toml"), "--scale", "paper", "--json", "--dry-run").stdout)
    llama = {r["axes"]["model.size"]: r["params_total"] for r in out["runs"] if r["axes"]["model.attention"] == "llama"}
    assert round(llama["86M"] / 1e6, 2) == 86.37 and round(llama["108M"] / 1e6, 2) == 108.05
    assert round(llama["134M"] / 1e6, 1) == 134.1 and round(llama["162M"] / 1e6, 1) == 162.8
    cem = {r["axes"]["model.size"]: r["params_total"] for r in out["runs"] if r["axes"]["model.attention"] == "cem"}
    assert all(cem[s] < llama[s] for s in llama)  # CEM attention has about half the attention parameters
    assert all(r["gpu_hours"] > 0.5 for r in out["runs"])  # Chinchilla budgets at paper sizes
    assert not (tmp_path / "results.db").exists()  # --dry-run writes nothing


def test_plan_never_imports_torch(tmp_path):
    code = (
        "import sys\n"
        "from cemctl.cli import app\n"
        f"sys.argv = ['cemctl', 'plan', {str(ROOT / 'experiments' / 'fig3a.toml')!r}, '--scale', 'paper',"
        f" '--db', {str(tmp_path / 'r.db')!r}, '--runs-dir', {str(tmp_path / 'runs')!r}]\n"
        "try:\n    app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "assert not bad, bad[:5]\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
    assert len(list((tmp_path / "runs").iterdir())) == 40


def test_cpu_hours_estimate_counts_only_runs_still_to_train(tmp_path):
    """CPU-hours = training FLOPs / (--cpu-gflops x 3600), summed over the runs not done yet."""
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("cpuest", seeds="[0, 1]"))
    out = json.loads(cli(tmp_path, "plan", str(grid), "--json", "--cpu-gflops", "10").stdout)
    for r in out["runs"]:
        assert r["cpu_hours"] == pytest.approx(r["train_flops"] / 10e9 / 3600)
    assert out["totals"]["cpu_hours"] == pytest.approx(sum(r["cpu_hours"] for r in out["runs"]))
    finish_run(tmp_path / "runs" / out["runs"][0]["run_id"])
    assert cli(tmp_path, "sync").returncode == 0
    again = json.loads(cli(tmp_path, "plan", str(grid), "--json", "--cpu-gflops", "10").stdout)
    assert again["totals"]["cpu_hours"] == pytest.approx(out["runs"][1]["cpu_hours"])  # the done run is not counted
    table = cli(tmp_path, "plan", str(grid), "--dry-run").stdout
    import os
    import re

    workers = os.cpu_count() or 1  # the local executor's default without a GPU: one worker per core
    assert "CPU-h" in table and re.search(rf"about \d+ min with {workers} workers?", table), table
    dry = json.loads(cli(tmp_path, "plan", str(grid), "--json", "--dry-run", "--cpu-gflops", "10").stdout)
    assert dry["new_runs"] == 0 and dry["totals"]["cpu_hours"] == pytest.approx(out["runs"][1]["cpu_hours"])
    assert_clean_error(cli(tmp_path, "plan", str(grid), "--cpu-gflops", "nan"), contains="--cpu-gflops")


SAME_MODEL_GRID = tiny_grid("mr", steps=20, extra='"model.mlp" = "cem"\n[axes]\n'
                            '"model.mlp_precond" = ["diag", "diag_lowrank"]\n"model.mlp_precond_rank" = [2, 8]\n')


def test_plan_says_which_runs_train_the_same_model(tmp_path):
    """Own grid (CEM MLP: diag vs diag+low-rank at ranks 2 and 8): a diag preconditioner has no rank, so its
    rank-2 and rank-8 runs are one model trained twice per seed (other run ids, the same numbers). plan names them
    and the key; with an [[exclude]] of one copy, or where the rank shapes the model, it says nothing."""
    (tmp_path / "mr.toml").write_text(SAME_MODEL_GRID)
    res = cli(tmp_path, "plan", str(tmp_path / "mr.toml"), "--dry-run", "--json")
    assert res.returncode == 0, res.output
    runs = json.loads(res.stdout)["runs"]
    diag = {r["axes"]["train.seed"]: [] for r in runs}
    for r in runs:
        if r["axes"]["model.mlp_precond"] == "diag":
            diag[r["axes"]["train.seed"]].append(r["run_id"][:8])
    notes = [ln for ln in res.stderr.splitlines() if "same model" in ln]
    assert len(notes) == 1, res.stderr
    assert all(f"{a} = {b}" in notes[0] for a, b in diag.values()), (notes, diag)
    assert "model.mlp_precond_rank is not read with model.mlp_precond = diag" in notes[0]
    assert "diag_lowrank" not in notes[0].split("(")[0]

    excluded = SAME_MODEL_GRID + '[[exclude]]\n"model.mlp_precond" = "diag"\n"model.mlp_precond_rank" = 2\n'
    (tmp_path / "mr.toml").write_text(excluded)
    res = cli(tmp_path, "plan", str(tmp_path / "mr.toml"), "--dry-run")
    assert res.returncode == 0 and "same model" not in res.output + res.stderr, res.output


def test_a_preconditioner_reads_its_rank_unless_its_spec_says_otherwise():
    from cem_core.config import resolve
    from cem_core.plugins import unread_keys
    from cem_core.spec import PreconditionerSpec

    def unread(**model):
        return unread_keys(resolve(RunConfig.from_dict({f"model.{k}": v for k, v in model.items()})))

    assert "model.mlp_precond_rank" in unread(mlp="cem", mlp_precond="diag")
    assert "model.mlp_precond_rank" not in unread(mlp="cem", mlp_precond="diag_lowrank")
    assert "model.attn_precond_rank" in unread(attention="cem", attn_precond="identity")
    assert {"model.attn_steps", "model.kq_diagonal"} <= set(unread(attention="llama"))
    assert "model.attn_steps" not in unread(attention="cem")
    assert PreconditionerSpec("p", "m:C", "d", "p", params=lambda n, w, r: 0).reads_rank  # a plugin's: read
