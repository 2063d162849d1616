"""The run directory contract, in one place: the trainer and every `cemctl` command use it.

    from cem_core import runfiles
    runfiles.RESULT_FILE, runfiles.RunState.DONE, runfiles.TERMINAL_STATES
    runfiles.read_result(run_dir) -> RunResult | None; runfiles.read_job(run_dir) -> JobRecord | None
    runfiles.RunDir(path)                       # the trainer's writers, lock and heartbeat

- `files`: file names, `RunState` and its sets, confined reads (`read_run_file`:
  regular files inside the run directory only, non-blocking, size-capped),
  atomic JSON writes, append-only JSONL, events, the heartbeat timeout.
- `job`: `job.json` as a typed `JobRecord`, the `cancel` file, liveness readers.
- `results`: result.json as a frozen `RunResult`, read and written by one rule.
- `rundir`: `RunDir`, `Heartbeat`, `truncate_metrics`.
- `process`: is a recorded PID still the run's process (start time + token), before any signal.
- `saved_config`: config.json read into a typed `RunConfig` (the one reader, strict).
- `manifest`: ownership by proof: what cemctl may delete is what a manifest it
  wrote lists (sizes and sha256), read like a run file.

Torch-free.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as the type checker sees them (at run time: imported on first use)
    from cem_core.runfiles.files import (  # noqa: F401
        ACTIVE_STATES, CANCEL_FILE, CHECKPOINT_DIR, CHECKPOINT_RE, CONFIG_FILE, DEFAULT_HEARTBEAT_TIMEOUT_S,
        ENDED_STATES, EVALS_FILE, EVENTS_FILE, EXECUTOR_LOG, EXIT_PREEMPTED, FINAL_STATES, HEARTBEAT_FILE,
        IN_FLIGHT_STATES, JOB_FILE, LOCK_FILE, LOG_FILE, MAX_JSON_BYTES, MAX_LOG_BYTES, METRICS_FILE, RESULT_FILE,
        RESULT_STATES, RUN_STATES, RunFileError, RunState, TERMINAL_STATES, TROUBLED_STATES, append_event,
        append_jsonl, atomic_write, atomic_write_bytes, atomic_write_json, atomic_write_path, checkpoint_name,
        confined_path, finite_json, fsync_dir, heartbeat_timeout_s, hostname, iter_jsonl, list_checkpoints, number,
        open_run_file, publish_dir, read_bytes, read_json, read_json_object, read_jsonl, read_run_file, run_json,
    )
    from cem_core.runfiles.job import (  # noqa: F401
        JOB_STATES, JobRecord, JobUnreadable, LIVE_JOB_STATES, cancel_requested, clear_cancel, heartbeat_age_s,
        last_metrics, read_heartbeat, read_job, request_cancel, update_job, write_job,
    )
    from cem_core.runfiles.manifest import (  # noqa: F401
        Audit, Manifest, ManifestError, audit_folder, file_digest, read_manifest, remove_owned, write_manifest,
    )
    from cem_core.runfiles.results import (  # noqa: F401
        NotAResult, ResultFile, RunResult, read_result, read_result_file,
    )
    from cem_core.runfiles.process import (  # noqa: F401
        TOKEN_ENV, describe_mismatch, process_matches, process_start,
    )
    from cem_core.runfiles.rundir import (  # noqa: F401
        Heartbeat, RunDir, call_quietly, truncate_metrics,
    )
    from cem_core.runfiles.saved_config import (  # noqa: F401
        SavedConfig, config_from_object, config_of_record, parse_config, read_config_file, read_run_config,
    )

# Names are imported on first use (PEP 562): `cemctl status` imports the file names and states without paying for the
# manifests, the config reader and the trainer's writers.
_HOMES = {
    "ACTIVE_STATES": "files", "CANCEL_FILE": "files", "CHECKPOINT_DIR": "files", "CHECKPOINT_RE": "files",
    "CONFIG_FILE": "files", "DEFAULT_HEARTBEAT_TIMEOUT_S": "files", "ENDED_STATES": "files", "EVALS_FILE": "files",
    "EVENTS_FILE": "files", "EXECUTOR_LOG": "files", "EXIT_PREEMPTED": "files", "FINAL_STATES": "files",
    "HEARTBEAT_FILE": "files", "IN_FLIGHT_STATES": "files", "JOB_FILE": "files", "LOCK_FILE": "files",
    "LOG_FILE": "files", "MAX_JSON_BYTES": "files", "MAX_LOG_BYTES": "files", "METRICS_FILE": "files",
    "RESULT_FILE": "files", "RESULT_STATES": "files", "RUN_STATES": "files", "RunFileError": "files",
    "RunState": "files", "TERMINAL_STATES": "files", "TROUBLED_STATES": "files", "append_event": "files",
    "append_jsonl": "files", "atomic_write": "files", "atomic_write_bytes": "files", "atomic_write_json": "files",
    "atomic_write_path": "files", "checkpoint_name": "files", "confined_path": "files", "finite_json": "files",
    "fsync_dir": "files", "heartbeat_timeout_s": "files", "hostname": "files", "iter_jsonl": "files",
    "list_checkpoints": "files", "number": "files", "open_run_file": "files", "publish_dir": "files",
    "read_bytes": "files", "read_json": "files", "read_json_object": "files", "read_jsonl": "files",
    "read_run_file": "files", "run_json": "files",
    "JOB_STATES": "job", "JobRecord": "job", "JobUnreadable": "job", "LIVE_JOB_STATES": "job",
    "cancel_requested": "job", "clear_cancel": "job", "heartbeat_age_s": "job", "last_metrics": "job",
    "read_heartbeat": "job", "read_job": "job", "request_cancel": "job", "update_job": "job", "write_job": "job",
    "Audit": "manifest", "Manifest": "manifest", "ManifestError": "manifest", "audit_folder": "manifest",
    "file_digest": "manifest", "read_manifest": "manifest", "remove_owned": "manifest", "write_manifest": "manifest",
    "NotAResult": "results", "ResultFile": "results", "RunResult": "results", "read_result": "results",
    "read_result_file": "results",
    "TOKEN_ENV": "process", "describe_mismatch": "process", "process_matches": "process", "process_start": "process",
    "Heartbeat": "rundir", "RunDir": "rundir", "call_quietly": "rundir", "truncate_metrics": "rundir",
    "SavedConfig": "saved_config", "config_from_object": "saved_config", "config_of_record": "saved_config",
    "parse_config": "saved_config", "read_config_file": "saved_config", "read_run_config": "saved_config",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'cem_core.runfiles' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"cem_core.runfiles.{home}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_HOMES)
