"""Code snapshots: jobs run the code of launch time, even if the tree changes while they queue."""

from __future__ import annotations

import sys

from cemctl.executors.base import Job, code_env, trainer_argv
from cemctl.executors.local import LocalExecutor, LocalOptions
from cemctl.services.launch.snapshot import code_hash, take_snapshot


def test_snapshot_is_content_hashed_shared_and_isolates_jobs_from_edits(tmp_path, monkeypatch):
    src = tmp_path / "src"
    (src / "snappkg" / "__pycache__").mkdir(parents=True)
    (src / "snappkg" / "__init__.py").write_text("VALUE = 1\n")
    (src / "snappkg" / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    monkeypatch.syspath_prepend(str(src))
    runs = tmp_path / "runs"
    first = take_snapshot(runs, packages=("snappkg",))
    assert take_snapshot(runs, packages=("snappkg",)) == first  # same code, same snapshot
    assert (first.path / "snappkg" / "__init__.py").read_text() == "VALUE = 1\n"
    assert not (first.path / "snappkg" / "__pycache__").exists()
    # The tree changes after launch: a new hash, the old snapshot untouched.
    (src / "snappkg" / "__init__.py").write_text("VALUE = 2\n")
    second = take_snapshot(runs, packages=("snappkg",))
    assert second.hash != first.hash and code_hash(("snappkg",)) == second.hash
    assert (first.path / "snappkg" / "__init__.py").read_text() == "VALUE = 1\n"
    # A job started with the first snapshot imports it, even from a cwd holding the edited package.
    monkeypatch.chdir(src)
    out = tmp_path / "job"
    out.mkdir()
    code = f"import snappkg; open({str(out / 'value.txt')!r}, 'w').write(str(snappkg.VALUE))"
    job = Job(run_id="job", run_dir=out, argv=[sys.executable, "-c", code], env=code_env(first.path, first.hash))
    LocalExecutor(LocalOptions(gpus=[], poll_s=0.05)).submit([job])
    assert (out / "value.txt").read_text() == "1"


def test_trainer_command_single_and_multi_gpu(tmp_path):
    single = trainer_argv(tmp_path, 1, python="py")
    assert single == ["py", "-m", "cem_core.train", str(tmp_path.resolve())]
    multi = trainer_argv(tmp_path, 4, python="py")
    assert multi[:3] == ["py", "-m", "torch.distributed.run"] and "--nproc_per_node=4" in multi
    assert multi[-3:] == ["-m", "cem_core.train", str(tmp_path.resolve())]
