"""Cost of a planned run without torch (`cemctl plan`): parameters, tokens, FLOPs, GPU-hours.

Parameters and FLOPs are the exact analytic counts of `cem_core.counts`.
Training FLOPs = 3 x forward matmul FLOPs per token x tokens. GPU-hours assume a
sustained throughput of `gpu_tflops` x `mfu` plus an overhead a run (compilation, start,
evaluation: `GPU_RUN_OVERHEAD_S`, `GPU_RUN_OVERHEAD_CEM_S`). The defaults come from two
sessions on an H200 (bench/results/gpu-h200-2026-11-26/ and gpu-h200-2026-11-27/,
their README.md), and are few points:
- 989 TFLOP/s is the H100's and the H200's datasheet dense bf16 (memory: an H100's 80 GiB).
- The MFU against it is two measurements from different set-ups, interpolated in
  log(d_model) between them and held beyond (`measured_mfu`; an assumption, not a
  fit): 6.5 % for a 20M Llama trained by `cemctl launch` (d_model 256, context 1024,
  vocabulary 4,096, micro-batch 16: 1.10-1.29M tokens/s), 39 % for the 134M Llama of
  `bench/gpu.py` (d_model 768, context 2048, vocabulary 32,000, batch 8, compiled).
- Models with CEM attention or a CEM MLP ran at 77-78 % of the Llama's FLOP rate at
  134M and at 1.58x it at 20M (full CEM T=2: 1.03M tokens/s of 107 MFLOP against the
  Llama's 1.29M of 54; a small model's step is bound by launches, and CEM does more work
  per launch): `MEASURED_CEM_RATE`, interpolated like the MFU.
- A run's overhead: 26 s for the 20M Llama (its whole run took 38.5 s) and 71 s for the
  20M full CEM T=2 (86.6 s), once a compiled model compiled once (before 2026-11-27 each
  compiled twice: 57.7 s for the same Llama run).
`--mfu` replaces the MFU (and the CEM factor); `--gpu-tflops 312` for an A100.
`gpu_peak_gib` estimates a run's GPU memory (`plan` warns when a micro-batch will not fit).
CPU-hours assume `cpu_gflops` of training FLOPs per second per worker: the default,
30, is the median of 68 finished `cpu`-scale runs (micro, byte-level, batch 16 x 128,
evaluation and checkpoints included) with 2 workers on a 2-core EPYC VM; the wall
time of a grid is about CPU-hours / workers.
For task "gp" (`cem_core.gp.counts`) a "token" is one training example and a step
is assumed to see `train.batch_seqs` examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cem_core.config import RunConfig, tokens_per_step, total_steps
from cem_core.counts import run_counts
from cem_core.variants import TASKS

DEFAULT_GPU_TFLOPS = 989.0  # H100 / H200 dense bf16 (datasheet); an 8192^3 matmul measured 789-799 on an H200
DEFAULT_MFU: float | None = None  # None: measured_mfu by the model's width
# (d_model, MFU against 989 TFLOP/s), measured on an H200 (module doc): compiled, bf16 autocast, fused AdamW
MEASURED_MFU = ((256, 0.065), (768, 0.39))
DEFAULT_GPU_MEM_GIB = 80.0  # an H100's (`--gpu-mem-gib 141` for an H200)
# (d_model, FLOP rate of a model with CEM attention or a CEM MLP over the Llama's): 1.58 at 20M (full CEM T=2 in
# `cemctl launch`), 0.775 at 134M (301 and 299 TFLOP/s against 387 in bench/gpu.py)
MEASURED_CEM_RATE = ((256, 1.58), (768, 0.775))
GPU_RUN_OVERHEAD_S = 25.0  # per run without CEM layers: torch.compile, start, evaluations (26 s for the 20M Llama)
GPU_RUN_OVERHEAD_CEM_S = 70.0  # with CEM attention or a CEM MLP (71 s for the 20M full CEM T=2)
# GPU memory (GiB = 2^30 bytes): weights, gradients and AdamW's two moments in float32, then per token the logits
# (bf16, their float32 copy and its gradient) and per layer, model width and recursion step the activations; a
# shared KQ diagonal keeps an [L, L] matrix per step. The activation constant is set from the Llama's peak measured
# on an H200 at 134M, context 2048, micro-batch 8, compiled (13.05 GiB); the estimate is then 0.0 % over the CEM
# attention T=1 (shared diagonal) peak of 13.60, 8 % over full CEM T=2's 18.72 and 19 % over the 20M launch run's
# 1.48 GiB (its environment.json). All measured at micro-batch 8-16: larger micro-batches are extrapolated
# linearly, which is how activations grow. Eager steps (measured 2026-11-27 at micro-batches 1 and 4, 86M-162M)
# take 1.35-1.91 GiB a sequence for the Llama and 2.02-3.15 for full CEM T=2 (at 134M 23-26 % over this estimate); the
# largest eager micro-batch on the H200's 139.8 GiB was 73 (134M Llama) and 44 (134M full CEM T=2).
GPU_BYTES_PER_PARAM = 16
GPU_LOGIT_BYTES = 10  # per token and vocabulary entry
GPU_ACTIVATION_BYTES = 44  # per token, layer and d_model, at one step of attention and of the MLP
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


def measured_mfu(d_model: int) -> float:
    """MFU against DEFAULT_GPU_TFLOPS for a model of this width (MEASURED_MFU, log-interpolated, held beyond)."""
    return _by_width(MEASURED_MFU, d_model)


def cem_rate(d_model: int) -> float:
    """A CEM model's FLOP rate over the Llama's at this width (MEASURED_CEM_RATE, log-interpolated, held beyond)."""
    return _by_width(MEASURED_CEM_RATE, d_model)


def _by_width(points: tuple[tuple[int, float], tuple[int, float]], d_model: int) -> float:
    (d0, m0), (d1, m1) = points
    if d_model <= d0:
        return m0
    if d_model >= d1:
        return m1
    t = (math.log(d_model) - math.log(d0)) / (math.log(d1) - math.log(d0))
    return m0 + t * (m1 - m0)


def _measured_mfu_of(cfg: RunConfig) -> float:
    """`measured_mfu` of the model's width, times `cem_rate` where CEM attention or a CEM MLP runs."""
    return measured_mfu(cfg.model.d_model) * (cem_rate(cfg.model.d_model) if _has_cem(cfg) else 1.0)


