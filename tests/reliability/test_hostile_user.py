"""The CLI against a hostile-but-fair user: nothing a user owns is destroyed, hidden or leaked.

One section per family of the issue; every case failed on the main of 2026-11-22 (the note of the
issue lists them). Runs are finished by writing the files a trainer leaves (tests.helpers.finish_run)
unless the case is about the trainer itself.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cem_core import runfiles
from tests.helpers import assert_clean_error, cli, finish_run, plan_ids, status_rows, subprocess_env, tiny_grid


# ============================================================== 1. output paths


def test_report_refuses_a_folder_holding_the_users_file(tmp_path, finished):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    res = cli(tmp_path, "report", "exp", "--out", str(out), "--format", "png")
    assert_clean_error(res, contains="notes.txt")
    assert (out / "notes.txt").read_text() == "my notes" and sorted(os.listdir(out)) == ["notes.txt"]


def test_report_refuses_an_existing_file_and_leaves_it_where_it_was(tmp_path, finished):
    out = tmp_path / "thesis.pdf"
    out.write_bytes(b"%PDF my thesis")
    res = cli(tmp_path, "report", "exp", "--out", str(out))
    assert_clean_error(res, contains="existing file")
    assert out.read_bytes() == b"%PDF my thesis"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["exp.toml", "results.db", "runs", "thesis.pdf",
                                                                 *[p.name for p in tmp_path.glob("results.db-*")]])


def test_report_out_dot_is_one_line_and_touches_nothing(tmp_path, finished):
    before = sorted(os.listdir(tmp_path))
    res = cli(tmp_path, "report", "exp", "--out", ".", cwd=tmp_path, subprocess=True)
    assert_clean_error(res, contains="refused")
    assert sorted(os.listdir(tmp_path)) == before


def test_report_refuses_a_symlinked_output_folder(tmp_path, finished):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert_clean_error(cli(tmp_path, "report", "exp", "--out", str(tmp_path / "link")), contains="symlink")
    assert os.listdir(real) == []


def test_report_refuses_a_special_file(tmp_path, finished):
    """A device or a FIFO (a FIFO here: the old code renamed /dev/null aside and made it a folder)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert_clean_error(cli(tmp_path, "report", "exp", "--out", str(fifo)), contains="special file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_an_earlier_report_with_the_users_file_added_is_not_replaced(tmp_path, finished):
    out = tmp_path / "rep"
    assert cli(tmp_path, "report", "exp", "--out", str(out), "--format", "png").returncode == 0
    (out / "figures" / "my_edit.png").write_bytes(b"mine")
    assert_clean_error(cli(tmp_path, "report", "exp", "--out", str(out), "--format", "png"), contains="my_edit.png")
    assert (out / "figures" / "my_edit.png").read_bytes() == b"mine"
    (out / "figures" / "my_edit.png").unlink()
    assert cli(tmp_path, "report", "exp", "--out", str(out), "--format", "png").returncode == 0  # ours again


# ============================================================== 2. re-planning (more in test_replan_keeps_results.py)


def test_a_dry_run_launch_does_not_relink_the_experiment(tmp_path, finished):
    grid, ids = finished
    res = cli(tmp_path, "launch", str(grid), "--dry-run", "--set", "train.lr=0.001", subprocess=True)
    assert res.returncode == 0, res.output
    runs = status_rows(tmp_path)
    assert set(runs) == set(ids) and {r["state"] for r in runs.values()} == {"done"}


# ============================================================== 3. confinement


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "secret.txt"
    path.write_text("TOP-SECRET-LINE\n")
    return path


@pytest.mark.parametrize("logs_entry", ["abs", "dotdot"])
def test_logs_never_prints_files_named_in_job_json(tmp_path, finished, secret, logs_entry):
    _, ids = finished
    run_dir = tmp_path / "runs" / ids[0]
    entry = str(secret) if logs_entry == "abs" else "../../secret.txt"
    (run_dir / "job.json").write_text(json.dumps({"executor": "local", "job_id": "x", "state": "exited", "logs": [entry]}))
    res = cli(tmp_path, "logs", ids[0], subprocess=True)
    assert res.returncode == 0 and "TOP-SECRET" not in res.output


def test_logs_refuses_a_train_log_symlinked_out_of_the_run(tmp_path, finished, secret):
    _, ids = finished
    (tmp_path / "runs" / ids[0] / "train.log").symlink_to(secret)
    res = cli(tmp_path, "logs", ids[0], subprocess=True)
    assert "TOP-SECRET" not in res.output and "not shown" in res.output and "outside the run directory" in res.output


def test_a_run_directory_symlinked_out_of_the_runs_root_is_refused_and_reported(tmp_path, finished, secret):
    _, ids = finished
    outside = tmp_path / "outside" / "0123456789ab"
    outside.mkdir(parents=True)
    (outside / "config.json").write_text(json.dumps({}))
    (outside / "train.log").write_text("TOP-SECRET-LINE\n")
    (tmp_path / "runs" / "0123456789ab").symlink_to(outside)
    sync = cli(tmp_path, "sync", subprocess=True)
    assert sync.returncode == 0 and "refused: a symlink out of the runs folder" in sync.stderr
    assert "0123456789ab" not in status_rows(tmp_path)
    logs = cli(tmp_path, "logs", "0123456789ab", subprocess=True)
    assert "TOP-SECRET" not in logs.output and logs.returncode == 2


def test_status_never_reads_a_metrics_file_symlinked_out_of_the_run(tmp_path, secret):
    _, ids = plan_ids(tmp_path)
    run_dir = tmp_path / "runs" / ids[0]
    runfiles.append_event(run_dir, "running", "attempt 1", attempt=1)
    secret.write_text(json.dumps({"kind": "train", "step": 7, "tokens": 1, "train_loss": 99.0}) + "\n")
    (run_dir / "metrics.jsonl").symlink_to(secret)
    sync = cli(tmp_path, "sync", subprocess=True)
    assert "outside the run directory" in sync.stderr
    assert status_rows(tmp_path)[ids[0]]["train_loss"] is None


# ============================================================== 4. damaged run directories


def test_a_done_run_whose_result_json_was_deleted_is_damaged_not_retrained(tmp_path, finished):
    grid, ids = finished
    status_rows(tmp_path)  # ingest the results
    (tmp_path / "runs" / ids[0] / "result.json").unlink()
    runs = status_rows(tmp_path)
    assert runs[ids[0]]["state"] == "damaged" and "result.json is gone" in runs[ids[0]]["reason"]
    dry = cli(tmp_path, "launch", str(grid), "--dry-run", subprocess=True)
    assert "would launch 0 of 2" in dry.stdout and "damaged" in dry.stdout and "--redo-damaged" in dry.stdout


def test_a_copied_run_directory_is_not_synced_as_a_second_done_run(tmp_path, finished):
    _, ids = finished
    shutil.copytree(tmp_path / "runs" / ids[0], tmp_path / "runs" / "feedfacecafe")
    res = cli(tmp_path, "sync", subprocess=True)
    assert res.returncode == 0
    runs = status_rows(tmp_path)
    assert runs["feedfacecafe"]["state"] == "damaged" and "hashes to run id" in runs["feedfacecafe"]["reason"]
    assert sum(r["state"] == "done" for r in runs.values()) == 2


def test_one_damaged_entry_is_reported_while_the_other_runs_are_synced(tmp_path, finished):
    _, ids = finished
    (tmp_path / "runs" / ids[0] / "result.json").write_text("[1, 2, 3]")
    runs = status_rows(tmp_path)
    assert runs[ids[0]]["state"] == "damaged" and "not a result (a JSON list" in runs[ids[0]]["reason"]
    assert runs[ids[1]]["state"] == "done"


@pytest.fixture(scope="module")
def byte_cache(tmp_path_factory) -> str:
    from cem_core.config import DataConfig
    from cem_core.data import prepare_data

    cache = str(tmp_path_factory.mktemp("hostile-data"))
    prepare_data(DataConfig(tokenizer="byte", cache_dir=cache))
    return cache


def _trainer(run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cem_core.train", str(run_dir), "--device", "cpu"],
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_trainer_refuses_a_result_json_that_is_no_result_and_leaves_it(tmp_path, byte_cache):
    _, ids = plan_ids(tmp_path, tiny_grid("exp", seeds="[0]", cache_dir=byte_cache, steps=2))
    run_dir = tmp_path / "runs" / ids[0]
    (run_dir / "result.json").write_text('["not", "a", "result"]')
    proc = _trainer(run_dir)
    assert proc.returncode == 2 and "result.json" in proc.stderr and "Traceback" not in proc.stderr
    assert (run_dir / "result.json").read_text() == '["not", "a", "result"]'
    assert not (run_dir / "events.jsonl").exists()  # nothing was written, the run was not flipped to failed


@pytest.mark.slow
def test_an_edited_config_is_never_trained_under_the_old_id(tmp_path, byte_cache):
    grid, ids = plan_ids(tmp_path, tiny_grid("exp", seeds="[0]", cache_dir=byte_cache, steps=2))
    run_dir = tmp_path / "runs" / ids[0]
    cfg = json.loads((run_dir / "config.json").read_text())
    cfg["train"]["lr"] = 0.05
    (run_dir / "config.json").write_text(json.dumps(cfg))
    proc = _trainer(run_dir)
    assert proc.returncode == 2 and "hashes to run id" in proc.stderr and not (run_dir / "checkpoints").exists()
    assert status_rows(tmp_path)[ids[0]]["state"] == "damaged"
    assert "would launch 0 of 1" in cli(tmp_path, "launch", str(grid), "--dry-run", subprocess=True).stdout


@pytest.mark.slow
def test_redo_damaged_moves_the_files_aside_restores_the_config_and_trains_again(tmp_path, byte_cache):
    grid, ids = plan_ids(tmp_path, tiny_grid("exp", seeds="[0]", cache_dir=byte_cache, steps=2))
    run_dir = tmp_path / "runs" / ids[0]
    edited = json.loads((run_dir / "config.json").read_text())
    edited["train"]["lr"] = 0.05
    (run_dir / "config.json").write_text(json.dumps(edited))
    status_rows(tmp_path)
    res = cli(tmp_path, "launch", str(grid), "--redo-damaged", "--workers", "1", subprocess=True)
    assert res.returncode == 0, res.output
    assert status_rows(tmp_path)[ids[0]]["state"] == "done"
    (moved,) = [p for p in run_dir.iterdir() if p.name.startswith(".damaged-")]
    assert json.loads((moved / "config.json").read_text())["train"]["lr"] == 0.05  # kept, not deleted
    from cem_core.config import RunConfig, run_id

    assert run_id(RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))) == ids[0]


