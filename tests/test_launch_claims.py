"""One command at a time on a run: a launch claims each run it starts (`cem_core.runfiles.lock.claim_run`) for as
long as it runs it, so a second launch of the same runs skips them and says so, and `forget` never removes a run a
launch is starting. Here the test process holds the claims, as another launch would."""

from __future__ import annotations

import contextlib
import json

from cem_core.runfiles.lock import claim_run
from tests.helpers import cli, plan_ids, tiny_grid


def test_a_launch_skips_the_runs_another_command_holds_and_starts_no_trainer(tmp_path):
    grid, ids = plan_ids(tmp_path, tiny_grid("held", steps=2, seeds="[0, 1]"), "held")
    with contextlib.ExitStack() as stack:
        assert all(stack.enter_context(claim_run(tmp_path / "runs" / rid)) for rid in ids)
        res = cli(tmp_path, "launch", str(grid), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert {r["run_id"]: r["action"] for r in out["runs"]} == {rid: "skip" for rid in ids}, out
    assert all("has it now" in r["reason"] for r in out["runs"]), out
    for rid in ids:  # nothing was queued or started for them
        assert not (tmp_path / "runs" / rid / "job.json").exists()
        assert not (tmp_path / "runs" / rid / "executor.log").exists()


def test_forget_keeps_a_run_a_launch_is_starting(tmp_path):
    grid, ids = plan_ids(tmp_path, tiny_grid("oops", steps=2, seeds="[0, 1]"), "oops")
    with claim_run(tmp_path / "runs" / ids[0]) as mine:
        assert mine
        res = cli(tmp_path, "forget", "oops")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "runs" / ids[0] / "config.json").exists(), "forget removed a run a launch was starting"
    assert ids[0][:8] in res.stdout and "a launch is starting it now" in res.stdout, res.stdout
    assert not (tmp_path / "runs" / ids[1]).exists()  # the one nobody held: planned, held nothing, removed


def test_a_second_until_decided_loop_on_one_experiment_is_refused_before_it_launches(tmp_path):
    """Two loops on one experiment wrote an empty round into their shared design; the second is now refused in one
    line (here the test holds the first loop's lock) and launches nothing."""
    from cem_core.runfiles.lock import one_at_a_time
    from tests.helpers import assert_clean_error

    grid, ids = plan_ids(tmp_path, tiny_grid("loop", steps=2, seeds="[0, 1]"), "loop")
    with one_at_a_time(tmp_path / "runs" / ".locks" / "loop.until-decided.lock", "held by the test"):
        res = cli(tmp_path, "launch", str(grid), "--until-decided")
    assert_clean_error(res, contains="another --until-decided loop on loop is running")
    assert not any((tmp_path / "runs" / rid / "job.json").exists() for rid in ids)


def test_a_second_import_into_one_project_is_refused_in_one_line(tmp_path):
    """Two imports at once into one project ended in a bare `Directory not empty`; the second is now refused in one
    line (here the test holds the first's lock on the runs folder) and imports nothing."""
    from cem_core.runfiles.lock import one_at_a_time
    from tests.helpers import assert_clean_error, finish_run

    src = tmp_path / "src"
    src.mkdir()
    _, ids = plan_ids(src, tiny_grid("imp", steps=2, seeds="[0]"), "imp")
    finish_run(src / "runs" / ids[0])
    assert cli(src, "archive", "imp", "-o", str(tmp_path / "imp.tar.gz")).returncode == 0
    dst = tmp_path / "dst"
    (dst / "runs").mkdir(parents=True)
    with one_at_a_time(dst / "runs", "held by the test"):
        res = cli(dst, "import", str(tmp_path / "imp.tar.gz"))
    assert_clean_error(res, contains="another cemctl import")
    assert sorted(p.name for p in (dst / "runs").iterdir()) == []
    res = cli(dst, "import", str(tmp_path / "imp.tar.gz"))  # once the first has ended
    assert res.returncode == 0 and "imported 1 runs" in res.stdout, res.stdout + res.stderr
