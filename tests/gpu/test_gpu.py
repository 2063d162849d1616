"""The paper-scale path on a real CUDA GPU (marker `gpu`; skipped with the reason without one; never in CI).

    python -m pytest -q -m gpu tests/gpu          # on a machine with an H100 / H200

Every registered variant at 134M dims trains in bf16 with a finite, falling loss; CEM attention on
FlexAttention matches the float32 SDPA reference (outputs and gradients) within bf16 tolerance; a run killed
after a checkpoint resumes on the GPU with the uninterrupted losses; `cemctl launch --gpus 0` trains on the GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)")]

VARIANTS = {
    "llama": {},
    "reuse T=2": {"attention": "reuse", "attn_steps": 2, "mlp": "reuse", "mlp_steps": 2},
    "cem attention T=1 none": {"attention": "cem", "kq_diagonal": "none"},
    "cem attention T=2 shared": {"attention": "cem", "attn_steps": 2, "kq_diagonal": "shared"},
    "cem attention T=2 per_head": {"attention": "cem", "attn_steps": 2, "kq_diagonal": "per_head"},
    "cem attention no position": {"attention": "cem", "cem_position": "none", "kq_diagonal": "shared"},
    "cem mlp T=2 diag": {"mlp": "cem", "mlp_steps": 2, "mlp_precond": "diag"},
    "cem mlp param matched": {"mlp": "cem_param_matched", "mlp_steps": 2},
    "full cem T=2 diag_lowrank": {"attention": "cem", "attn_steps": 2, "kq_diagonal": "shared",
                                  "attn_precond": "diag_lowrank", "mlp": "cem", "mlp_steps": 2,
                                  "mlp_precond": "diag_lowrank"},
}


@pytest.fixture(autouse=True)
def _flex_failures_of_other_tests_do_not_leak(monkeypatch):
    from cem_core.model import flex

    monkeypatch.setattr(flex, "_disabled", {})


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_trains_at_134m_dims_in_bf16(name):
    from bench.models import make_step, model_config

    m = model_config("134M", context_len=512, vocab_size=32000, **VARIANTS[name])
    step = make_step("ours", m, 4, device="cuda", autocast_dtype=torch.bfloat16)
    losses = []
    for _ in range(8):
        step.optimizer.zero_grad(set_to_none=True)
        loss = step.loss()
        loss.backward()
        step.optimizer.step()
        losses.append(float(loss))
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert losses[-1] < losses[0] - 0.1, losses  # the same batch: the loss must fall


@pytest.mark.parametrize("name", ["llama", "cem attention T=2 shared"])
def test_a_compiled_model_compiles_once_on_the_gpu(name, monkeypatch):
    """The first step's compilation is the only one: a cache filled while dynamo traced the first call (RoPE's
    table, FlexAttention's causal BlockMask, a deprecation warn-once) recompiled the whole model at the second."""
    import torch._dynamo

    from bench.models import model_config
    from cem_core.model import build_model, flex

    monkeypatch.setattr(flex, "_block_masks", {})
    m = model_config("nano", context_len=256, **{k: v for k, v in VARIANTS[name].items()})
    torch.manual_seed(0)
    model = build_model(m).cuda()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(model)
    x = torch.randint(0, m.vocab_size, (2, m.context_len), device="cuda")
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = compiled(x, x)
        loss.backward()
    assert not flex.failed_shapes(), flex.describe_kernel(x.device)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("diagonal", ["none", "shared", "per_head"])
