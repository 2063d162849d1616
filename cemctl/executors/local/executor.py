"""The local executor: a queue of jobs over GPU slots or a CPU worker pool (`cemctl launch --executor local`).

Jobs wait in a queue and start only when a slot is free (`pinning.py` decides
which slot: one job per GPU by default, `--jobs-per-gpu`, `--gpus-per-run` for
torchrun; without a GPU, `--workers` CPU workers sharing the cores). Each job
runs in its own session with `CUDA_VISIBLE_DEVICES` / `OMP_NUM_THREADS` set,
its stdout+stderr appended to `<run_dir>/executor.log`, and its state recorded
in `job.json` / `events.jsonl` (`cem_core.runfiles`).

A job that dies (a signal, an exit without result.json) is recorded as failed
with the reason and the orchestrator goes on with the others. A trainer that
was preempted (SIGTERM, SIGUSR1 or SIGUSR2 to it: it checkpoints its step and
exits with `EXIT_PREEMPTED`) is restarted from that checkpoint, at most
`max_restarts` times per launch, unless the run was cancelled. Ctrl-C (or
SIGTERM to the orchestrator) terminates the children (SIGTERM: each trainer
checkpoints the step it is in; SIGKILL after `term_timeout_s`) and leaves every
unfinished run resumable: the next `cemctl launch` starts queued runs and
resumes interrupted ones from their newest checkpoint.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from cem_core import runfiles
from cem_core.errors import ConfigError
from cem_core.runfiles import JobRecord
from cemctl.executors.base import Executor, Job, Submitted, exit_state, heartbeat_fresh, pid_alive
from cemctl.executors.local.pinning import Slot, SlotPool, cpu_slots, gpu_slots


@dataclass
class LocalOptions:
    gpus: list[int] | None = None  # None: detect; []: CPU only
    jobs_per_gpu: int = 1
    gpus_per_run: int = 1
    workers: int | None = None  # CPU workers (None: one per core, one thread each)
    cores: int | None = None  # CPU cores to split (None: all)
    poll_s: float = 0.5
    term_timeout_s: float = 30.0
    max_restarts: int = 3  # restarts of a preempted trainer per launch


@dataclass
class JobStatus:
    """The orchestrator's live view of one job (for the progress display)."""

    job: Job
    state: str = "queued"  # queued | running | done | diverged | failed | cancelled | interrupted
    slot: str = ""
    pid: int | None = None
    started_time: float | None = None
    ended_time: float | None = None
    reason: str = ""
    attempt: int = 0
    restarts: int = 0  # after preemption, in this launch


