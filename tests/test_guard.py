"""The fast tier's guard (tests/guard.py): a test not marked slow that starts a trainer process, itself or through a
process it started, or compiles, fails; a slow one may."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.guard import Watch, is_trainer
from tests.helpers import ROOT, subprocess_env

# A stand-in for a trainer: its command line is a trainer's (`-m cem_core.train`), it only sleeps (no torch).
INNER = '''
import subprocess, sys
import pytest

TRAINER = [sys.executable, "-c", "import time; time.sleep(0.6)", "-m", "cem_core.train", "RUN_DIR"]

def test_starts_a_trainer():
    subprocess.run(TRAINER, check=True)

def test_starts_a_process_that_starts_a_trainer():
    subprocess.run([sys.executable, "-c", f"import subprocess; subprocess.run({TRAINER!r})"], check=True)

@pytest.mark.slow
def test_slow_starts_a_trainer():
    subprocess.run(TRAINER, check=True)

def test_starts_another_process():
    subprocess.run([sys.executable, "-c", "import time; time.sleep(0.3)"], check=True)
'''


def test_a_fast_test_that_starts_a_trainer_fails_and_a_slow_one_passes(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    out = _inner_pytest(tmp_path)
    assert "FAILED test_inner.py::test_starts_a_trainer " in out, out
    assert "FAILED test_inner.py::test_starts_a_process_that_starts_a_trainer " in out, out
    assert "PASSED test_inner.py::test_slow_starts_a_trainer" in out, out
    assert "PASSED test_inner.py::test_starts_another_process" in out, out
    # each failure's report names what it started once (the short summary repeats it untruncated where CI is set)
    reports = out.split("short test summary info")[0]
    assert reports.count("started a trainer process: ") == 2 and "cem_core.train RUN_DIR" in reports, out


def test_trainer_command_lines():
    assert is_trainer(["python", "-m", "cem_core.train", "/runs/abc"])
    assert is_trainer(["python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                       "cem_core.train", "/runs/abc"])
    assert is_trainer(b"python\x00-m\x00cem_core.train\x00/runs/abc")
    assert not is_trainer(["python", "-m", "cemctl.cli", "launch", "cem_core.train.toml"])
    assert not is_trainer(["python", "-m", "pytest", "tests/test_train.py"])
    assert not is_trainer(["python", "-m", "cem_core.train_extra"])


def test_a_compilation_is_seen():
    """TorchDynamo's frame counter moving during a test is a compilation; an earlier test's is not this one's."""
    counters = {"total": 0}
    watch = Watch(frames=lambda: counters["total"])
    watch.begin("t1")
    assert watch.take(last=True) == ([], False)
    watch.begin("t2")
    counters["total"] = 1  # torch.compile(...)(x) traced one frame
    assert watch.take(last=True) == ([], True)
    watch.begin("t3")
    assert watch.take(last=True) == ([], False)


@pytest.mark.slow
def test_a_fast_test_that_compiles_fails(tmp_path):
    """The real thing: torch.compile (dynamo only, no code generation) in a test not marked slow."""
    (tmp_path / "test_inner.py").write_text(
        "import torch\n\ndef test_compiles():\n    torch.compile(lambda x: x + 1, backend='eager')(torch.ones(2))\n")
    out = _inner_pytest(tmp_path)
    assert "FAILED test_inner.py::test_compiles - " in out and "compiled (torch.compile)" in out, out


def _inner_pytest(where) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.guard", "-p", "no:cacheprovider", "-q",
                           "-rA", "--rootdir", str(where), "test_inner.py"],
                          cwd=where, env=subprocess_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=300)
    return proc.stdout + proc.stderr