def _has_cem(cfg: RunConfig) -> bool:
    return cfg.model.attention == "cem" or str(cfg.model.mlp).startswith("cem")


def _gpu_bytes(cfg: RunConfig, params_total: int) -> tuple[float, float]:
    """(bytes that do not depend on the micro-batch, bytes per sequence of the micro-batch): module doc."""
    m = cfg.model
    attn_steps = m.attn_steps if m.attention != "llama" else 1
    mlp_steps = m.mlp_steps if m.mlp != "llama" else 1
    per_token = (GPU_LOGIT_BYTES * m.vocab_size
                 + GPU_ACTIVATION_BYTES * m.n_layers * m.d_model * (attn_steps + mlp_steps) / 2
                 + (2 * m.n_layers * attn_steps * m.context_len if m.kq_diagonal == "shared" else 0))
    return float(GPU_BYTES_PER_PARAM * params_total), per_token * m.context_len


def gpu_peak_gib(cfg: RunConfig, params_total: int) -> float:
    """Estimated peak GPU memory of a training run at its micro-batch (the constants above: set from measured peaks)."""
    fixed, per_seq = _gpu_bytes(cfg, params_total)
    return (fixed + cfg.train.micro_batch_seqs * per_seq) / 2**30


def micro_batch_notes(configs: "list[RunConfig]", gpu_mem_gib: float) -> list[str]:
    """A line per planned model whose micro-batch will not fit a GPU of `gpu_mem_gib` (90 % of it, by
    `gpu_peak_gib`), naming the largest micro-batch that fits and divides `train.batch_seqs`. Models are told
    apart by everything the estimate reads (width, depth, vocabulary, context, KQ diagonal, steps)."""
    seen: dict[tuple[Any, ...], str] = {}
    budget = 0.9 * gpu_mem_gib * 2**30
    for cfg in configs:
        if TASKS.spec(cfg.task).unit != "tokens":
            continue
        m, t = cfg.model, cfg.train
        key = (m.size, m.d_model, m.n_layers, m.d_mlp, m.vocab_size, m.context_len, m.attention, m.attn_steps,
               m.kq_diagonal, m.mlp, m.mlp_steps, t.micro_batch_seqs, t.batch_seqs)
        if key in seen:
            continue
        params = run_counts(cfg)["params_total"]
        fixed, per_seq = _gpu_bytes(cfg, params)
        need = fixed + t.micro_batch_seqs * per_seq
        if need <= budget:
            seen[key] = ""
            continue
        most_seqs = int((budget - fixed) // per_seq) if budget > fixed else 0
        fits = max((n for n in range(1, min(most_seqs, t.batch_seqs) + 1) if t.batch_seqs % n == 0), default=0)
        arm = f"attention={m.attention}" + (f" T={m.attn_steps}" if m.attention != "llama" else "")
        arm += f", kq_diagonal={m.kq_diagonal}" if m.attention == "cem" else ""
        arm += f", mlp={m.mlp}" + (f" T={m.mlp_steps}" if m.mlp != "llama" else "")
        what = (f"{m.size or 'a model'} (d_model {m.d_model}, {m.n_layers} layers, vocab {m.vocab_size}; {arm}) "
                f"at micro-batch {t.micro_batch_seqs} x {m.context_len}")
        if budget <= fixed:
            fix = f"its weights and optimizer state alone need about {fixed / 2**30:.1f} GiB"
        elif fits:
            fix = f"train.micro_batch_seqs = {fits} fits (the largest that divides train.batch_seqs = {t.batch_seqs})"
        else:
            fix = "not even one sequence of its context fits"
        seen[key] = (f"warning: {what} needs about {need / 2**30:.0f} GiB of GPU memory, over 90% of "
                     f"{gpu_mem_gib:g} GiB (--gpu-mem-gib); {fix}")
    return [line for line in seen.values() if line]


def run_cost(cfg: RunConfig, *, gpu_tflops: float = DEFAULT_GPU_TFLOPS, mfu: float | None = DEFAULT_MFU,
             cpu_gflops: float = DEFAULT_CPU_GFLOPS) -> RunCost:
    """The cost of a resolved config (`mfu` None: `measured_mfu` of the model's width)."""
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
        gpu_hours=(flops / (gpu_tflops * 1e12 * (mfu or _measured_mfu_of(cfg)))
                   + (GPU_RUN_OVERHEAD_CEM_S if _has_cem(cfg) else GPU_RUN_OVERHEAD_S)) / 3600.0,
        cpu_hours=flops / (cpu_gflops * 1e9) / 3600.0,
    )


