"""The model library: sizes, variants, energies, causality, gradients, FLOP counts."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from cem_core.config import RunConfig, resolve
from cem_core.counts import forward_flops, param_counts
from cem_core.errors import ConfigError
from cem_core.model import ATTENTION, MLPS, PRECONDITIONERS, build_model, count_params_meta
from cem_core.model.attention import CEMAttention
from cem_core.model.energy import attention_energy, energy_trajectory, mlp_energy, phi
from cem_core.model.mlp import CEMMLP


def model_cfg(**updates):
    base = {"model.size": "nano", "data.tokenizer": "byte", "model.context_len": 32}
    base.update({f"model.{k}": v for k, v in updates.items()})
    return resolve(RunConfig.from_dict(base)).model


# Every pairing of attention and MLP kinds, plus the CEM knobs.
VARIANTS = [
    dict(attention="llama", mlp="llama"),
    dict(attention="cem", mlp="llama"),
    dict(attention="cem", mlp="llama", attn_steps=2, attn_precond="diag", kq_diagonal="shared"),
    dict(attention="cem", mlp="llama", attn_steps=2, attn_precond="diag_lowrank", kq_diagonal="per_head"),
    dict(attention="cem", mlp="llama", cem_position="none", kq_diagonal="shared"),
    dict(attention="reuse", mlp="llama", attn_steps=2),
    dict(attention="llama", mlp="cem"),
    dict(attention="llama", mlp="cem_param_matched", mlp_steps=2, mlp_precond="diag_lowrank"),
    dict(attention="llama", mlp="cem", mlp_steps=3, mlp_precond="diag"),
    dict(attention="llama", mlp="reuse", mlp_steps=2),
    dict(attention="cem", mlp="cem", attn_steps=2, mlp_steps=2, attn_precond="diag_lowrank", mlp_precond="diag_lowrank", kq_diagonal="shared"),
] + [dict(attention=a, mlp=m) for a, m in itertools.product(ATTENTION.names(), MLPS.names())]


def variant_id(v):
    return ",".join(f"{k}={x}" for k, x in v.items())


# ---------------------------------------------------------------- sizes and parameter counts

# Table 1 dims with vocab 32,000. The paper quotes 86.5M, 108.2M, 134.1M, 162.8M; the dims give
# 86.37M and 108.05M for the first two (no consistent rule gives both: see the issue note),
# so those two are held to 0.15M, the others to the 0.1M.
PAPER = {"86M": (86.5e6, 0.15e6), "108M": (108.2e6, 0.16e6), "134M": (134.1e6, 0.1e6), "162M": (162.8e6, 0.1e6)}


@pytest.mark.parametrize("size", list(PAPER))
def test_baseline_parameter_counts_match_table1(size):
    cfg = resolve(RunConfig.from_dict({"model.size": size, "data.tokenizer": "hf"})).model
    counted = count_params_meta(cfg)  # built on the meta device: no weights allocated
    assert counted == {k: param_counts(cfg)[k] for k in ("total", "non_embedding")}
    target, tol = PAPER[size]
    assert abs(counted["total"] - target) <= tol


def test_256m_size_is_about_256m():
    cfg = resolve(RunConfig.from_dict({"model.size": "256M", "data.tokenizer": "hf"})).model
    assert abs(param_counts(cfg)["total"] - 256e6) < 2e6


def test_cem_attention_has_half_and_cem_mlp_two_thirds():
    base = param_counts(resolve(RunConfig.from_dict({"model.size": "134M", "data.tokenizer": "hf"})).model)
    bare = {"model.size": "134M", "data.tokenizer": "hf", "model.attention": "cem", "model.cem_position": "none"}
    cem_attn = param_counts(resolve(RunConfig.from_dict(bare)).model)
    assert 2 * cem_attn["attention"] == base["attention"]
    cem_mlp = param_counts(resolve(RunConfig.from_dict({"model.size": "134M", "data.tokenizer": "hf", "model.mlp": "cem"})).model)
    assert 3 * cem_mlp["mlp"] == 2 * base["mlp"]
    matched = param_counts(resolve(RunConfig.from_dict({"model.size": "134M", "data.tokenizer": "hf", "model.mlp": "cem_param_matched"})).model)
    assert matched["mlp"] == base["mlp"]


@pytest.mark.parametrize("v", VARIANTS, ids=variant_id)
def test_extras_are_counted_exactly(v):
    cfg = model_cfg(**v)
    model = build_model(cfg)
    assert model.num_params() == param_counts(cfg)["total"]
    assert model.num_params(non_embedding=True) == param_counts(cfg)["non_embedding"]


# ---------------------------------------------------------------- energies


def _attn_layer(**kw):
    torch.manual_seed(0)
    cfg = model_cfg(attention="cem", **kw)
    layer = CEMAttention(cfg).double()
    for p in layer.parameters():  # random everything (biases, diagonals, norms too)
        with torch.no_grad():
            p.normal_(0, 0.3) if p.dim() < 2 else p.normal_(0, 0.2)
    return layer


@pytest.mark.parametrize("position", ["none", "alibi"])
def test_cem_attention_update_is_minus_energy_gradient(position):
    layer = _attn_layer(cem_position=position)
    h = torch.randn(2, 7, layer.d_model, dtype=torch.float64)
    n = layer.norm(h)
    update = layer(h) - h
    u = n.detach().clone().requires_grad_(True)
    energy = attention_energy(layer, u, n.detach()).sum()
    (grad,) = torch.autograd.grad(energy, u)
    assert torch.allclose(update, -grad, atol=1e-12, rtol=0), (update + grad).abs().max()


def _rmsnorm64(x, weight, eps):
    """RMSNorm written out in float64, independent of the model's module."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def test_rmsnorm_keeps_float64_and_upcasts_half_precision():
    from cem_core.model.norm import RMSNorm

    norm = RMSNorm(16).double()
    with torch.no_grad():
        norm.weight.normal_(1, 0.3)
    x = torch.randn(3, 16, dtype=torch.float64) * 5
    assert norm(x).dtype == torch.float64
    assert (norm(x) - _rmsnorm64(x, norm.weight, norm.eps)).abs().max() <= 1e-15
    xb = (torch.randn(3, 16) * 100).to(torch.bfloat16)  # bf16 sums would lose the norm: it is taken in float32
    ref = _rmsnorm64(xb.double(), 1.0, 1e-6)
    assert (RMSNorm(16)(xb).double() - ref).abs().max() <= 1e-2


