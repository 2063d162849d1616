"""Re-planning never hides results: every scale and override set stays reachable (issue "hostile-but-fair", 2).

Following the README (launch a grid at one scale, then `plan --scale paper` to see the costs) used to
relink the experiment to the new plan only: status showed planned runs and report said "no finished
runs yet". Runs here are finished by writing the files a trainer leaves (tests.helpers.finish_run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import cli, finish_run, tiny_grid

SCALED = tiny_grid("scaled", seeds="[0]", steps=4) + """
[scale.tiny]
[scale.cpu]
[scale.cpu.base]
"train.max_steps" = 8
"""


def _plan(tmp_path: Path, grid: Path, *args: str) -> dict:
    res = cli(tmp_path, "plan", str(grid), "--json", *args)
    assert res.returncode == 0, res.output
    return json.loads(res.stdout)


def _finish_all(tmp_path: Path, plan: dict, loss: float = 1.5) -> list[str]:
    ids = [r["run_id"] for r in plan["runs"]]
    for i, rid in enumerate(ids):
        finish_run(tmp_path / "runs" / rid, test_loss=loss + 0.01 * i)
    return ids


def _status(tmp_path: Path, *args: str) -> dict:
    res = cli(tmp_path, "status", "--json", *args)
    assert res.returncode == 0, res.output
    return {e["name"]: e for e in json.loads(res.stdout)["experiments"]}


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    path = tmp_path / "scaled.toml"
    path.write_text(SCALED)
    return path


def test_planning_another_scale_keeps_the_finished_runs_in_status(tmp_path, grid):
    done = _finish_all(tmp_path, _plan(tmp_path, grid, "--scale", "tiny"))
    cpu = _plan(tmp_path, grid, "--scale", "cpu")
    exp = _status(tmp_path)["scaled"]
    states = {r["run_id"]: r["state"] for r in exp["runs"]}
    assert all(states[rid] == "done" for rid in done), states
    assert all(states[r["run_id"]] == "planned" for r in cpu["runs"])
    assert exp["counts"] == {"planned": 1, "done": 1}
    only_tiny = _status(tmp_path, "--scale", "tiny")["scaled"]
    assert [r["run_id"] for r in only_tiny["runs"]] == done and only_tiny["runs"][0]["scale"] == "tiny"


def test_report_after_planning_another_scale_reports_the_finished_scale(tmp_path, grid):
    _finish_all(tmp_path, _plan(tmp_path, grid, "--scale", "tiny"))
    _plan(tmp_path, grid, "--scale", "cpu")
    out = tmp_path / "rep"
    res = cli(tmp_path, "report", "scaled", "--out", str(out), "--format", "png")
    assert res.returncode == 0, res.output
    index = (out / "index.md").read_text()
    assert "- **scale**: tiny; other scales: cpu (0/1 done; --scale cpu)" in index
    res = cli(tmp_path, "report", "scaled", "--out", str(tmp_path / "rep2"), "--scale", "cpu")
    assert res.returncode == 2 and "no finished runs" in res.stderr
    res = cli(tmp_path, "report", "scaled", "--out", str(tmp_path / "rep3"), "--scale", "paper")
    assert res.returncode == 2 and "no runs at scale 'paper'" in res.stderr and "tiny (1/1 done)" in res.stderr


def test_replanning_with_set_keeps_the_first_override_sets_runs(tmp_path, grid):
    first = _finish_all(tmp_path, _plan(tmp_path, grid))
    _plan(tmp_path, grid, "--set", "train.lr=0.001")
    exp = _status(tmp_path)["scaled"]
    assert {r["run_id"] for r in exp["runs"]} >= set(first) and exp["total_runs"] == 2
    out = tmp_path / "rep"
    res = cli(tmp_path, "report", "scaled", "--out", str(out), "--format", "png")
    assert res.returncode == 0, res.output
    assert first[0] in (out / "runs.csv").read_text()


def test_a_second_grid_file_claiming_the_experiment_name_is_refused(tmp_path, grid):
    _plan(tmp_path, grid)
    other = tmp_path / "other.toml"
    other.write_text(SCALED.replace('"train.max_steps" = 4', '"train.max_steps" = 5'))
    res = cli(tmp_path, "plan", str(other))
    assert res.returncode == 2 and len(res.lines) == 1
    assert "'scaled' is already the experiment of" in res.stderr and str(grid) in res.stderr
    assert len(_status(tmp_path)["scaled"]["runs"]) == 1  # nothing recorded from the other file


def test_the_same_grid_text_from_another_path_is_the_same_experiment(tmp_path, grid):
    _plan(tmp_path, grid)
    copy = tmp_path / "copy" / "scaled.toml"
    copy.parent.mkdir()
    copy.write_text(grid.read_text())
    assert _plan(tmp_path, copy)["new_runs"] == 0


def test_an_edited_grid_file_replans_under_its_own_name(tmp_path, grid):
    _plan(tmp_path, grid)
    grid.write_text(grid.read_text().replace('"train.max_steps" = 4', '"train.max_steps" = 5'))
    assert _plan(tmp_path, grid)["new_runs"] == 1


def test_marks_are_recorded_and_named_in_the_report(tmp_path):
    path = tmp_path / "marked.toml"
    path.write_text(tiny_grid("marked", seeds="[0]", extra='\n[axes]\n"model.attention" = ["llama", "cem"]\n\n'
                                                         '[[mark]]\nlabel = "beyond the paper"\n"model.attention" = "cem"\n'))
    plan = _plan(tmp_path, path)
    assert sorted(map(tuple, (r["marks"] for r in plan["runs"]))) == [(), ("beyond the paper",)]
    _finish_all(tmp_path, plan)
    res = cli(tmp_path, "plan", str(path))
    assert "beyond the paper" in res.stdout and "note" in res.stdout
    out = tmp_path / "rep"
    assert cli(tmp_path, "report", "marked", "--out", str(out), "--format", "png").returncode == 0
    index = (out / "index.md").read_text()
    # the marked arm named as every label is: by the fewest varying keys that tell the arms apart (one here)
    assert "- beyond the paper: CEM attention\n" in index and "beyond the paper: Llama" not in index, index
