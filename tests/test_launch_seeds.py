"""`cemctl launch --seeds 0-7` / `--add-seeds N`: more seeds for an experiment, its finished runs untouched."""

from __future__ import annotations

import json

import pytest

from cem_core.errors import ConfigError
from cemctl.grid.expand import parse_seeds
from tests.helpers import assert_clean_error, cli, finish_run, tiny_grid


@pytest.mark.slow
def test_more_seeds_add_runs_and_keep_the_finished_ones(tmp_path):
    grid = tmp_path / "s.toml"
    grid.write_text(tiny_grid("s", seeds="[0, 1]", extra='\n[axes]\n"model.attention" = ["llama", "cem"]\n'))
    res = cli(tmp_path, "plan", str(grid), "--json")
    runs = json.loads(res.stdout)["runs"]
    for r in runs:
        finish_run(tmp_path / "runs" / r["run_id"])
    stamps = {r["run_id"]: (tmp_path / "runs" / r["run_id"] / "result.json").stat().st_mtime_ns for r in runs}
    dry = cli(tmp_path, "launch", "s", "--add-seeds", "2", "--dry-run", "--json")
    assert dry.returncode == 0, dry.output
    sel = json.loads(dry.stdout)["runs"]
    assert len(sel) == 8 and sum(s["action"] == "skip" for s in sel) == 4  # the four done runs stay done
    launched = cli(tmp_path, "launch", "s", "--add-seeds", "2", "--workers", "2", subprocess=True)
    assert launched.returncode == 0, launched.output
    status = json.loads(cli(tmp_path, "status", "s", "--json").stdout)["experiments"][0]
    seeds = sorted({r["axes"]["train.seed"] for r in status["runs"]})
    assert seeds == [0, 1, 2, 3] and status["counts"] == {"done": 8}
    for rid, stamp in stamps.items():  # never run twice
        assert (tmp_path / "runs" / rid / "result.json").stat().st_mtime_ns == stamp
    again = json.loads(cli(tmp_path, "launch", str(grid), "--seeds", "0-3", "--dry-run", "--json").stdout)["runs"]
    assert len(again) == 8 and all(s["action"] == "skip" for s in again)


@pytest.mark.parametrize("text,seeds", [("0-3", [0, 1, 2, 3]), ("0,2,5", [0, 2, 5]), ("0-1,4", [0, 1, 4])])
def test_seed_lists(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a-b", "3-1", "-1", "1.5"])
def test_bad_seed_lists_are_one_line(text, tmp_path):
    with pytest.raises(ConfigError):
        parse_seeds(text)
    grid = tmp_path / "s.toml"
    grid.write_text(tiny_grid("s"))
    assert_clean_error(cli(tmp_path, "launch", str(grid), "--seeds", text or ",", "--dry-run", subprocess=True),
                       contains="--seeds")