@pytest.mark.parametrize("kind,diag", [("attention", "none"), ("attention", "shared"), ("mlp", "none")])
def test_update_is_minus_energy_gradient_to_1e12_through_the_model_norm(kind, diag):
    """float64 end to end: the layer's own RMSNorm must not round to float32 (it capped this at ~1e-7)."""
    if kind == "attention":
        layer = _attn_layer(cem_position="alibi", kq_diagonal=diag)
    else:
        torch.manual_seed(5)
        layer = CEMMLP(model_cfg(mlp="cem")).double()
        with torch.no_grad():
            layer.norm.weight.normal_(1, 0.3)
    h = torch.randn(2, 7, layer.norm.weight.numel(), dtype=torch.float64) * 3
    u = _rmsnorm64(h, layer.norm.weight.detach(), layer.norm.eps).detach().requires_grad_(True)
    if kind == "attention":
        energy = attention_energy(layer, u, u.detach()).sum()
    else:
        energy = mlp_energy(layer, u, u.detach()).sum()
    (grad,) = torch.autograd.grad(energy, u)
    update = layer(h) - h
    if kind == "attention" and diag != "none":  # the diagonal enters the scores only (Alg. 1)
        B, L, d = h.shape
        K = layer.n_heads
        n = u.detach()
        q = layer.w_q(n).view(B, L, K, -1).transpose(1, 2)
        scores = layer.scale * (q @ layer.keys(n).transpose(-1, -2) + ((n * layer.diag) @ n.transpose(1, 2))[:, None])
        attn = (scores + layer.position_bias(L)).softmax(-1)
        update = update + ((attn @ n[:, None]) * layer.diag).sum(1)
    assert (update + grad).abs().max() <= 1e-12


