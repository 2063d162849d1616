"""Family 5 of issue 24: no command reads outside a run's folder or hangs on a special file, and every
terminal output escapes control sequences.

`eval` (config, result, checkpoints, evals.json, its lock), the trainer's resume, `plan`, `logs` (the
SLURM folder), `report`'s curves: every run-file read goes through the confined readers of
`cem_core.runfiles`. `logs`, `cancel`, `sync`, `status` escape what they print. Each case failed on the
main of 526f40c.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from cem_core import runfiles
from tests.helpers import assert_clean_error, cli, finish_run, plan_ids, status_rows

SECRET = "TOP-SECRET-5b1e"


@pytest.fixture
def project(trained_project, copy_project):
    """A copy of a project with one finished CEM run (final checkpoint kept); returns (folder, run folder)."""
    import sqlite3

    src, run_id = trained_project
    b = copy_project(src)
    con = sqlite3.connect(b / "results.db")  # the copy's database names the copy's folders (also as older cemctl did)
    con.execute("UPDATE runs SET run_dir = ? || '/' || id", (str(b / "runs"),))
    con.commit()
    con.close()
    return b, b / "runs" / run_id


def _eval(project_dir, run_dir, timeout: float | None = None):  # noqa: ANN202
    """`cemctl eval RUN --steps 1` in this process; with a `timeout`, as a process that must end within it (a test
    that the command never hangs)."""
    return cli(None, "eval", run_dir.name, "--steps", "1", cwd=project_dir, subprocess=timeout is not None,
               timeout=timeout or 300)


def _move_out(path, outside):  # noqa: ANN001, ANN202
    """Move `path` out of the run and leave a symlink to it where it was."""
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(path), str(outside))
    os.symlink(outside, path)


# ============================================================== eval


def test_eval_refuses_a_final_checkpoint_linked_out_of_the_run(project, tmp_path):
    b, run_dir = project
    (ckpt,) = (run_dir / "checkpoints").glob("step_*.pt")
    _move_out(ckpt, tmp_path / "elsewhere" / ckpt.name)
    assert_clean_error(_eval(b, run_dir), contains="outside the run directory")
    assert not (run_dir / "evals.json").exists()


def test_eval_refuses_a_checkpoints_folder_linked_out_of_the_run(project, tmp_path):
    b, run_dir = project
    _move_out(run_dir / "checkpoints", tmp_path / "elsewhere" / "checkpoints")
    assert_clean_error(_eval(b, run_dir), contains="outside the run directory")


def test_eval_refuses_a_config_linked_out_of_the_run(project, tmp_path):
    b, run_dir = project
    _move_out(run_dir / "config.json", tmp_path / "elsewhere" / "config.json")
    assert_clean_error(_eval(b, run_dir), contains="outside the run directory")


def test_eval_refuses_a_result_linked_out_of_the_run(project, tmp_path):
    b, run_dir = project
    _move_out(run_dir / "result.json", tmp_path / "elsewhere" / "result.json")
    res = _eval(b, run_dir)
    assert res.returncode == 2 and "Traceback" not in res.output and not (run_dir / "evals.json").exists(), res.output


def test_eval_never_merges_an_evals_file_linked_out_of_the_run(project, tmp_path):
    b, run_dir = project
    outside = tmp_path / "elsewhere" / "evals.json"
    outside.parent.mkdir()
    outside.write_text(json.dumps({"run_id": run_dir.name, "evals": [
        {"attn_steps": 7, "mlp_steps": 7, "eval_steps": 7, "test_loss": 0.123, "note": SECRET}]}))
    os.symlink(outside, run_dir / "evals.json")
    res = _eval(b, run_dir)
    # refused in one line (the link is the user's: never replaced, never followed into the report)
    assert res.returncode == 2 and SECRET not in res.output and "Traceback" not in res.output, res.output
    assert "leads outside the run directory" in res.output and "move it aside" in res.output, res.output
    assert (run_dir / "evals.json").is_symlink() and SECRET in outside.read_text()  # the user's files untouched
    assert json.loads(outside.read_text())["evals"][0]["eval_steps"] == 7


def test_eval_never_hangs_on_a_result_fifo(project):
    b, run_dir = project
    (run_dir / "result.json").unlink()
    os.mkfifo(run_dir / "result.json")
    assert _eval(b, run_dir, timeout=60).returncode == 2


def test_eval_never_hangs_on_a_lock_fifo(project):
    b, run_dir = project
    os.mkfifo(run_dir / ".evals.lock")
    res = _eval(b, run_dir, timeout=60)
    assert res.returncode == 2 and "not a regular file" in res.output and "Traceback" not in res.output, res.output


def test_eval_never_writes_through_a_lock_linked_out_of_the_run(project, tmp_path):
    b, run_dir = project
    target = tmp_path / "elsewhere" / "victim.txt"
    target.parent.mkdir()
    os.symlink(target, run_dir / ".evals.lock")
    _eval(b, run_dir)
    assert not target.exists()


# ============================================================== the trainer's resume


def test_the_trainer_never_resumes_from_a_checkpoint_linked_out_of_the_run(project, tmp_path):
    _, run_dir = project
    (run_dir / "result.json").unlink()
    (ckpt,) = (run_dir / "checkpoints").glob("step_*.pt")
    _move_out(ckpt, tmp_path / "elsewhere" / ckpt.name)
    before = (run_dir / "train.log").read_text()
    from cem_core.train import run_training  # what `python -m cem_core.train RUN_DIR` runs, in this process

    assert run_training(run_dir, device="cpu")["state"] == "done"
    log = (run_dir / "train.log").read_text()[len(before):]
    assert "resumed from checkpoint" not in log and "outside the run directory" in log


# ============================================================== plan, logs, report


def test_plan_never_writes_into_a_run_folder_linked_out_of_the_runs_root(tmp_path):
    grid, ids = plan_ids(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(tmp_path / "runs" / ids[0])
    os.symlink(outside, tmp_path / "runs" / ids[0])
    res = cli(tmp_path, "plan", str(grid))
    assert_clean_error(res, contains="symlink out of the runs folder")
    assert os.listdir(outside) == []


def test_logs_never_reads_a_slurm_folder_linked_out_of_the_runs_root(tmp_path, finished):
    _, ids = finished
    outside = tmp_path / "outside" / "4242"
    outside.mkdir(parents=True)
    (outside / "4242_0_log.out").write_text(SECRET + "\n")
    os.symlink(tmp_path / "outside", tmp_path / "runs" / ".slurm")
    runfiles.atomic_write_json(tmp_path / "runs" / ids[0] / "job.json",
                               {"executor": "slurm", "job_id": "4242", "state": "exited", "logs": []})
    res = cli(tmp_path, "logs", ids[0], subprocess=True)
    assert SECRET not in res.output and "outside the runs folder" in res.output, res.output


def test_logs_escape_terminal_control_sequences(tmp_path, finished):
    _, ids = finished
    (tmp_path / "runs" / ids[0] / "train.log").write_text("step 1\x1b]0;owned\x07 \x1b[2J done\tok\n")
    res = cli(tmp_path, "logs", ids[0], subprocess=True)
    assert res.returncode == 0 and "\x1b" not in res.stdout and "\x07" not in res.stdout, res.output
    assert "\\x1b]0;owned\\x07" in res.stdout and "done\tok" in res.stdout


def test_report_curves_never_read_a_metrics_file_linked_out_of_the_run(tmp_path):
    """Curves come from the run folders when the database has none: a metrics.jsonl linked out is not read."""
    from cemctl.report.frame import curves_from_run_dirs

    _, ids = plan_ids(tmp_path)
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"kind": "train", "step": 1, "tokens": 1, "train_loss": 99.25}) + "\n")
    os.symlink(secret, tmp_path / "runs" / ids[0] / "metrics.jsonl")
    curves = curves_from_run_dirs(tmp_path / "runs", ids)
    assert 99.25 not in set(curves["train_loss"])


def test_guard_report_never_hangs_on_a_metrics_fifo(tmp_path):
    """(A guard: it held on 526f40c.) A FIFO where metrics.jsonl should be is skipped, not waited on."""
    grid, ids = plan_ids(tmp_path)
    for rid in ids:
        finish_run(tmp_path / "runs" / rid)
        (tmp_path / "runs" / rid / "metrics.jsonl").unlink()
    assert cli(tmp_path, "sync").returncode == 0
    os.mkfifo(tmp_path / "runs" / ids[0] / "metrics.jsonl")
    res = cli(tmp_path, "report", "exp", "--out", str(tmp_path / "rep"), "--format", "png", "--no-sync",
              subprocess=True, timeout=60)
    assert res.returncode == 0, res.output


# ============================================================== terminal output


def test_cancel_escapes_a_host_name_from_job_json(tmp_path):
    _, ids = plan_ids(tmp_path)
    runfiles.atomic_write_json(tmp_path / "runs" / ids[0] / "job.json", {
        "executor": "local", "job_id": "x", "state": "running", "host": "evil\x1b]0;owned\x07host", "logs": []})
    res = cli(tmp_path, "cancel", ids[0], subprocess=True)
    assert res.returncode == 0 and "\x1b" not in res.output and "\x07" not in res.output, res.output


def test_sync_escapes_a_folder_name_it_skips(tmp_path, finished):
    bad = tmp_path / "runs" / "evil\x1b]0;owned\x07"
    bad.mkdir()
    (bad / "config.json").write_text("{ not json")
    res = cli(tmp_path, "sync", subprocess=True)
    assert "\x1b" not in res.output and "\x07" not in res.output and "evil\\x1b" in res.stderr, res.output


def test_status_escapes_a_job_id_and_never_reads_markup(tmp_path):
    _, ids = plan_ids(tmp_path)
    runfiles.append_event(tmp_path / "runs" / ids[0], "failed", "[link=https://evil.example]click here[/link]",
                          executor="local", job_id="job\x1b]0;owned\x07")
    res = cli(tmp_path, "status", subprocess=True)
    assert res.returncode == 0 and "\x1b" not in res.stdout, res.output
    assert "[link=https://evil.example]" in res.stdout
    assert status_rows(tmp_path)[ids[0]]["state"] == "failed"


def test_a_failed_jobs_reason_never_reads_events_linked_out_of_the_run(tmp_path):
    """exit_state compares a failure with the previous attempt's (events.jsonl): a link out of the run is not read."""
    from cemctl.executors.base import exit_state

    run_dir = tmp_path / "runs" / "abc"
    run_dir.mkdir(parents=True)
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text(json.dumps({"state": "failed", "attempt": 1, "reason": "exit code 7 before finishing"}) + "\n")
    os.symlink(outside, run_dir / "events.jsonl")
    state, reason, _ = exit_state(run_dir, 7, "mine")
    assert state == "failed" and "the same as attempt" not in reason, reason
    (run_dir / "events.jsonl").unlink()
    (run_dir / "events.jsonl").write_text(outside.read_text())  # the same record inside the run: compared
    assert "the same as attempt 1" in exit_state(run_dir, 7, "mine")[1]
