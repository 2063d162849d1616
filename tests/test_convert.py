"""The one converter from plain data to typed records (`cem_core.convert`): the same rules for configs, [slurm]
tables and run files; strict for what people write, tolerant for files cemctl wrote."""

from __future__ import annotations

import math

import pytest

from cem_core.config import RunConfig
from cem_core.errors import ConfigError
from cem_core.runfiles import JobRecord
from cemctl.executors.slurm import SlurmOptions


@pytest.mark.parametrize("build", [
    lambda v: RunConfig.from_dict({"train.max_steps": v}),
    lambda v: SlurmOptions.from_mapping({"timeout_min": v}, source="g.toml"),
])
@pytest.mark.parametrize("value,ok", [(3, True), (3.0, True), (2.5, False), (True, False), ("3", False),
                                      (2**63, False)])
def test_an_integer_field_reads_the_same_everywhere(build, value, ok):
    if ok:
        build(value)
    else:
        with pytest.raises(ConfigError) as e:
            build(value)
        assert "\n" not in str(e.value) and ("max_steps" in e.value.key or "timeout_min" in e.value.key)


@pytest.mark.parametrize("value", [math.nan, math.inf, False, "1e-3"])
def test_a_number_field_refuses_what_is_not_a_finite_number(value):
    with pytest.raises(ConfigError, match="train.lr"):
        RunConfig.from_dict({"train.lr": value})
    with pytest.raises(ConfigError, match="slurm.mem_gb"):
        SlurmOptions.from_mapping({"mem_gb": value})


def test_unknown_keys_name_the_allowed_ones_in_the_same_form():
    with pytest.raises(ConfigError, match=r"train\.lrr: unknown key \(allowed: train\.lr"):
        RunConfig.from_dict({"train.lrr": 1})
    with pytest.raises(ConfigError, match=r"g\.toml: slurm\.walltime: unknown key \(allowed: slurm\.partition"):
        SlurmOptions.from_mapping({"walltime": 1}, source="g.toml")


def test_a_run_file_is_read_tolerantly():
    job = JobRecord.from_dict({"executor": "slurm", "job_id": 1234, "pid": 77.0, "attempt": "two", "host": None,
                               "started_time": "yesterday", "logs": ["a", 3], "from_the_future": 1})
    assert (job.job_id, job.pid, job.attempt, job.host, job.started_time, job.logs) == (
        "1234", 77, 0, None, None, ["a", "3"])
    assert JobRecord.from_dict({"attempt": True}).attempt == 0  # a bool is never a number
