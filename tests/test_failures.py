"""Failures that say why (issue 37, item 1): a failed run's recorded reason is the real error (type, message, the
user's file:line), a failure that will repeat says to fix it and `cemctl launch EXPERIMENT --retry-failed` (never
"launch again"), and `launch` exits non-zero when a run it launched failed, `--json` included."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from cem_core.errors import ConfigError, describe_exception
from cem_core.runfiles.failure import EXPERIMENT_ENV, failure_line
from cemctl.executors.base import Job
from cemctl.executors.local import LocalExecutor, LocalOptions
from tests.helpers import ROOT, cli, read_jsonl


def _plugin_project(tmp_path: Path) -> Path:
    """The example plugin, one seed, six steps."""
    where = tmp_path / "my-study"
    shutil.copytree(ROOT / "examples" / "plugin", where, ignore=shutil.ignore_patterns("__pycache__"))
    grid = where / "scalar.toml"
    grid.write_text(grid.read_text().replace("seeds = [0, 1]", "seeds = [0]")
                    .replace('"train.max_steps" = 60', '"train.max_steps" = 6'))
    return where


def _break(where: Path) -> None:
    """A syntax error on line 21 of the module built with the model."""
    layers = where / "scalar_precond" / "layers.py"
    lines = layers.read_text().splitlines()
    lines.insert(20, "def broken(:")
    layers.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_a_plugin_broken_after_plan_fails_launch_with_the_real_error_in_status(tmp_path):
    where = _plugin_project(tmp_path)
    assert cli(where, "plan", "scalar.toml", subprocess=True, cwd=where).returncode == 0
    _break(where)  # edited after plan: `launch EXPERIMENT` starts the jobs, each refuses with the real error
    res = cli(where, "launch", "scalar_precond", "--json", "--workers", "2", subprocess=True, cwd=where)
    assert res.returncode == 1, res.output  # scripts and pipelines see the failure (main: exit 0 with --json)
    doc = json.loads(res.stdout)  # stdout stays one JSON document
    assert [r["state"] for r in doc["runs"]] == ["failed", "failed"]
    real = "syntax error in scalar_precond/layers.py, line 21"
    advice = "fix it, then `cemctl launch scalar_precond --retry-failed`"
    summary = [ln for ln in res.stderr.splitlines() if ln.strip()][-1]
    assert summary.startswith("2 of 2 runs failed; the first, ") and real in summary and advice in summary
    status = cli(where, "status", "scalar_precond", subprocess=True, cwd=where, env={"COLUMNS": "400"})
    assert status.returncode == 0, status.output
    rows = [ln for ln in status.stdout.splitlines() if " failed " in ln]
    assert len(rows) == 2 and all(real in ln and advice in ln for ln in rows), status.stdout
    assert "launch again" not in status.stdout
    # the terminal run without --json exits 1 as well, with the same summary line
    res = cli(where, "launch", "scalar_precond", "--retry-failed", "--workers", "2", subprocess=True, cwd=where)
    assert res.returncode == 1 and real in res.stderr and advice in res.stderr, res.output


def test_the_failure_line_names_the_users_file_and_advises_only_for_a_failure_that_repeats(tmp_path):
    source = tmp_path / "my_layer.py"
    source.write_text("x = 1\n\ndef f(:\n")
    try:
        compile(source.read_text(), str(source), "exec")
    except SyntaxError as e:
        sys.path.insert(0, str(tmp_path))
        try:
            line = failure_line(e, experiment="mine")
        finally:
            sys.path.remove(str(tmp_path))
    assert line == "SyntaxError: invalid syntax (my_layer.py:3); fix it, then `cemctl launch mine --retry-failed`"
    # a crash is said as it is the first time; the same crash again is a failure that will repeat
    first = failure_line(RuntimeError("CUDA error: an illegal memory access"), experiment="mine")
    assert first == "RuntimeError: CUDA error: an illegal memory access"
    again = failure_line(RuntimeError("CUDA error: an illegal memory access"), f"Traceback ...\n{first}", 1, "mine")
    assert again == (f"{first}; the same error as attempt 1: fix it, then `cemctl launch mine --retry-failed`")
    assert "fix it, then" in failure_line(ConfigError("model.size", "unknown size"), experiment="mine")
    assert describe_exception(ValueError("a\nb")) == "ValueError: a b"  # one line


def _fake_jobs(tmp_path: Path, code: int, words: str = "") -> list[Job]:
    script = tmp_path / "fake.py"
    script.write_text(f"import sys\nprint({words!r}, file=sys.stderr)\nsys.exit({code})\n")
    (tmp_path / "run0").mkdir()
    return [Job(run_id="run0", run_dir=tmp_path / "run0", argv=[sys.executable, str(script)],
                env={EXPERIMENT_ENV: "mine"})]


def test_the_same_death_on_two_attempts_says_to_fix_it_not_to_launch_again(tmp_path):
    jobs = _fake_jobs(tmp_path, 5)
    first = LocalExecutor(LocalOptions(gpus=[], workers=1, poll_s=0.05)).submit(jobs)[0].reason
    assert first == "exit code 5 before finishing; no checkpoint yet: `cemctl launch mine` starts it again"
    second = LocalExecutor(LocalOptions(gpus=[], workers=1, poll_s=0.05)).submit(jobs)[0].reason
    assert second == ("exit code 5 before finishing; the same as attempt 1: fix it, then "
                      "`cemctl launch mine --retry-failed`")
    assert read_jsonl(tmp_path / "run0" / "events.jsonl")[-1]["reason"] == second


def test_a_refused_config_and_the_trainers_last_words_are_the_reason(tmp_path):
    jobs = _fake_jobs(tmp_path, 2, "error: config.json: model.size: unknown size 'huge'")
    reason = LocalExecutor(LocalOptions(gpus=[], workers=1, poll_s=0.05)).submit(jobs)[0].reason
    assert reason == ("refused to start: config.json: model.size: unknown size 'huge'; fix it, then "
                      "`cemctl launch mine --retry-failed`")
    shutil.rmtree(tmp_path / "run0")
    jobs = _fake_jobs(tmp_path, 1, "error: OSError: [Errno 28] No space left on device")
    reason = LocalExecutor(LocalOptions(gpus=[], workers=1, poll_s=0.05)).submit(jobs)[0].reason
    assert reason == "OSError: [Errno 28] No space left on device"
