"""What a run trained on (environment.json) and its system samples (metrics kind "system"), from the trainer through
the database to the TensorBoard export; older runs without them still sync, report and export.

Real tiny CPU runs (nano model, byte tokenizer) trained in this process with `train.system_every_s` = 0.01 s, so
samples come without a test ever sleeping; the sampler itself is tested with a clock the test moves."""

from __future__ import annotations

import importlib.abc
import json
import os
import sqlite3
import sys
import time

import pytest

from cem_core.errors import ConfigError
from cem_core.runfiles import read_jsonl
from cem_core.runfiles.environment import SYSTEM_METRICS, check_environment, read_environment, write_environment
from tests.helpers import cli, finish_run, plan_ids, tiny_grid

GRID_EXTRA = '"train.system_every_s" = 0.01\n[axes]\n"train.lr" = [0.001, 0.004]\n'


class _ImportRecorder(importlib.abc.MetaPathFinder):
    """Records every attempt to import one of `names` (whether or not it is installed)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names, self.seen = names, []

    def find_spec(self, fullname, path=None, target=None):  # noqa: ARG002 - the finder protocol
        if fullname.split(".")[0] in self.names:
            self.seen.append(fullname)
        return None


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two tiny runs (two learning rates, seed 0) trained here, the first one failing at step 4 and resumed."""
    from cem_core.config import DataConfig
    from cem_core.data import prepare_data
    from cem_core.train import run_training

    where = tmp_path_factory.mktemp("env")
    _, ids = plan_ids(where, tiny_grid("envx", steps=6, ckpt=2, seeds="[0]", extra=GRID_EXTRA), "envx")
    prepare_data(DataConfig(tokenizer="byte"))
    recorder = _ImportRecorder(("pynvml", "nvidia_smi", "pycuda"))
    sys.meta_path.insert(0, recorder)
    old = {k: os.environ.get(k) for k in ("CEMCTL_NUM_THREADS", "CEMCTL_TEST_CRASH_AT_STEP")}
    os.environ["CEMCTL_NUM_THREADS"] = "1"
    try:
        os.environ["CEMCTL_TEST_CRASH_AT_STEP"] = "4"
        first = run_training(where / "runs" / ids[0], device="cpu")
        assert first["state"] == "failed"
        del os.environ["CEMCTL_TEST_CRASH_AT_STEP"]
        results = [run_training(where / "runs" / rid, device="cpu") for rid in ids]
    finally:
        sys.meta_path.remove(recorder)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert [r["state"] for r in results] == ["done", "done"]
    assert cli(where, "sync").returncode == 0
    return {"where": where, "ids": ids, "results": results, "gpu_imports": recorder.seen}


def test_a_trained_run_records_its_environment(trained):
    rid = trained["ids"][1]
    env = read_environment(trained["where"] / "runs" / rid)
    assert env["attempt"] == 1 and env["earlier_attempts"] == [] and env["device"] == "cpu" and env["world_size"] == 1
    import platform
    import socket

    import torch

    assert env["hostname"] == socket.gethostname().split(".")[0]
    assert env["python_version"] == platform.python_version() and env["torch_version"] == torch.__version__
    assert env["cpu_count"] == os.cpu_count() and 1 <= env["cpus_usable"] <= os.cpu_count()
    assert env["torch_threads"] == 1  # CEMCTL_NUM_THREADS, as the run trained
    from importlib.metadata import version

    assert env["cemctl_version"] == version("cemctl")
    assert env["code_fingerprint"] == trained["results"][1]["code_fingerprint"]  # the code that trained the result
    assert env["code_snapshot"] is None  # trained from the tree, not a launch's snapshot
    assert env["system_every_s"] == 0.01
    # at the end of the attempt: the peaks and the end time
    assert env["peak_host_rss_bytes"] > 50 << 20  # torch alone holds more
    assert env["started_at"] <= env["ended_at"] <= time.time()
    # a CPU run has no GPU fields, and nothing GPU-specific was even looked for
    assert not any(k.startswith(("gpu_", "peak_gpu")) or k in ("driver_version", "cuda_version") for k in env)
    assert trained["gpu_imports"] == []