def detect_gpus() -> list[int]:
    """GPU indices visible to this process, without importing torch ($CUDA_VISIBLE_DEVICES, else nvidia-smi)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [int(x) for x in visible.split(",") if x.strip().isdigit()]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(x) for x in out.stdout.split() if x.strip().isdigit()] if out.returncode == 0 else []


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def max_workers() -> int:
    """The most CPU workers (`--workers`) or tokenizer processes (`--data-workers`) a command takes: 4 per core."""
    return 4 * cpu_count()


def check_workers(value: int | None, option: str = "--workers") -> None:
    """`value` is None or 1..max_workers(); ConfigError naming `option` otherwise."""
    if value is not None and not 1 <= value <= max_workers():
        raise ConfigError(option, f"must be between 1 and {max_workers()} (4 per CPU core here), got {value}",
                          allowed=f"1..{max_workers()}")


def check_gpus(gpus: list[int] | None) -> None:
    """GPUs named on the command line (`--gpus`) must be on this machine: a missing one silently meant training
    on the CPU (CUDA_VISIBLE_DEVICES naming no device). ConfigError listing the GPUs found otherwise."""
    if not gpus:
        return
    present = detect_gpus()
    missing = [g for g in gpus if g not in present]
    if missing:
        named = f"GPU {missing[0]} is" if len(missing) == 1 else f"GPUs {', '.join(map(str, missing))} are"
        raise ConfigError("--gpus", f"{named} not on this machine",
                          allowed=",".join(map(str, present)) if present else "none found: use --gpus none for the CPU")


def make_slots(options: LocalOptions) -> list[Slot]:
    check_workers(options.workers)
    gpus = detect_gpus() if options.gpus is None else list(options.gpus)
    cores = options.cores or cpu_count()
    if gpus:
        n_groups = len(gpus) // max(1, options.gpus_per_run)
        threads = max(1, cores // max(1, n_groups * options.jobs_per_gpu))
        return gpu_slots(gpus, jobs_per_gpu=options.jobs_per_gpu, gpus_per_run=options.gpus_per_run, threads=threads)
    if options.gpus_per_run > 1:
        raise ConfigError("--gpus-per-run", f"needs GPUs, but none was found or given (got {options.gpus_per_run})")
    return cpu_slots(cores, options.workers)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


class LocalExecutor(Executor):
    """Runs jobs on this machine, in the foreground, `len(slots)` at a time."""

    name = "local"

    @classmethod
    def from_launch(cls, options: Mapping[str, Any], *, grid_table: Mapping[str, Any], source: str, runs_root: Path,
                    on_tick: Callable[..., None] | None = None) -> "LocalExecutor":
        """--gpus, --jobs-per-gpu, --gpus-per-run, --workers (a grid has no [local] table)."""
        check_gpus(options.get("gpus"))
        opts = LocalOptions(gpus=options.get("gpus"), jobs_per_gpu=options.get("jobs_per_gpu", 1),
                            gpus_per_run=options.get("gpus_per_run", 1), workers=options.get("workers"))
        return cls(opts, on_tick=on_tick)

    def __init__(self, options: LocalOptions | None = None, *, on_tick: Callable[[list[JobStatus]], None] | None = None) -> None:
        self.options = options or LocalOptions()
        self.slots = make_slots(self.options)
        self.on_tick = on_tick
        self.statuses: list[JobStatus] = []
        self._procs: dict[str, tuple[subprocess.Popen[bytes], Slot, Any]] = {}
        self._queue: deque[JobStatus] = deque()

    # -- records ------------------------------------------------------------
    def _job_id(self, pid: int | None = None) -> str:
        return f"{runfiles.hostname()}:{pid or os.getpid()}"

    def _record_queued(self, st: JobStatus) -> None:
        prev = runfiles.read_job(st.job.run_dir)
        st.attempt = prev.attempt if prev else 0
        runfiles.write_job(st.job.run_dir, JobRecord(
            executor=self.name, job_id=self._job_id(), host=runfiles.hostname(), state="queued", attempt=st.attempt,
            snapshot=st.job.snapshot, submitted_time=time.time(), orchestrator_pid=os.getpid(),
            orchestrator_start=runfiles.process_start(os.getpid()),
            logs=[str(Path(st.job.run_dir).resolve() / runfiles.EXECUTOR_LOG)],
        ))
        reason = "local executor" + (f", code snapshot {st.job.snapshot}" if st.job.snapshot else "")
        runfiles.append_event(st.job.run_dir, "queued", reason, attempt=st.attempt, executor=self.name,
                              job_id=self._job_id(), snapshot=st.job.snapshot)

    # -- process control ------------------------------------------------------
    def _start(self, st: JobStatus, slot: Slot) -> None:
        job = st.job
        st.attempt += 1
        cmd = job.command()
        env = dict(os.environ)
        env.update(slot.env())
        env.update(job.env)
        token = secrets.token_hex(12)  # the job's process proves it is this job's with it (cem_core.runfiles.process)
        env.update({"CEMCTL_EXECUTOR": self.name, "CEMCTL_ATTEMPT": str(st.attempt), runfiles.TOKEN_ENV: token})
        try:
            log = open(Path(job.run_dir) / runfiles.EXECUTOR_LOG, "ab")
        except OSError as e:  # a run directory deleted or made read-only under us: this run only
            self._finish(st, None, reason=f"cannot write {Path(job.run_dir) / runfiles.EXECUTOR_LOG}: {e.strerror or e}",
                         state="failed")
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"=== {stamp} attempt {st.attempt} on {slot.label} ({runfiles.hostname()}): {' '.join(cmd)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            log.close()
            self._finish(st, None, reason=f"could not start {cmd[0]}: {e}", state="failed")
            return
        self._procs[job.run_id] = (proc, slot, log)
        st.state, st.slot, st.pid, st.started_time = "running", slot.label, proc.pid, time.time()
        job_id = self._job_id(proc.pid)
        _quietly(runfiles.update_job, job.run_dir, state="running", job_id=job_id, pid=proc.pid, attempt=st.attempt,
                 started_time=st.started_time, slot=slot.label, pid_start=runfiles.process_start(proc.pid), token=token)
        # No "running" event here: the trainer writes it (and counts its attempts from those events).

    def _finish(self, st: JobStatus, returncode: int | None, *, reason: str = "", state: str | None = None) -> None:
        run_dir = st.job.run_dir
        has_result = False
        if state is None:
            from cem_core.runfiles.failure import EXPERIMENT_ENV

            state, reason, has_result = exit_state(run_dir, returncode, st.job.env.get(EXPERIMENT_ENV, ""))
        st.state, st.reason, st.ended_time = state, reason, time.time()
        # A run directory deleted or made read-only under the orchestrator fails that run, never the others.
        _quietly(runfiles.update_job, run_dir, state="cancelled" if state == "cancelled" else "exited",
                 exit_code=returncode, ended_time=st.ended_time, reason=reason)
        # The trainer records its own terminal event with result.json (and its `stale` event when preempted).
        if not has_result and state != "cancelled" and returncode != runfiles.EXIT_PREEMPTED:
            _quietly(runfiles.append_event, run_dir, state, reason, attempt=st.attempt, executor=self.name,
                     job_id=self._job_id(st.pid), exit_code=returncode)

    def _poll(self, by_id: dict[str, JobStatus], pool: SlotPool) -> None:
        for run_id, (proc, slot, log) in list(self._procs.items()):
            rc = proc.poll()
            if rc is None:
                continue
            log.close()
            del self._procs[run_id]
            pool.release(slot)
            st = by_id[run_id]
            self._finish(st, rc)
            if (rc == runfiles.EXIT_PREEMPTED and st.state == "stale" and st.restarts < self.options.max_restarts
                    and not runfiles.cancel_requested(st.job.run_dir)):
                self._requeue(st)

    def _requeue(self, st: JobStatus) -> None:
        """Queue a preempted job again: it resumes from the checkpoint it wrote when it stopped."""
        st.restarts += 1
        st.state, st.reason = "queued", f"preempted; restarting from its checkpoint ({st.restarts} of {self.options.max_restarts})"
        _quietly(runfiles.update_job, st.job.run_dir, state="queued", reason=st.reason)
        _quietly(runfiles.append_event, st.job.run_dir, "queued", st.reason, attempt=st.attempt, executor=self.name,
                 job_id=self._job_id())
        self._queue.append(st)

    def _terminate_all(self, reason: str) -> None:
        """SIGTERM every running job's process group, SIGKILL what is left after term_timeout_s."""
        for proc, _, _ in self._procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.time() + self.options.term_timeout_s
        for proc, _, _ in self._procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        by_id = {st.job.run_id: st for st in self.statuses}
        for run_id, (proc, _, log) in list(self._procs.items()):
            log.close()
            st = by_id[run_id]
            result = runfiles.read_result(st.job.run_dir)
            if result:
                self._finish(st, proc.returncode)
                continue
            st.state, st.reason, st.ended_time = "interrupted", reason, time.time()
            _quietly(runfiles.update_job, st.job.run_dir, state="interrupted", exit_code=proc.returncode,
                     ended_time=st.ended_time, reason=reason)
            # "stale": not finished, not running, resumable (events use the run states of docs/design.md).
            _quietly(runfiles.append_event, st.job.run_dir, "stale", reason, attempt=st.attempt, executor=self.name,
                     job_id=self._job_id(st.pid))
        self._procs.clear()
        for st in self.statuses:
            if st.state == "queued":
                st.state, st.reason = "interrupted", "orchestrator interrupted before it started; launch again to run it"
                _quietly(runfiles.update_job, st.job.run_dir, state="interrupted", reason=st.reason)
                _quietly(runfiles.append_event, st.job.run_dir, "planned", st.reason, attempt=st.attempt,
                         executor=self.name, job_id=self._job_id())

    # -- the loop -------------------------------------------------------------
    def submit(self, jobs: list[Job]) -> list[Submitted]:
        """Run every job to its end (foreground). Ctrl-C / SIGTERM: children are stopped, runs stay resumable."""
        self.statuses = [JobStatus(job=j) for j in jobs]
        by_id = {st.job.run_id: st for st in self.statuses}
        for st in self.statuses:
            try:
                self._record_queued(st)
            except OSError as e:  # this run's folder is gone or unwritable: report it, run the others
                st.state, st.reason = "failed", f"cannot record the job in {st.job.run_dir}: {e.strerror or e}"
        queue = self._queue = deque(st for st in self.statuses if st.state == "queued")
        pool = SlotPool(self.slots)
        previous = signal.getsignal(signal.SIGTERM)
        previous_int = signal.getsignal(signal.SIGINT)

        def _on_sigterm(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        in_main = _in_main_thread()
        if in_main:
            signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            while queue or self._procs:
                while queue and pool.free:
                    st = queue.popleft()
                    if runfiles.cancel_requested(st.job.run_dir):
                        st.state, st.reason = "cancelled", "cancelled before it started"
                        _quietly(runfiles.update_job, st.job.run_dir, state="cancelled", reason=st.reason)
                        continue
                    slot = pool.acquire()
                    assert slot is not None
                    self._start(st, slot)
                    if st.state != "running":
                        pool.release(slot)
                if self.on_tick:
                    self.on_tick(self.statuses)
                time.sleep(self.options.poll_s)
                self._poll(by_id, pool)
            if self.on_tick:
                self.on_tick(self.statuses)
        except KeyboardInterrupt:
            if in_main:  # a second Ctrl-C must not leave children behind: they get SIGKILL after term_timeout_s
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                self._terminate_all("interrupted (Ctrl-C / SIGTERM to the orchestrator); resumable from its last checkpoint")
            finally:
                if in_main:
                    signal.signal(signal.SIGINT, previous_int)
            if self.on_tick:
                self.on_tick(self.statuses)
            raise
        finally:
            if in_main:
                signal.signal(signal.SIGTERM, previous)
        return [Submitted(st.job.run_id, self._job_id(st.pid), st.state, st.reason) for st in self.statuses]

    # -- other processes' jobs -----------------------------------------------
    @classmethod
    def owns_process(cls, run_dir: Path, job: JobRecord) -> bool:
        """The recorded process (the job's, or while queued its orchestrator's) is alive and is the one recorded:
        same start time and, for the job, its token (a reused PID is never taken for it)."""
        written = _mtime(Path(run_dir) / runfiles.JOB_FILE)  # an older record: its process started before it
        if job.state == "running":
            found = runfiles.process_matches(job.pid, job.pid_start, job.token,
                                             legacy_words=(str(Path(run_dir).resolve()), "cem_core.train"),
                                             legacy_not_after=written)
            return pid_alive(job.pid) if found is None else found
        found = runfiles.process_matches(job.orchestrator_pid, job.orchestrator_start, legacy_words=("cemctl",),
                                         legacy_not_after=written)
        return pid_alive(job.orchestrator_pid) if found is None else found

    @classmethod
    def alive(cls, jobs: list[tuple[Path, JobRecord]]) -> list[bool | None]:
        """A job on this host is alive while its recorded process (or, still queued, its orchestrator) is alive
        and is still that process; one on another host while its heartbeat is fresh."""
        out: list[bool | None] = []
        for run_dir, job in jobs:
            if not job.live:
                out.append(False)
            elif job.host != runfiles.hostname():
                out.append(heartbeat_fresh(run_dir))
            else:
                out.append(cls.owns_process(run_dir, job))
        return out

    @classmethod
    def gone_reason(cls, run_dir: Path, job: JobRecord) -> str:
        """Why a job recorded on this host is not alive, in words."""
        if job.state == "running":
            return f"its trainer is not running: {runfiles.describe_mismatch(job.pid, job.pid_start)}; resumable"
        return "the local orchestrator that queued it is gone; launch again to run it"

    @classmethod
    def cancel(cls, run_dir: Path, job: JobRecord) -> str:
        runfiles.request_cancel(run_dir)
        what = "marked cancelled"
        if job.state == "running" and job.host == runfiles.hostname() and job.pid:
            if cls.owns_process(run_dir, job):
                _signal_group(int(job.pid), signal.SIGTERM)
                what = f"sent SIGTERM to process group {job.pid}"
            else:
                what = f"marked cancelled (no signal sent: {runfiles.describe_mismatch(job.pid, job.pid_start)})"
        elif job.live and job.host not in (None, runfiles.hostname()):
            what = f"marked cancelled (job runs on {job.host}; it will not be restarted)"
        runfiles.update_job(run_dir, state="cancelled", reason="cancelled by user")
        runfiles.append_event(run_dir, "cancelled", "cancelled by user", executor=cls.name, job_id=job.job_id,
                              attempt=job.attempt)
        return what


def _quietly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """A bookkeeping write that may fail (the run's folder is gone or read-only) without stopping the others."""
    try:
        fn(*args, **kwargs)
    except OSError:
        pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
