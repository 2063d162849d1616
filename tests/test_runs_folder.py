"""One runs folder per project: every command uses the one the database recorded unless told otherwise, and a
folder that cannot be this project's is refused, never read as "every run is gone"."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.helpers import assert_clean_error, cli, finish_run, plan_ids, tiny_grid

GRID = ('[experiment]\nname = "g"\n[base]\n"model.size" = "nano"\n"train.max_steps" = 2\n'
        '[axes]\n"train.seed" = [0, 1]\n')


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A project whose runs live in ./elsewhere (planned with --runs-dir), both finished and synced."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CEMCTL_RUNS", raising=False)
    (tmp_path / "g.toml").write_text(GRID)
    db = str(tmp_path / "results.db")
    res = cli(None, "plan", "g.toml", "--db", db, "--runs-dir", "elsewhere", "--json")
    assert res.returncode == 0, res.stderr
    ids = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    for i, rid in enumerate(ids):
        finish_run(tmp_path / "elsewhere" / rid, test_loss=1.5 + i)
    assert cli(None, "sync", "--db", db, "--runs-dir", "elsewhere").returncode == 0
    return tmp_path, db, ids


def _states(db: str) -> dict[str, str]:
    out = json.loads(cli(None, "status", "--db", db, "--json", "--no-sync").stdout)
    return {r["run_id"]: r["state"] for r in out["experiments"][0]["runs"]}


def test_a_runs_folder_holding_none_of_the_projects_runs_is_refused(elsewhere):
    """status, sync and report pointed at an existing folder without one of the recorded runs (a stale
    CEMCTL_RUNS, a typo that exists) say so in one line and record nothing; before, every run became damaged."""
    where, db, ids = elsewhere
    (where / "empty").mkdir()
    for args, env in ((("status", "--db", db), {"CEMCTL_RUNS": str(where / "empty")}),
                      (("sync", "--db", db, "--runs-dir", "empty"), None),
                      (("report", "g", "--db", db, "--runs-dir", "empty", "--out", "rep"), None)):
        line = assert_clean_error(cli(None, *args, env=env), contains="holds none of the 2 runs")
        assert str(where / "elsewhere") in line, line
        assert _states(db) == {ids[0]: "done", ids[1]: "done"}, args
    assert not (where / "rep").exists()
    # a folder that is not there, a file, a part of the project's runs (a hostile probe: status and report read
    # the first two as "nothing to sync", sync marked the runs a part lacked damaged)
    (where / "afile").write_text("")
    (where / "part").mkdir()
    import shutil

    shutil.copytree(where / "elsewhere" / ids[0], where / "part" / ids[0])
    for folder, said in (("nowhere", "there"), ("afile", "not a folder"), ("part", "holds 1 of the 2 runs")):
        for args in (("status", "--db", db, "--runs-dir", folder), ("sync", "--db", db, "--runs-dir", folder),
                     ("report", "g", "--db", db, "--runs-dir", folder, "--out", "rep")):
            line = assert_clean_error(cli(None, *args), contains=folder)
            assert said in line or "no runs folder there" in line, line
        assert _states(db) == {ids[0]: "done", ids[1]: "done"}, folder
    assert not (where / "rep").exists()


def test_runs_gone_from_the_recorded_folder_are_gone(elsewhere):
    """The project's own folder emptied on purpose is not refused: its runs are gone, and status says which."""
    import shutil

    where, db, ids = elsewhere
    shutil.rmtree(where / "elsewhere" / ids[0])
    shutil.rmtree(where / "elsewhere" / ids[1])
    assert cli(None, "status", "--db", db).returncode == 0
    assert set(_states(db).values()) == {"damaged"}


def test_tag_note_and_archive_use_the_recorded_runs_folder(elsewhere):
    """Unnamed, the runs folder is the one the database recorded: tag and note write there, archive reads there
    (before: all three looked in ./runs and failed)."""
    where, db, ids = elsewhere
    assert cli(None, "tag", ids[0], "phase=b", "--db", db).returncode == 0
    res = cli(None, "note", ids[0], "looked fine", "--db", db)
    assert res.returncode == 0, res.stderr
    tags = json.loads((where / "elsewhere" / ids[0] / "tags.json").read_text())
    assert tags["tags"] == {"phase": "b"} and [n["text"] for n in tags["notes"]] == ["looked fine"]
    res = cli(None, "archive", "g", "-o", "g.tar.gz", "--db", db)
    assert res.returncode == 0, res.stderr
    with tarfile.open(where / "g.tar.gz") as tar:
        assert f"runs/{ids[0]}/tags.json" in tar.getnames()
    assert not Path(where / "runs").exists()


def test_a_config_json_written_by_an_older_release_is_this_runs_config(tmp_path):
    """A run's config.json without a key a later release added (at its default: the same run id) is the run's config:
    a plan of today recorded over it (forget and plan again over an imported archive) no longer makes sync call the
    run damaged ("config.json differs from the config recorded in the database")."""
    from cem_core.identity import ADDED_FIELDS

    _, (rid,) = plan_ids(tmp_path, tiny_grid("old", steps=2, seeds="[0]"), "old")
    run = tmp_path / "runs" / rid
    finish_run(run)
    cfg = json.loads((run / "config.json").read_text())
    section, key = next(k.split(".") for k in ADDED_FIELDS if "." in k)
    del cfg[section][key]  # as a release before that key wrote it
    (run / "config.json").write_text(json.dumps(cfg))
    res = cli(tmp_path, "sync")
    assert res.returncode == 0, res.stderr
    out = json.loads(cli(tmp_path, "status", "--json", "--no-sync").stdout)
    assert [r["state"] for r in out["experiments"][0]["runs"]] == ["done"], out
