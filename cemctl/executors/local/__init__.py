"""The local executor (`cemctl launch --executor local`): a job queue over GPU slots or CPU workers.

    from cemctl.executors.local import LocalExecutor, LocalOptions
    LocalExecutor(LocalOptions(workers=2)).submit(jobs)

`executor.py` runs and watches the processes; `pinning.py` decides which job
gets which device, as pure functions.
"""

from cemctl.executors.local.executor import JobStatus, LocalExecutor, LocalOptions, cpu_count, detect_gpus, make_slots

__all__ = ["JobStatus", "LocalExecutor", "LocalOptions", "cpu_count", "detect_gpus", "make_slots"]