@pytest.mark.parametrize("diag", ["shared", "per_head"])
def test_kq_diagonal_enters_scores_only(diag):
    """With a diagonal, the update is the low-rank part of -grad E: -grad E = update + sum_k D_k sum_j a_ijk n_j."""
    layer = _attn_layer(cem_position="none", kq_diagonal=diag)
    h = torch.randn(2, 6, layer.d_model, dtype=torch.float64)
    n = layer.norm(h)
    u = n.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(attention_energy(layer, u, n.detach()).sum(), u)
    # the omitted value-path term, computed directly
    B, L, d = h.shape
    K = layer.n_heads
    q = layer.w_q(n).view(B, L, K, -1).transpose(1, 2)
    k = layer.keys(n)
    D = layer.diag.expand(K, d) if diag == "shared" else layer.diag
    scores = layer.scale * (q @ k.transpose(-1, -2) + (n[:, None] * D[None, :, None]) @ n[:, None].transpose(-1, -2))
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    attn = scores.softmax(-1)  # [B, K, L, L]
    omitted = ((attn @ n[:, None]) * D[None, :, None]).sum(1)  # sum_k D_k sum_j a n_j: [B, L, d]
    assert torch.allclose(layer(h) - h + omitted, -grad, atol=1e-12, rtol=0)


def test_phi_is_the_integral_of_silu():
    z = torch.linspace(-6, 6, 101, dtype=torch.float64).requires_grad_(True)
    (dphi,) = torch.autograd.grad(phi(z).sum(), z)
    assert torch.allclose(dphi, torch.nn.functional.silu(z), atol=1e-12)
    assert phi(torch.zeros(1, dtype=torch.float64)).item() == 0.0


def test_cem_mlp_update_is_minus_energy_gradient():
    torch.manual_seed(1)
    layer = CEMMLP(model_cfg(mlp="cem")).double()
    with torch.no_grad():
        layer.norm.weight.normal_(1, 0.3)
    h = torch.randn(2, 5, layer.norm.weight.numel(), dtype=torch.float64)
    n = layer.norm(h)
    u = n.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(mlp_energy(layer, u, n.detach()).sum(), u)
    assert torch.allclose(layer(h) - h, -grad, atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", ["attention", "mlp"])
@pytest.mark.parametrize("precond", ["identity", "diag", "diag_lowrank"])
def test_small_steps_descend_the_energy(kind, precond):
    torch.manual_seed(2)
    if kind == "attention":
        cfg = model_cfg(attention="cem", attn_steps=6, attn_step_size=0.02, attn_precond=precond, kq_diagonal="shared")
        layer = CEMAttention(cfg).double()
        with torch.no_grad():
            layer.diag.normal_(0, 0.1)
    else:
        cfg = model_cfg(mlp="cem", mlp_steps=6, mlp_step_size=0.02, mlp_precond=precond)
        layer = CEMMLP(cfg).double()
    if precond == "diag_lowrank":
        with torch.no_grad():
            layer.precond.V.normal_(0, 0.02)  # a non-zero low-rank part (P stays positive definite)
    h = torch.randn(2, 8, cfg.d_model, dtype=torch.float64)
    energies = torch.stack([e.sum() for e in energy_trajectory(layer, h)])
    assert len(energies) == 7
    assert bool((energies[1:] < energies[:-1]).all()), energies


# ---------------------------------------------------------------- behaviour of every variant


@pytest.mark.parametrize("v", VARIANTS, ids=variant_id)
def test_causality(v):
    torch.manual_seed(3)
    model = build_model(model_cfg(**v)).double()
    idx = torch.randint(0, 257, (2, 12))
    j = 7
    changed = idx.clone()
    changed[:, j] = (changed[:, j] + 1) % 257
    out_a, _ = model(idx)
    out_b, _ = model(changed)
    assert torch.allclose(out_a[:, :j], out_b[:, :j], atol=1e-12)
    assert not torch.allclose(out_a[:, j:], out_b[:, j:])


@pytest.mark.parametrize("v", VARIANTS, ids=variant_id)
def test_forward_backward_reaches_every_parameter(v):
    torch.manual_seed(4)
    model = build_model(model_cfg(**v))
    for name, p in model.named_parameters():
        if name.endswith("precond.V"):
            with torch.no_grad():
                p.normal_(0, 0.02)  # V starts at 0, which zeroes U's gradient (LoRA-style)
    idx = torch.randint(0, 257, (3, 16))
    _, loss = model(idx, torch.roll(idx, -1, dims=1))
    assert torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} unused"
        assert p.grad.abs().sum() > 0, f"{name} gets no gradient"