def test_a_resumed_run_keeps_the_environment_of_its_earlier_attempt(trained):
    env = read_environment(trained["where"] / "runs" / trained["ids"][0])
    assert env["attempt"] == 2
    [earlier] = env["earlier_attempts"]
    assert earlier["attempt"] == 1 and earlier["ended_at"] <= env["started_at"] and earlier["peak_host_rss_bytes"] > 0


def test_system_samples_are_metrics_lines_ingested_into_the_database(trained):
    from cemctl.db import open_db
    from cemctl.db.environment import SYSTEM_COLUMNS, system_frame

    rid = trained["ids"][1]
    lines = [m for m in read_jsonl(trained["where"] / "runs" / rid / "metrics.jsonl") if m["kind"] == "system"]
    assert len(lines) >= 2  # 0.01 s apart over a run that takes far longer
    assert [m["sample"] for m in lines] == list(range(len(lines)))
    assert len({m["series"] for m in lines}) == len(lines)  # several samples at one step are kept apart
    assert all(m["attempt"] == 1 and 0 <= m["step"] <= 6 for m in lines)
    assert [m["step"] for m in lines] == sorted(m["step"] for m in lines)
    assert all(m["cpu_process_pct"] >= 0 and m["rss_bytes"] > 50 << 20 for m in lines)
    assert not any(k.startswith("gpu_") for m in lines for k in m)  # no GPU here
    frame = system_frame(open_db(f"sqlite:///{trained['where'] / 'results.db'}"), trained["ids"])
    assert list(frame.columns) == list(SYSTEM_COLUMNS)
    mine = frame[frame["run_id"] == rid]
    assert len(mine) == len(lines)
    assert list(mine["rss_bytes"]) == [float(m["rss_bytes"]) for m in lines]
    assert mine["gpu_util_pct"].isna().all()


def test_the_resumed_run_keeps_only_the_samples_of_the_steps_it_kept(trained):
    lines = [m for m in read_jsonl(trained["where"] / "runs" / trained["ids"][0] / "metrics.jsonl")
             if m["kind"] == "system"]
    first, second = [m for m in lines if m["attempt"] == 1], [m for m in lines if m["attempt"] == 2]
    assert second and all(m["step"] <= 2 for m in first)  # attempt 1 crashed at step 4; resumed from step 2
    assert len({m["series"] for m in lines}) == len(lines)


def test_the_environment_is_in_the_database(trained):
    from cemctl.db import open_db
    from cemctl.db.environment import environment_of

    engine = open_db(f"sqlite:///{trained['where'] / 'results.db'}")
    envs = environment_of(engine, [*trained["ids"], "000000000000"])
    assert set(envs) == set(trained["ids"])  # an unknown run: absent
    for rid in trained["ids"]:
        assert envs[rid] == read_environment(trained["where"] / "runs" / rid)
    con = sqlite3.connect(trained["where"] / "results.db")
    row = con.execute("SELECT attempt, hostname, torch_version, device, peak_host_rss_bytes FROM run_environment "
                      "WHERE run_id = ?", (trained["ids"][0],)).fetchone()
    assert row[0] == 2 and row[3] == "cpu" and row[4] == envs[trained["ids"][0]]["peak_host_rss_bytes"]


