"""One run record, one field catalogue (`cemctl.records`): every field of the catalogue selects the same runs
through `status`, `export`, `report` and the API, on a grid of our own with tags, notes and runs in every
state; `--columns` and `--sort` accept every field."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from cemctl.records.fields import RUN_FIELDS
from tests.helpers import cli, finish_run

GRID = """seeds = [0, 1]

[experiment]
name = "own"
description = "rank x start of CEM attention under a diag+low-rank preconditioner (a question of our own)"

[base]
"model.size" = "nano"
"model.attention" = "cem"
"model.attn_precond" = "diag_lowrank"
"data.tokenizer" = "byte"
"train.max_steps" = 8

[axes]
"model.attn_precond_rank" = [2, 8]
"model.attn_start" = ["h", "norm"]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict:
    where = tmp_path_factory.mktemp("records")
    (where / "own.toml").write_text(GRID)
    res = cli(where, "plan", str(where / "own.toml"), "--json")
    assert res.returncode == 0, res.output
    ids = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    assert len(ids) == 8
    for i, rid in enumerate(ids[:5]):
        finish_run(where / "runs" / rid, test_loss=1.4 + i / 20, steps=4 + i)
    finish_run(where / "runs" / ids[5], state="failed", error="Traceback\nRuntimeError: boom at step 2")
    assert cli(where, "status").returncode == 0
    assert cli(where, "tag", ids[0], "phase=b", "owner=ana").returncode == 0
    assert cli(where, "tag", ids[1], "phase=a").returncode == 0
    assert cli(where, "note", ids[0], "lr looked too high").returncode == 0
    assert cli(where, "note", ids[2], "a second look").returncode == 0
    return {"where": where, "ids": ids}


def _records(project) -> list[dict]:
    from cemctl.db.engine import open_readonly_db
    from cemctl.records import load_records

    return load_records(open_readonly_db(str(project["where"] / "results.db")), "own").records


def _condition(name: str, records: list[dict]) -> str:
    """A condition on `name` that selects some of the runs (the median value or one string), never a made-up value."""
    from cemctl.records.formats import value as fmt

    values = [r.get(name) for r in records if r.get(name) not in (None, "")]
    if not values:
        return f"{name}!=nothing-has-this"  # no run has a value: every run matches '!=' (a value never compared)
    if all(isinstance(v, bool) for v in values):
        return f"{name}={'true' if values[0] else 'false'}"
    if all(isinstance(v, (int, float)) for v in values):
        finite = sorted(v for v in values if math.isfinite(v))
        return f"{name}>={fmt(finite[len(finite) // 2])}"
    text = str(values[0])
    word = max(text.replace(",", " ").split(), key=len)
    return f"{name}~{word}"


def _status_ids(project, cond: str) -> set[str]:
    res = cli(project["where"], "status", "own", "--json", "--where", cond, "--no-sync")
    assert res.returncode == 0, res.output
    return {r["run_id"] for r in json.loads(res.stdout)["experiments"][0]["runs"]}


def _export_ids(project, cond: str, tmp_path: Path) -> set[str]:
    out = tmp_path / "x.csv"
    res = cli(project["where"], "export", "own", "--where", cond, "--format", "csv", "-o", str(out), "--force")
    if res.returncode != 0:
        assert "no runs" in res.output, res.output
        return set()
    with open(out) as f:
        return {r["run_id"] for r in csv.DictReader(f)}


def _api_ids(project, cond: str) -> set[str]:
    import cemctl.api as cem

    return set(cem.runs("own", db=str(project["where"] / "results.db"), where=[cond])["run_id"])


FIELDS = [f.name for f in RUN_FIELDS] + ["tag.phase", "model.attn_precond_rank", "attn_start", "train.seed"]


@pytest.mark.parametrize("name", FIELDS)
def test_each_field_selects_the_same_runs_in_status_export_and_the_api(project, name, tmp_path):
    records = _records(project)
    cond = _condition(name, records)
    from cemctl.records.where import matches, parse_where

    expected = {r["run_id"] for r in records if matches(parse_where([cond]), r)}
    assert _status_ids(project, cond) == expected, cond
    assert _export_ids(project, cond, tmp_path) == expected, cond
    assert _api_ids(project, cond) == expected, cond
    for option in ("--columns", "--sort"):  # every field is a column and a sort key too
        res = cli(project["where"], "status", "own", option, name if option == "--sort" else f"run,{name}", "--no-sync")
        assert res.returncode == 0, (option, name, res.output)


