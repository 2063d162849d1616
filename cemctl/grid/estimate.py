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
from typing import Any

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