@pytest.mark.parametrize("v", VARIANTS, ids=variant_id)
def test_flop_count_matches_the_products_run(v):
    cfg = model_cfg(**v)
    model = build_model(cfg)
    idx = torch.randint(0, 257, (2, 16))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(idx)
    assert counter.get_total_flops() == forward_flops(cfg, 2, 16)


def test_shared_diagonal_costs_one_matrix_per_step_not_per_head():
    none = forward_flops(model_cfg(attention="cem"), 1, 32)
    shared = forward_flops(model_cfg(attention="cem", kq_diagonal="shared"), 1, 32)
    per_head = forward_flops(model_cfg(attention="cem", kq_diagonal="per_head"), 1, 32)
    cfg = model_cfg()
    assert shared - none == cfg.n_layers * 2 * 32 * 32 * cfg.d_model
    assert per_head - none == cfg.n_heads * (shared - none)


# ---------------------------------------------------------------- preconditioners and registries


def test_preconditioner_initialisation_follows_the_paper():
    width, n = 64, 3
    diag = PRECONDITIONERS.get("diag")(n, width, 4)
    lowrank = PRECONDITIONERS.get("diag_lowrank")(n, width, 4)
    sp1 = torch.nn.functional.softplus(torch.tensor(1.0))
    for p in (diag, lowrank):
        assert torch.allclose(p.p, torch.full((n, width), width**-0.5))
        assert torch.allclose(p.diagonal(), sp1.expand(n, width))  # d = sqrt(width) p = 1
    assert lowrank.U.shape == (n, width, 4) and torch.count_nonzero(lowrank.V) == 0
    assert 0.01 < lowrank.U.std().item() < 0.03
    assert torch.allclose(lowrank.matrix(), diag.matrix())  # the low-rank part starts at zero
    assert torch.equal(PRECONDITIONERS.get("identity")(1, width).matrix()[0], torch.eye(width))


@pytest.mark.parametrize("kind", ["identity", "diag", "diag_lowrank"])
def test_fused_head_projection_equals_dense_preconditioners(kind):
    torch.manual_seed(5)
    K, Dh, d = 4, 8, 32
    p = PRECONDITIONERS.get(kind)(K, d, 3).double()
    for t in p.parameters():
        with torch.no_grad():
            t.normal_(0, 0.3)
    o = torch.randn(2, 5, K, Dh, dtype=torch.float64)
    w_q = torch.randn(K * Dh, d, dtype=torch.float64)
    P = p.matrix().double()  # [K, d, d]
    dense = sum(o[:, :, k] @ w_q.view(K, Dh, d)[k] @ P[k].T for k in range(K))
    assert torch.allclose(p.project_heads(o, w_q), dense, atol=1e-10)
    assert torch.allclose(P, P.transpose(1, 2))


