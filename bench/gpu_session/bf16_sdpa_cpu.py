"""How far the SDPA path of CEM attention lands from float32 in bf16, on the CPU (issue 35's T=2 tolerance).

    python bench/gpu_session/bf16_sdpa_cpu.py

The GPU test's layer and inputs (d_model 256, 4 heads, 2 x 512 tokens, ALiBi, parameters perturbed by 0.1 randn):
relative errors of the output, the input gradient and each parameter gradient, bf16 autocast against float32.
"""

from __future__ import annotations

import os

import torch

from cem_core.config import ModelConfig
from cem_core.model import flex
from cem_core.model.attention import CEMAttention


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def main() -> None:
    os.environ[flex.KERNEL_ENV] = "sdpa"
    for steps in (1, 2):
        for diagonal in ("none", "shared", "per_head"):
            torch.manual_seed(0)
            cfg = ModelConfig(attention="cem", d_model=256, n_heads=4, n_layers=1, d_mlp=512, context_len=512,
                              vocab_size=64, attn_steps=steps, cem_position="alibi", kq_diagonal=diagonal)
            layer = CEMAttention(cfg)
            with torch.no_grad():
                for p in layer.parameters():
                    p.add_(0.1 * torch.randn_like(p))
            h = torch.randn(2, 512, 256)
            g = torch.randn_like(h)

            def run(bf16: bool) -> dict[str, torch.Tensor]:
                layer.zero_grad(set_to_none=True)
                x = h.clone().requires_grad_()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    out = layer(x)
                (out.float() * g).sum().backward()
                return {"out": out.float().detach(), "dx": x.grad.detach(),
                        **{n: p.grad.detach().clone() for n, p in layer.named_parameters()}}

            ref, low = run(False), run(True)
            print(steps, diagonal, " ".join(f"{k} {rel(low[k], ref[k]):.3g}" for k in ref))


if __name__ == "__main__":
    main()
