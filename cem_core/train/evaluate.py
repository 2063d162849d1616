"""Held-out loss and perplexity of a model (`python -m cem_core.train RUN_DIR`, `cemctl eval`).

The evaluation set is fixed and documented: the first `n_tokens` tokens of a
split, read in order as `n_tokens // seq_len` whole sequences of `seq_len`
predicted tokens each (sequence i = tokens[i*L : (i+1)*L + 1]), so it is the
same for every run with the same data config and context. If the split has
fewer sequences, all of them are used (and the count actually evaluated is
returned, recorded in result.json). If it has not even one full sequence, the
whole split is one shorter sequence. Perplexity = exp(mean token NLL).

Under data parallelism the sequences are shared out round-robin between ranks
and the sums are all-reduced, so every rank returns the same numbers.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class EvalResult:
    loss: float  # mean token NLL (nats)
    tokens: int  # predicted tokens evaluated

    @property
    def ppl(self) -> float | None:
        return perplexity(self.loss)


def perplexity(loss: float | None) -> float | None:
    """exp(mean token NLL); None when the loss is missing, not finite, or its exponential overflows a float."""
    if loss is None or not math.isfinite(loss) or loss >= 700:
        return None
    return math.exp(loss)


def eval_sequences(data: Any, split: str, seq_len: int, n_tokens: int) -> tuple[int, int]:
    """(number of sequences, length) of the fixed evaluation set of a split."""
    n_avail = int(data.num_sequences(split, seq_len))
    if n_avail >= 1:
        return min(n_avail, max(1, n_tokens // seq_len)), seq_len
    n_split = len(data.tokens(split))
    if n_split < 2:
        raise ValueError(f"split {split!r} has {n_split} tokens: nothing to evaluate")
    return 1, min(n_split - 1, max(1, n_tokens))


def _batch(data: Any, split: str, length: int, full_seq: bool, idx: np.ndarray) -> torch.Tensor:
    if full_seq:
        return torch.as_tensor(np.asarray(data.sequences(split, length, idx)), dtype=torch.long)
    tokens = np.asarray(data.tokens(split)[: length + 1], dtype=np.int64)
    return torch.as_tensor(tokens[None, :])


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: Any, split: str, *, seq_len: int, n_tokens: int,
             micro_batch_seqs: int, device: torch.device,
             autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
             rank: int = 0, world_size: int = 1) -> EvalResult:
    """Mean NLL over the fixed first-`n_tokens` evaluation set of `split`."""
    n_seqs, length = eval_sequences(data, split, seq_len, n_tokens)
    full_seq = length == seq_len
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # (sum NLL, tokens)
    try:
        mine = np.arange(rank, n_seqs, world_size, dtype=np.int64)
        for start in range(0, len(mine), micro_batch_seqs):
            idx = mine[start:start + micro_batch_seqs]
            batch = _batch(data, split, length, full_seq, idx).to(device, non_blocking=True)
            x, y = batch[:, :-1], batch[:, 1:]
            with autocast():
                _, loss = model(x, y)
            total[0] += loss.double() * y.numel()
            total[1] += y.numel()
    finally:
        model.train(was_training)
    if world_size > 1:
        dist.all_reduce(total)
    nll, count = float(total[0]), int(total[1])
    return EvalResult(loss=nll / max(1, count), tokens=count)
