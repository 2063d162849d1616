"""Cost of every CEM variant relative to the Llama baseline of the same dims (`python -m bench`).

Two measurements, both timed round-robin in one process:
- model: a full training step (forward, loss, backward, AdamW) of the whole
  model with one component swapped, against the baseline; peak memory from a
  fresh subprocess per variant;
- sublayer: forward + backward of a single attention or MLP sublayer on a
  random residual stream [batch, context, d], which isolates the swapped part
  (the model-level ratio is diluted by the parts every variant shares:
  embedding, head, loss, optimizer). Targets are judged on the training step
  (the issue's "step time"), with the sublayer ratio shown next to it.
"""

from __future__ import annotations

import gc
from typing import Any, Callable

import torch

from cem_core.counts import train_flops_per_token
from cem_core.variants import ATTENTION, MLPS

from bench.memory import peak_memory
from bench.models import make_step, model_config, param_count
from bench.settings import Settings
from bench.table import Section, Target
from bench.timing import median, spread, time_round_robin

BASELINE = "llama (baseline)"

# name -> ModelConfig overrides (on top of the Llama baseline of the variant size)
VARIANTS: dict[str, dict[str, Any]] = {
    BASELINE: {},
    "attn cem T=1": {"attention": "cem"},
    "attn cem T=2": {"attention": "cem", "attn_steps": 2},
    "attn cem T=1 no ALiBi": {"attention": "cem", "cem_position": "none"},
    "attn cem T=1 kq shared": {"attention": "cem", "kq_diagonal": "shared"},
    "attn cem T=1 kq per_head": {"attention": "cem", "kq_diagonal": "per_head"},
    "attn cem T=1 precond diag": {"attention": "cem", "attn_precond": "diag"},
    "attn cem T=1 precond diag_lowrank": {"attention": "cem", "attn_precond": "diag_lowrank"},
    "attn reuse T=2": {"attention": "reuse", "attn_steps": 2},
    "mlp cem T=1": {"mlp": "cem"},
    "mlp cem T=2": {"mlp": "cem", "mlp_steps": 2},
    "mlp cem T=1 precond diag": {"mlp": "cem", "mlp_precond": "diag"},
    "mlp cem T=1 precond diag_lowrank": {"mlp": "cem", "mlp_precond": "diag_lowrank"},
    "mlp cem_param_matched T=1": {"mlp": "cem_param_matched"},
    "mlp reuse T=2": {"mlp": "reuse", "mlp_steps": 2},
    "full cem T=2 (attn + mlp, kq shared, diag)": {
        "attention": "cem", "attn_steps": 2, "kq_diagonal": "shared", "attn_precond": "diag",
        "mlp": "cem", "mlp_steps": 2, "mlp_precond": "diag"},
}


def _sublayer(overrides: dict[str, Any]) -> str | None:
    """Which sublayer a variant swaps ('attention' / 'mlp'), None for the baseline or both."""
    attn = any(k.startswith(("attention", "attn", "kq", "cem_position")) for k in overrides)
    mlp = any(k.startswith("mlp") for k in overrides)
    if attn and mlp:
        return None
    return "attention" if attn else "mlp" if mlp else None


class SublayerStep:
    """Forward + backward of one sublayer on a fixed random residual stream."""

    def __init__(self, module: torch.nn.Module, batch: int, seq_len: int, d_model: int) -> None:
        self.module = module
        gen = torch.Generator().manual_seed(0)
        self.h = torch.randn(batch, seq_len, d_model, generator=gen).requires_grad_(True)
        self.grad = torch.randn(batch, seq_len, d_model, generator=gen)

    def __call__(self) -> None:
        self.module.zero_grad(set_to_none=True)
        self.h.grad = None
        self.module(self.h).backward(self.grad)


def _sublayer_steps(s: Settings) -> dict[str, Callable[[], None]]:
    steps: dict[str, Callable[[], None]] = {}
    for name, overrides in VARIANTS.items():
        kinds = ["attention", "mlp"] if name == BASELINE else [_sublayer(overrides)]
        for kind in kinds:
            if kind is None:
                continue
            m = model_config(s.variant_size, **overrides)
            torch.manual_seed(0)
            module = (ATTENTION.get(m.attention) if kind == "attention" else MLPS.get(m.mlp))(m)
            label = f"{kind}: llama" if name == BASELINE else name
            steps[label] = SublayerStep(module, s.batch_seqs, m.context_len, m.d_model)
    return steps


