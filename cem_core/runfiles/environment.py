"""What a run trained on: `environment.json` in its directory, and the names of its system samples.

    env = read_environment(run_dir)      # dict, None when the run has none (older runs); ConfigError when bad
    write_environment(run_dir, env)      # the trainer (rank 0), atomically, at the start and the end of an attempt

The trainer (`cem_core.train.environment`) writes one small JSON object describing
the attempt that trains the run (the latest one): host, CPU, GPU, driver and CUDA,
torch / Python / cemctl versions, the code fingerprint and snapshot, and, once the
attempt ends, its peak host and GPU memory. Earlier attempts of the run (a resume on
another machine) are kept in `earlier_attempts`, oldest first, each of the same shape.
Every field but `attempt`, `hostname`, `python_version` and `torch_version` may be
missing or null (unknown on that machine); unknown keys are kept (a newer trainer may
add fields). `read_environment` is strict: a value of the wrong type is one line
naming the file and the key (`ConfigError`), never a half-read record.

System samples are metrics.jsonl lines of kind `system` (every `train.system_every_s`
seconds): step, tokens, time_s (training time), `series` "<attempt>.<sample>" (the
key that keeps samples taken at one step apart), attempt, sample, unix_s, and the
`SYSTEM_METRICS` (each may be null or missing where the machine cannot say).

Torch-free.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cem_core.errors import ConfigError
from cem_core.runfiles.files import ENVIRONMENT_FILE, RunFileError, atomic_write_json, read_run_file

MAX_ENVIRONMENT_BYTES = 1 << 20
MAX_EARLIER_ATTEMPTS = 50  # a run restarted more often keeps the newest ones

SYSTEM_KIND = "system"  # the metrics.jsonl kind of a system sample
# The measurements of a system sample (metrics.jsonl, kind "system"): name -> what it is.
SYSTEM_METRICS: dict[str, str] = {
    "cpu_process_pct": "CPU time of the trainer process over the interval, % of one core (all threads: may exceed 100)",
    "cpu_machine_pct": "busy CPU time of the whole machine over the interval, % of all cores (Linux /proc/stat)",
    "rss_bytes": "resident memory of the trainer process",
    "host_mem_available_bytes": "memory the machine can still give (Linux MemAvailable)",
    "gpu_util_pct": "GPU busy time over NVML's last sample period (pynvml; null without it)",
    "gpu_mem_used_bytes": "GPU memory in use on the device, every process (pynvml; null without it)",
    "gpu_mem_allocated_bytes": "GPU memory held by the trainer's tensors (torch.cuda.memory_allocated)",
    "gpu_mem_reserved_bytes": "GPU memory reserved by the trainer's caching allocator (torch.cuda.memory_reserved)",
}

# Field -> (type, required). Times are unix seconds; sizes bytes.
ENVIRONMENT_FIELDS: dict[str, tuple[type, bool]] = {
    "attempt": (int, True),
    "hostname": (str, True),
    "python_version": (str, True),
    "torch_version": (str, True),
    "started_at": (float, False),
    "ended_at": (float, False),
    "platform": (str, False),
    "cpu_model": (str, False),
    "cpu_count": (int, False),  # logical CPUs of the machine
    "cpus_usable": (int, False),  # CPUs this process may run on (affinity, e.g. a SLURM allocation)
    "torch_threads": (int, False),
    "device": (str, False),  # cpu, cuda:0, ...
    "world_size": (int, False),
    "gpu_model": (str, False),
    "gpu_count": (int, False),
    "gpu_memory_bytes": (int, False),  # total memory of the run's GPU
    "gpu_capability": (str, False),  # CUDA compute capability, "9.0"
    "driver_version": (str, False),
    "cuda_version": (str, False),  # the CUDA torch was built with
    "cudnn_version": (str, False),
    "cemctl_version": (str, False),
    "code_fingerprint": (str, False),  # cem_core.fingerprint of the code that trains (result.json has it too)
    "code_snapshot": (str, False),  # the launch's code snapshot hash ($CEMCTL_SNAPSHOT; job.json `snapshot`)
    "peak_host_rss_bytes": (int, False),  # the trainer process's peak resident memory (VmHWM / ru_maxrss)
    "peak_gpu_allocated_bytes": (int, False),  # torch.cuda.max_memory_allocated
    "peak_gpu_reserved_bytes": (int, False),  # torch.cuda.max_memory_reserved
    "gather_ms": (float, False),  # what gathering this record cost the trainer
    "system_every_s": (float, False),  # the sampling interval of the attempt's system samples (0: none)
}


def _check_record(d: Any, key: str, source: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ConfigError(key or "<environment>", f"must be a JSON object, got {type(d).__name__}", source=source)
    out = dict(d)
    for name, (tp, required) in ENVIRONMENT_FIELDS.items():
        dotted = f"{key}.{name}" if key else name
        value = d.get(name)
        if value is None:
            if required:
                raise ConfigError(dotted, "is missing", source=source)
            continue
        ok = (isinstance(value, str) if tp is str else
              isinstance(value, (int, float)) and not isinstance(value, bool) if tp is float else
              isinstance(value, int) and not isinstance(value, bool))
        if not ok:
            raise ConfigError(dotted, f"must be {'a string' if tp is str else 'an integer' if tp is int else 'a number'} "
                              f"or null, got {type(value).__name__} {value!r}"[:200], source=source)
        if tp is not str and value < 0:
            raise ConfigError(dotted, f"must be >= 0, got {value!r}", source=source)
        out[name] = float(value) if tp is float else value
    if out["attempt"] < 1:
        raise ConfigError(f"{key}.attempt" if key else "attempt", f"must be >= 1, got {out['attempt']}", source=source)
    return out


def check_environment(d: Any, source: str = ENVIRONMENT_FILE) -> dict[str, Any]:
    """`d` checked as an environment record (ConfigError naming `source` and the key otherwise)."""
    record = _check_record(d, "", source)
    earlier = record.get("earlier_attempts", [])
    if earlier is None:
        earlier = []
    if not isinstance(earlier, list):
        raise ConfigError("earlier_attempts", f"must be a list, got {type(earlier).__name__}", source=source)
    record["earlier_attempts"] = []
    for i, item in enumerate(earlier):
        one = _check_record(item, f"earlier_attempts[{i}]", source)
        one.pop("earlier_attempts", None)
        record["earlier_attempts"].append(one)
    return record


def read_environment(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's environment.json, checked; None when it has none (a run trained before it was recorded).

    A file that cannot be read (a symlink out of the run, a FIFO, too large), is not JSON or has a wrong value
    raises `ConfigError`, one line naming the file and the key.
    """
    path = str(Path(run_dir) / ENVIRONMENT_FILE)
    try:
        raw = read_run_file(run_dir, ENVIRONMENT_FILE, max_bytes=MAX_ENVIRONMENT_BYTES)
    except FileNotFoundError:
        return None
    except RunFileError as e:
        raise ConfigError(ENVIRONMENT_FILE, str(e).split(": ", 1)[-1], source=path) from None
    except OSError as e:
        raise ConfigError(ENVIRONMENT_FILE, f"unreadable ({e.strerror or e})", source=path) from None
    try:
        d = json.loads(raw)
    except ValueError:
        raise ConfigError(ENVIRONMENT_FILE, "is not valid JSON (truncated or garbled)", source=path) from None
    return check_environment(d, source=path)


def write_environment(run_dir: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Replace the run's environment.json atomically (checked first: a bad record is never written)."""
    checked = check_environment(record, source=str(Path(run_dir) / ENVIRONMENT_FILE))
    checked["earlier_attempts"] = checked["earlier_attempts"][-MAX_EARLIER_ATTEMPTS:]
    atomic_write_json(Path(run_dir) / ENVIRONMENT_FILE, checked, indent=1)
