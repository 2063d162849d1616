"""Runs trained by older model code (`cemctl.db.outdated`): counted by status, report and claims, rerun on request."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from cem_core import fingerprint as fp
from tests.helpers import cli, finish_run, plan_ids, status_rows, tiny_grid

CORE = Path(fp.__file__).resolve().parent


def _copy_with(tmp_path: Path, name: str, old: str, new: str) -> str:
    """The fingerprint of a copy of cem_core with one edit to the CEM attention."""
    copy = tmp_path / name / "cem_core"
    shutil.copytree(CORE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / "model" / "attention.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return fp.code_fingerprint(root=copy)


def _set_code(run_dir: Path, code: str | None) -> None:
    res = json.loads((run_dir / "result.json").read_text())
    if code is None:
        res.pop("code_fingerprint", None)
    else:
        res["code_fingerprint"] = code
    (run_dir / "result.json").write_text(json.dumps(res))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """Four finished runs of one grid: trained by this code, by code with a changed step (outdated), by code
    with only a reworded docstring (the same code), and by cemctl 0.2 (no fingerprint recorded)."""
    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "cache"))
    _, ids = plan_ids(tmp_path, tiny_grid("own", seeds="[0, 1, 2, 3]"), "own")
    changed = _copy_with(tmp_path, "changed", "x = x + self.step_size *", "x = x - self.step_size *")
    reworded = _copy_with(tmp_path, "reworded", '"""Yields x_0', '"""Yields (reworded) x_0')
    codes = [fp.code_fingerprint(), changed, reworded, None]
    assert changed != codes[0] == reworded
    for rid, code in zip(ids, codes):
        finish_run(tmp_path / "runs" / rid)
        _set_code(tmp_path / "runs" / rid, code)
    return tmp_path, ids


def test_only_a_run_trained_by_code_that_computes_differently_is_outdated(project):
    where, ids = project
    from cemctl.db.engine import open_existing_db
    from cemctl.db.outdated import outdated_runs

    assert cli(where, "sync").returncode == 0
    stale = outdated_runs(open_existing_db(f"sqlite:///{where / 'results.db'}"))
    assert list(stale) == [ids[1]] and stale[ids[1]].current == fp.code_fingerprint()
    doc = json.loads(cli(where, "status", "--json").stdout)
    assert doc["experiments"][0]["outdated"] == [ids[1]]
    rows = status_rows(where)
    assert [rid for rid in ids if rows[rid]["outdated"]] == [ids[1]]
    assert all(rows[rid]["state"] == "done" for rid in ids)  # still shown, still counted
    text = cli(where, "status", env={"COLUMNS": "120"}).stdout
    assert "1 finished run was trained by older model code (`cemctl launch own --rerun-outdated`" in text


def test_code_shown_to_compute_the_same_is_current_and_nothing_else(project, monkeypatch):
    """A fingerprint recorded by code that retrained runs showed to compute what this code computes
    (`EQUIVALENT`, with its evidence) is current; the same fingerprint against other code is not."""
    from cemctl.db.outdated import judge

    where, ids = project
    changed = json.loads((where / "runs" / ids[1] / "result.json").read_text())["code_fingerprint"]

    def config() -> dict:
        return json.loads((where / "runs" / ids[1] / "config.json").read_text())

    assert list(judge([(ids[1], changed, config)])) == [ids[1]]
    monkeypatch.setitem(fp.EQUIVALENT, changed, fp.code_fingerprint())
    assert judge([(ids[1], changed, config)]) == {}
    monkeypatch.setitem(fp.EQUIVALENT, changed, "0123456789ab")  # equivalent to some other code only
    assert list(judge([(ids[1], changed, config)])) == [ids[1]]


@pytest.mark.parametrize(("entries", "recorded", "current", "same"), [
    ({}, "aaa", "aaa", True),
    ({}, "aaa", "bbb", False),
    ({"aaa": "bbb"}, "aaa", "bbb", True),
    ({"aaa": "bbb", "bbb": "ccc"}, "aaa", "ccc", True),  # two recorded changes, each with its evidence
    ({"aaa": "bbb", "bbb": "ccc"}, "bbb", "aaa", False),  # not backwards
    ({"aaa": "bbb", "bbb": "aaa"}, "aaa", "ccc", False),  # a cycle ends
])
def test_equivalence_follows_recorded_changes_one_after_another(entries, recorded, current, same, monkeypatch):
    monkeypatch.setattr(fp, "EQUIVALENT", entries)
    assert fp.equivalent(recorded, current) is same


def test_the_report_counts_and_marks_them(project):
    where, ids = project
    out = where / "rep"
    res = cli(where, "report", "own", "--out", str(out), "--format", "png")
    assert res.returncode == 0, res.output
    assert "1 finished run was trained by older model code" in (out / "index.md").read_text()
    with open(out / "runs.csv") as f:
        marked = {r["run_id"]: r["outdated"] for r in csv.DictReader(f)}
    assert marked == {ids[0]: "False", ids[1]: "True", ids[2]: "False", ids[3]: "False"}


def test_launch_skips_them_unless_asked_and_then_reruns_only_them(project):
    where, ids = project
    res = cli(where, "launch", "own", "--dry-run", "--json")
    assert res.returncode == 0, res.output
    actions = {r["run_id"]: r for r in json.loads(res.stdout)["runs"]}
    assert all(actions[rid]["action"] == "skip" for rid in ids)
    assert "--rerun-outdated" in actions[ids[1]]["reason"] and "--rerun-outdated" not in actions[ids[0]]["reason"]
    res = cli(where, "launch", "own", "--dry-run", "--json", "--rerun-outdated")
    actions = {r["run_id"]: r["action"] for r in json.loads(res.stdout)["runs"]}
    assert actions == {ids[0]: "skip", ids[1]: "retry", ids[2]: "skip", ids[3]: "skip"}


@pytest.mark.slow
def test_rerun_outdated_trains_it_again_and_keeps_the_old_files(tmp_path, monkeypatch):
    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "cache"))
    _, ids = plan_ids(tmp_path, tiny_grid("one", seeds="[0]", steps=4), "one")
    assert cli(tmp_path, "launch", "one", "--workers", "1", subprocess=True).returncode == 0
    run = tmp_path / "runs" / ids[0]
    first = json.loads((run / "result.json").read_text())
    assert first["code_fingerprint"] == fp.code_fingerprint()
    _set_code(run, "0123456789ab")  # as an older cemctl's trainer would have left it
    assert cli(tmp_path, "sync").returncode == 0
    res = cli(tmp_path, "launch", "one", "--workers", "1", "--rerun-outdated", subprocess=True)
    assert res.returncode == 0, res.stderr
    assert "set aside" in res.stdout
    aside = [p for p in run.iterdir() if p.name.startswith(".outdated-")]
    assert len(aside) == 1 and json.loads((aside[0] / "result.json").read_text())["code_fingerprint"] == "0123456789ab"
    again = json.loads((run / "result.json").read_text())
    assert again["code_fingerprint"] == fp.code_fingerprint() and again["test_loss"] == first["test_loss"]
    assert status_rows(tmp_path)[ids[0]]["outdated"] is False
    res = cli(tmp_path, "launch", "one", "--workers", "1", "--rerun-outdated", subprocess=True)
    assert "launched 0 of 1" in res.stdout  # nothing outdated any more


def test_a_part_whose_runs_were_trained_by_code_shown_to_compute_the_same_is_not_called_mixed(monkeypatch):
    """The claims page's note 'its runs were trained by N versions of the model code' counts versions up to
    `EQUIVALENT`: runs of 0664f622f66e and of bd240f845b5b (one unused class apart) are one version."""
    import pandas as pd

    from cemctl.services.claims import code_notes

    monkeypatch.setattr(fp, "EQUIVALENT", {"aaaaaaaaaaaa": "bbbbbbbbbbbb"})
    runs = pd.DataFrame({"run_id": ["r1", "r2", "r3"], "outdated": [False, False, False],
                         "code_fingerprint": ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]})
    parts = pd.DataFrame({"claim": ["1", "2"], "part": ["same code", "other code"], "scale": ["cpu", "cpu"],
                          "runs": ["r1,r2", "r2,r3"]})
    notes = code_notes(None, runs, parts)
    assert len(notes) == 1 and notes[0].startswith("2. other code (cpu): its runs were trained by 2 versions")
