"""Cost of a planned run without torch (`cemctl plan`): parameters, tokens, FLOPs, GPU-hours.

Parameters and FLOPs are the exact analytic counts of `cem_core.counts`.
Training FLOPs = 3 x forward matmul FLOPs per token x tokens. GPU-hours assume a
sustained throughput of `gpu_tflops` x `mfu` (defaults: 312 TFLOP/s peak, the
A100's dense bf16, at 40 % model FLOPs utilisation; `--gpu-tflops 989` for an
H100). Element-wise work is not counted, so real runs of small models are slower.
CPU-hours assume `cpu_gflops` of training FLOPs per second per worker: the default,
30, is the median of 68 finished `cpu`-scale runs (micro, byte-level, batch 16 x 128,
evaluation and checkpoints included) with 2 workers on a 2-core EPYC VM; the wall
time of a grid is about CPU-hours / workers.
For task "gp" (`cem_core.gp.counts`) a "token" is one training example and a step
is assumed to see `train.batch_seqs` examples.
"""

from __future__ import annotations

from dataclasses import dataclass

from cem_core.config import RunConfig, tokens_per_step, total_steps
from cem_core.counts import run_counts
from cem_core.variants import TASKS

DEFAULT_GPU_TFLOPS = 312.0
DEFAULT_MFU = 0.4
DEFAULT_CPU_GFLOPS = 30.0  # training FLOP/s per CPU worker, measured (module doc)


def flops_per_token(cfg: RunConfig) -> int:
    """Forward FLOPs per token (per example for task "gp")."""
    return run_counts(cfg)["flops_per_token"]


@dataclass(frozen=True)
class RunCost:
    params_total: int
    params_non_embedding: int
    steps: int
    tokens: int
    train_flops: float
    gpu_hours: float
    cpu_hours: float


def run_cost(cfg: RunConfig, *, gpu_tflops: float = DEFAULT_GPU_TFLOPS, mfu: float = DEFAULT_MFU,
             cpu_gflops: float = DEFAULT_CPU_GFLOPS) -> RunCost:
    """The cost of a resolved config."""
    steps = total_steps(cfg)
    task = TASKS.spec(cfg.task)
    counts, fpt = task.count(cfg)
    if task.unit == "tokens":
        tokens = steps * tokens_per_step(cfg)
    else:  # a step sees train.batch_seqs examples (the GP study)
        tokens = steps * cfg.train.batch_seqs
    flops = 3.0 * float(fpt) * tokens
    return RunCost(
        params_total=counts["total"],
        params_non_embedding=counts["non_embedding"],
        steps=steps,
        tokens=tokens,
        train_flops=flops,
        gpu_hours=flops / (gpu_tflops * 1e12 * mfu) / 3600.0,
        cpu_hours=flops / (cpu_gflops * 1e9) / 3600.0,
    )
