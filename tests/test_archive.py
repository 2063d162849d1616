"""`cemctl archive` / `cemctl import`: results anyone can re-derive (hashes checked, idempotent, nothing replaced)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import assert_clean_error, cli, finish_run, tiny_grid

GRID = tiny_grid("arch", seeds="[0, 1, 2]", extra='''
[axes]
"model.attention" = ["llama", "cem"]

[[claim]]
id = "A"
statement = "CEM attention is close to Llama attention"
[[claim.part]]
name = "CEM attention - Llama"
arms = [{ "model.attention" = "cem" }, { "model.attention" = "llama" }]
expect = "close"
margin = "2%"
''')


@pytest.fixture
def project(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "arch.toml").write_text(GRID)
    res = cli(src, "plan", str(src / "arch.toml"), "--json")
    assert res.returncode == 0, res.output
    for r in json.loads(res.stdout)["runs"]:
        a = r["axes"]
        finish_run(src / "runs" / r["run_id"], test_loss=1.5 + 0.002 * a["train.seed"]
                   + (0.003 if a["model.attention"] == "cem" else 0.0))
    assert cli(src, "tag", "arch", "phase=final").returncode == 0
    return src


def test_an_archive_imported_into_an_empty_database_reproduces_the_claims(project, tmp_path):
    out = tmp_path / "arch.tar.gz"
    res = cli(project, "archive", "arch", "--scale", "tiny", "-o", str(out))
    assert res.returncode == 0, res.output
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert "manifest.json" in names and not any("checkpoints" in n or n.endswith(".log") for n in names)
    assert cli(project, "claims", "--out", str(project / "claims")).returncode == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    res = cli(fresh, "import", str(out))
    assert res.returncode == 0, res.output
    assert "imported 6 runs (0 already here)" in res.stdout
    assert cli(fresh, "claims", "--scale", "tiny", "--out", str(fresh / "claims")).returncode == 0
    before = pd.read_csv(project / "claims" / "claims.csv")
    after = pd.read_csv(fresh / "claims" / "claims.csv")
    pd.testing.assert_frame_equal(before, after)
    status = json.loads(cli(fresh, "status", "arch", "--json").stdout)["experiments"][0]
    assert status["counts"] == {"done": 6}
    assert cli(fresh, "export", "arch", "-o", str(fresh / "x.csv")).returncode == 0
    runs = pd.read_csv(fresh / "x.csv")
    assert set(runs["tag.phase"]) == {"final"}  # tags travel too
    again = cli(fresh, "import", str(out))  # idempotent
    assert again.returncode == 0 and "imported 0 runs (6 already here)" in again.stdout


def _rewrite(src: Path, dst: Path, change) -> None:  # noqa: ANN001
    with tarfile.open(src) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]
    with tarfile.open(dst, "w:gz") as tar:
        for m, data in members:
            data = change(m.name, data)
            m.size = len(data)
            tar.addfile(m, io.BytesIO(data))


def test_a_damaged_or_foreign_archive_is_refused_and_writes_nothing(project, tmp_path):
    out = tmp_path / "arch.tar.gz"
    assert cli(project, "archive", "arch", "-o", str(out)).returncode == 0
    bad = tmp_path / "bad.tar.gz"
    _rewrite(out, bad, lambda name, data: data.replace(b'"test_loss": 1.5', b'"test_loss": 9.5')
             if name.endswith("result.json") else data)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert_clean_error(cli(fresh, "import", str(bad), subprocess=True), contains="does not match its sha256")
    assert not (fresh / "runs").exists() or not any((fresh / "runs").iterdir())
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tar")
    assert_clean_error(cli(fresh, "import", str(tmp_path / "junk.tar.gz"), subprocess=True), contains="not a cemctl archive")


def test_a_run_finished_here_under_an_archived_id_is_kept_and_an_unfinished_different_one_refused(project, tmp_path):
    """The same id finished on both sides (a shared baseline: its own result) keeps ours and names it; the same id
    here unfinished with other files is refused, nothing written."""
    out = tmp_path / "arch.tar.gz"
    assert cli(project, "archive", "arch", "-o", str(out)).returncode == 0
    other = tmp_path / "other"
    (other / "runs").mkdir(parents=True)
    rid = json.loads(cli(project, "status", "arch", "--json").stdout)["experiments"][0]["runs"][0]["run_id"]
    import shutil

    shutil.copytree(project / "runs" / rid, other / "runs" / rid)
    result = json.loads((other / "runs" / rid / "result.json").read_text())
    result["test_loss"] = 2.5  # the same id (config), trained here too: another result
    (other / "runs" / rid / "result.json").write_text(json.dumps(result))
    both = tmp_path / "both"
    shutil.copytree(other, both)
    res = cli(other, "import", str(out), subprocess=True)
    assert res.returncode == 0 and "kept 1 runs this project trained too" in res.stdout and rid[:8] in res.stdout
    assert json.loads((other / "runs" / rid / "result.json").read_text())["test_loss"] == 2.5  # ours kept
    (both / "runs" / rid / "result.json").unlink()  # here unfinished, its metrics another run's
    with open(both / "runs" / rid / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "train", "step": 99, "train_loss": 1.0}) + "\n")
    assert_clean_error(cli(both, "import", str(out), subprocess=True), contains=f"run {rid} is already in")
    assert sorted(p.name for p in (both / "runs").iterdir()) == [rid]  # nothing else was written


def test_archive_never_replaces_a_file_it_did_not_write(project, tmp_path):
    mine = tmp_path / "mine.tar.gz"
    mine.write_bytes(b"my backup")
    assert_clean_error(cli(project, "archive", "arch", "-o", str(mine), subprocess=True), contains="--force")
    assert mine.read_bytes() == b"my backup"


def test_an_imported_run_shows_the_time_it_trained_not_the_time_since(project, tmp_path):
    """Regression: finished_at was result.json's mtime, which an import (or a copy) makes 'now': runs trained the
    day before showed ~21 h of elapsed time in `cemctl status`."""
    for events in (project / "runs").glob("*/events.jsonl"):  # trained a day ago, for 1 s
        lines = [json.loads(line) for line in events.read_text().splitlines()]
        events.write_text("".join(json.dumps({**e, "time": e["time"] - 86400}) + "\n" for e in lines))
    out = tmp_path / "arch.tar.gz"
    assert cli(project, "archive", "arch", "-o", str(out)).returncode == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert cli(fresh, "import", str(out)).returncode == 0
    runs = json.loads(cli(fresh, "status", "arch", "--json").stdout)["experiments"][0]["runs"]
    assert len(runs) == 6 and all(r["state"] == "done" for r in runs)
    assert all(r["elapsed_s"] == pytest.approx(1.0, abs=0.01) for r in runs), [r["elapsed_s"] for r in runs]



def test_archive_refuses_a_run_whose_config_json_its_reader_refuses(project, tmp_path):
    """The archived config.json is parsed by the one reader of config.json (as import parses it): a config that
    reader refuses is one line naming the run, and no archive is written (before, it was skipped silently and the
    archive written, which every import then refused)."""
    rid = json.loads(cli(project, "status", "arch", "--json").stdout)["experiments"][0]["runs"][0]["run_id"]
    (project / "runs" / rid / "config.json").write_text('{"model": {"attention": 3}}')
    out = tmp_path / "arch.tar.gz"
    line = assert_clean_error(cli(project, "archive", "arch", "-o", str(out), subprocess=True), contains=rid)
    assert "config.json" in line
    assert not out.exists()


def test_the_claims_registrations_and_until_decided_looks_travel_with_the_archive(project, tmp_path):
    """`.claims/` (the claims' pre-registration and the looks of `launch --until-decided`) of the archived experiments
    travels with the archive and is merged on import: the parts read as they did (not "not registered"), a second
    import adds nothing, and a different design here is refused in one line, never replaced."""
    from cemctl.db import open_db
    from cemctl.services.claim_plans import design_path, read_registry, register_claims, write_design

    runs = json.loads(cli(project, "status", "arch", "--json").stdout)["experiments"][0]["runs"]
    engine = open_db(f"sqlite:///{project / 'results.db'}")
    assert register_claims(engine, "arch", project / "runs", scale="tiny", now=1_700_000_000.0) == 1
    write_design(project / "runs", "arch", "tiny", {
        "design": {"experiment": "arch", "scale": "tiny", "alpha": 0.05, "spending": "obrien-fleming",
                   "max_seeds": 6, "round_seeds": 1, "family": [["arch", "A", "CEM attention - Llama"]],
                   "started_at": 1_700_000_001.0},
        "looks": [{"time": 1_700_000_002.0, "runs": sorted(r["run_id"] for r in runs)}]})
    out = tmp_path / "arch.tar.gz"
    assert cli(project, "archive", "arch", "-o", str(out)).returncode == 0
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert "claims/registry.jsonl" in names and "claims/sequential/arch@tiny.json" in names
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    res = cli(fresh, "import", str(out))
    assert res.returncode == 0, res.output
    assert read_registry(fresh / "runs") == read_registry(project / "runs")
    mine = design_path(fresh / "runs", "arch", "tiny")
    assert mine.read_bytes() == design_path(project / "runs", "arch", "tiny").read_bytes()
    for where in (project, fresh):
        assert cli(where, "claims", "--scale", "tiny", "--out", str(where / "claims")).returncode == 0
    before = pd.read_csv(project / "claims" / "claims.csv")
    after = pd.read_csv(fresh / "claims" / "claims.csv")
    assert "not registered" not in set(after["declared"]) and list(after["declared"]) == list(before["declared"])
    assert cli(fresh, "import", str(out)).returncode == 0  # twice: nothing added
    assert len(read_registry(fresh / "runs")) == 1
    edited = mine.read_text().replace('"max_seeds": 6', '"max_seeds": 9')
    mine.write_text(edited)
    line = assert_clean_error(cli(fresh, "import", str(out)), contains="differs from the design here")
    assert "claims/sequential/arch@tiny.json" in line and mine.read_text() == edited


def test_a_later_snapshot_of_an_until_decided_design_takes_the_place_of_an_earlier_one(project, tmp_path):
    """Regression: importing a later archive of a project (the until-decided loop looked again, added a round and a
    rate) over an import of an earlier one was refused ("differs from the design here"), so every round had to be
    imported into an empty folder. A design whose settings are the same and whose looks, rounds and added rates begin
    with the ones here carries them on: it takes their place; an earlier snapshot is skipped; a design that diverges
    is still refused and left as it was."""
    from cemctl.services.claim_plans import design_path, write_design

    runs = sorted(r["run_id"] for r in json.loads(cli(project, "status", "arch", "--json").stdout)["experiments"][0]["runs"])
    design = {"experiment": "arch", "scale": "tiny", "alpha": 0.05, "spending": "obrien-fleming", "max_seeds": 6,
              "round_seeds": 1, "family": [["arch", "A", "CEM attention - Llama"]], "started_at": 1_700_000_001.0}
    first = {"design": design, "looks": [{"time": 1_700_000_002.0, "runs": runs[:3]}], "rounds": [],
             "extensions": [], "stopped": {"reason": "seed cap", "time": 1_700_000_003.0}}
    later = {**first, "looks": [*first["looks"], {"time": 1_700_000_009.0, "runs": runs}],
             "rounds": [{"time": 1_700_000_004.0, "runs": runs[3:]}],
             "extensions": [{"lr": 0.001, "selector": {"model.attention": "cem"}}],
             "stopped": {"reason": "seed cap", "time": 1_700_000_010.0}}
    archives = {}
    for name, doc in (("early", first), ("late", later)):
        write_design(project / "runs", "arch", "tiny", doc)
        archives[name] = tmp_path / f"{name}.tar.gz"
        assert cli(project, "archive", "arch", "-o", str(archives[name])).returncode == 0
    late_bytes = design_path(project / "runs", "arch", "tiny").read_bytes()
    for order in (("early", "late"), ("late", "early")):
        fresh = tmp_path / "-".join(order)
        fresh.mkdir()
        for name in order:
            res = cli(fresh, "import", str(archives[name]))
            assert res.returncode == 0, (order, res.output)
        assert design_path(fresh / "runs", "arch", "tiny").read_bytes() == late_bytes, order  # the later one, always
    fresh = tmp_path / "diverged"
    fresh.mkdir()
    assert cli(fresh, "import", str(archives["early"])).returncode == 0
    mine = design_path(fresh / "runs", "arch", "tiny")
    other = json.loads(mine.read_text())
    other["looks"][0]["runs"] = runs[:2]  # another first look: neither carries the other on
    mine.write_text(json.dumps(other))
    before = mine.read_bytes()
    line = assert_clean_error(cli(fresh, "import", str(archives["late"])), contains="differs from the design here")
    assert "neither continues the other" in line and mine.read_bytes() == before


def test_archive_refuses_a_run_whose_result_is_not_a_result(project, tmp_path):
    """What import would refuse is said at archive time, naming the run and the file (a damaged result.json)."""
    rid = json.loads(cli(project, "status", "arch", "--json").stdout)["experiments"][0]["runs"][0]["run_id"]
    (project / "runs" / rid / "result.json").write_text('{"state": "done", "test_loss": null}')
    out = tmp_path / "arch.tar.gz"
    line = assert_clean_error(cli(project, "archive", "arch", "-o", str(out)), contains=f"run {rid}: result.json")
    assert "import would refuse it" in line and not out.exists()


def test_an_imported_interrupted_run_shows_the_time_it_ran_not_the_time_since(project, tmp_path):
    """Regression: a run interrupted at 93% and imported elsewhere had no heartbeat.json, so its elapsed time ran
    to 'now' and grew with the clock (16m25s, then 17m00s a minute later). It ends at the run's last event."""
    import time

    rid = json.loads(cli(project, "status", "arch", "--json").stdout)["experiments"][0]["runs"][0]["run_id"]
    run = project / "runs" / rid
    (run / "result.json").unlink()
    t0 = time.time() - 900  # it ran 50 s, a quarter of an hour ago
    run_events = [{"time": t0, "state": "running", "reason": "", "attempt": 1},
                  {"time": t0 + 50, "state": "stale", "attempt": 1,
                   "reason": "interrupted (Ctrl-C / SIGTERM to the orchestrator); resumable from its last checkpoint"}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run_events))
    (run / "heartbeat.json").unlink(missing_ok=True)
    out = tmp_path / "arch.tar.gz"
    assert cli(project, "archive", "arch", "-o", str(out)).returncode == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert cli(fresh, "import", str(out)).returncode == 0
    runs = {r["run_id"]: r for r in json.loads(cli(fresh, "status", "arch", "--json").stdout)["experiments"][0]["runs"]}
    assert runs[rid]["state"] == "stale", runs[rid]
    assert runs[rid]["elapsed_s"] == pytest.approx(50.0, abs=1.0), runs[rid]


