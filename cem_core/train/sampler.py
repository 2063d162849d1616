"""Deterministic data order for training (`python -m cem_core.train RUN_DIR`).

The train sequences are read as an endless stream of epochs; epoch e is the
permutation `np.random.default_rng([seed, e]).permutation(N)` of the N train
sequences. Optimizer step s (1-based) consumes stream positions
[(s-1)*B, s*B) with B = `train.batch_seqs`. Inside a step, micro-step a and
data-parallel rank r take the slice

    [(s-1)*B + (a*W + r)*b, (s-1)*B + (a*W + r + 1)*b)

(b = micro batch, W = world size). So the batch of (step, micro-step, rank) is
a pure function of (seed, s, a, r): resuming needs no data RNG state, ranks
take disjoint slices of the same global batch, and 2 ranks x micro b see the
same sequences in each accumulation round as 1 rank x micro 2b.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=4)
def _epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    perm.setflags(write=False)
    return perm


def stream_indices(seed: int, n: int, start: int, count: int) -> np.ndarray:
    """Sequence indices at stream positions [start, start + count)."""
    if n < 1:
        raise ValueError("no train sequences")
    pos = np.arange(start, start + count, dtype=np.int64)
    epochs, offsets = np.divmod(pos, n)
    out = np.empty(count, dtype=np.int64)
    for e in np.unique(epochs):
        sel = epochs == e
        out[sel] = _epoch_permutation(seed, int(e), n)[offsets[sel]]
    return out


class BatchSampler:
    """Indices of the train sequences for each (step, micro-step, rank)."""

    def __init__(self, *, seed: int, num_sequences: int, batch_seqs: int, micro_batch_seqs: int,
                 world_size: int = 1) -> None:
        per_round = micro_batch_seqs * world_size
        if batch_seqs % per_round:
            raise ValueError(f"batch_seqs={batch_seqs} is not a multiple of micro_batch_seqs x world_size = {per_round}")
        self.seed = seed
        self.num_sequences = num_sequences
        self.batch_seqs = batch_seqs
        self.micro_batch_seqs = micro_batch_seqs
        self.world_size = world_size
        self.grad_accum = batch_seqs // per_round

    def indices(self, step: int, micro_step: int, rank: int) -> np.ndarray:
        if step < 1 or not 0 <= micro_step < self.grad_accum or not 0 <= rank < self.world_size:
            raise ValueError(f"bad (step, micro_step, rank) = ({step}, {micro_step}, {rank})")
        b = self.micro_batch_seqs
        start = (step - 1) * self.batch_seqs + (micro_step * self.world_size + rank) * b
        return stream_indices(self.seed, self.num_sequences, start, b)
