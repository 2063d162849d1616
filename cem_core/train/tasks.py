"""What the training engine trains on: a `Task` (`python -m cem_core.train RUN_DIR`).

The engine (`cem_core.train.loop`) owns the recipe, the data order, the
checkpoints and the run-directory files; a task owns everything that differs
between language modelling and the GP regression study:

    task = make_task(cfg, device, world)       # `task` from cem_core.variants.TASKS
    task.num_train, task.tokens_per_step       # what the sampler draws from; tokens (or examples) per step
    model = task.build_model()
    x, y = task.train_batch(indices)           # on the device
    task.evaluate(model, "val" | "test", autocast=..., rank=..., world_size=...) -> (loss, tokens)
    task.diagnostics(rd, model, step, tokens)  # optional per-evaluation extras (energy lines)
    task.info                                  # what result.json records of the task itself
    Task.result_fields(cfg, examples=, val_loss=, test_loss=, **info) -> extra result.json fields (static:
                                               # a run that fails before its task is up still gets them)
    Task.quality(loss) -> "ppl 12.3" | "rmse 0.41";  task.unit -> "tokens" | "examples"

`LMTask` is the language model's; `cem_core.gp.task.GPTask` the GP study's.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np
import torch

from cem_core.config import RunConfig, energy_layers, tokens_per_step
from cem_core.errors import ConfigError
from cem_core.train.evaluate import evaluate, perplexity

if TYPE_CHECKING:  # pragma: no cover
    from cem_core.runfiles import RunDir

log = logging.getLogger("cem_core.train")

AutocastFn = Callable[[], contextlib.AbstractContextManager]


class EvalLike(Protocol):
    loss: float
    tokens: int


class Task(Protocol):
    unit: str
    num_train: int
    tokens_per_step: int

    def build_model(self) -> torch.nn.Module: ...

    def train_batch(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]: ...

    def evaluate(self, model: torch.nn.Module, split: str, *, autocast: AutocastFn, rank: int,
                 world_size: int) -> EvalLike: ...

    def diagnostics(self, rd: "RunDir", model: torch.nn.Module, step: int, tokens: int) -> None: ...

    @property
    def info(self) -> dict[str, Any]: ...


class LMTask:
    """Next-token prediction on the packed corpus of `cfg.data` (rank 0 prepares the cache first)."""

    unit = "tokens"

    def __init__(self, cfg: RunConfig, device: torch.device, world: Any = None) -> None:
        from cem_core.data import data_for_run

        self.cfg, self.device = cfg, device
        self.seq_len = cfg.model.context_len
        self.tokens_per_step = tokens_per_step(cfg)
        rank0 = world is None or world.rank == 0
        data = data_for_run(cfg) if rank0 else None
        if world is not None:
            world.barrier()
        self.data = data if data is not None else data_for_run(cfg)
        if self.data.vocab_size > cfg.model.vocab_size:
            raise ConfigError("model.vocab_size", f"is {cfg.model.vocab_size} but the tokenizer has {self.data.vocab_size} tokens")
        self.num_train = int(self.data.num_sequences("train", self.seq_len))
        if self.num_train < 1:
            raise ValueError(f"the train split has fewer than {self.seq_len + 1} tokens (model.context_len={self.seq_len})")
        self.energy_layers = energy_layers(cfg)

    def build_model(self) -> torch.nn.Module:
        from cem_core.model import build_model

        return build_model(self.cfg.model)

    def train_batch(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        batch = torch.as_tensor(np.asarray(self.data.sequences("train", self.seq_len, idx)), dtype=torch.long)
        batch = batch.to(self.device, non_blocking=True)  # [n, L + 1]: inputs and shifted targets
        return batch[:, :-1], batch[:, 1:]

    def evaluate(self, model: torch.nn.Module, split: str, *, autocast: AutocastFn, rank: int = 0,
                 world_size: int = 1) -> EvalLike:
        t = self.cfg.train
        return evaluate(model, self.data, split, seq_len=self.seq_len,  # type: ignore[return-value]
                        n_tokens=t.val_tokens if split == "val" else t.test_tokens,
                        micro_batch_seqs=t.micro_batch_seqs, device=self.device, autocast=autocast, rank=rank,
                        world_size=world_size)

    def diagnostics(self, rd: "RunDir", model: torch.nn.Module, step: int, tokens: int) -> None:
        """`train.energy_layers`: energies along the CEM recursion on the first val sequences.

        One metrics line per (layer, sublayer, recursion step t): {"kind": "energy",
        "step" (optimizer step), "tokens", "layer", "sublayer", "t", "energy",
        "descent_frac"}; nothing for layers without CEM sublayers. A failure is
        logged, never the end of the run.
        """
        if not self.energy_layers:
            return
        from cem_core.model.energy import energy_diagnostics

        try:
            n = min(self.cfg.train.micro_batch_seqs, int(self.data.num_sequences("val", self.seq_len)))
            if n < 1:
                return
            batch = torch.as_tensor(np.asarray(self.data.sequences("val", self.seq_len, np.arange(n))),
                                    dtype=torch.long).to(self.device)
            was_training = model.training
            model.eval()
            try:
                rows = energy_diagnostics(model, batch[:, :-1], self.energy_layers)
            finally:
                model.train(was_training)
            for row in rows:
                rd.append_metrics({"kind": "energy", "step": step, "tokens": tokens, "layer": row["layer"],
                                   "sublayer": row["sublayer"], "t": row["step"], "energy": row["energy"],
                                   "descent_frac": row["descent_frac"]})
        except Exception as e:  # noqa: BLE001 - a diagnostic must not end the run
            log.warning("energy diagnostics failed at step %d: %s", step, e)

    info: dict[str, Any] = {}

    @staticmethod
    def result_fields(cfg: RunConfig, *, examples: int, val_loss: float | None, test_loss: float | None,
                      **_: Any) -> dict[str, Any]:
        return {}

    @staticmethod
    def quality(loss: float | None) -> str:
        ppl = perplexity(loss)
        return "n/a" if loss is None else "ppl overflows" if ppl is None else f"ppl {ppl:.2f}"


def task_class(cfg: RunConfig) -> Any:
    """The class of the task named by `cfg.task` (cem_core.variants.TASKS)."""
    from cem_core.variants import TASKS

    return TASKS.get(cfg.task)


def make_task(cfg: RunConfig, device: torch.device, world: Any = None) -> Task:
    """The task named by `cfg.task`, set up on `device` (data prepared, model not built yet)."""
    return task_class(cfg)(cfg, device, world)