@pytest.mark.parametrize("steps", [1, 2])
def test_cem_attention_on_flex_matches_the_sdpa_path(diagonal, steps, monkeypatch):
    """FlexAttention computes the SDPA path's function and gradients: in float32 to float32 accuracy, and in bf16
    no further from the float32 reference than the SDPA path in bf16 is.

    A fixed bf16 tolerance is wrong for T=2: on an H200 (2026-11-26) FlexAttention's input gradient was 6-9% from
    the float32 reference at T=2 (0.5-1% at T=1), and the SDPA path in bf16 is as far (6-8%, measured on the
    CPU): the second step amplifies the rounding of the first. The float32 comparison (TF32 off, PyTorch's default) is the sharp check.
    """
    from cem_core.config import ModelConfig
    from cem_core.model import flex
    from cem_core.model.attention import CEMAttention

    torch.manual_seed(0)
    cfg = ModelConfig(attention="cem", d_model=256, n_heads=4, n_layers=1, d_mlp=512, context_len=512, vocab_size=64,
                      attn_steps=steps, cem_position="alibi", kq_diagonal=diagonal)
    layer = CEMAttention(cfg).cuda()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))  # non-zero biases and diagonals
    h = torch.randn(2, 512, 256, device="cuda")
    grad_out = torch.randn_like(h)

    def run(kernel: str, bf16: bool):  # noqa: ANN202
        monkeypatch.setenv(flex.KERNEL_ENV, kernel)
        layer.zero_grad(set_to_none=True)
        x = h.clone().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = layer(x)
        (out.float() * grad_out).sum().backward()
        return {"output": out.float().detach(), "input gradient": x.grad.detach(),
                **{f"gradient of {n}": p.grad.detach().clone() for n, p in layer.named_parameters()}}

    def err(a, b):  # noqa: ANN001, ANN202
        return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-6))

    assert not torch.backends.cuda.matmul.allow_tf32  # PyTorch's default: float32 products in full precision
    ref = run("sdpa", bf16=False)
    flex32 = run("flex", bf16=False)
    sdpa16 = run("sdpa", bf16=True)
    flex16 = run("flex", bf16=True)
    assert not flex.failed_shapes(), flex.describe_kernel(h.device)  # FlexAttention ran on every call
    for what in ref:
        assert err(flex32[what], ref[what]) < 2e-2, f"{what} in float32: relative error {err(flex32[what], ref[what]):.3g}"
        e_flex, e_sdpa = err(flex16[what], ref[what]), err(sdpa16[what], ref[what])
        assert e_flex <= 2 * e_sdpa + 5e-3, f"{what} in bf16: FlexAttention {e_flex:.3g} from float32, SDPA {e_sdpa:.3g}"


def test_resume_on_the_gpu_repeats_the_uninterrupted_losses(tmp_path, monkeypatch):
    from cem_core.config import RunConfig, resolve
    from cem_core.data import prepare_data
    from cem_core.train import run_training
    from cem_core.runfiles import read_jsonl

    cache = tmp_path / "cache"
    cfg = resolve(RunConfig.from_dict({
        "model.size": "micro", "model.attention": "cem", "model.attn_steps": 2, "model.kq_diagonal": "shared",
        "model.context_len": 256, "data.tokenizer": "byte", "data.cache_dir": str(cache), "train.max_steps": 12,
        "train.batch_seqs": 8, "train.micro_batch_seqs": 8, "train.ckpt_every_steps": 6, "train.eval_every_steps": 6,
        "train.val_tokens": 4096, "train.test_tokens": 4096, "train.precision": "bf16"}))
    prepare_data(cfg.data)
    runs = {}
    for name in ("full", "crashed"):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg.to_dict()))
        runs[name] = d
    full = run_training(runs["full"], device="cuda")
    monkeypatch.setenv("CEMCTL_TEST_CRASH_AT_STEP", "9")
    assert run_training(runs["crashed"], device="cuda")["state"] == "failed"
    monkeypatch.delenv("CEMCTL_TEST_CRASH_AT_STEP")
    resumed = run_training(runs["crashed"], device="cuda")
    assert resumed["state"] == "done" and resumed["attempt"] == 2
    a = {m["step"]: m["train_loss"] for m in read_jsonl(runs["full"] / "metrics.jsonl") if m["kind"] == "train"}
    b = {m["step"]: m["train_loss"] for m in read_jsonl(runs["crashed"] / "metrics.jsonl") if m["kind"] == "train"}
    assert a.keys() == b.keys() == set(range(1, 13))
    assert all(abs(a[s] - b[s]) < 2e-2 for s in a), (a, b)  # bf16 and nondeterministic kernels: noise, not drift
    assert abs(resumed["test_loss"] - full["test_loss"]) < 2e-2


def test_launch_with_gpus_0_trains_on_the_gpu(tmp_path):
    from helpers import cli, tiny_grid

    (tmp_path / "g.toml").write_text(tiny_grid("gpu", seeds="[0]", steps=4, extra='"model.attention" = "cem"\n'))
    res = cli(tmp_path, "launch", str(tmp_path / "g.toml"), "--gpus", "0", subprocess=True, timeout=900)
    assert res.returncode == 0, res.output
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["state"] == "done" and str(result.get("device", "")).startswith("cuda"), result
    log = (run_dir / "train.log").read_text()
    assert "FlexAttention" in log  # the kernel chosen by device is in the run's log
