"""Which job gets which device, as pure functions (`cemctl launch --executor local`).

The local executor runs a fixed set of *slots*; a queued job takes the first
free slot and gives it back when it ends. On GPUs a slot is a tuple of device
indices (one per process of a multi-GPU run), exported to the job as
`CUDA_VISIBLE_DEVICES`; on the CPU a slot is a worker with `threads` cores
(`OMP_NUM_THREADS` / `CEMCTL_NUM_THREADS`). Nothing here touches a GPU, so the
pinning is tested on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from cem_core.errors import ConfigError


@dataclass(frozen=True)
class Slot:
    """One place a job can run: GPU devices (empty on the CPU) and CPU threads."""

    index: int
    devices: tuple[int, ...] = ()
    threads: int = 1

    def env(self) -> dict[str, str]:
        """Environment that pins a job to this slot."""
        env = {"OMP_NUM_THREADS": str(self.threads), "CEMCTL_NUM_THREADS": str(self.threads)}
        if self.devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in self.devices)
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU worker must not grab a GPU
        return env

    @property
    def label(self) -> str:
        if self.devices:
            return "gpu" + ",".join(str(d) for d in self.devices)
        return f"cpu{self.index}"


def parse_gpus(text: str | None) -> list[int] | None:
    """'0,1,3' -> [0, 1, 3]; None / '' -> None (auto-detect); 'none' / 'cpu' -> [] (no GPU)."""
    if text is None or text.strip() == "":
        return None
    if text.strip().lower() in ("none", "cpu"):
        return []
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ConfigError("--gpus", f"must be comma-separated device indices like 0,1,3, got {text!r}", allowed="0,1,... | none")
        if int(part) in out:
            raise ConfigError("--gpus", f"device {part} is listed twice in {text!r}")
        out.append(int(part))
    return out


def gpu_slots(gpus: Sequence[int], *, jobs_per_gpu: int = 1, gpus_per_run: int = 1, threads: int = 1) -> list[Slot]:
    """Slots over `gpus`: devices grouped `gpus_per_run` at a time, each group used by `jobs_per_gpu` jobs.

    Groups are consecutive in the given order (0,1 | 2,3 for gpus_per_run=2);
    devices left over that cannot form a whole group are not used. Slots are
    ordered so that consecutive jobs spread over different groups first.
    """
    if jobs_per_gpu < 1:
        raise ConfigError("--jobs-per-gpu", f"must be >= 1, got {jobs_per_gpu}")
    if gpus_per_run < 1:
        raise ConfigError("--gpus-per-run", f"must be >= 1, got {gpus_per_run}")
    if gpus_per_run > len(gpus):
        raise ConfigError("--gpus-per-run", f"needs {gpus_per_run} GPUs per run but only {len(gpus)} given ({list(gpus)})")
    groups = [tuple(gpus[i : i + gpus_per_run]) for i in range(0, len(gpus) - gpus_per_run + 1, gpus_per_run)]
    slots: list[Slot] = []
    for _ in range(jobs_per_gpu):
        for group in groups:
            slots.append(Slot(index=len(slots), devices=group, threads=threads))
    return slots


def cpu_slots(cores: int, workers: int | None = None) -> list[Slot]:
    """`workers` CPU workers splitting `cores`: each gets max(1, cores // workers) threads.

    With `workers` unset: one worker per core, each with one thread (the small models of the CPU
    scales train faster as independent single-threaded processes than as fewer multi-threaded ones).
    """
    cores = max(1, int(cores))
    if workers is None or workers == 0:
        workers = cores
    if workers < 1:
        raise ConfigError("--workers", f"must be >= 1, got {workers}")
    threads = max(1, cores // workers)
    return [Slot(index=i, devices=(), threads=threads) for i in range(workers)]


class SlotPool:
    """First-free-slot assignment: `acquire()` -> Slot | None, `release(slot)`."""

    def __init__(self, slots: Sequence[Slot]) -> None:
        if not slots:
            raise ConfigError("slots", "no slot to run jobs on (no GPU group and no CPU worker)")
        self.slots = list(slots)
        self._busy: set[int] = set()

    def acquire(self) -> Slot | None:
        for slot in self.slots:
            if slot.index not in self._busy:
                self._busy.add(slot.index)
                return slot
        return None

    def release(self, slot: Slot) -> None:
        self._busy.discard(slot.index)

    @property
    def free(self) -> int:
        return len(self.slots) - len(self._busy)

    @property
    def busy(self) -> int:
        return len(self._busy)


def assign(n_jobs: int, slots: Sequence[Slot]) -> list[Slot | None]:
    """The slot each of the first jobs of a queue starts on when all slots are free
    (None: the job waits for a slot to be released)."""
    pool = SlotPool(slots)
    return [pool.acquire() for _ in range(n_jobs)]
