"""GPU training speed (`python -m bench` on a machine with CUDA): 134M baseline and full CEM at context 2048.

bf16 autocast, `torch.compile` off and on, fused AdamW, batch `GPU_BATCH_SEQS`
sequences of 2048 tokens, vocab 32,000 (the Llama tokenizer, as in the paper).
MFU = train FLOPs/token (cem_core.counts) x tokens/s over the best measured
bf16 8192^3 matmul on the same GPU. Without CUDA the section is skipped with
the reason recorded.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import torch

from cem_core.counts import train_flops_per_token

from bench.mfu import matmul_peak_flops
from bench.models import make_step, model_config
from bench.settings import Settings
from bench.table import Section

GPU_BATCH_SEQS = 8
GPU_MODELS: dict[str, dict[str, Any]] = {
    "134M llama baseline": {},
    "134M full CEM (attn T=2 kq shared diag, mlp T=2 diag)": {
        "attention": "cem", "attn_steps": 2, "kq_diagonal": "shared", "attn_precond": "diag",
        "mlp": "cem", "mlp_steps": 2, "mlp_precond": "diag"},
}


def run(s: Settings) -> Section:
    section = Section("gpu", "GPU training speed (bf16 autocast, torch.compile off/on, context 2048)",
                      columns=["model", "compile", "batch x context", "ms/step", "tokens/s", "peak GiB",
                               "achieved TFLOP/s", "bf16 matmul peak TFLOP/s", "MFU"])
    if not torch.cuda.is_available():
        section.skipped = "no CUDA device on this machine (torch.cuda.is_available() is False); GPU numbers still to be measured"
        return section
    device = "cuda"
    size = "nano" if s.quick else "134M"
    n_peak = 1024 if s.quick else 8192
    peak, _ = matmul_peak_flops(n_peak, dtype=torch.bfloat16, device=device, repeats=5)
    steps_timed = 3 if s.quick else 20
    for name, overrides in GPU_MODELS.items():
        m = model_config(size, **overrides, **({} if s.quick else {"vocab_size": 32000}))
        for compile_ in (False, True):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            try:
                step = make_step("ours", m, GPU_BATCH_SEQS, device=device, autocast_dtype=torch.bfloat16,
                                 compile=compile_)
                for _ in range(3 if compile_ else 2):  # compile happens in the first call
                    step()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(steps_timed):
                    step()
                torch.cuda.synchronize()
                t = (time.perf_counter() - t0) / steps_timed
            except Exception as e:  # a failed configuration is recorded, the others still run
                section.rows.append({"model": name, "compile": compile_, "ms/step": f"failed: {type(e).__name__}: {e}"[:200]})
                continue
            finally:
                step = None
                gc.collect()
            achieved = train_flops_per_token(m) * GPU_BATCH_SEQS * m.context_len / t
            section.rows.append({
                "model": name, "compile": compile_, "batch x context": f"{GPU_BATCH_SEQS} x {m.context_len}",
                "ms/step": 1e3 * t, "tokens/s": GPU_BATCH_SEQS * m.context_len / t,
                "peak GiB": torch.cuda.max_memory_allocated() / 2**30, "achieved TFLOP/s": achieved / 1e12,
                "bf16 matmul peak TFLOP/s": peak / 1e12, "MFU": f"{100 * achieved / peak:.1f}%"})
    section.notes.append(f"Device: {torch.cuda.get_device_name(0)}; {steps_timed} timed steps after warm-up.")
    return section
