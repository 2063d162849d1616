"""What the training engine needs for task = "gp" (`python -m cem_core.train RUN_DIR` of experiments/gp.toml).

The engine (`cem_core.train.loop`) keeps its recipe, data order, checkpoints and
run-directory files; for a GP run it takes from here the data, the model, the
batches and the evaluation:

- data: `make_gp_dataset(cfg.gp)` (cached under `data.cache_dir` / `$CEMCTL_CACHE`),
  held as tensors on the device; the train set is `train.batch_seqs` examples per step,
  in the engine's deterministic order (its sampler over the n_train examples);
- model: `GPRegressor(cfg.model, cfg.gp)`; loss = mean squared error;
- evaluation: the whole val / test split (fixed), loss = MSE, RMSE = sqrt(MSE);
- accounting: an example plays the part of a token (`tokens` in metrics lines and
  result.json count examples seen); `flops_per_token` = forward FLOPs per example.

`gp_result_fields` gives the result.json values that differ from the language
model's: GP parameter and FLOP counts, `test_rmse`, `val_rmse`, `bayes_rmse` (the
GP posterior mean's test RMSE, when the data is loaded) and null perplexities.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from cem_core.config import RunConfig
from cem_core.gp.counts import gp_flops_per_example, gp_param_counts
from cem_core.gp.data import SPLITS, GPData, make_gp_dataset
from cem_core.gp.model import GPRegressor


@dataclass(frozen=True)
class GPEvalResult:
    loss: float  # mean squared error over the split
    tokens: int  # examples evaluated

    @property
    def rmse(self) -> float:
        return math.sqrt(self.loss) if self.loss >= 0 else float("nan")

    @property
    def ppl(self) -> None:  # the engine's LM field; no perplexity for regression
        return None


class GPTask:
    """The GP dataset on a device, with the batches and evaluation the engine calls (`cem_core.train.tasks.Task`)."""

    unit = "examples"

    def __init__(self, cfg: RunConfig, device: torch.device | str = "cpu", world: Any = None,
                 data: GPData | None = None) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.tokens_per_step = cfg.train.batch_seqs  # an example plays the part of a token
        self.data = data if data is not None else make_gp_dataset(cfg.gp, cache_dir=cfg.data.cache_dir)
        self._tensors = {}
        for name in SPLITS:
            x, y = self.data.split(name)
            self._tensors[name] = (torch.from_numpy(np.ascontiguousarray(x)).to(self.device),
                                   torch.from_numpy(np.ascontiguousarray(y)).to(self.device))

    @property
    def num_train(self) -> int:
        return int(self.data.x_train.shape[0])

    def build_model(self) -> GPRegressor:
        return GPRegressor(self.cfg.model, self.cfg.gp)

    def train_batch(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batch("train", idx)

    def diagnostics(self, rd: Any, model: torch.nn.Module, step: int, tokens: int) -> None:
        """No per-evaluation extras for the GP study."""

    @property
    def info(self) -> dict[str, Any]:
        """What result.json records of the task itself: the GP posterior mean's test RMSE."""
        return {"bayes_rmse": self.data.bayes_rmse}

    @staticmethod
    def result_fields(cfg: RunConfig, *, examples: int, val_loss: float | None, test_loss: float | None,
                      bayes_rmse: float | None = None, **_: Any) -> dict[str, Any]:
        return gp_result_fields(cfg, examples=examples, val_loss=val_loss, test_loss=test_loss, bayes_rmse=bayes_rmse)

    @staticmethod
    def quality(loss: float | None) -> str:
        if loss is None:
            return "n/a"
        return f"rmse {math.sqrt(loss):.4f}" if loss >= 0 else "rmse nan"

    def batch(self, split: str, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(x [n, D], y [n]) of the examples `idx` of a split, on the device."""
        x, y = self._tensors[split]
        index = torch.as_tensor(np.asarray(idx, dtype=np.int64), device=self.device)
        return x.index_select(0, index), y.index_select(0, index)

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, split: str, *, micro_batch: int | None = None,
                 autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 rank: int = 0, world_size: int = 1) -> GPEvalResult:
        """MSE over the whole split (examples shared round-robin between ranks, sums all-reduced)."""
        x_all, y_all = self._tensors[split]
        micro_batch = micro_batch or self.cfg.train.micro_batch_seqs
        was_training = model.training
        model.eval()
        total = torch.zeros(2, dtype=torch.float64, device=self.device)  # (sum of squared errors, count)
        try:
            mine = np.arange(rank, len(y_all), world_size, dtype=np.int64)
            for start in range(0, len(mine), micro_batch):
                x, y = self.batch(split, mine[start:start + micro_batch])
                with autocast():
                    pred, _ = model(x)
                total[0] += ((pred.double() - y.double()) ** 2).sum()
                total[1] += len(y)
        finally:
            model.train(was_training)
        if world_size > 1:
            dist.all_reduce(total)
        count = int(total[1])
        return GPEvalResult(loss=float(total[0]) / max(1, count), tokens=count)


def gp_result_fields(cfg: RunConfig, *, examples: int, val_loss: float | None, test_loss: float | None,
                     bayes_rmse: float | None = None) -> dict[str, Any]:
    """The result.json values of a GP run that replace or extend the language model's."""
    counts = gp_param_counts(cfg.model, cfg.gp)
    fpe = gp_flops_per_example(cfg.model, cfg.gp)

    def rmse(loss: float | None) -> float | None:
        return math.sqrt(loss) if loss is not None and loss >= 0 else None

    return {
        "test_ppl": None, "val_ppl": None,
        "params_total": counts["total"], "params_non_embedding": counts["non_embedding"],
        "flops_per_token": fpe, "flops_per_example": fpe, "flops": fpe, "train_flops": 3 * fpe * examples,
        "test_rmse": rmse(test_loss), "val_rmse": rmse(val_loss),
        "bayes_rmse": bayes_rmse,
        "examples": examples, "task": "gp", "gp_kernel": cfg.gp.kernel,
    }
