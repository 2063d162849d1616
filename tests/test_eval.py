"""`cemctl eval RUN|EXPERIMENT --steps ...` (test-time recursion) and its report figures, on real tiny runs.

One small experiment is planned and trained once for the module on the CPU:
a Llama run, full CEM (attention + MLP, T=2, energy lines), a CEM attention +
param-matched CEM MLP run (T=2), and a CEM run left planned (never trained).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cemctl.cli import app

REPO = Path(__file__).resolve().parents[1]

GRID = """
[experiment]
name = "tt"
figure = "curves"
description = "test-time recursion on tiny real runs"

[base]
"model.size" = "nano"
"model.context_len" = 32
"data.tokenizer" = "byte"
"data.cache_dir" = "{cache}"
"train.max_steps" = 6
"train.batch_seqs" = 8
"train.micro_batch_seqs" = 4
"train.eval_every_steps" = 3
"train.val_tokens" = 1024
"train.test_tokens" = 2048
"train.seed" = 1

[[zip]]
"model.attention" = ["llama", "cem", "cem", "cem"]
"model.mlp" = ["llama", "cem", "cem_param_matched", "llama"]
"model.attn_steps" = [1, 2, 1, 3]
"model.mlp_steps" = [1, 2, 2, 1]
"train.energy_layers" = ["", "all", "", ""]
"""


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    """The planned experiment: {llama, full, pm, planned} run dirs, the db URL and the runs root."""
    from cem_core.train import run_training
    from cemctl.services.plan import plan_experiment

    tmp = tmp_path_factory.mktemp("eval")
    cache = tmp_path_factory.getbasetemp() / "eval-energy-data-cache"
    grid = tmp / "tt.toml"
    grid.write_text(GRID.format(cache=cache))
    db = f"sqlite:///{tmp / 'results.db'}"
    runs_root = tmp / "runs"
    report = plan_experiment(grid, db_url=db, runs_root=runs_root)
    ids = [r.run_id for r in report.plan.runs]
    assert len(ids) == 4
    dirs = dict(zip(("llama", "full", "pm", "planned"), (runs_root / rid for rid in ids)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CEMCTL_NUM_THREADS", "1")
        for name in ("llama", "full", "pm"):
            assert run_training(dirs[name], device="cpu")["state"] == "done"
    return {"dirs": dirs, "db": db, "runs": runs_root, "tmp": tmp}


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("CEMCTL_NUM_THREADS", "1")
    monkeypatch.setenv("CEMCTL_DEVICE", "cpu")


def _result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def _cli(exp, *args: str):
    return CliRunner().invoke(app, ["eval", *args, "--db", exp["db"], "--runs-dir", str(exp["runs"])])


def _db_rows(exp, run_id: str) -> list[dict]:
    from cemctl.db import open_db
    from cemctl.db.frames import evals_frame

    return evals_frame(open_db(exp["db"]), [run_id]).to_dict("records")


# ---------------------------------------------------------------------------
# The library


def test_eval_at_the_trained_T_reproduces_the_training_test_loss_and_other_T_are_finite(exp):
    from cem_core.train.recursion_eval import evaluate_steps, read_evals

    run_dir = exp["dirs"]["full"]
    result = _result(run_dir)
    rows = {r["eval_steps"]: r for r in evaluate_steps(run_dir, [1, 2, 3, 5])}
    assert sorted(rows) == [1, 2, 3, 5]
    same = rows[2]
    assert (same["attn_steps"], same["mlp_steps"]) == (2, 2) == (same["trained_attn_steps"], same["trained_mlp_steps"])
    assert same["test_loss"] == pytest.approx(result["test_loss"], rel=1e-6, abs=1e-7)
    assert same["test_ppl"] == pytest.approx(result["test_ppl"], rel=1e-6)
    assert same["flops_per_token"] == result["flops_per_token"]
    for T, r in rows.items():
        assert (r["attn_steps"], r["mlp_steps"], r["sublayer"]) == (T, T, "both")
        assert math.isfinite(r["test_loss"]) and math.isfinite(r["test_ppl"]) and r["test_ppl"] > 1
        assert r["test_tokens"] == result["test_tokens"]  # the same fixed test tokens
    assert rows[1]["test_loss"] != rows[2]["test_loss"]  # the depth really changed the model's function
    flops = [rows[T]["flops_per_token"] for T in (1, 2, 3, 5)]
    assert flops == sorted(flops) and len(set(flops)) == 4
    stored = {(r["attn_steps"], r["mlp_steps"]) for r in read_evals(run_dir)}
    assert {(1, 1), (2, 2), (3, 3), (5, 5)} <= stored


def test_eval_varies_only_the_chosen_sublayer_and_handles_param_matched_mlp(exp):
    from cem_core.train.recursion_eval import EvalRefused, evaluate_steps

    full = exp["dirs"]["full"]
    rows = evaluate_steps(full, "1,4", sublayer="attention")
    assert [(r["attn_steps"], r["mlp_steps"], r["sublayer"]) for r in rows] == [(1, 2, "attention"), (4, 2, "attention")]
    rows = evaluate_steps(full, [3], sublayer="mlp")
    assert [(r["attn_steps"], r["mlp_steps"], r["sublayer"]) for r in rows] == [(2, 3, "mlp")]

    pm = exp["dirs"]["pm"]  # CEM attention T=1, param-matched CEM MLP T=2
    rows = {r["eval_steps"]: r for r in evaluate_steps(pm, [1, 2, 4], sublayer="mlp")}
    assert [(r["attn_steps"], r["mlp_steps"]) for r in rows.values()] == [(1, 1), (1, 2), (1, 4)]
    assert rows[2]["test_loss"] == pytest.approx(_result(pm)["test_loss"], rel=1e-6, abs=1e-7)
    assert all(math.isfinite(r["test_ppl"]) for r in rows.values())
    with pytest.raises(EvalRefused, match="model.mlp='llama' is not a CEM sublayer"):
        evaluate_steps(exp["dirs"]["planned"], [2], sublayer="mlp")


# ---------------------------------------------------------------------------
# The command and the database


def test_cli_eval_stores_rows_in_the_database_and_rerunning_is_idempotent(exp):
    run_dir = exp["dirs"]["full"]
    rid = run_dir.name
    res = _cli(exp, rid, "--steps", "1,2,4")
    assert res.exit_code == 0, res.output
    assert "test ppl" in res.output and "2*" in res.output  # the trained T is starred
    # a plain table like every other command's: a header line, a rule of dashes, no box drawing (main: boxed)
    assert not set("\u250f\u2503\u2502\u2501\u2517\u2514\u250c") & set(res.output), res.output
    lines = res.output.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("run "))
    assert set(lines[header + 1].replace(" ", "")) == {"-"} and "evaluations of 1 run stored" in res.output
    first = _db_rows(exp, rid)
    keys = [(r["attn_steps"], r["mlp_steps"]) for r in first]
    assert len(keys) == len(set(keys))  # one row per depth pair
    assert {(1, 1), (2, 2), (4, 4)} <= set(keys)
    from cem_core.train.recursion_eval import read_evals

    file_rows = {(r["attn_steps"], r["mlp_steps"]): r for r in read_evals(run_dir)}
    assert set(file_rows) == set(keys)  # the database mirrors evals.json
    for r in first:
        assert r["test_ppl"] == pytest.approx(file_rows[(r["attn_steps"], r["mlp_steps"])]["test_ppl"])
    trained = next(r for r in first if (r["attn_steps"], r["mlp_steps"]) == (2, 2))
    assert trained["test_loss"] == pytest.approx(_result(run_dir)["test_loss"], rel=1e-6, abs=1e-7)

    again = _cli(exp, rid, "--steps", "1,2,4")
    assert again.exit_code == 0, again.output
    second = _db_rows(exp, rid)
    assert len(second) == len(first)
    assert {r["id"] for r in second} == {r["id"] for r in first}  # updated in place, no new rows
    by_key = {(r["attn_steps"], r["mlp_steps"]): r["test_ppl"] for r in first}
    for r in second:
        assert r["test_ppl"] == pytest.approx(by_key[(r["attn_steps"], r["mlp_steps"])], rel=1e-9)


def test_cli_eval_experiment_evaluates_its_cem_runs_and_skips_the_others_with_a_note(exp):
    d = exp["dirs"]
    res = _cli(exp, "tt", "--steps", "1,3")
    assert res.exit_code == 0, res.output
    assert f"skipped {d['llama'].name}: run {d['llama'].name} has no CEM sublayer" in res.stderr
    assert f"skipped {d['planned'].name}: run {d['planned'].name} is not done" in res.stderr
    assert "2 runs skipped or failed" in res.output
    assert (3, 3) in {(r["attn_steps"], r["mlp_steps"]) for r in _db_rows(exp, d["full"].name)}
    assert (3, 3) in {(r["attn_steps"], r["mlp_steps"]) for r in _db_rows(exp, d["pm"].name)}  # both CEM sublayers
    assert _db_rows(exp, d["llama"].name) == [] and not (d["llama"] / "evals.json").exists()


@pytest.mark.parametrize("which, args, message", [
    ("llama", ["--steps", "1,2"], "has no CEM sublayer (model.attention='llama', model.mlp='llama')"),
    ("planned", ["--steps", "2"], "is not done (state: no result.json yet)"),
    ("unknown", ["--steps", "2"], "'feedfacecafe' is not a grid file, an experiment or a run"),
    ("pm", ["--steps", "2", "--sublayer", "nope"], "--sublayer: unknown sublayer 'nope' (allowed: both, attention, mlp)"),
    ("pm", ["--steps", "0,2"], "--steps: each T must be between 1 and 64, got 0"),
    ("pm", ["--steps", "two"], "--steps: must be comma-separated integers"),
])
def test_cli_eval_refuses_with_one_line_and_exit_code_2(exp, which, args, message):
    target = "feedfacecafe" if which == "unknown" else exp["dirs"][which].name
    before = {p: sorted(os.listdir(p)) for p in exp["dirs"].values()}
    res = _cli(exp, target, *args)
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: ")
    assert message in res.stderr
    assert "Traceback" not in res.output
    assert {p: sorted(os.listdir(p)) for p in exp["dirs"].values()} == before  # nothing written


def test_eval_command_module_and_report_figures_do_not_import_torch():
    code = ("import sys, cemctl.cli, cemctl.commands.eval, cemctl.report.figures.test_time, "
            "cemctl.report.figures.energy, cemctl.db.frames; assert 'torch' not in sys.modules, 'torch imported'")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


# ---------------------------------------------------------------------------
# The report


def test_report_draws_the_test_time_recursion_and_energy_figures(exp):
    d = exp["dirs"]
    res = _cli(exp, d["full"].name, "--steps", "1,2,4")
    assert res.exit_code == 0, res.output
    out = exp["tmp"] / "report"
    rep = CliRunner().invoke(app, ["report", "tt", "--db", exp["db"], "--runs-dir", str(exp["runs"]),
                                   "--out", str(out), "--format", "png"])
    assert rep.exit_code == 0, rep.output
    for name in ("test_time_recursion", "energy_descent", "energy_training"):
        png = out / "figures" / f"{name}.png"
        assert png.stat().st_size > 5000 and png.read_bytes().startswith(b"\x89PNG"), name
    md = (out / "index.md").read_text()
    assert "### test_time_recursion" in md and "### energy_descent" in md
    table = (out / "tables" / "test_time_recursion.csv").read_text()
    assert "full CEM" in table  # each trained arm a series of its own (named by the one labelling path)
    energy = (out / "tables" / "energy_descent.csv").read_text().splitlines()
    # full CEM run: 2 layers x 2 sublayers x (T + 1) = 12 lines at its last evaluation
    assert sum(d["full"].name in line for line in energy) == 12


def test_test_time_figure_aggregates_seeds_and_marks_the_trained_depth():
    import pandas as pd

    from cemctl.report.figures import test_time
    from cemctl.report.frame import runs_frame

    cfg = {"model": {"attention": "cem", "mlp": "llama", "size": "nano", "attn_steps": 2}}
    runs = runs_frame([{"run_id": f"r{s}", "state": "done", "config": {**cfg, "train": {"seed": s}}} for s in (0, 1)]
                      + [{"run_id": "r9", "state": "failed", "config": {**cfg, "train": {"seed": 9}}}])
    rows = [{"run_id": f"r{s}", "attn_steps": T, "mlp_steps": 1, "eval_steps": T, "sublayer": "attention",
             "test_loss": 3.0, "test_ppl": 20.0 + T + 2 * s, "test_tokens": 2048, "flops_per_token": 100 * T,
             "trained_attn_steps": 2, "trained_mlp_steps": 1} for s in (0, 1, 9) for T in (1, 2, 4)]
    parts = test_time.render(runs, pd.DataFrame(rows))
    assert [f.name for f in parts.figures] == ["test_time_recursion"]
    table = parts.tables[0].frame
    assert table["eval T"].tolist() == [1, 2, 4]
    assert table["test ppl (mean)"].tolist() == [22.0, 23.0, 25.0]  # the failed seed-9 run is left out
    assert table["n seeds"].tolist() == [2, 2, 2]
    assert table["test ppl (s.d.)"].round(6).tolist() == [round(2 ** 0.5, 6)] * 3  # ddof=1 of {x, x+2}
    assert table["FLOPs/token"].tolist() == [100, 200, 400]
    agg = test_time.aggregate(runs, pd.DataFrame(rows))
    assert agg.loc[agg["trained"], "eval_steps"].tolist() == [2]
    assert test_time.render(runs, pd.DataFrame(columns=list(test_time.EVAL_COLUMNS))).is_empty()
    parts.figures[0].figure.clear()


@pytest.mark.parametrize("damage, message", [("truncate", "final checkpoint unusable"), ("delete", "is missing")])
def test_cli_eval_refuses_a_run_whose_final_checkpoint_is_damaged_or_gone(exp, damage, message):
    import shutil

    copy = exp["runs"] / f"copy-{damage}"
    shutil.copytree(exp["dirs"]["pm"], copy)
    (copy / "evals.json").unlink(missing_ok=True)
    final = max((copy / "checkpoints").glob("step_*.pt"))
    if damage == "truncate":
        final.write_bytes(final.read_bytes()[:100])
    else:
        final.unlink()
    res = _cli(exp, copy.name, "--steps", "1,2")
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: run {copy.name}") and res.stderr.count("\n") == 1
    assert message in res.stderr
    assert not (copy / "evals.json").exists()
