"""`cemctl compare` (issue 37.3): arm labels in any key order and across experiments, a difference with its interval
(paired by seed, else Welch, the claims' functions), what the runs trained on, and a layout that fits 80 columns."""

from __future__ import annotations

import json
import math
import re

import pytest

from tests.helpers import assert_clean_error, cli, finish_run, on_screen

GRID = """seeds = [0, 1, 2]

[experiment]
name = "{name}"

[base]
"model.size" = "nano"
"model.attention" = "cem"
"model.attn_precond" = "diag_lowrank"
"data.tokenizer" = "byte"
"train.max_steps" = 8

[axes]
"model.attn_precond_rank" = [2, 8]
"model.kq_diagonal" = ["shared", "per_head"]
"""
# A second grid that shares the rank=2/shared arm's runs and adds one arm of its own.
OTHER = GRID.replace('"model.kq_diagonal" = ["shared", "per_head"]', '"model.kq_diagonal" = ["shared"]').replace(
    "[2, 8]", "[2, 32]")
LOSS = {(2, "shared"): 1.50, (8, "shared"): 1.46, (2, "per_head"): 1.52, (8, "per_head"): 1.48, (32, "shared"): 1.40}
NOISE = {0: 0.004, 1: -0.003, 2: 0.001}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    where = tmp_path_factory.mktemp("compare")
    runs = []
    for name, text in (("kq", GRID), ("rank", OTHER)):
        (where / f"{name}.toml").write_text(text.format(name=name))
        res = cli(where, "plan", str(where / f"{name}.toml"), "--json")
        assert res.returncode == 0, res.output
        runs += json.loads(res.stdout)["runs"]
    seen = set()
    for r in runs:
        if r["run_id"] in seen:
            continue
        seen.add(r["run_id"])
        axes, seed = r["axes"], r["axes"].get("train.seed", 0)
        loss = LOSS[(axes["model.attn_precond_rank"], axes["model.kq_diagonal"] if "model.kq_diagonal" in axes
                     else "shared")] + NOISE[seed] * (1 + axes["model.attn_precond_rank"] / 8)
        result = finish_run(where / "runs" / r["run_id"], test_loss=loss)
        result["params_total"] = 1000 + axes["model.attn_precond_rank"]  # another rank: another parameter count
        (where / "runs" / r["run_id"] / "result.json").write_text(json.dumps(result))
    assert cli(where, "status").returncode == 0
    return where


def test_a_label_resolves_in_any_key_order_and_by_any_name(project):
    a = cli(project, "compare", "attn_precond_rank=8, kq_diagonal=shared", "kq_diagonal=per_head, attn_precond_rank=8",
            "--json")
    b = cli(project, "compare", "model.kq_diagonal=shared,model.attn_precond_rank=8",
            "attn_precond_rank=8,kq_diagonal=per_head", "--json")
    assert a.returncode == 0 and b.returncode == 0, a.output + b.output
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert [i["runs"] for i in ja["items"]] == [i["runs"] for i in jb["items"]]
    assert all(len(i["runs"]) == 3 for i in ja["items"])


def test_a_label_is_found_across_experiments_and_a_shared_arm_is_one_arm(project):
    res = cli(project, "compare", "attn_precond_rank=32", "attn_precond_rank=2, kq_diagonal=shared", "--json")
    assert res.returncode == 0, res.output
    items = json.loads(res.stdout)["items"]
    assert items[0]["experiment"] == "rank" and len(items[1]["runs"]) == 3  # the shared arm: one arm, 3 seeds


def test_an_ambiguous_label_names_the_candidates_and_their_experiment(project):
    res = cli(project, "compare", "attn_precond_rank=8", "attn_precond_rank=2, kq_diagonal=shared")
    line = assert_clean_error(res, contains="names 2 arms")
    assert "(kq)" in line and "kq_diagonal=per_head" in line
    narrowed = cli(project, "compare", "attn_precond_rank=2", "attn_precond_rank=32", "-e", "rank", "--json")
    assert narrowed.returncode == 0, narrowed.output