@pytest.mark.slow
def test_a_run_directory_deleted_under_the_orchestrator_does_not_stop_the_others(tmp_path, byte_cache):
    grid, ids = plan_ids(tmp_path, tiny_grid("exp", seeds="[0, 1, 2]", cache_dir=byte_cache, steps=2))
    shutil.rmtree(tmp_path / "runs" / ids[1])
    res = cli(tmp_path, "launch", str(grid), "--workers", "2", subprocess=True)
    runs = status_rows(tmp_path)
    assert runs[ids[0]]["state"] == "done" and runs[ids[2]]["state"] == "done", res.output
    assert "Traceback" not in res.output


# ============================================================== 5. one bad entry never stops the rest


def test_a_symlink_loop_in_runs_is_reported_and_skipped(tmp_path, finished):
    _, ids = finished
    loop = tmp_path / "runs" / "aaaaaaaaaaaa"
    loop.symlink_to(loop)
    res = cli(tmp_path, "sync")
    assert res.returncode == 0 and "aaaaaaaaaaaa" in res.stderr
    assert {r["state"] for r in status_rows(tmp_path).values()} == {"done"}


@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl", "heartbeat.json", "result.json"])
def test_a_fifo_run_file_never_hangs_sync_and_is_reported(tmp_path, name):
    _, ids = plan_ids(tmp_path)
    victim = tmp_path / "runs" / ids[0]
    runfiles.append_event(victim, "running", "attempt 1", attempt=1)
    (victim / name).unlink(missing_ok=True)
    os.mkfifo(victim / name)
    finish_run(tmp_path / "runs" / ids[1])
    res = cli(tmp_path, "sync", subprocess=True, timeout=60)
    assert res.returncode == 0, res.output
    assert status_rows(tmp_path)[ids[1]]["state"] == "done"
    if name != "heartbeat.json":  # a FIFO heartbeat is just no heartbeat
        assert "not a regular file" in res.stderr or status_rows(tmp_path)[ids[0]]["state"] == "damaged"