def test_tensorboard_reads_back_every_scalar_and_the_hparams_the_export_counts(trained, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    out = tmp_path / "tb"
    res = cli(trained["where"], "export", "envx", "--format", "tensorboard", "-o", str(out))
    assert res.returncode == 0, res.output
    scalars_said = int(res.stdout.split(" scalars")[0].rsplit(" ", 1)[-1])
    assert "hparams of 2 runs" in res.stdout
    folders = sorted(str(p.parent.relative_to(out)) for p in out.rglob("events.out.tfevents.*"))
    assert folders == [".", "lr=0.001/seed=0", "lr=0.004/seed=0"]  # by arm label and seed; the experiment on top
    read, hparams = 0, {}
    for folder in folders[1:]:
        acc = EventAccumulator(str(out / folder), size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        tags = acc.Tags()["scalars"]
        assert {"train/loss", "val/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "result/test_loss",
                *(f"system/{m}" for m in ("cpu_process_pct", "cpu_machine_pct", "rss_bytes"))} <= set(tags)
        for tag in tags:
            steps = [e.step for e in acc.Scalars(tag)]
            assert steps == sorted(steps), tag  # steps in order
            read += len(steps)
        assert [e.step for e in acc.Scalars("train/loss")] == list(range(1, 7))
        content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
        hparams[folder] = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
    assert read == scalars_said
    assert hparams["lr=0.001/seed=0"]["train.lr"] == 0.001 and hparams["lr=0.004/seed=0"]["train.lr"] == 0.004
    assert hparams["lr=0.001/seed=0"]["model.size"] == "nano" and hparams["lr=0.001/seed=0"]["train.seed"] == 0
    top = EventAccumulator(str(out), size_guidance={"tensors": 0})
    top.Reload()
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        top.PluginTagToContent("hparams")["_hparams_/experiment"]).experiment
    names = [h.name for h in experiment.hparam_infos]
    assert names[0] == "train.lr" and "model.size" in names  # what varies first
    assert {m.name.tag for m in experiment.metric_infos} >= {"train/loss", "result/test_loss", "system/rss_bytes"}


def test_an_old_run_without_them_syncs_reports_and_exports(tmp_path):
    where = tmp_path
    _, ids = plan_ids(where, tiny_grid("old", seeds="[0, 1]"), "old")
    for rid in ids:  # what a trainer of an earlier release left: no environment.json, no system lines
        finish_run(where / "runs" / rid, steps=6)
    res = cli(where, "sync")
    assert res.returncode == 0 and "2 done" in res.stdout and "left out" not in res.stdout, res.output
    from cemctl.db import open_db
    from cemctl.db.environment import environment_of, system_frame

    engine = open_db(f"sqlite:///{where / 'results.db'}")
    assert environment_of(engine, ids) == {} and system_frame(engine, ids).empty
    assert cli(where, "status").returncode == 0
    assert cli(where, "report", "old", "--out", str(tmp_path / "rep")).returncode == 0
    res = cli(where, "export", "old", "-f", "tensorboard", "-o", str(tmp_path / "tb"))
    assert res.returncode == 0 and "hparams of 2 runs" in res.output, res.output


def test_a_damaged_environment_file_is_reported_by_sync_and_keeps_the_run(tmp_path):
    where = tmp_path
    _, [rid, other] = plan_ids(where, tiny_grid("dmg", seeds="[0, 1]"), "dmg")
    finish_run(where / "runs" / rid, steps=6)
    finish_run(where / "runs" / other, steps=6)
    good = {"attempt": 1, "hostname": "node7", "python_version": "3.11.7", "torch_version": "2.3.0",
            "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_bytes": 85 << 30, "driver_version": "550.54.15",
            "cuda_version": "12.4", "peak_gpu_allocated_bytes": 12 << 30, "a_later_field": [1, 2]}
    write_environment(where / "runs" / rid, good)
    assert cli(where, "sync").returncode == 0
    from cemctl.db import open_db
    from cemctl.db.environment import environment_of

    engine = open_db(f"sqlite:///{where / 'results.db'}")
    assert environment_of(engine, [rid])[rid]["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert environment_of(engine, [rid])[rid]["a_later_field"] == [1, 2]  # a newer trainer's field is kept
    (where / "runs" / rid / "environment.json").write_text(json.dumps({**good, "gpu_memory_bytes": "80GB"}))
    res = cli(where, "sync")
    assert res.returncode == 0 and "2 done" in res.stdout, res.output
    assert "1 run files left out (first: " in res.stdout and "environment.json: gpu_memory_bytes: must be an integer" \
        in res.stdout
    assert environment_of(engine, [rid])[rid]["gpu_model"] == "NVIDIA H100 80GB HBM3"  # the last good record stays
    (where / "runs" / rid / "environment.json").unlink()
    assert "left out" not in cli(where, "sync").stdout
    assert environment_of(engine, [rid]) == {}  # the file is the ground truth


@pytest.mark.parametrize("bad, says", [
    ({"hostname": "h", "python_version": "3", "torch_version": "2"}, "attempt: is missing"),
    ({"attempt": 0, "hostname": "h", "python_version": "3", "torch_version": "2"}, "attempt: must be >= 1"),
    ({"attempt": True, "hostname": "h", "python_version": "3", "torch_version": "2"}, "attempt: must be an integer"),
    ({"attempt": 1, "hostname": 7, "python_version": "3", "torch_version": "2"}, "hostname: must be a string"),
    ({"attempt": 1, "hostname": "h", "python_version": "3", "torch_version": "2", "peak_host_rss_bytes": -1},
     "peak_host_rss_bytes: must be >= 0"),
    ({"attempt": 1, "hostname": "h", "python_version": "3", "torch_version": "2", "earlier_attempts": [{"attempt": 1}]},
     "earlier_attempts[0].hostname: is missing"),
    ([1, 2], "must be a JSON object, got list"),
])
def test_the_reader_is_strict_one_line_naming_the_file_and_key(tmp_path, bad, says):
    (tmp_path / "environment.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError) as e:
        read_environment(tmp_path)
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{tmp_path / 'environment.json'}: ") and says in text
    with pytest.raises(ConfigError):
        write_environment(tmp_path / "w", bad if isinstance(bad, dict) else {})  # never written either
    assert not (tmp_path / "w").exists()


def test_the_reader_refuses_what_is_no_environment_file(tmp_path):
    assert read_environment(tmp_path) is None  # an older run: nothing recorded
    (tmp_path / "environment.json").write_text('{"attempt": 1, "host')
    with pytest.raises(ConfigError, match="environment.json: environment.json: is not valid JSON"):
        read_environment(tmp_path)
    (tmp_path / "environment.json").unlink()
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json"
    outside.write_text(json.dumps({"attempt": 1, "hostname": "h", "python_version": "3", "torch_version": "2"}))
    (tmp_path / "environment.json").symlink_to(outside)
    with pytest.raises(ConfigError, match="leads outside the run directory"):
        read_environment(tmp_path)


def test_gathering_the_environment_on_the_cpu_records_its_own_cost():
    """The run records what gathering cost it (gather_ms); the speed target (< 100 ms) is bench's
    (`python -m bench --only environment`), not a timed test."""
    import torch

    from cem_core.train.environment import gather_environment

    env = gather_environment(torch.device("cpu"), attempt=1, code_fingerprint="0123456789ab")
    check_environment(env)
    assert isinstance(env["gather_ms"], float) and env["gather_ms"] >= 0


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class _FakeGpu:
    def __init__(self) -> None:
        self.calls = 0

    def read(self) -> dict:
        self.calls += 1
        return {"gpu_util_pct": 87.0, "gpu_mem_used_bytes": 40 << 30, "gpu_mem_allocated_bytes": 30 << 30,
                "gpu_mem_reserved_bytes": 32 << 30}


def test_the_sampler_measures_over_each_interval_with_a_clock_the_test_moves():
    from cem_core.train.environment import SystemSampler

    lines, clock, progress = [], _Clock(), {"step": 3}
    sampler = SystemSampler(lines.append, lambda: (progress["step"], progress["step"] * 128, 12.5), every_s=30,
                            attempt=2, clock=clock, gpu=_FakeGpu())
    burn_until = time.process_time() + 0.05
    while time.process_time() < burn_until:  # 50 ms of CPU for the first interval
        pass
    clock.t += 0.1  # the interval the sampler divides by
    first = sampler.sample()
    assert first["kind"] == "system" and first["step"] == 3 and first["tokens"] == 384 and first["time_s"] == 12.5
    assert first["series"] == "2.0" and first["attempt"] == 2 and first["sample"] == 0
    assert 30 <= first["cpu_process_pct"] <= 100  # >= 50 ms of CPU over 0.1 s of the clock
    assert first["gpu_util_pct"] == 87.0 and first["gpu_mem_allocated_bytes"] == 30 << 30
    assert set(SYSTEM_METRICS) <= set(first)
    clock.t += 1e6  # a long idle interval: the process used almost no CPU
    second = sampler.sample()
    assert second["series"] == "2.1" and second["cpu_process_pct"] < 1
    assert lines == [first, second]


def test_a_failing_sample_is_logged_once_and_never_stops_training(caplog):
    from cem_core.train.environment import SystemSampler

    def broken(_line):
        raise OSError("disk full")

    sampler = SystemSampler(broken, lambda: (1, 1, 1.0), every_s=30, attempt=1, clock=_Clock())
    with caplog.at_level("WARNING"):
        assert sampler.sample() is None and sampler.sample() is None
    assert [r.getMessage() for r in caplog.records].count("system sample failed (OSError: disk full); training goes on") == 1


def test_system_every_s_zero_turns_sampling_off_and_bad_values_are_refused(tmp_path):
    from cem_core.config import RunConfig, resolve
    from cem_core.train.environment import SystemSampler

    sampler = SystemSampler(lambda _: None, lambda: (0, 0, 0.0), every_s=0, attempt=1).start()
    assert sampler._thread is None
    sampler.stop()
    for bad in (-1, 0.001, 1e9, "fast"):
        with pytest.raises(ConfigError, match="train.system_every_s"):
            resolve(RunConfig.from_dict({"train.system_every_s": bad}))
    assert resolve(RunConfig.from_dict({"train.system_every_s": 0})).train.system_every_s == 0


def test_the_new_key_changes_no_existing_run_id(tmp_path):
    """A config.json saved before the key existed hashes to its old id; only a value away from 30 s is a new run."""
    from cem_core.config import RunConfig, flatten, resolve, run_id

    before = resolve(RunConfig.from_dict({"model.attention": "cem", "train.seed": 3})).to_dict()
    old_saved = json.loads(json.dumps(before))
    del old_saved["train"]["system_every_s"]  # what an earlier release wrote
    assert run_id(RunConfig.from_dict(old_saved)) == run_id(RunConfig.from_dict(before))
    from cem_core.identity import config_hash

    flat = flatten(before)
    assert config_hash({k: v for k, v in flat.items() if k != "train.system_every_s"}) == run_id(RunConfig.from_dict(before))
    assert run_id(RunConfig.from_dict({**flatten(old_saved), "train.system_every_s": 5})) != run_id(RunConfig.from_dict(before))


def test_a_version_8_database_is_migrated_and_old_runs_have_no_environment(tmp_path):
    from cemctl.db import CURRENT_VERSION, open_db
    from cemctl.db.environment import environment_of
    from tests.test_eval_db import V3_SCHEMA, _columns

    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(V3_SCHEMA)
    con.close()
    engine = open_db(f"sqlite:///{path}")
    con = sqlite3.connect(path)
    assert max(v for (v,) in con.execute("SELECT version FROM schema_version")) == CURRENT_VERSION >= 9
    assert con.execute("SELECT environment_mtime FROM runs").fetchall() == [(None,)]
    fresh = tmp_path / "fresh.db"
    open_db(f"sqlite:///{fresh}")
    assert _columns(con, "run_environment") == _columns(sqlite3.connect(fresh), "run_environment")
    assert environment_of(engine, ["aaaaaaaaaaaa"]) == {}


def test_a_sample_appended_while_a_resume_rewrites_metrics_is_not_lost(tmp_path, monkeypatch):
    """Regression: the sampler thread's line landed between truncate_metrics' read and its rename, and vanished."""
    import threading

    from cem_core.runfiles import RunDir, truncate_metrics, rundir

    rd = RunDir(tmp_path)
    for step in (1, 2, 3):
        rd.append_metrics({"kind": "train", "step": step})
    real_write = rundir.atomic_write_bytes

    def write_while_a_sample_comes(path, data, **kw):
        sampler = threading.Thread(target=rd.append_metrics, args=({"kind": "system", "step": 0, "series": "2.0"},))
        sampler.start()
        sampler.join(timeout=0.2)  # without the lock it appends now, before the rename below
        real_write(path, data, **kw)
        write_while_a_sample_comes.thread = sampler

    monkeypatch.setattr(rundir, "atomic_write_bytes", write_while_a_sample_comes)
    assert truncate_metrics(rd.metrics, 2) == 2
    write_while_a_sample_comes.thread.join()
    assert [(m["kind"], m["step"]) for m in read_jsonl(rd.metrics)] == [("train", 1), ("train", 2), ("system", 0)]


def test_an_archive_carries_the_environment_to_another_project(trained, tmp_path):
    from cemctl.db import open_db
    from cemctl.db.environment import environment_of

    out = tmp_path / "envx.tar.gz"
    assert cli(trained["where"], "archive", "envx", "-o", str(out)).returncode == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert cli(fresh, "import", str(out)).returncode == 0
    here = environment_of(open_db(f"sqlite:///{fresh / 'results.db'}"), trained["ids"])
    assert here == environment_of(open_db(f"sqlite:///{trained['where'] / 'results.db'}"), trained["ids"])
    assert here[trained["ids"][0]]["attempt"] == 2


def test_tensorboard_folders_never_put_two_arms_or_two_runs_in_one(tmp_path):
    import pandas as pd

    from cemctl.services.export import tensorboard_folders

    runs = pd.DataFrame({
        "run_id": ["r1", "r2", "r3", "r4", "r5", "r6"],
        "arm": ["a1", "a1", "a2", "a3", "a4", "a4"],
        "arm_label": ["data.path=a/b", "data.path=a/b", "data.path=a:b", "Lr=1", "lr=1", "lr=1"],
        "train.seed": [0, 1, 0, 0, 0, 0],
    })
    folders = tensorboard_folders(runs)
    assert folders["r1"] == "data.path=a_b~a1/seed=0" and folders["r2"] == "data.path=a_b~a1/seed=1"
    assert folders["r3"] == "data.path=a_b~a2/seed=0"  # read alike once made safe: the arm id tells them apart
    assert folders["r4"] == "Lr=1~a3/seed=0" and folders["r5"] == "lr=1~a4/seed=0"  # alike but for case
    assert folders["r6"] == "lr=1~a4/seed=0~r6"  # one arm, one seed, two runs
    assert len({f.casefold() for f in folders.values()}) == len(folders)
    for f in folders.values():
        for part in f.split("/"):
            assert part not in ("", ".", "..") and len(part) <= 120
            (tmp_path / part).mkdir(exist_ok=True)  # a name the file system takes


@pytest.mark.slow
def test_a_launched_run_records_the_code_snapshot_it_ran_from(tmp_path):
    """`cemctl launch` runs jobs from a code snapshot: environment.json names it, as job.json does."""
    (tmp_path / "g.toml").write_text(tiny_grid("snap", seeds="[0]", steps=2))
    res = cli(tmp_path, "launch", str(tmp_path / "g.toml"), "--workers", "1", subprocess=True)
    assert res.returncode == 0, res.output
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    job, result = (json.loads((run_dir / f).read_text()) for f in ("job.json", "result.json"))
    env = read_environment(run_dir)
    assert job["snapshot"] and env["code_snapshot"] == job["snapshot"] and (tmp_path / "runs" / ".snapshots" /
                                                                              job["snapshot"]).is_dir()
    assert env["code_fingerprint"] == result["code_fingerprint"] and env["ended_at"] is not None


def test_the_nvml_handle_is_looked_up_once_by_uuid_and_a_failure_is_not_retried(caplog):
    from types import SimpleNamespace

    import torch

    from cem_core.train.environment import _GpuProbe

    calls = []
    nvml = SimpleNamespace(nvmlInit=lambda: calls.append("init"),
                           nvmlDeviceGetHandleByUUID=lambda u: calls.append(u) or f"handle of {u}")
    probe = _GpuProbe(torch.device("cuda", 1), nvml=nvml, uuid="58ad1a8b-0000-1111-2222-333344445555")
    assert probe._nvml_handle() == probe._nvml_handle() == "handle of GPU-58ad1a8b-0000-1111-2222-333344445555"
    assert calls == ["init", "GPU-58ad1a8b-0000-1111-2222-333344445555"]

    def no_driver():
        calls.append("init")
        raise RuntimeError("NVML Shared Library Not Found")

    broken = _GpuProbe(torch.device("cuda", 0), nvml=SimpleNamespace(nvmlInit=no_driver), uuid="x")
    calls.clear()
    with caplog.at_level("INFO"):
        assert broken._nvml_handle() is None and broken._nvml_handle() is None
    assert calls == ["init"]  # not every sample
    assert "no GPU utilisation (NVML: NVML Shared Library Not Found)" in caplog.text