@pytest.mark.slow
@pytest.mark.parametrize("name", FIELDS)
def test_each_field_selects_the_same_runs_in_report(project, name, tmp_path):
    records = _records(project)
    cond = _condition(name, records)
    from cemctl.records.where import matches, parse_where

    expected = {r["run_id"] for r in records if matches(parse_where([cond]), r)}
    out = tmp_path / "rep"
    res = cli(project["where"], "report", "own", "--where", cond, "--out", str(out), "--format", "png", "--no-sync")
    ended = ("done", "failed", "diverged", "damaged", "stale", "cancelled")
    if not any(r["state"] in ended for r in records if r["run_id"] in expected):  # nothing to report on
        assert res.returncode == 2 and "no finished runs" in res.output, (cond, res.output)
        return
    assert res.returncode == 0, (cond, res.output)
    with open(out / "runs.csv") as f:
        assert {r["run_id"] for r in csv.DictReader(f)} == expected, cond


@pytest.mark.parametrize("cond,count", [
    ("note~too high", 1), ("note~look", 2), ("tag.phase=b", 1), ("tag.phase!=b", 7), ("val_ppl>0", 6),
    ("params_total>0", 8), ("wall_time_s>0", 6), ("step>0", 6), ("state=failed", 1), ("reason~boom", 1),
    ("arm_label~rank=8", 4), ("experiment=own", 8), ("attn_start=norm", 4), ("val_ppl!=3", 8),
])
def test_the_where_cases_that_disagreed_now_agree(project, cond, count, tmp_path):
    """Cases where status, export and report used to disagree (status: note~x matched nothing, val_ppl/params/
    wall time/steps matched nothing and `!=` everything; report: tag.x said 'no finished runs')."""
    assert len(_status_ids(project, cond)) == count, cond
    assert _status_ids(project, cond) == _export_ids(project, cond, tmp_path) == _api_ids(project, cond)


def test_status_arms_keeps_the_grids_nuisance_keys_and_every_digit(tmp_path):
    grid = GRID.replace('description =', 'nuisance = ["train.lr"]\ndescription =').replace(
        '"model.attn_start" = ["h", "norm"]', '"train.lr" = [0.0012345678, 0.0012345679]')
    (tmp_path / "n.toml").write_text(grid)
    assert cli(tmp_path, "plan", str(tmp_path / "n.toml")).returncode == 0
    res = cli(tmp_path, "status", "own", "--arms", env={"COLUMNS": "120"})
    assert res.returncode == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if "planned" in ln and "runs:" not in ln]
    assert len(lines) == 2, res.stdout  # the lr is a nuisance: 2 ranks = 2 arms of 4 runs each
    assert "and train.lr (the grid's nuisance keys)" in res.stdout
    res = cli(tmp_path, "status", "own", "--columns", "run,lr", env={"COLUMNS": "120"})
    assert "0.0012345678" in res.stdout and "0.0012345679" in res.stdout  # two values never print alike


def test_unknown_fields_name_the_closest_ones(project):
    from tests.helpers import assert_clean_error

    assert_clean_error(cli(project["where"], "status", "--where", "val_pll>1"), contains="did you mean val_ppl")
    assert_clean_error(cli(project["where"], "status", "--columns", "run,tset,nope"),
                       contains="unknown field 'tset' (did you mean test")
    res = cli(project["where"], "status", "--columns", "run,tset,nope")
    assert "'nope'" in res.output  # every unknown name, not only the first
    assert_clean_error(cli(project["where"], "export", "own", "--where", "attn_stat=h", "-o", "x.csv"),
                       contains="did you mean")


def test_the_grid_eta_is_the_running_runs_own_plus_the_queued_ones_at_the_finished_ones_pace():
    from cemctl.records.progress import grid_eta_s

    done = [{"state": "done", "wall_time_s": w} for w in (100.0, 200.0)]  # 150 s per run
    running = [{"state": "running", "eta_s": 30.0}, {"state": "running", "eta_s": 90.0}]
    queued = [{"state": "queued"}] * 4
    # two slots: (30 + 90 + 4 x 150) / 2 = 360 s; never less than the longest running run alone
    assert grid_eta_s(done + running + queued) == pytest.approx(360.0)
    assert grid_eta_s(done + running) == pytest.approx(90.0)
    assert grid_eta_s(done + running + queued, workers=4) == pytest.approx(180.0)
    assert grid_eta_s(done) is None  # nothing left
    assert grid_eta_s(running + queued) is None  # queued runs and no finished one to time them by


def test_a_typo_of_a_result_suggests_the_result_not_a_gp_key(project):
    """issue 37.9: `--where tst<2` suggested a GP config key; the run fields come first now."""
    from tests.helpers import assert_clean_error

    line = assert_clean_error(cli(project["where"], "status", "--where", "tst<2"), contains="did you mean test_loss")
    assert "gp." not in line.split("(allowed")[0]
