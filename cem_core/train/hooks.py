"""Test hooks of the training loop, set by environment variables (tests of `cem_core.train` and executors).

They exist so that tests can provoke the outcomes a real run can have; they
do nothing unless set.

- `CEMCTL_TEST_NAN_AT_STEP=k`: the loss of optimizer step k becomes NaN (the
  run ends `diverged` at step k), on every attempt.
- `CEMCTL_TEST_CRASH_AT_STEP=k`: step k raises `RuntimeError` before it runs
  (the run ends `failed`; checkpoints up to step k-1 remain). Only on attempts
  <= `CEMCTL_TEST_CRASH_ATTEMPTS` (default 1), so a retry resumes and finishes.
- `CEMCTL_TEST_SLEEP_PER_STEP_S=x`: sleep x seconds before each step (slow a
  run down so a test can kill it mid-way).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


@dataclass(frozen=True)
class TestHooks:
    __test__ = False  # not a pytest class

    nan_at_step: int | None = None
    crash_at_step: int | None = None
    crash_attempts: int = 1
    sleep_per_step_s: float = 0.0
    attempt: int = 1

    @classmethod
    def from_env(cls, attempt: int) -> "TestHooks":
        return cls(
            nan_at_step=_env_int("CEMCTL_TEST_NAN_AT_STEP"),
            crash_at_step=_env_int("CEMCTL_TEST_CRASH_AT_STEP"),
            crash_attempts=_env_int("CEMCTL_TEST_CRASH_ATTEMPTS") or 1,
            sleep_per_step_s=float(os.environ.get("CEMCTL_TEST_SLEEP_PER_STEP_S", "0") or 0),
            attempt=attempt,
        )

    def before_step(self, step: int) -> None:
        if self.sleep_per_step_s > 0:
            time.sleep(self.sleep_per_step_s)
        if self.crash_at_step == step and self.attempt <= self.crash_attempts:
            raise RuntimeError(f"test crash at step {step} (CEMCTL_TEST_CRASH_AT_STEP)")

    def loss(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        if self.nan_at_step == step:
            return loss * float("nan")
        return loss
