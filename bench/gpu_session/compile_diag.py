"""Where the first step of a compiled model spends its time (issue 35: the 20M full CEM T=2 of the gpu-scale
launch was still compiling after 80 s, the 20M Llama took 36 s).

    python bench/gpu_session/compile_diag.py VARIANT [SIZE]     # VARIANT: llama | full | attn | mlp

Compiles the model the way the trainer does (`torch.compile(model)`, model(x, y) -> loss, bf16 autocast) with a
cold inductor cache of its own, at the gpu scale's micro-batch (16 x 1024, vocabulary 4,096), and prints one
`[compile]` line: seconds to the first forward, the first backward, a second step; dynamo's graph count, graph
breaks and recompiles; and the largest entries of dynamo's compile-time table.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))  # before torch

import torch  # noqa: E402

from bench.models import model_config  # noqa: E402
from cem_core.model import build_model  # noqa: E402

VARIANTS = {
    "llama": {},
    "full": {"attention": "cem", "attn_steps": 2, "kq_diagonal": "shared", "attn_precond": "diag",
             "mlp": "cem", "mlp_steps": 2, "mlp_precond": "diag"},
    "attn": {"attention": "cem", "attn_steps": 2, "kq_diagonal": "shared", "attn_precond": "diag"},
    "mlp": {"mlp": "cem", "mlp_steps": 2, "mlp_precond": "diag"},
}


def main(variant: str, size: str = "20M") -> None:
    import torch._dynamo.utils as dyn

    dev = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU only to check this script runs
    m = model_config(size, vocab_size=4096, **VARIANTS[variant])
    batch = 16 if dev == "cuda" else 2
    torch.manual_seed(0)
    model = build_model(m).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=dev == "cuda" or None)
    compiled = torch.compile(model)
    x = torch.randint(0, m.vocab_size, (batch, m.context_len), device=dev)
    y = torch.randint(0, m.vocab_size, (batch, m.context_len), device=dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    marks = []
    t0 = time.perf_counter()
    for _ in range(2):
        with torch.autocast(dev, dtype=torch.bfloat16):
            _, loss = compiled(x, y)
        sync()
        marks.append(time.perf_counter() - t0)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        marks.append(time.perf_counter() - t0)
    c = dyn.counters
    phases = sorted(((name, round(sum(v), 1), len(v)) for name, v in dyn.compilation_time_metrics.items()),
                    key=lambda kv: -kv[1])[:10]  # (phase, seconds in all, times entered)
    print(f"[compile] {size} {variant}: first forward {marks[0]:.1f} s, first backward {marks[1] - marks[0]:.1f} s, "
          f"second step {marks[3] - marks[1]:.2f} s; graphs {sum(c['stats'].get(k, 0) for k in ('unique_graphs',))}, "
          f"graph breaks {sum(c['graph_break'].values())} {dict(c['graph_break'])}, "
          f"recompiles {c['recompiles'] if 'recompiles' in c else '-'}; phases {phases}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