def undeclared_flops(configs: "list[RunConfig]") -> list[str]:
    """A line per plugin variant the runs use whose FLOPs its spec leaves at the default of 0 (a preconditioner
    without `attention_flops` / `mlp_flops`): its cost is counted as 0 extra FLOPs, which `plan` says."""
    from cem_core.plugins import used_variants
    from cem_core.spec import PreconditionerSpec

    defaults = {f.name: f.default for f in PreconditionerSpec.__dataclass_fields__.values()}
    out: dict[str, str] = {}
    for cfg in configs:
        for key, spec in used_variants(cfg):
            if key not in ("model.attn_precond", "model.mlp_precond") or spec.name in out:
                continue
            field = "attention_flops" if key == "model.attn_precond" else "mlp_flops"
            if spec.plugin and getattr(spec, field) is defaults[field]:
                label = f" ({spec.label})" if spec.label and spec.label != spec.name else ""
                out[spec.name] = (f"note: preconditioner {spec.name!r}{label} of plugin {spec.plugin} declares no "
                                  f"{field} (used by {key}): its extra FLOPs are counted as 0; give {field}= in its "
                                  "PreconditionerSpec (0 if it really costs none)")
    return list(out.values())


def same_model_notes(runs: "list[Any]", *, most: int = 3) -> list[str]:
    """A line per set of planned arms that differ only in keys their model does not read
    (`cem_core.plugins.unread_keys`: `model.attn_steps` of a Llama, the rank of a diag preconditioner): seed for
    seed they would train the same model, which `plan` says, naming the keys, the value that leaves them unread and
    the runs that are the same (`a = b` per seed). At most `most` sets are named, then how many more."""
    import json

    from cem_core.plugins import reader_of, unread_keys
    from cem_core.schema import flatten

    flat = {pr.run_id: flatten(pr.config.to_dict()) for pr in runs}
    sets: dict[str, dict[Any, list[Any]]] = {}  # the model without unread keys or seed -> seed -> its runs
    for pr in runs:
        drop = {*unread_keys(pr.config), "train.seed"}
        key = json.dumps({k: v for k, v in flat[pr.run_id].items() if k not in drop}, sort_keys=True, default=str)
        sets.setdefault(key, {}).setdefault(flat[pr.run_id].get("train.seed"), []).append(pr)
    twins = [by_seed for by_seed in sets.values() if any(len(g) > 1 for g in by_seed.values())]
    out = []
    for by_seed in twins[:most]:
        groups = [g for g in by_seed.values() if len(g) > 1]
        first = flat[groups[0][0].run_id]
        differ = sorted({k for g in groups for pr in g[1:] for k, v in flat[pr.run_id].items()
                         if flat[g[0].run_id].get(k) != v})
        why = "; ".join(f"{k} is not read with {reader_of(k)} = {first.get(reader_of(k))}" for k in differ)
        same = ", ".join(" = ".join(pr.run_id[:8] for pr in g) for g in groups)
        out.append(f"note: runs {same} train the same model (they differ only in {', '.join(differ)}: {why}); "
                   "an [[exclude]] keeps one of each")
    if len(twins) > most:
        out.append(f"note: {len(twins) - most} more sets of runs train the same model (plan --json lists the runs)")
    return out


def plugin_variants(configs: "list[RunConfig]") -> list[str]:
    """'scalar = one scalar per head (plugin scalar_precond)': each plugin variant the runs use, by its declared label."""
    from cem_core.plugins import used_variants

    out: dict[str, str] = {}
    for cfg in configs:
        for _, spec in used_variants(cfg):
            if spec.plugin and spec.name not in out:
                label = getattr(spec, "label", "") or spec.name  # a TaskSpec has no label
                out[spec.name] = f"{spec.name} = {label} (plugin {spec.plugin})"
    return list(out.values())