def test_registries_resolve_every_name_and_reject_unknown():
    from torch import nn

    for reg in (ATTENTION, MLPS, PRECONDITIONERS):
        assert all(issubclass(reg.get(name), nn.Module) for name in reg.names())
    with pytest.raises(ConfigError) as info:
        ATTENTION.get("flash")
    assert info.value.key == "model.attention"
    assert all(name in info.value.allowed for name in ATTENTION.names())


@pytest.mark.parametrize(
    "updates, key",
    [
        ({"model.attention": "linear"}, "model.attention"),
        ({"model.d_model": 100, "model.n_heads": 3}, "model.n_heads"),
        ({"model.attention": "cem", "model.attn_steps": 0}, "model.attn_steps"),
        ({"model.kq_diagonal": "shared"}, "model.kq_diagonal"),  # a diagonal on Llama attention
        ({"model.mlp_precond": "diag"}, "model.mlp_precond"),  # a preconditioner on the Llama MLP
    ],
)
def test_bad_model_configs_name_the_field(updates, key):
    with pytest.raises(ConfigError) as info:
        build_model(RunConfig.from_dict({"model.size": "nano", **updates}))
    assert info.value.key == key


def test_energy_diagnostics_report_each_step_of_cem_sublayers_only():
    torch.manual_seed(6)
    cfg = model_cfg(attention="cem", mlp="cem", attn_steps=2, mlp_steps=3, attn_step_size=0.05, mlp_step_size=0.05)
    model = build_model(cfg)
    from cem_core.model.energy import energy_diagnostics

    rows = energy_diagnostics(model, torch.randint(0, 257, (2, 16)), layers=[1])
    assert {(r["layer"], r["sublayer"]) for r in rows} == {(1, "attention"), (1, "mlp")}
    assert [r["step"] for r in rows if r["sublayer"] == "attention"] == [0, 1, 2]
    assert [r["step"] for r in rows if r["sublayer"] == "mlp"] == [0, 1, 2, 3]
    for sub in ("attention", "mlp"):
        e = [r["energy"] for r in rows if r["sublayer"] == sub]
        assert all(b < a for a, b in zip(e, e[1:])), e  # small steps descend on a fresh model
    assert energy_diagnostics(build_model(model_cfg()), torch.randint(0, 257, (1, 8)), layers=[0, 1]) == []


def test_phi_chunks_agree_with_one_pass():
    z = torch.randn(1000, dtype=torch.float64) * 3
    assert torch.allclose(phi(z, chunk=7), phi(z), atol=1e-14)


def test_activation_checkpointing_gives_the_same_loss_and_gradients():
    cfg = model_cfg(attention="cem", mlp="cem", attn_steps=2, mlp_steps=2, kq_diagonal="shared",
                    attn_precond="diag_lowrank", mlp_precond="diag")
    torch.manual_seed(6)
    a = build_model(cfg).double()
    b = build_model(cfg).double()
    b.load_state_dict(a.state_dict())
    b.checkpoint_blocks = True
    idx = torch.randint(0, 257, (2, 16))
    grads = []
    for model in (a, b):
        _, loss = model(idx, idx)
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.allclose(grads[0][n], grads[1][n], atol=1e-12) for n in grads[0])


def test_compile_modes(monkeypatch):
    from cem_core.train.loop import maybe_compile

    model = torch.nn.Linear(2, 2)
    assert maybe_compile(model, "auto", torch.device("cpu")) is model  # auto compiles on CUDA only
    assert maybe_compile(model, "off", torch.device("cuda")) is model
    with pytest.raises(ConfigError, match="train.compile"):
        resolve(RunConfig.from_dict({"train.compile": "sometimes"}))
    assert resolve(RunConfig.from_dict({"train.compile": True})).train.compile == "on"


