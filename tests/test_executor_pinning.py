"""GPU pinning and CPU worker split of the local executor: pure functions, no GPU needed."""

from __future__ import annotations

import pytest

from cem_core.errors import ConfigError
from cemctl.executors import EXECUTORS, get_executor
from cemctl.executors.local import LocalOptions, make_slots
from cemctl.executors.local.pinning import SlotPool, assign, cpu_slots, gpu_slots, parse_gpus


def test_one_job_per_gpu_in_given_order():
    slots = gpu_slots([0, 1, 3])
    assert [s.devices for s in slots] == [(0,), (1,), (3,)]
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0", "1", "3"]


def test_jobs_per_gpu_spreads_over_devices_first():
    slots = gpu_slots([0, 1], jobs_per_gpu=2)
    assert [s.devices for s in slots] == [(0,), (1,), (0,), (1,)]
    # Two jobs on an idle machine go to different GPUs.
    first_two = assign(2, slots)
    assert {s.devices for s in first_two if s} == {(0,), (1,)}


def test_multi_gpu_runs_get_whole_groups_and_leftovers_are_unused():
    slots = gpu_slots([0, 1, 2, 3, 4], gpus_per_run=2)
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0,1", "2,3"]
    with pytest.raises(ConfigError, match="gpus-per-run"):
        gpu_slots([0], gpus_per_run=2)


def test_queue_waits_for_a_free_slot_and_reuses_released_ones():
    slots = gpu_slots([5, 7])
    pool = SlotPool(slots)
    a, b = pool.acquire(), pool.acquire()
    assert pool.acquire() is None and pool.free == 0
    assert a is not None and b is not None
    pool.release(b)
    c = pool.acquire()
    assert c is not None and c.devices == (7,)
    assert assign(3, slots)[2] is None  # third job waits


def test_cpu_workers_split_the_cores():
    slots = cpu_slots(8, workers=3)
    assert len(slots) == 3
    assert {s.env()["OMP_NUM_THREADS"] for s in slots} == {"2"}
    assert all(s.env()["CEMCTL_NUM_THREADS"] == "2" and s.env()["CUDA_VISIBLE_DEVICES"] == "" for s in slots)
    # Without --workers: one single-threaded worker per core (the demo on 2 cores trains 2 runs at once).
    assert [s.threads for s in cpu_slots(2)] == [1, 1] and [s.threads for s in cpu_slots(8)] == [1] * 8
    assert cpu_slots(1, workers=4)[0].threads == 1  # never zero threads
    with pytest.raises(ConfigError):
        cpu_slots(4, workers=-1)


def test_parse_gpus():
    assert parse_gpus("0,1,3") == [0, 1, 3]
    assert parse_gpus(None) is None and parse_gpus("none") == []
    for bad in ("0,x", "1,1", "-1"):
        with pytest.raises(ConfigError, match="--gpus"):
            parse_gpus(bad)


def test_make_slots_uses_given_gpus_or_cpu_workers():
    slots = make_slots(LocalOptions(gpus=[2, 3], jobs_per_gpu=2, cores=8))
    assert [s.devices for s in slots] == [(2,), (3,), (2,), (3,)] and slots[0].threads == 2
    cpu = make_slots(LocalOptions(gpus=[], workers=2, cores=6))
    assert [s.threads for s in cpu] == [3, 3]
    with pytest.raises(ConfigError, match="needs GPUs"):
        make_slots(LocalOptions(gpus=[], gpus_per_run=2))


def test_registry_rejects_unknown_names_and_lists_known():
    assert set(EXECUTORS.names()) == {"local", "slurm"}
    assert get_executor("local").name == "local"
    with pytest.raises(ConfigError) as e:
        get_executor("kubernetes")
    assert "kubernetes" in str(e.value) and "local" in str(e.value) and "slurm" in str(e.value)
