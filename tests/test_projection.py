"""The database as a projection of the run folders (issue 33): one function rebuilds a run's derived rows from its
folder (a table added later included); reruns keep the user's tags and notes and the earlier result as history;
a tags.json that cannot be read is refused, never wiped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import Column, ForeignKey, Integer, Table, func, select

from tests.helpers import assert_clean_error, cli, finish_run, plan_ids, tiny_grid


@pytest.fixture
def project(tmp_path):
    """One finished run with metrics, evals, tags and a note; its result recorded by an older code fingerprint."""
    _, ids = plan_ids(tmp_path, tiny_grid("one", seeds="[0, 1]"), "one")
    run = tmp_path / "runs" / ids[0]
    finish_run(run, test_loss=1.25)
    res = json.loads((run / "result.json").read_text())
    res["code_fingerprint"] = "0123456789ab"
    (run / "result.json").write_text(json.dumps(res))
    (run / "evals.json").write_text(json.dumps({"evals": [
        {"attn_steps": t, "mlp_steps": 1, "sublayer": "attention", "test_loss": 1.2 + t, "test_ppl": 3.0 + t}
        for t in (1, 2, 4)]}))
    assert cli(tmp_path, "sync").returncode == 0
    assert cli(tmp_path, "tag", ids[0], "phase=b").returncode == 0
    assert cli(tmp_path, "note", ids[0], "the old code's number").returncode == 0
    return tmp_path, ids


def _engine(where: Path):
    from cemctl.db import open_db

    return open_db(f"sqlite:///{where / 'results.db'}")


def _count(engine, model, run_id: str) -> int:
    from cemctl.db.engine import read_session

    with read_session(engine) as s:
        return s.execute(select(func.count()).select_from(model).where(model.run_id == run_id)).scalar_one()


def test_every_run_keyed_table_is_derived_and_a_table_added_later_is_rebuilt_too(project):
    from cemctl.db.models import Base
    from cemctl.db.projection import derived_tables, rebuild_run

    where, ids = project
    names = {t.name for t in derived_tables()}
    assert {"metrics", "results", "evals", "run_tags", "run_environment", "run_events", "result_history"} <= names
    assert "experiment_runs" not in names  # the plan's links
    dummy = Table("dummy_run_rows", Base.metadata, Column("id", Integer, primary_key=True),
                  Column("run_id", ForeignKey("runs.id")), Column("x", Integer))
    try:
        engine = _engine(where)
        dummy.create(engine)
        with engine.begin() as conn:
            conn.execute(dummy.insert().values(run_id=ids[0], x=1))
        assert "dummy_run_rows" in {t.name for t in derived_tables()}
        rebuild_run(engine, where / "runs", ids[0], reason="test")
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(dummy)).scalar_one() == 0
    finally:
        Base.metadata.remove(dummy)


def test_a_rebuild_reads_the_folder_again_in_one_transaction(project):
    from cemctl.db.models import Eval, Metric, Result, RunTags
    from cemctl.db.projection import rebuild_run

    where, ids = project
    engine = _engine(where)
    before = {m.__tablename__: _count(engine, m, ids[0]) for m in (Metric, Result, Eval, RunTags)}
    rebuilt = rebuild_run(engine, where / "runs", ids[0])
    after = {m.__tablename__: _count(engine, m, ids[0]) for m in (Metric, Result, Eval, RunTags)}
    assert rebuilt.state == "done" and not rebuilt.warnings and before == after and after["evals"] == 3  # the same folder: the same rows


def test_rerun_outdated_drops_the_old_evals_keeps_tags_and_notes_and_the_old_result_as_history(project):
    from cemctl.db.models import Eval, Metric, Result, RunTags
    from cemctl.services.launch.repair import set_aside_outdated

    where, ids = project
    engine = _engine(where)
    run = where / "runs" / ids[0]
    assert _count(engine, Eval, ids[0]) == 3
    done = set_aside_outdated(engine, ids[0], run)
    assert "set aside" in done
    assert _count(engine, Eval, ids[0]) == 0 and _count(engine, Result, ids[0]) == 0  # the old weights' rows: gone
    assert _count(engine, Metric, ids[0]) == 0
    assert (run / "tags.json").exists() and _count(engine, RunTags, ids[0]) == 1  # the user's tags stay with the run
    rows = {r["run_id"]: r for r in json.loads(cli(where, "status", "--json", "--columns", "run,tag.phase,note")
                                               .stdout)["experiments"][0]["runs"]}
    assert rows[ids[0]]["tag.phase"] == "b" and rows[ids[0]]["note"] == "the old code's number"
    assert rows[ids[0]]["state"] == "planned"
    res = cli(where, "compare", ids[0], "--history", "--json")
    assert res.returncode == 0, res.output
    hist = json.loads(res.stdout)["results"]
    assert [h["current"] for h in hist] == [False, True]
    assert hist[0]["code_fingerprint"] == "0123456789ab" and hist[0]["test_loss"] == pytest.approx(1.25)
    exported = cli(where, "export", "one", "-o", str(where / "x.csv"))
    assert exported.returncode == 0
    import csv

    with open(where / "x.csv") as f:
        row = {r["run_id"]: r for r in csv.DictReader(f)}[ids[0]]
    assert float(row["previous_test_loss"]) == pytest.approx(1.25) and row["previous_code_fingerprint"] == "0123456789ab"
    screen = cli(where, "compare", ids[0], "--history", env={"COLUMNS": "80"})
    assert "1 earlier result(s)" in screen.stdout and "0123456789ab" in screen.stdout


@pytest.mark.parametrize("content", [
    '{"tags": {"phase": "b"}, "notes": [{"time": 1, "text": "bad \\x escape"}]}',  # one bad escape
    '{"tags": {"phase": 2}, "notes": []}',  # a hand edit: a number where text belongs
    '{"tags": {"phase": "b"}, "notes": [], "extra": 1}',  # a key nobody wrote
    "not json at all",
])
def test_an_unreadable_tags_file_is_refused_never_wiped(project, content):
    where, ids = project
    path = where / "runs" / ids[0] / "tags.json"
    path.write_text(content)
    for args in (("tag", ids[0], "owner=ana"), ("note", ids[0], "more"), ("tag", "one", "phase=c")):
        res = cli(where, *args)
        line = assert_clean_error(res, contains="tags.json")
        assert "fix the file by hand" in line
        assert path.read_text() == content  # untouched
    # the other run of the experiment was not tagged either (all or nothing)
    other = where / "runs" / ids[1] / "tags.json"
    assert not other.exists()
    res = cli(where, "sync")
    assert res.returncode == 0 and "left out" in res.stderr and "tags.json" in res.stderr
    rows = {r["run_id"]: r for r in json.loads(cli(where, "status", "--json", "--columns", "run,tag.phase,note")
                                               .stdout)["experiments"][0]["runs"]}
    assert rows[ids[0]]["tag.phase"] == "b" and rows[ids[0]]["note"] == "the old code's number"  # kept as they were


def test_a_tags_file_too_large_to_read_is_refused(project):
    from cem_core.runfiles.tags import MAX_TAGS_BYTES

    where, ids = project
    path = where / "runs" / ids[0] / "tags.json"
    path.write_text('{"tags": {}, "notes": [' + ",".join(['{"time": 1, "text": "x"}'] * 10) + "]}" + " " * MAX_TAGS_BYTES)
    size = path.stat().st_size
    assert_clean_error(cli(where, "note", ids[0], "one more"), contains="tags.json")
    assert path.stat().st_size == size


def test_fifteen_thousand_notes_and_one_more_are_all_kept(project):
    """No note is dropped: a tags.json with 15,000 notes (merged, hand-edited) keeps every one through `cemctl note`,
    and the database mirror too (`--where note~` finds the oldest). Before, the next note kept the last 1,000."""
    from cem_core.runfiles.tags import read_tags

    where, ids = project
    path = where / "runs" / ids[0] / "tags.json"
    notes = [{"time": 1.0 + i, "text": f"note number {i}"} for i in range(15_000)]
    path.write_text(json.dumps({"tags": {"phase": "b"}, "notes": notes}))
    res = cli(where, "note", ids[0], "one more")
    assert res.returncode == 0 and "15001 notes" in res.stdout, res.stdout + res.stderr
    kept = read_tags(path.parent).notes
    assert [n["text"] for n in kept] == [n["text"] for n in notes] + ["one more"]
    st = cli(where, "status", "--json", "--columns", "run", "--where", "note~note number 0", "--no-sync")
    assert [r["run_id"] for r in json.loads(st.stdout)["experiments"][0]["runs"]] == [ids[0]], st.stdout


def test_a_note_that_would_pass_the_files_bound_is_refused_and_nothing_is_dropped(project):
    """The one bound is the file's size (what a reader accepts): a note that would pass it is refused in one line
    naming the file, and the file keeps every note it had."""
    from cem_core.runfiles.tags import MAX_NOTE_CHARS, MAX_TAGS_BYTES, read_tags

    where, ids = project
    path = where / "runs" / ids[0] / "tags.json"
    full = {"time": 1.0, "text": "x" * MAX_NOTE_CHARS}
    notes = [full] * (MAX_TAGS_BYTES // (len(json.dumps(full)) + 2) - 1)
    room = MAX_TAGS_BYTES - len(json.dumps({"tags": {}, "notes": notes}))
    notes.append({"time": 1.0, "text": "y" * (room - MAX_NOTE_CHARS // 2)})  # within half a note of the bound
    path.write_text(json.dumps({"tags": {}, "notes": notes}))
    assert MAX_TAGS_BYTES - MAX_NOTE_CHARS < path.stat().st_size < MAX_TAGS_BYTES
    before = path.read_bytes()
    line = assert_clean_error(cli(where, "note", ids[0], "z" * MAX_NOTE_CHARS), contains="tags.json")
    assert "nothing was written" in line
    assert path.read_bytes() == before and len(read_tags(path.parent).notes) == len(json.loads(before)["notes"])


@pytest.mark.parametrize("flag", ["outdated", "damaged"])
def test_a_rerun_with_an_unreadable_tags_file_keeps_the_recorded_tags_and_says_so(project, flag):
    """`--rerun-outdated` / `--redo-damaged` with a tags.json that cannot be read: the tags and notes the database
    mirrored stay (the rebuild marks them to be read again, never deletes them), the repair names the file, and once
    the file is fixed the next sync reads it. Before, the rebuild deleted the run_tags row and the reread failed."""
    from cemctl.db.models import RunTags
    from cemctl.services.launch.repair import repair_damaged, set_aside_outdated

    where, ids = project
    engine = _engine(where)
    run = where / "runs" / ids[0]
    good = (run / "tags.json").read_text()
    (run / "tags.json").write_text('{"tags": {"phase": "b"}, "notes": [{"time": 1, "text": "bad \\x escape"}]}')
    done = (set_aside_outdated if flag == "outdated" else repair_damaged)(engine, ids[0], run)
    assert "tags.json" in done and "kept" in done, done
    assert _count(engine, RunTags, ids[0]) == 1
    rows = {r["run_id"]: r for r in json.loads(cli(where, "status", "--json", "--no-sync", "--columns",
                                                   "run,tag.phase,note").stdout)["experiments"][0]["runs"]}
    assert rows[ids[0]]["tag.phase"] == "b" and rows[ids[0]]["note"] == "the old code's number"
    (run / "tags.json").write_text(good.replace('"b"', '"c"'))  # fixed by hand (and edited): read again
    assert cli(where, "sync").returncode == 0
    rows = {r["run_id"]: r for r in json.loads(cli(where, "status", "--json", "--no-sync", "--columns",
                                                   "run,tag.phase").stdout)["experiments"][0]["runs"]}
    assert rows[ids[0]]["tag.phase"] == "c"


def test_a_rebuild_after_tags_json_was_removed_drops_the_mirrored_tags(project):
    """The tags row is kept only while its file cannot be read: a tags.json removed by hand means no tags."""
    from cemctl.db.models import RunTags
    from cemctl.db.projection import rebuild_run

    where, ids = project
    engine = _engine(where)
    (where / "runs" / ids[0] / "tags.json").unlink()
    rebuild_run(engine, where / "runs", ids[0])
    assert _count(engine, RunTags, ids[0]) == 0
