"""Preemption: SIGTERM, SIGUSR1 or SIGUSR2 stop a run after its step, with a checkpoint (`cem_core.train.attempt`).

Not part of the code fingerprint: when a run stops decides nothing about the numbers it produces.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import torch
import torch.distributed as dist

PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class Preempted(Exception):
    """A preemption signal arrived: the run stopped after `step` with a checkpoint of it (not a failure)."""

    def __init__(self, step: int, signame: str, checkpointed: bool) -> None:
        super().__init__(f"preempted by {signame} after step {step}")
        self.step, self.signame, self.checkpointed = step, signame, checkpointed


class Preemption:
    """SIGTERM / SIGUSR1 / SIGUSR2 set a flag the training loop reads after each step (handlers of the main
    thread only; elsewhere, e.g. the library form run from a thread, signals keep their default)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def install(self) -> "Preemption":
        if threading.current_thread() is threading.main_thread():
            for sig in PREEMPT_SIGNALS:
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def requested(self, world: Any, device: torch.device) -> bool:
        """Whether any rank of `world` (`cem_core.train.loop.World`) got a preemption signal (every rank stops after
        the same step)."""
        flag = self.signum is not None
        if world.size > 1:
            t = torch.tensor([1 if flag else 0], dtype=torch.long, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = bool(int(t[0]))
        return flag

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "a peer rank's signal"