def test_a_plan_recorded_in_parts_links_each_run_at_its_grid_position_and_archives_importably(tmp_path):
    """Regression (the cpu-scale re-decision, 2026-11-27): rounds of `launch --until-decided` record the runs they
    keep under one plan key, each round's runs at positions 0, 1, ... again, so the key held one position twice;
    `archive` wrote that and `import` refused the archive ("a position of its own in the plan (it appears twice)").
    Planning a part of a grid now links each run where the whole grid has it; and a database that already holds a
    position twice (planned before this) still archives into one that imports, in the same order."""
    from sqlalchemy import select, update

    from cemctl.db import open_db
    from cemctl.db.engine import read_session, write_session
    from cemctl.db.models import ExperimentRun
    from cemctl.services.plan import plan_experiment

    src = tmp_path / "src"
    src.mkdir()
    (src / "arch.toml").write_text(GRID)
    url = f"sqlite:///{src / 'results.db'}"
    whole = plan_experiment(src / "arch.toml", scale="tiny", record=False).plan.runs
    grid_pos = {pr.run_id: i for i, pr in enumerate(whole)}
    for arm in ("cem", "llama"):  # two rounds, each keeping one arm, one plan key
        plan_experiment(src / "arch.toml", scale="tiny", db_url=url, runs_root=src / "runs",
                        only=lambda pr, arm=arm: pr.axes["model.attention"] == arm)
    engine = open_db(url)
    with read_session(engine) as s:
        links = {r.run_id: r.position for r in s.scalars(select(ExperimentRun))}
    assert links == grid_pos  # before: each round's runs at 0, 1, 2
    for rid in grid_pos:
        finish_run(src / "runs" / rid, test_loss=1.5)
    with write_session(engine) as s:  # a database planned before the fix: every run at position 0
        s.execute(update(ExperimentRun).values(position=0))
    out = tmp_path / "arch.tar.gz"
    assert cli(src, "archive", "arch", "-o", str(out)).returncode == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    res = cli(fresh, "import", str(out))
    assert res.returncode == 0, res.output
    assert "imported 6 runs (0 already here)" in res.stdout
    with read_session(open_db(f"sqlite:///{fresh / 'results.db'}")) as s:
        imported = [r.run_id for r in s.scalars(select(ExperimentRun).order_by(ExperimentRun.position))]
    assert imported == sorted(grid_pos)  # one position each, ties broken by run id


