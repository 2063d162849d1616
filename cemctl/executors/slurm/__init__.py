"""The SLURM executor (`cemctl launch --executor slurm`): job arrays through submitit.

    from cemctl.executors.slurm import SlurmExecutor, SlurmOptions
    SlurmExecutor(SlurmOptions(partition="gpu", gpus_per_job=1)).submit(jobs)

`executor.py` submits arrays, reads squeue and cancels; `job.py` is the
checkpointable function a job runs inside its allocation.
"""

from cemctl.executors.slurm.executor import (
    ACTIVE_SQUEUE_STATES,
    SlurmError,
    SlurmExecutor,
    SlurmOptions,
    chunks,
    max_array_size,
    parse_max_array_size,
    parse_squeue,
    slurm_available,
    squeue_states,
)

__all__ = [
    "ACTIVE_SQUEUE_STATES", "SlurmError", "SlurmExecutor", "SlurmOptions", "chunks", "max_array_size",
    "parse_max_array_size", "parse_squeue", "slurm_available", "squeue_states",
]
