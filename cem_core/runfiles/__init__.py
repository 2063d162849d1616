"""The run directory contract, in one place: the trainer and every `cemctl` command use it.

    from cem_core import runfiles
    runfiles.RESULT_FILE, runfiles.RunState.DONE, runfiles.TERMINAL_STATES
    runfiles.read_result(run_dir); runfiles.read_job(run_dir) -> JobRecord | None
    runfiles.RunDir(path)                       # the trainer's writers, lock and heartbeat

- `files`: file names, `RunState` and its sets, confined reads (`read_run_file`:
  regular files inside the run directory only, non-blocking, size-capped),
  atomic JSON writes, append-only JSONL, events, the heartbeat timeout.
- `job`: `job.json` as a typed `JobRecord`, the `cancel` file, liveness readers.
- `rundir`: `RunDir`, `Heartbeat`, `truncate_metrics`.
- `process`: is a recorded PID still the run's process (start time + token), before any signal.
- `saved_config`: config.json read into a typed `RunConfig` (the one reader, strict).
- `manifest`: ownership by proof: what cemctl may delete is what a manifest it
  wrote lists (sizes and sha256), read like a run file.

Torch-free.
"""

from cem_core.runfiles.files import (
    ACTIVE_STATES,
    CANCEL_FILE,
    CHECKPOINT_DIR,
    CHECKPOINT_RE,
    CONFIG_FILE,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    EVALS_FILE,
    EVENTS_FILE,
    EXECUTOR_LOG,
    EXIT_PREEMPTED,
    FINAL_STATES,
    HEARTBEAT_FILE,
    JOB_FILE,
    LOCK_FILE,
    LOG_FILE,
    MAX_JSON_BYTES,
    MAX_LOG_BYTES,
    METRICS_FILE,
    RESULT_FILE,
    RESULT_STATES,
    RUN_STATES,
    TERMINAL_STATES,
    RunFileError,
    RunState,
    append_event,
    append_jsonl,
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_path,
    confined_path,
    finite_json,
    fsync_dir,
    publish_dir,
    checkpoint_name,
    heartbeat_timeout_s,
    hostname,
    iter_jsonl,
    list_checkpoints,
    open_run_file,
    read_bytes,
    read_json,
    read_json_object,
    read_jsonl,
    read_run_file,
    run_json,
)
from cem_core.runfiles.job import (
    JOB_STATES,
    LIVE_JOB_STATES,
    JobRecord,
    JobUnreadable,
    cancel_requested,
    clear_cancel,
    heartbeat_age_s,
    last_metrics,
    read_heartbeat,
    read_job,
    read_result,
    request_cancel,
    update_job,
    write_job,
)
from cem_core.runfiles.manifest import (
    Audit,
    Manifest,
    ManifestError,
    audit_folder,
    file_digest,
    read_manifest,
    remove_owned,
    write_manifest,
)
from cem_core.runfiles.process import TOKEN_ENV, describe_mismatch, process_matches, process_start
from cem_core.runfiles.rundir import Heartbeat, RunDir, call_quietly, truncate_metrics
from cem_core.runfiles.saved_config import (
    SavedConfig,
    config_from_object,
    config_of_record,
    parse_config,
    read_config_file,
    read_run_config,
)

__all__ = [
    "ACTIVE_STATES", "CANCEL_FILE", "CHECKPOINT_DIR", "CHECKPOINT_RE", "CONFIG_FILE", "DEFAULT_HEARTBEAT_TIMEOUT_S", "EVALS_FILE",
    "EVENTS_FILE", "EXECUTOR_LOG", "EXIT_PREEMPTED", "FINAL_STATES", "HEARTBEAT_FILE", "JOB_FILE", "JOB_STATES", "LIVE_JOB_STATES",
    "LOCK_FILE", "LOG_FILE", "MAX_JSON_BYTES", "MAX_LOG_BYTES", "METRICS_FILE", "RESULT_FILE", "RESULT_STATES",
    "RUN_STATES", "TERMINAL_STATES", "TOKEN_ENV", "Audit", "SavedConfig", "config_from_object", "config_of_record", "parse_config",
    "read_config_file", "read_run_config", "Heartbeat", "Manifest", "ManifestError", "JobRecord", "JobUnreadable", "RunDir", "RunFileError", "RunState", "append_event",
    "append_jsonl", "atomic_write", "atomic_write_bytes", "atomic_write_path", "checkpoint_name", "list_checkpoints", "audit_folder", "atomic_write_json", "call_quietly", "cancel_requested", "clear_cancel",
    "confined_path", "describe_mismatch", "file_digest", "finite_json", "fsync_dir", "heartbeat_age_s", "heartbeat_timeout_s", "hostname", "iter_jsonl",
    "last_metrics", "open_run_file", "process_matches", "process_start", "publish_dir", "read_bytes", "read_heartbeat", "read_job", "read_json", "read_json_object", "read_jsonl",
    "read_manifest", "read_result", "read_run_file", "remove_owned", "request_cancel", "run_json", "truncate_metrics", "update_job", "write_job", "write_manifest",
]
