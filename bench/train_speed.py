"""Training speed of our Llama baseline against Hugging Face `LlamaForCausalLM` (`python -m bench`).

Same dims, batch, sequence length (the size's context), dtype (float32) and
optimizer; both models live in one process and are timed alternately
(warm-up first, median over rounds). Peak memory comes from a fresh
subprocess per model (bench/probe.py).
"""

from __future__ import annotations

import gc
from typing import Any

import torch

from cem_core.counts import train_flops_per_token

from bench.memory import peak_memory
from bench.models import make_step, model_config, param_count
from bench.settings import Settings
from bench.table import Section, Target
from bench.timing import median, spread, time_round_robin

# Named sizes from cem_core/sizes.py, plus one bigger CPU shape.
SIZE_SPECS: dict[str, dict[str, Any]] = {
    "nano": {"size": "nano"},
    "micro": {"size": "micro"},
    "mini": {"size": "mini"},
    "small": {"size": "small"},
    "medium": {"size": "small", "d_model": 384, "n_layers": 6, "n_heads": 6, "d_mlp": 1024},
}

COLUMNS = ["size", "params", "d/layers/heads/mlp", "tokens/step", "ours ms/step", "HF ms/step",
           "ours tokens/s", "HF tokens/s", "speed-up (HF/ours)", "speed-up wall", "spread",
           "ours peak MiB", "HF peak MiB", "memory ratio (ours/HF)"]


def size_config(name: str):
    spec = dict(SIZE_SPECS[name])
    return model_config(spec.pop("size"), **spec)


def run(s: Settings) -> Section:
    torch.set_num_threads(s.threads)
    section = Section("train_vs_hf", "Training speed: our Llama vs Hugging Face LlamaForCausalLM (CPU, float32)",
                      columns=COLUMNS)
    speedups = []
    for name in s.sizes:
        m = size_config(name)
        steps = {"ours": make_step("ours", m, s.batch_seqs), "hf": make_step("hf", m, s.batch_seqs)}
        n_ours, n_hf = param_count(steps["ours"].model), param_count(steps["hf"].model)
        if n_ours != n_hf:
            section.notes.append(f"{name}: parameter counts differ (ours {n_ours:,}, HF {n_hf:,})")
        times = time_round_robin(steps, warmup=s.warmup, repeats=s.repeats, calls_per_repeat=s.calls_per_repeat)
        tokens = steps["ours"].tokens
        t_ours, t_hf = median(times["ours"]["cpu"]), median(times["hf"]["cpu"])
        w_ours, w_hf = median(times["ours"]["wall"]), median(times["hf"]["wall"])
        del steps
        gc.collect()
        row: dict[str, Any] = {
            "size": name, "params": n_ours, "d/layers/heads/mlp": f"{m.d_model}/{m.n_layers}/{m.n_heads}/{m.d_mlp}",
            "tokens/step": tokens, "ours ms/step": 1e3 * t_ours, "HF ms/step": 1e3 * t_hf,
            "ours tokens/s": tokens / t_ours, "HF tokens/s": tokens / t_hf, "speed-up (HF/ours)": t_hf / t_ours,
            "speed-up wall": w_hf / w_ours, "ours wall ms/step": 1e3 * w_ours, "HF wall ms/step": 1e3 * w_hf,
            "ours wall tokens/s": tokens / w_ours, "HF wall tokens/s": tokens / w_hf,
            "spread": f"{100 * max(spread(times['ours']['cpu']), spread(times['hf']['cpu'])):.0f}%",
            "train_flops_per_token": train_flops_per_token(m),
        }
        if s.memory:
            mem = {impl: peak_memory(impl, m, s.batch_seqs, threads=s.threads) for impl in ("ours", "hf")}
            for impl, label in (("ours", "ours peak MiB"), ("hf", "HF peak MiB")):
                row[label] = mem[impl].get("peak_delta_mib", mem[impl].get("error"))
            if all("peak_delta_mib" in v for v in mem.values()) and mem["hf"]["peak_delta_mib"] > 0:
                row["memory ratio (ours/HF)"] = mem["ours"]["peak_delta_mib"] / mem["hf"]["peak_delta_mib"]
        section.rows.append(row)
        speedups.append((name, t_hf / t_ours))
    worst = min(speedups, key=lambda x: x[1])
    values = ", ".join(f"{n} {v:.2f}x" for n, v in speedups)
    worst_spread = next(r["spread"] for r in section.rows if r["size"] == worst[0])
    note = "" if worst[1] >= 1.3 else f"aim 1.3x not reached; worst {worst[0]} {worst[1]:.2f}x"
    if worst[1] < 1.0:
        note += f" (the rounds' spread there: {worst_spread}; see bench/README.md)"
    section.targets.append(Target("ours vs HF training tokens/s", ">= 1.0x (aim 1.3x)", values, worst[1] >= 1.0, note))
    section.notes += [
        f"Training step = forward, cross-entropy, backward, AdamW (foreach) step; batch {s.batch_seqs} sequences "
        f"of the size's context length; float32; {s.threads} intra-op thread(s).",
        f"Both models timed alternately in one process after {s.warmup} warm-up steps each: "
        f"{s.repeats} rounds x {s.calls_per_repeat} steps, median per step; spread = (max - min) / median of the rounds.",
        "ms/step and tokens/s are per second of process CPU time (with one intra-op thread: the compute a step "
        "needs, without the time spent waiting for a core on a loaded machine); 'speed-up wall' is the same "
        "ratio from wall-clock medians (the JSON has the wall-clock ms and tokens/s too).",
        "Peak MiB = rise of the resident-set high-water mark (VmHWM, reset after the imports and a warm-up step "
        "of a tiny model) while building the model and running 2 training steps, in a fresh subprocess per "
        "model (bench/probe.py).",
    ]
    return section
