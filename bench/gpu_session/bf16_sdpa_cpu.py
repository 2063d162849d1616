"""How far the SDPA path of CEM attention lands from float32 in bf16, on the CPU (issue 35's T=2 tolerance).

    python bench/gpu_session/bf16_sdpa_cpu.py

The GPU test's layer and inputs (d_model 256, 4 heads, 2 x 512 tokens, ALiBi, parameters perturbed by 0.1 randn):
relative errors of the output, the input gradient and each parameter gradient, bf16 autocast against float32.
"""
import torch, os
from cem_core.config import ModelConfig
from cem_core.model import flex
from cem_core.model.attention import CEMAttention
os.environ[flex.KERNEL_ENV]="sdpa"
for steps in (1,2):
  for diagonal in ("none","shared","per_head"):
    torch.manual_seed(0)
    cfg = ModelConfig(attention="cem", d_model=256, n_heads=4, n_layers=1, d_mlp=512, context_len=512, vocab_size=64,
                      attn_steps=steps, cem_position="alibi", kq_diagonal=diagonal)
    layer = CEMAttention(cfg)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    h = torch.randn(2, 512, 256); g = torch.randn_like(h)
    def run(bf16):
        layer.zero_grad(set_to_none=True)
        x = h.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = layer(x)
        (out.float()*g).sum().backward()
        return out.float().detach(), x.grad.detach(), {n: p.grad.detach().clone() for n,p in layer.named_parameters()}
    o32, dx32, g32 = run(False); o16, dx16, g16 = run(True)
    e = lambda a,b: float((a-b).norm()/b.norm())
    print(steps, diagonal, "out %.3g dx %.3g" % (e(o16,o32), e(dx16,dx32)), " ".join("%s %.3g"%(n, e(g16[n],g32[n])) for n in g32))
