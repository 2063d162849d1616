"""The SLURM executor: job arrays through submitit (`cemctl launch --executor slurm`).

Runs are submitted as arrays (`executor.batch()`), split below the cluster's
MaxArraySize (`scontrol show config`), with at most `array_parallelism` tasks
running at once (`%N`). Options come from the grid file's `[slurm]` table and
the command line (`SlurmOptions.from_mapping`). Every job is checkpointable
and submitted with `--requeue`: on a timeout, preemption or `scontrol requeue`
it starts again and the trainer resumes from its newest checkpoint, up to
`max_attempts` starts. Multi-GPU runs (`gpus_per_job > 1`) run torchrun inside
the allocation.

State never comes from `sacct` (clusters without accounting have none, and
submitit then reports UNKNOWN): it comes from the runs' own files and, for
queued jobs, from `squeue` (`squeue_states`).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from cem_core import runfiles
from cem_core.errors import CemError, ConfigError
from cem_core.runfiles import JobRecord
from cemctl.executors.base import Executor, Job, Submitted, heartbeat_fresh

DEFAULT_MAX_ARRAY_SIZE = 1001
ACTIVE_SQUEUE_STATES = {
    "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
    "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED",
}


class SlurmError(CemError):
    """sbatch / squeue / scancel failed, or SLURM is not installed."""


@dataclass
class SlurmOptions:
    """Per-job resources; keys of the grid file's `[slurm]` table (and `cemctl launch --slurm-*` options)."""

    partition: str = ""
    account: str = ""
    qos: str = ""
    timeout_min: int = 60
    mem_gb: float = 0.0  # 0: the partition's default
    gpus_per_job: int = 0
    cpus_per_task: int = 0  # 0: SLURM's default
    array_parallelism: int = 64  # at most this many tasks of an array at once (%N)
    max_attempts: int = 4  # starts per run, requeues included
    signal_delay_s: int = 90  # timeout signal this long before the time limit
    job_name: str = "cemctl"
    sbatch: dict[str, Any] = field(default_factory=dict)  # extra sbatch flags: {"constraint": "a100", "exclusive": true}
    setup: list[str] = field(default_factory=list)  # shell lines run before the job (module load ...)

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any] | None, source: str = "[slurm]") -> "SlurmOptions":
        """Build from a table; unknown keys and wrong types raise ConfigError naming the key."""
        from cem_core.convert import from_plain

        opts = from_plain(cls, dict(d or {}), prefix="slurm", source=source)
        opts.validate(source)
        return opts

    def merged(self, overrides: Mapping[str, Any]) -> "SlurmOptions":
        """A copy with the non-None overrides (the command line wins over the grid file)."""
        updates = {k: v for k, v in overrides.items() if v is not None}
        out = dataclasses.replace(self, **{k: v for k, v in updates.items() if k not in ("sbatch",)})
        if "sbatch" in updates:
            out.sbatch = {**self.sbatch, **updates["sbatch"]}
        out.validate("command line")
        return out

    def validate(self, source: str = "[slurm]") -> None:
        for key in ("timeout_min", "array_parallelism", "max_attempts"):
            if getattr(self, key) < 1:
                raise ConfigError(f"slurm.{key}", f"must be >= 1, got {getattr(self, key)}", source=source)
        for key in ("mem_gb", "gpus_per_job", "cpus_per_task", "signal_delay_s"):
            value = getattr(self, key)
            if not value >= 0 or value == float("inf"):  # NaN fails the comparison
                raise ConfigError(f"slurm.{key}", f"must be a finite number >= 0, got {value}", source=source)

    def submitit_parameters(self) -> dict[str, Any]:
        """Parameters for `submitit.SlurmExecutor.update_parameters`."""
        p: dict[str, Any] = {
            "job_name": self.job_name,
            "time": int(self.timeout_min),
            "array_parallelism": int(self.array_parallelism),
            "signal_delay_s": int(self.signal_delay_s),
            "additional_parameters": {"requeue": True, **self.sbatch},
        }
        for key in ("partition", "account", "qos"):
            if getattr(self, key):
                p[key] = getattr(self, key)
        if self.mem_gb:
            p["mem"] = f"{int(self.mem_gb)}GB" if float(self.mem_gb).is_integer() else f"{int(self.mem_gb * 1024)}MB"
        if self.gpus_per_job:
            p["gpus_per_node"] = int(self.gpus_per_job)
        if self.cpus_per_task:
            p["cpus_per_task"] = int(self.cpus_per_task)
        return p


# ---------------------------------------------------------------------------
# Cluster queries


def slurm_available() -> bool:
    return shutil.which("sbatch") is not None and shutil.which("squeue") is not None


def _run(cmd: list[str], timeout_s: float = 30) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]} not found: is SLURM installed on this machine?") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(cmd)} timed out after {timeout_s:.0f}s") from None
    if out.returncode != 0:
        raise SlurmError(f"{' '.join(cmd)} failed: {(out.stderr or out.stdout).strip().splitlines()[-1:] or ['?']}")
    return out.stdout


def max_array_size() -> int:
    """MaxArraySize of the cluster (`scontrol show config`); an array holds at most this many tasks."""
    try:
        text = _run(["scontrol", "show", "config"])
    except SlurmError:
        return DEFAULT_MAX_ARRAY_SIZE
    return parse_max_array_size(text)