def test_the_difference_has_the_interval_claims_would_compute(project):
    from cemctl.report.stats import welch_estimate

    res = cli(project, "compare", "attn_precond_rank=2, kq_diagonal=shared", "attn_precond_rank=8, kq_diagonal=shared",
              "-e", "kq", "--json")
    d = json.loads(res.stdout)["differences"]["test_loss"][1]
    a = [LOSS[(2, "shared")] + NOISE[s] * (1 + 2 / 8) for s in (0, 1, 2)]
    b = [LOSS[(8, "shared")] + NOISE[s] * (1 + 8 / 8) for s in (0, 1, 2)]
    assert d["method"] == "Welch"  # another rank is another parameter count: not the same model per seed
    est = welch_estimate([(-1.0, a), (1.0, b)])
    low, high = est.interval()
    assert d["effect"] == pytest.approx(est.effect, abs=1e-9)
    assert d["low"] == pytest.approx(low, abs=1e-9) and d["high"] == pytest.approx(high, abs=1e-9)
    assert math.isfinite(d["low"]) and d["low"] < d["effect"] < d["high"]


def test_arms_that_share_seeds_and_parameters_are_paired(project):
    from cemctl.report.stats import paired_estimate

    res = cli(project, "compare", "attn_precond_rank=8, kq_diagonal=shared", "attn_precond_rank=8, kq_diagonal=per_head",
              "-e", "kq", "--json")  # here both have 1008 parameters: the same model per seed
    d = json.loads(res.stdout)["differences"]["test_loss"][1]
    a = [LOSS[(8, "shared")] + NOISE[s] * 2 for s in (0, 1, 2)]
    b = [LOSS[(8, "per_head")] + NOISE[s] * 2 for s in (0, 1, 2)]
    est = paired_estimate([y - x for x, y in zip(a, b)])
    assert d["method"] == "paired t" and d["effect"] == pytest.approx(est.effect, abs=1e-9) and d["df"] == 2


ARMS = ["attn_precond_rank=2, kq_diagonal=shared", "attn_precond_rank=8, kq_diagonal=shared",
        "kq_diagonal=per_head, attn_precond_rank=8", "attn_precond_rank=2, kq_diagonal=per_head"]


@pytest.mark.parametrize("terminal", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["columns", "pty"])
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("cols", [80, 120])
def test_compare_fits_the_terminal(project, cols, n, terminal):
    """Nothing wider than the terminal (main: 3 arms made 92-column tables at 80, every cell folded by the terminal
    into '1.4813 ±' and '0.0070 (n=3)'); every mean +- s.d. and every difference with its interval whole on a line."""
    screen = on_screen(["compare", *ARMS[:n], "-e", "kq"], project, cols=cols, rows=60, cwd=project, terminal=terminal)
    screen.assert_clean(0)
    screen.assert_fits()
    text = screen.text
    assert "A: arm 'attn_precond_rank=2, kq_diagonal=shared'" in text.replace("\n   ", " ")
    means = {"A": "1.5008 \u00b1 0.0044 (n=3)", "B": "1.4613 \u00b1 0.0070 (n=3)", "C": "1.4813 \u00b1 0.0070 (n=3)",
             "D": "1.5208 \u00b1 0.0044 (n=3)"}
    tests = [ln for ln in screen.lines if ln.startswith("test ")]  # the metrics' test-loss rows (one per block)
    shown = " ".join(tests)
    for letter in "ABCD"[:n]:
        assert means[letter] in shown, (letter, text)
    diffs = {"B": r"B - A\s+-0\.0395\s+\[-0\.0538, -0\.0252\]\s+Welch",
             "C": r"C - A\s+-0\.0195\s+\[-0\.0338, -0\.0052\]\s+Welch", "D": r"D - A\s+\+0\.0200\s+paired"}
    for letter in "BCD"[:n - 1]:  # the difference, its interval and how it was taken, on the line that names it
        assert re.search(diffs[letter], text), (letter, text)
    if cols == 120 or n == 2:  # every item side by side
        assert any(re.search(r"^\s+A\s+B" + (r"\s+C" if n > 2 else ""), ln) for ln in screen.lines), text


