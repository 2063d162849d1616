"""Sweeps from the command line (issue 37, item 6): `plan`/`launch --axis KEY=V1,V2,...` adds an axis to a grid,
checked like the file's, and the experiment records it so that `launch EXPERIMENT` runs (and re-plans) the same runs."""

from __future__ import annotations

import json

import pytest

from tests.helpers import assert_clean_error, cli, tiny_grid

GRID = tiny_grid("ax", seeds="[0, 1]", extra='"model.attention" = "cem"\n[axes]\n"model.kq_diagonal" = ["none", "shared"]\n')


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "ax.toml"
    path.write_text(GRID)
    return path


def _plan(tmp_path, *args):
    res = cli(tmp_path, "plan", *args, "--json")
    assert res.returncode == 0, res.output
    return json.loads(res.stdout)


def test_axis_adds_an_axis_after_the_files_and_the_experiment_records_it(tmp_path, grid):
    doc = _plan(tmp_path, str(grid), "--axis", "model.attn_steps=1,2,3")
    assert len(doc["runs"]) == 2 * 3 * 2
    assert doc["varied"] == ["model.kq_diagonal", "model.attn_steps", "train.seed"]  # the grid file's order, seed last
    assert doc["axes_added"] == {"model.attn_steps": [1, 2, 3]} and doc["recorded"] is True
    assert {r["axes"]["model.attn_steps"] for r in doc["runs"]} == {1, 2, 3}
    ids = {r["run_id"] for r in doc["runs"]}
    # `launch EXPERIMENT` starts exactly these runs, and re-planning it (more seeds) keeps the axis
    res = cli(tmp_path, "launch", "ax", "--dry-run", "--json")
    assert res.returncode == 0, res.output
    assert {r["run_id"] for r in json.loads(res.stdout)["runs"]} == ids
    res = cli(tmp_path, "launch", "ax", "--add-seeds", "1", "--dry-run", "--json")
    assert res.returncode == 0, res.output
    again = json.loads(res.stdout)["runs"]
    assert len(again) == 2 * 3 * 3 and ids <= {r["run_id"] for r in again}


def test_axis_replaces_the_values_of_an_axis_the_file_has_and_plain_text_values_work(tmp_path, grid):
    doc = _plan(tmp_path, str(grid), "--dry-run", "--axis", "model.kq_diagonal=per_head,shared")
    assert sorted({r["axes"]["model.kq_diagonal"] for r in doc["runs"]}) == ["per_head", "shared"]
    assert len(doc["runs"]) == 4


def test_launch_of_a_file_takes_axis_too(tmp_path, grid):
    res = cli(tmp_path, "launch", str(grid), "--axis", "train.lr=0.001,0.002", "--dry-run", "--json")
    assert res.returncode == 0, res.output
    assert len(json.loads(res.stdout)["runs"]) == 8


@pytest.mark.parametrize("args, message", [
    (["--axis", "model.attn_stepz=1,2"], "--axis: model.attn_stepz: unknown config key in --axis (allowed: "
                                         "model.attn_steps"),
    (["--axis", "model.kq_diagonal=none,diagonal"], "--axis: model.kq_diagonal: unknown KQ diagonal 'diagonal'"),
    (["--axis", "model.attn_steps=1,1"], "--axis: model.attn_steps: has repeated values: 1"),
    (["--axis", "model.attn_steps"], "must look like key=v1,v2,..."),
    (["--axis", "model.attn_steps=1", "--axis", "model.attn_steps=2"], "is given twice"),
    (["--axis", "train.seed=0,1"], "lists its seeds (seeds = [...]); use --seeds"),
    (["--axis", "train.lr=0.1,0.2", "--set", "train.lr=0.1"], "is both --set and --axis"),
])
def test_a_bad_axis_is_one_line_and_plans_nothing(tmp_path, grid, args, message):
    line = assert_clean_error(cli(tmp_path, "plan", str(grid), *args))
    assert message in line, line
    assert not (tmp_path / "results.db").exists() and not (tmp_path / "runs").exists()


def test_a_bad_axis_value_names_the_allowed_values(tmp_path, grid):
    line = assert_clean_error(cli(tmp_path, "plan", str(grid), "--axis", "model.kq_diagonal=none,diagonal,diag2"))
    assert "every bad value of model.kq_diagonal: 'diagonal', 'diag2'" in line
    assert "(allowed: none, shared, per_head)" in line


def test_axis_on_a_recorded_experiment_is_refused(tmp_path, grid):
    _plan(tmp_path, str(grid))
    line = assert_clean_error(cli(tmp_path, "launch", "ax", "--axis", "train.lr=0.1,0.2"))
    assert "--axis: applies to a grid file; 'ax' is a recorded experiment" in line