def parse_max_array_size(text: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MaxArraySize" and value.strip().isdigit():
            return max(1, int(value.strip()))
    return DEFAULT_MAX_ARRAY_SIZE


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    """Split into consecutive lists of at most `size` (arrays below MaxArraySize)."""
    size = max(1, size)
    return [items[i : i + size] for i in range(0, len(items), size)]


def squeue_states(timeout_s: float = 30) -> dict[str, tuple[str, str]]:
    """{job_id: (STATE, reason)} of every job in the queue, array tasks one by one ('123_4')."""
    text = _run(["squeue", "-h", "-r", "-o", "%i|%T|%r"], timeout_s)
    return parse_squeue(text)


def parse_squeue(text: str) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            out[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return out


# ---------------------------------------------------------------------------


class SlurmExecutor(Executor):
    """Submits jobs as SLURM arrays and returns at once (the jobs run on the cluster)."""

    name = "slurm"

    @classmethod
    def from_launch(cls, options: Mapping[str, Any], *, grid_table: Mapping[str, Any], source: str, runs_root: Path,
                    on_tick: Callable[..., None] | None = None) -> "SlurmExecutor":
        """The grid's [slurm] table, then the command line's --partition, --timeout-min, ... (`options["slurm"]`)."""
        opts = SlurmOptions.from_mapping(dict(grid_table), source=source).merged(options.get("slurm") or {})
        return cls(opts, folder=Path(runs_root) / ".slurm")

    def __init__(self, options: SlurmOptions | None = None, *, folder: Path | str = "runs/.slurm", python: str | None = None) -> None:
        self.options = options or SlurmOptions()
        self.folder = Path(folder).resolve()
        self.python = python

    def _executor(self, setup: list[str]) -> Any:
        import submitit

        if not slurm_available():
            raise SlurmError("sbatch/squeue not found: is SLURM installed on this machine? (try --executor local)")
        ex = submitit.SlurmExecutor(folder=str(self.folder / "%j"), max_num_timeout=self.options.max_attempts, python=self.python)
        params = self.options.submitit_parameters()
        params["setup"] = list(self.options.setup) + setup
        ex.update_parameters(**params)
        return ex

    def submit(self, jobs: list[Job]) -> list[Submitted]:
        from cemctl.executors.slurm.job import TrainJob

        if not jobs:
            return []
        nproc = max(1, self.options.gpus_per_job)
        # One snapshot per launch: export it in the batch script so submitit itself imports from it.
        setup: list[str] = []
        env0 = jobs[0].env
        for key in ("PYTHONPATH", "PYTHONSAFEPATH", "CEMCTL_SNAPSHOT"):
            if key in env0:
                setup.append(f"export {key}={_shell_quote(env0[key])}")
        ex = self._executor(setup)
        self.folder.mkdir(parents=True, exist_ok=True)
        out: list[Submitted] = []
        for chunk in chunks(jobs, max_array_size()):
            for job in chunk:
                prev = runfiles.read_job(job.run_dir)
                runfiles.write_job(job.run_dir, JobRecord(
                    executor=self.name, state="queued", attempt=prev.attempt if prev else 0, snapshot=job.snapshot,
                    submitted_time=time.time()))
            with ex.batch():
                handles = [
                    ex.submit(TrainJob(), str(Path(j.run_dir).resolve()), j.command(self.python) if j.argv else _trainer(j, nproc, self.python), dict(j.env), self.options.max_attempts)
                    for j in chunk
                ]
            for job, handle in zip(chunk, handles):
                job_id = str(handle.job_id)
                logs = [str(handle.paths.stdout), str(handle.paths.stderr)]
                runfiles.update_job(job.run_dir, job_id=job_id, logs=logs)  # keeps the job's own state if it already started
                reason = f"submitted to SLURM as {job_id}" + (f", code snapshot {job.snapshot}" if job.snapshot else "")
                record = runfiles.read_job(job.run_dir)
                runfiles.append_event(job.run_dir, "queued", reason, executor=self.name, job_id=job_id,
                                      snapshot=job.snapshot, attempt=record.attempt if record else 0)
                out.append(Submitted(job.run_id, job_id, "queued"))
        return out

    @classmethod
    def alive(cls, jobs: list[tuple[Path, JobRecord]]) -> list[bool | None]:
        """One squeue for the whole batch. Without squeue: a job that ran is judged by its heartbeat;
        one that never reported may still be pending, so the answer is None (cannot tell)."""
        if not jobs:
            return []
        try:
            queue: dict[str, tuple[str, str]] | None = squeue_states()
        except SlurmError:
            queue = None
        out: list[bool | None] = []
        for run_dir, job in jobs:
            if not job.live or not job.job_id:
                out.append(False)
            elif queue is not None:
                entry = queue.get(str(job.job_id))
                out.append(entry is not None and entry[0] in ACTIVE_SQUEUE_STATES)
            elif job.state == "queued" and runfiles.heartbeat_age_s(run_dir) is None:
                out.append(None)
            else:
                out.append(heartbeat_fresh(run_dir))
        return out

    @classmethod
    def cancel(cls, run_dir: Path, job: JobRecord) -> str:
        runfiles.request_cancel(run_dir)
        what = "marked cancelled"
        if job.job_id and job.live:
            try:
                _run(["scancel", str(job.job_id)])
                what = f"scancel {job.job_id}"
            except SlurmError as e:
                what = f"marked cancelled ({e})"
        runfiles.update_job(run_dir, state="cancelled", reason="cancelled by user")
        runfiles.append_event(run_dir, "cancelled", "cancelled by user", executor=cls.name, job_id=job.job_id,
                              attempt=job.attempt)
        return what


def _trainer(job: Job, nproc: int, python: str | None) -> list[str]:
    from cemctl.executors.base import trainer_argv

    return trainer_argv(job.run_dir, max(nproc, job.nproc), python=python)


def _shell_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)