def test_an_unknown_item_lists_labels_with_their_experiment(project):
    res = cli(project, "compare", "attn_precond_rank=99", "attn_precond_rank=2, kq_diagonal=shared")
    line = assert_clean_error(res, contains="no run or arm 'attn_precond_rank=99'")
    assert "(kq)" in line or "(rank)" in line


def test_what_the_runs_trained_on_is_compared_and_exported(project, tmp_path):
    """issue 34.3: the environment a result came from, in compare (where it differs) and in export."""
    import csv

    from cem_core.runfiles.environment import write_environment

    ids = json.loads(cli(project, "compare", "attn_precond_rank=32", "attn_precond_rank=8, kq_diagonal=shared",
                         "--json").stdout)["items"]
    a, b = ids[0]["runs"][0], ids[1]["runs"][0]
    for rid, gpu in ((a, "NVIDIA H100 80GB HBM3"), (b, "NVIDIA H200")):
        write_environment(project / "runs" / rid, {"attempt": 1, "hostname": "node1", "python_version": "3.11.7",
                                                   "torch_version": "2.13.0", "gpu_model": gpu, "device": "cuda:0",
                                                   "peak_host_rss_bytes": 2 ** 30})
    assert cli(project, "sync").returncode == 0
    res = cli(project, "compare", a, b, "--json")
    env = json.loads(res.stdout)["environment"]
    assert env["gpu_model"] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"] and "torch_version" not in env  # only what differs
    out = tmp_path / "env.csv"
    assert cli(project, "export", "rank", "-o", str(out)).returncode == 0
    with open(out) as f:
        rows = {r["run_id"]: r for r in csv.DictReader(f)}
    assert rows[a]["gpu_model"] == "NVIDIA H100 80GB HBM3" and rows[a]["torch_version"] == "2.13.0"
    screen = cli(project, "compare", a, b, env={"COLUMNS": "80"})
    assert "trained on (where that differs):" in screen.stdout and "NVIDIA H200" in screen.stdout


def test_compare_and_export_read_a_result_no_orchestrator_recorded(tmp_path):
    """A run that finished while no orchestrator was there to record it (killed at the moment the trainer wrote its
    result): `status` showed its result, `compare` and `export` read the database as last recorded and showed it
    still running, or without its test loss. They sync first now, as status does; --no-sync reads it as it is."""
    (tmp_path / "g.toml").write_text(GRID.format(name="late").replace("[0, 1, 2]", "[0]").replace(
        '"model.kq_diagonal" = ["shared", "per_head"]', '"model.kq_diagonal" = ["shared"]'))
    res = cli(tmp_path, "plan", str(tmp_path / "g.toml"), "--json")
    assert res.returncode == 0, res.output
    a, b = (r["run_id"] for r in json.loads(res.stdout)["runs"])
    finish_run(tmp_path / "runs" / a, test_loss=1.25)
    finish_run(tmp_path / "runs" / b, test_loss=1.5)

    stale = cli(tmp_path, "compare", a, b, "--json", "--no-sync")
    assert stale.returncode == 0, stale.output
    assert [v["n"] for v in json.loads(stale.stdout)["metrics"]["test_loss"]] == [0, 0]

    res = cli(tmp_path, "compare", a, b, "--json")
    assert res.returncode == 0, res.output
    assert [v["mean"] for v in json.loads(res.stdout)["metrics"]["test_loss"]] == [1.25, 1.5]

    res = cli(tmp_path, "export", "late", "-o", str(tmp_path / "late.csv"))
    assert res.returncode == 0, res.output
    import csv

    rows = {r["run_id"]: r for r in csv.DictReader(open(tmp_path / "late.csv"))}
    assert (rows[a]["state"], float(rows[a]["test_loss"])) == ("done", 1.25)