def run(s: Settings) -> Section:
    torch.set_num_threads(s.threads)
    base_cfg = model_config(s.variant_size)
    section = Section(
        "cem_variants", f"CEM variants against the Llama baseline ({s.variant_size}: d={base_cfg.d_model}, "
        f"{base_cfg.n_layers} layers, {base_cfg.n_heads} heads, context {base_cfg.context_len}, batch {s.batch_seqs})",
        columns=["variant", "level", "params", "train GFLOP/token", "ms/step", "x baseline", "x baseline wall", "spread",
                 "peak MiB", "memory x baseline"])

    # Whole-model training steps.
    configs = {name: model_config(s.variant_size, **ov) for name, ov in VARIANTS.items()}
    steps = {name: make_step("ours", m, s.batch_seqs) for name, m in configs.items()}
    params = {name: param_count(st.model) for name, st in steps.items()}
    times = time_round_robin(steps, warmup=s.warmup, repeats=s.repeats, calls_per_repeat=s.calls_per_repeat)
    del steps
    gc.collect()
    # Peak memory in a fresh process per variant (quick mode: the baseline and one CEM variant only).
    probed = [BASELINE, "full cem T=2 (attn + mlp, kq shared, diag)"] if s.quick else list(configs)
    mem = {name: peak_memory("ours", configs[name], s.batch_seqs, threads=s.threads) for name in probed} if s.memory else {}
    t_base = median(times[BASELINE]["cpu"])
    w_base = median(times[BASELINE]["wall"])
    m_base = mem.get(BASELINE, {}).get("peak_delta_mib")
    model_ratio: dict[str, float] = {}
    for name, m in configs.items():
        t = median(times[name]["cpu"])
        model_ratio[name] = t / t_base
        peak = mem.get(name, {}).get("peak_delta_mib", mem.get(name, {}).get("error"))
        section.rows.append({
            "variant": name, "level": "model", "params": params[name],
            "train GFLOP/token": train_flops_per_token(m) / 1e9, "ms/step": 1e3 * t, "x baseline": t / t_base,
            "x baseline wall": median(times[name]["wall"]) / w_base,
            "spread": f"{100 * spread(times[name]['cpu']):.0f}%", "peak MiB": peak,
            "memory x baseline": peak / m_base if isinstance(peak, float) and m_base else None,
        })

    # Single sublayers, forward + backward.
    sub = _sublayer_steps(s)
    sub_times = time_round_robin(sub, warmup=s.warmup, repeats=s.repeats, calls_per_repeat=2 * s.calls_per_repeat,
                                 min_round_s=0.05 if s.quick else 0.25)
    sub_ms = {name: 1e3 * median(ts["cpu"]) for name, ts in sub_times.items()}
    sub_wall = {name: 1e3 * median(ts["wall"]) for name, ts in sub_times.items()}
    for name, ms in sub_ms.items():
        ref = "attention: llama" if name.startswith(("attention", "attn")) else "mlp: llama"
        section.rows.append({"variant": name, "level": "sublayer", "ms/step": ms, "x baseline": ms / sub_ms[ref],
                             "x baseline wall": sub_wall[name] / sub_wall[ref],
                             "spread": f"{100 * spread(sub_times[name]['cpu']):.0f}%"})
    del sub
    gc.collect()

    def pair(a: str, b: str) -> tuple[float, float]:
        """(training-step ratio, sublayer ratio) of variant a over b."""
        return model_ratio[a] / model_ratio[b], sub_ms[a] / sub_ms[b]

    r_model, r_sub = model_ratio["attn cem T=1"], sub_ms["attn cem T=1"] / sub_ms["attention: llama"]
    section.targets.append(Target(
        "CEM attention T=1 vs Llama attention", "<= 1.0x step time", f"step {r_model:.2f}x (sublayer {r_sub:.2f}x)",
        r_model <= 1.0, "" if r_model <= 1.0 else f"slower by {100 * (r_model - 1):.0f}%"))
    r_model, r_sub = pair("attn cem T=2", "attn cem T=1")
    section.targets.append(Target(
        "CEM attention T=2 vs T=1", "<= 1.7x step time", f"step {r_model:.2f}x (sublayer {r_sub:.2f}x)",
        r_model <= 1.7,
        "" if r_sub <= 1.7 else "the sublayer alone is above 1.7x: each step repeats the query projection, "
        "attention and output projection; only the keys/values and the bias are computed once"))
    r_model, r_sub = pair("attn cem T=1 kq shared", "attn cem T=1 kq per_head")
    section.targets.append(Target(
        "KQ diagonal shared vs per_head", "< 1.0x step time", f"step {r_model:.2f}x (sublayer {r_sub:.2f}x)",
        r_model < 1.0, ""))
    section.notes += [
        "level=model: a whole training step (forward, loss, backward, AdamW) of the model with the variant's "
        "component in every layer, relative to the Llama baseline, timed round-robin with all variants.",
        "level=sublayer: forward + backward of one attention or MLP sublayer on a random residual stream "
        "[batch, context, d], relative to the Llama sublayer of the same kind (isolates the swapped part; "
        "the targets are judged on the training step, the sublayer ratio is shown next to it).",
        "ms/step = process CPU time per step (one intra-op thread); x baseline is the ratio of CPU-time medians "
        "(the targets), x baseline wall the same from wall-clock medians.",
        "Peak MiB: as in the HF table (fresh subprocess per variant, rise of the resident-set high-water mark).",
    ]
    return section