@pytest.mark.parametrize("steps", [1, 2])
def test_attention_may_start_at_the_normed_input(steps):
    """attn_start='norm': x_0 = RMSNorm(h) (Alg. 1's 'x_i <- n_i'); the first step's update is the same."""
    torch.manual_seed(0)
    base = dict(attention="cem", attn_steps=steps, kq_diagonal="shared", attn_precond="diag")
    from_h = CEMAttention(model_cfg(**base))
    from_n = CEMAttention(model_cfg(**base, attn_start="norm"))
    from_n.load_state_dict(from_h.state_dict())
    h = 3.0 * torch.randn(2, 7, from_h.d_model)
    n = from_h.norm(h)
    xs_h, xs_n = list(from_h.iterate(h)), list(from_n.iterate(h))
    assert torch.equal(xs_h[0], h) and torch.allclose(xs_n[0], n)
    # step 1 uses the same query u = n either way, so it moves both starts by the same update
    torch.testing.assert_close(xs_n[1] - xs_n[0], xs_h[1] - xs_h[0])
    assert not torch.allclose(from_n(h), from_h(h))
    with pytest.raises(ConfigError, match="model.attn_start"):
        resolve(RunConfig.from_dict({"model.attention": "llama", "model.attn_start": "norm"}))


@pytest.mark.parametrize("overrides", [
    {},
    {"attention": "cem", "attn_steps": 2, "kq_diagonal": "shared"},
    {"attention": "cem", "attn_steps": 2, "kq_diagonal": "shared", "attn_precond": "diag",
     "mlp": "cem", "mlp_steps": 2, "mlp_precond": "diag"},
], ids=["llama", "cem attention T=2", "full cem T=2"])
@pytest.mark.slow
def test_a_compiled_model_compiles_once_for_a_training_loop(overrides):
    """A table a layer fills at its first call (RoPE's) changed what dynamo had guarded on, so every compiled model
    compiled twice: at the first step and again at the second (36 s more for the 20M Llama on an H200)."""
    import torch._dynamo

    from cem_core.model.attention import LlamaAttention

    cfg = model_cfg(**overrides)
    torch.manual_seed(0)
    model = build_model(cfg)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(model, backend="eager")  # dynamo's guards without inductor's code generation
    x = torch.randint(0, cfg.vocab_size, (2, cfg.context_len))
    for _ in range(3):
        _, loss = compiled(x, x)
        loss.backward()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    if not overrides:  # the table is the configured context's, and a longer input still gets one of its own
        attn = next(m for m in model.modules() if isinstance(m, LlamaAttention))
        assert attn.rope_cos.shape[0] == cfg.context_len and "rope_cos" not in model.state_dict().__repr__()
        cos, _ = attn._rope_for(cfg.context_len + 5)
        assert cos.shape[0] == cfg.context_len + 5


@pytest.mark.slow
def test_a_compiled_model_on_flexattention_compiles_once(monkeypatch):
    """The causal BlockMask cache, filled while dynamo traced the first call, made the second call recompile the
    whole model (on CUDA, every model with CEM attention). FlexAttention's backward needs a GPU, so the CPU checks
    the forward."""
    import torch._dynamo

    from cem_core.model import flex

    monkeypatch.setenv(flex.KERNEL_ENV, "flex")
    monkeypatch.setattr(flex, "_block_masks", {})
    monkeypatch.setattr(flex, "_disabled", {})
    cfg = model_cfg(attention="cem", attn_steps=2, kq_diagonal="shared")
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(model, backend="eager")
    x = torch.randint(0, cfg.vocab_size, (2, cfg.context_len))
    with torch.no_grad():
        outs = [compiled(x, x)[1] for _ in range(3)]
        assert not flex.failed_shapes()  # FlexAttention ran
        monkeypatch.setenv(flex.KERNEL_ENV, "sdpa")
        eager = model(x, x)[1]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert all(torch.allclose(o, eager, atol=1e-5) for o in outs)
