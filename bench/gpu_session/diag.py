"""What FlexAttention does with each CEM attention call shape at the Table 1 sizes on this GPU (issue 35).

    python bench/gpu_session/diag.py

For every size and KQ diagonal: one forward + backward of a CEM attention sublayer (T=2, ALiBi, bf16 autocast)
with CEMCTL_ATTENTION_KERNEL=flex; prints whether FlexAttention ran or failed (and why), and the time.
"""

from __future__ import annotations

import os
import time
import traceback

import torch

from bench.models import model_config
from cem_core.model import flex
from cem_core.model.attention import CEMAttention

os.environ[flex.KERNEL_ENV] = "flex"
for size in ("20M", "134M"):
    for diagonal in ("none", "shared", "per_head"):
        m = model_config(size, attention="cem", kq_diagonal=diagonal, attn_steps=2, context_len=1024)
        layer = CEMAttention(m).cuda()
        h = torch.randn(4, 1024, m.d_model, device="cuda", requires_grad=True)
        before = flex.failed_shapes()
        t0 = time.perf_counter()
        try:
            for _ in range(2):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = layer(h)
                out.float().sum().backward()
            torch.cuda.synchronize()
            new = {k: why for k, why in flex.failed_shapes().items() if k not in before}
            state = "fell back: " + "; ".join(new.values()) if new else "flex ran"
        except Exception as e:  # noqa: BLE001 - a diagnosis prints every failure
            state = f"raised {type(e).__name__}: {e}"[:400]
            traceback.print_exc()
        width = m.d_model // m.n_heads + (m.d_model if diagonal == "per_head" else 0)
        print(f"[diag] {size} {diagonal:8s} q/k width {width:4d}: {state} ({time.perf_counter() - t0:.1f} s)", flush=True)
