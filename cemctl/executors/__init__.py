"""Executors by name (`cemctl launch --executor local|slurm`, `cemctl cancel`).

`get_executor(name)` returns the executor class and rejects unknown names with
a `ConfigError` listing the known ones. Modules are imported lazily, so
`cemctl status` never pays for submitit.

    from cemctl.executors import get_executor
    Local = get_executor("local")
    Local(LocalOptions(workers=2)).submit(jobs)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from cem_core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from cemctl.executors.base import Executor

# name -> "module:Class"
EXECUTORS: dict[str, str] = {
    "local": "cemctl.executors.local:LocalExecutor",
    "slurm": "cemctl.executors.slurm:SlurmExecutor",
}


def executor_names() -> tuple[str, ...]:
    return tuple(EXECUTORS)


def get_executor(name: str) -> "type[Executor]":
    """The executor class registered under `name`."""
    if name not in EXECUTORS:
        raise ConfigError("--executor", f"unknown executor {name!r}", value=name, allowed=executor_names())
    module, cls = EXECUTORS[name].split(":")
    return getattr(importlib.import_module(module), cls)