def test_an_import_archived_again_names_its_grid_file_not_a_chain_of_archives(project, tmp_path):
    """Regression: an imported experiment's grid path is `ARCHIVE:FILE`; archiving it again recorded that whole
    string as the grid's file name, so a second import named the grid `second.tar.gz:first.tar.gz:arch.toml`."""
    from sqlalchemy import select

    from cemctl.db import open_db
    from cemctl.db.engine import read_session
    from cemctl.db.models import Experiment

    first, second = tmp_path / "first.tar.gz", tmp_path / "second.tar.gz"
    assert cli(project, "archive", "arch", "-o", str(first)).returncode == 0
    middle, last = tmp_path / "middle", tmp_path / "last"
    middle.mkdir()
    last.mkdir()
    assert cli(middle, "import", str(first)).returncode == 0
    assert cli(middle, "archive", "arch", "-o", str(second)).returncode == 0
    res = cli(last, "import", str(second))
    assert res.returncode == 0, res.output
    with read_session(open_db(f"sqlite:///{last / 'results.db'}")) as s:
        assert s.scalars(select(Experiment.grid_path)).one() == "second.tar.gz:arch.toml"


def test_planning_a_changed_grid_over_an_imported_experiment_names_forget_as_the_way_on(project, tmp_path):
    """The grid file has changed since the archive was written (the cpu project's fig2b gained lr profiles): its
    plan is refused as another grid's, and the line now says how to go on with the imported experiment."""
    out = tmp_path / "arch.tar.gz"
    assert cli(project, "archive", "arch", "-o", str(out)).returncode == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert cli(fresh, "import", str(out)).returncode == 0
    changed = fresh / "arch.toml"
    changed.write_text(GRID.replace('seeds = [0, 1, 2]', 'seeds = [0, 1, 2, 3]'))
    line = assert_clean_error(cli(fresh, "plan", str(changed)))
    assert assert_clean_error(cli(fresh, "plan", str(changed), "--dry-run")) == line  # a dry run said it would record
    assert "'arch' is already the experiment of arch.tar.gz:arch.toml" in line
    assert line.endswith("or, to go on with the imported experiment from this file, `cemctl forget arch` first "
                         "(runs that hold results are kept)")
    assert cli(fresh, "forget", "arch").returncode == 0
    res = cli(fresh, "plan", str(changed))
    assert res.returncode == 0 and "8 runs, 2 new" in res.stdout, res.output
