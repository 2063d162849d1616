"""Family 3 of issue 24: an edited grid never hides results.

Re-planning an experiment at the same scale after editing the grid (an axis value changed, a seed dropped,
an [[exclude]] added) keeps the runs that left the grid: status lists them ("no longer in the grid"), the
report's runs table and claims keep their results, and `launch EXPERIMENT` no longer starts them.
Each case failed on the main of 526f40c unless marked as a guard.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import cli, finish_run, tiny_grid
from tests.reliability.conftest import A_CLAIM

AXIS = '[axes]\n"train.lr" = [{lrs}]\n'


def _grid(lrs: str = "0.002, 0.003", seeds: str = "[0]", extra: str = "") -> str:
    return tiny_grid("exp", seeds=seeds) + AXIS.format(lrs=lrs) + extra


def _plan(tmp_path, text: str) -> dict[float, str]:
    """Plan (or re-plan) exp.toml with `text`; returns {lr: run id} of the plan (seed 0 runs)."""
    (tmp_path / "exp.toml").write_text(text)
    res = cli(tmp_path, "plan", str(tmp_path / "exp.toml"), "--json")
    assert res.returncode == 0, res.output
    return {(r["axes"].get("train.lr"), r["axes"].get("train.seed", 0)): r["run_id"] for r in json.loads(res.stdout)["runs"]}


def _exp_rows(tmp_path, *args: str) -> dict[str, dict]:
    res = cli(tmp_path, "status", "exp", "--json", *args)
    assert res.returncode == 0, res.output
    (exp,) = json.loads(res.stdout)["experiments"]
    return {r["run_id"]: r for r in exp["runs"]}


@pytest.fixture
def edited(tmp_path):
    """Both runs of lr in {0.002, 0.003} finished, then the grid edited to lr in {0.002, 0.004} and re-planned."""
    first = _plan(tmp_path, _grid())
    for i, rid in enumerate(first.values()):
        finish_run(tmp_path / "runs" / rid, test_loss=1.5 + 0.1 * i)
    assert cli(tmp_path, "sync").returncode == 0
    second = _plan(tmp_path, _grid("0.002, 0.004"))
    return first[(0.003, 0)], first, second


def test_status_keeps_a_finished_run_whose_axis_value_was_edited_away(tmp_path, edited):
    left, _, _ = edited
    row = _exp_rows(tmp_path)[left]
    assert row["state"] == "done" and row["in_grid"] is False and "no longer in the grid" in row["reason"]


def test_the_status_table_says_no_longer_in_the_grid(tmp_path, edited):
    left, _, _ = edited
    res = cli(tmp_path, "status", "exp")
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith(left[:8])), "")  # the table shows 8 characters
    assert res.returncode == 0 and "no longer in the grid" in line, res.output


def test_status_of_the_scale_keeps_it_too(tmp_path, edited):
    left, _, _ = edited
    assert _exp_rows(tmp_path, "--scale", "tiny")[left]["state"] == "done"


def test_the_report_keeps_its_result_and_says_why(tmp_path, edited):
    left, _, _ = edited
    out = tmp_path / "rep"
    res = cli(tmp_path, "report", "exp", "--out", str(out), "--format", "png")
    assert res.returncode == 0, res.output
    assert left in (out / "runs.csv").read_text()
    assert "no longer in the grid" in (out / "index.md").read_text()


def test_claims_count_its_result(tmp_path, edited):
    _plan(tmp_path, _grid("0.002, 0.004", extra=A_CLAIM))  # the edited grid, now declaring a claim
    out = tmp_path / "claims"
    res = cli(tmp_path, "claims", "--out", str(out))
    assert res.returncode == 0, res.output
    assert "- **finished runs**: 2" in (out / "claims.md").read_text()


def test_a_dropped_seed_keeps_its_finished_run(tmp_path):
    first = _plan(tmp_path, _grid("0.002", seeds="[0, 1]"))
    for rid in first.values():
        finish_run(tmp_path / "runs" / rid)
    assert cli(tmp_path, "sync").returncode == 0
    _plan(tmp_path, _grid("0.002", seeds="[0]"))
    rows = _exp_rows(tmp_path)
    assert set(first.values()) <= set(rows) and {rows[r]["state"] for r in first.values()} == {"done"}


def test_an_added_exclude_keeps_the_finished_run_it_excludes(tmp_path):
    first = _plan(tmp_path, _grid())
    for rid in first.values():
        finish_run(tmp_path / "runs" / rid)
    assert cli(tmp_path, "sync").returncode == 0
    _plan(tmp_path, _grid(extra='\n[[exclude]]\n"train.lr" = 0.003\n'))
    row = _exp_rows(tmp_path)[first[(0.003, 0)]]
    assert row["state"] == "done" and row["in_grid"] is False


def test_editing_back_and_forth_loses_neither_version(tmp_path, edited):
    left, first, second = edited
    finish_run(tmp_path / "runs" / second[(0.004, 0)], test_loss=1.9)
    _plan(tmp_path, _grid())  # the original grid again
    rows = _exp_rows(tmp_path)
    assert rows[left]["in_grid"] is True and rows[second[(0.004, 0)]]["in_grid"] is False
    assert {rows[r]["state"] for r in (left, second[(0.004, 0)])} == {"done"}


def test_guard_launch_by_name_starts_only_the_runs_in_the_grid(tmp_path):
    """(A guard: it held on 526f40c, where the left run was unlinked; it must hold now that it stays linked.)"""
    _plan(tmp_path, _grid())
    _plan(tmp_path, _grid("0.002"))
    res = cli(tmp_path, "launch", "exp", "--dry-run", subprocess=True)
    assert res.returncode == 0 and "would launch 1 of 1" in res.stdout, res.output