@pytest.mark.slow
def test_an_immutable_run_directory_fails_its_run_only(tmp_path, byte_cache):
    grid, ids = plan_ids(tmp_path, tiny_grid("exp", seeds="[0, 1]", cache_dir=byte_cache, steps=2))
    victim = tmp_path / "runs" / ids[0]
    if subprocess.run(["chattr", "+i", str(victim)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this file system")
    try:
        res = cli(tmp_path, "launch", str(grid), "--workers", "1", subprocess=True)
    finally:
        subprocess.run(["chattr", "-i", str(victim)], capture_output=True)
    assert "Traceback" not in res.output
    rows = status_rows(tmp_path)
    assert rows[ids[1]]["state"] == "done"  # the launch's claim of the victim failed too: it stopped every run
    assert f"{ids[0][:8]}  failed" in res.output and "Operation not permitted" in res.output, res.output


# ============================================================== 6. special files


def test_a_grid_file_that_is_a_fifo_never_hangs_plan(tmp_path):
    fifo = tmp_path / "grid.toml"
    os.mkfifo(fifo)
    res = cli(tmp_path, "plan", str(fifo), subprocess=True, timeout=30)
    assert_clean_error(res, contains="not a regular file")


def test_a_grid_file_linked_to_dev_zero_is_refused_without_reading_it(tmp_path):
    (tmp_path / "grid.toml").symlink_to("/dev/zero")
    res = cli(tmp_path, "plan", str(tmp_path / "grid.toml"), subprocess=True, timeout=30)
    assert_clean_error(res, contains="not a regular file")


def test_a_huge_grid_file_is_refused_unread(tmp_path):
    big = tmp_path / "big.toml"
    with open(big, "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of NUL bytes
    assert_clean_error(cli(tmp_path, "plan", str(big)), contains="limit")


@pytest.mark.slow
def test_a_config_json_fifo_makes_the_trainer_refuse_at_once(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.mkfifo(run_dir / "config.json")
    t0 = time.time()
    proc = _trainer(run_dir)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr and time.time() - t0 < 60


# ============================================================== 7. read-only commands create nothing


def test_status_with_a_missing_database_creates_nothing(tmp_path):
    res = cli(None, "status", "--db", str(tmp_path / "missing" / "dir" / "r.db"), "--runs-dir", str(tmp_path / "runs"))
    assert_clean_error(res, contains="no results database")
    assert not (tmp_path / "missing").exists()


def test_status_on_dev_null_leaves_no_journal(tmp_path):
    res = cli(None, "status", "--db", "/dev/null", "--runs-dir", str(tmp_path))
    assert_clean_error(res, contains="not a regular file")
    assert not os.path.exists("/dev/null-journal") and not os.path.exists("/dev/null-wal")


def test_a_read_only_uri_creates_no_file(tmp_path):
    target = tmp_path / "ro.db"
    res = cli(None, "status", "--db", f"sqlite:///file:{target}?mode=ro&uri=true", "--runs-dir", str(tmp_path))
    assert_clean_error(res, contains="no results database")
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_launch_writes_nothing(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g"))
    res = cli(tmp_path, "launch", str(grid), "--dry-run", subprocess=True)
    assert res.returncode == 0 and "would launch 2 of 2" in res.stdout
    assert sorted(os.listdir(tmp_path)) == ["g.toml"]


def test_plan_against_a_read_only_database_writes_no_config(tmp_path, finished):
    grid = tmp_path / "other.toml"
    grid.write_text(tiny_grid("other", seeds="[5]"))
    url = f"sqlite:///file:{tmp_path / 'results.db'}?mode=ro&uri=true"
    res = cli(None, "plan", str(grid), "--db", url, "--runs-dir", str(tmp_path / "runs"))
    assert_clean_error(res, contains="read-only")
    assert len([p for p in (tmp_path / "runs").iterdir()]) == 2


def test_a_read_only_database_can_be_read_by_status_report_and_logs(tmp_path, finished):
    _, ids = finished
    status_rows(tmp_path)  # ingest while writable
    url = f"sqlite:///file:{tmp_path / 'results.db'}?mode=ro&uri=true"
    before = {p.name: p.stat().st_mtime for p in tmp_path.iterdir() if p.name.startswith("results.db")}
    res = cli(None, "status", "--json", "--db", url, "--runs-dir", str(tmp_path / "runs"))
    assert res.returncode == 0 and {r["state"] for e in json.loads(res.stdout)["experiments"] for r in e["runs"]} == {"done"}
    rep = cli(None, "report", "exp", "--db", url, "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "rep"),
              "--format", "png")
    assert rep.returncode == 0, rep.output
    assert cli(None, "logs", ids[0], "--db", url, "--runs-dir", str(tmp_path / "runs")).returncode == 0
    assert {p.name: p.stat().st_mtime for p in tmp_path.iterdir() if p.name.startswith("results.db")} == before


# ============================================================== 8. options and reasons


@pytest.mark.parametrize("args, needle", [
    (("status", "--watch", "--interval-s", "-1"), "--interval-s"),
    (("status", "--watch", "--interval-s", "0"), "--interval-s"),
    (("status", "--limit", "-3"), "--limit"),
    (("launch", "g.toml", "--workers", "0", "--dry-run"), "--workers"),
    (("launch", "g.toml", "--jobs-per-gpu", "0", "--dry-run"), "--jobs-per-gpu"),
    (("plan", "g.toml", "--gpu-tflops", "inf", "--dry-run"), "--gpu-tflops"),
    (("plan", "g.toml", "--gpu-tflops", "nan", "--dry-run"), "--gpu-tflops"),
    (("launch", "g.toml", "--executor", "slurm", "--mem-gb", "nan", "--dry-run"), "mem_gb"),
])
def test_bad_option_values_are_one_line_errors(tmp_path, args, needle):
    (tmp_path / "g.toml").write_text(tiny_grid("g"))
    (tmp_path / "results.db").touch()
    res = cli(None, *args, "--db", str(tmp_path / "results.db"), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert_clean_error(res, contains=needle)


@pytest.mark.slow
def test_a_run_with_a_bad_config_shows_the_real_reason(tmp_path, byte_cache):
    """It used to be started, refused by the trainer, and shown as "resumable from its last checkpoint"."""
    grid, ids = plan_ids(tmp_path, tiny_grid("exp", seeds="[0, 1]", cache_dir=byte_cache, steps=2))
    (tmp_path / "runs" / ids[0] / "config.json").write_text("{ not json")
    res = cli(tmp_path, "launch", str(grid), "--workers", "1", subprocess=True)
    assert "config.json" in res.stdout and "is not valid JSON" in res.stdout  # skipped, with the reason
    row = status_rows(tmp_path)[ids[0]]
    assert row["state"] == "damaged" and "is not valid JSON" in row["reason"] and "resumable" not in row["reason"]
    assert status_rows(tmp_path)[ids[1]]["state"] == "done"
    # Started by hand anyway, the executor records the trainer's own one-line refusal.
    from cemctl.executors.base import Job
    from cemctl.executors.local import LocalExecutor, LocalOptions

    run_dir = tmp_path / "runs" / ids[0]
    (out,) = LocalExecutor(LocalOptions(gpus=[], workers=1, poll_s=0.05)).submit([Job(ids[0], run_dir, env=subprocess_env())])
    assert out.state == "failed" and "config.json" in out.reason and "resumable" not in out.reason


def test_control_characters_in_user_text_are_escaped_in_the_terminal_and_markdown(tmp_path):
    text = tiny_grid("esc", seeds="[0]").replace('figure = "curves"', 'figure = "curves"\ndescription = "evil\\u001b[2J\\u202eend"')
    grid, ids = plan_ids(tmp_path, text, "esc")
    finish_run(tmp_path / "runs" / ids[0], error=None)
    rep = cli(tmp_path, "report", "esc", "--out", str(tmp_path / "rep"), "--format", "png")
    assert rep.returncode == 0, rep.output
    md = (tmp_path / "rep" / "index.md").read_text()
    assert "\x1b" not in md and "\u202e" not in md and "evil\\x1b[2J\\u202eend" in md
    bad = tmp_path / "bad.toml"
    bad.write_text('[base]\n"model.attention" = "cem\\u001b[31m"\n')
    res = cli(tmp_path, "plan", str(bad))
    assert res.returncode == 2 and "\x1b" not in res.stderr and "\\x1b" in res.stderr


def test_status_escapes_a_reason_holding_terminal_controls(tmp_path):
    _, ids = plan_ids(tmp_path)
    runfiles.append_event(tmp_path / "runs" / ids[0], "failed", "boom \x1b]0;owned\x07 \x1b[2J")
    res = cli(tmp_path, "status")
    assert res.returncode == 0 and "\x1b]0;" not in res.stdout and "\x07" not in res.stdout


# ============================================================== 9. nothing escapes as a traceback


@pytest.mark.parametrize("args", [("nosuchcommand",), ("status", "--limit", "many"), ("plan",), ("launch", "--bogus")])
def test_usage_errors_are_one_line(tmp_path, args):
    res = cli(None, *args, subprocess=True, cwd=tmp_path)
    assert_clean_error(res)


def test_random_bytes_and_deep_toml_are_one_line_exit_2(tmp_path):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from cemctl.services.plan import plan_experiment
    from cem_core.errors import CemError

    seen = {"n": 0}

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.one_of(st.binary(min_size=0, max_size=400),
                          st.integers(min_value=1, max_value=3000).map(lambda d: b"a = " + b"[" * d + b"]" * d),
                          st.integers(min_value=1, max_value=2000).map(lambda d: b"a = " + b"{b = " * d + b"1" + b"}" * d)))
    def check(data: bytes) -> None:
        seen["n"] += 1
        path = tmp_path / "fuzz.toml"
        path.write_bytes(data)
        try:
            plan_experiment(path, record=False)
        except CemError as e:
            assert "\n" not in str(e) and str(path) in str(e)
        # (a random file can be a valid grid: then it plans, which is fine)

    check()
    assert seen["n"] >= 30
    path = tmp_path / "fuzz.toml"
    path.write_bytes(b"a = " + b"[" * 5000 + b"]" * 5000)
    assert_clean_error(cli(tmp_path, "plan", str(path), subprocess=True), contains=str(path))
