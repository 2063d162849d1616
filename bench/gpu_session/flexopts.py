"""FlexAttention's kernel options for the CEM attention calls at 134M, measured with the error gate (issue 50, item 1).

    python bench/gpu_session/flexopts.py [--shapes shared] [--candidates NAME,...] [--warm] --out DIR
    python bench/gpu_session/flexopts.py --steps-from DIR/flexopts.json --out DIR

For each call shape of a 134M CEM attention sublayer (batch 8 x 2048, 12 heads of 64, bf16, ALiBi and the learned
self bias; `SHAPES`) and each candidate of `CANDIDATES`, one `[flexopts]` line: forward + backward ms of the
attention call alone, and the gate of the GPU tests (tests/gpu/test_gpu.py), on batch 2: every output and
gradient in float32 within 2 % of the dense float32 reference, and in bf16 no further from that reference than
2x the SDPA path in bf16 + 0.005 (`passes`). A faster candidate that fails the gate is not faster. A time box
keeps the lines printed; flexopts.json (under --out) gets every measurement and each shape's fastest passing
candidate; the file is rewritten after every row, so a time box loses at most the row it cut.

--warm: compile each candidate for every call the timed run makes, and exit (run.sh starts one process a candidate, so the timed run reads
inductor's cache; numbers discarded). --steps-from FILE: whole 134M training steps (bench/gpu.py's rows, compiled)
of Llama, CEM attention T=1 and full CEM T=2 with Triton's defaults, and the CEM rows again with the shared shape's
fastest passing candidate of FILE (if it sets options): the issue's two step targets, on one card, in one process
(steps.json under --out).

The options reach the model's own FlexAttention call (`cem_core.model.flex`) through `kernel_options` below,
which wraps the function the model calls; the model code is not changed (its code fingerprint, which says
which code trained a run, stays). A winner that goes into the model changes the fingerprint: a model change.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
import typing
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Iterator

import torch

# The dense float32 reference of the scores is the model's own: its ALiBi bias (one home for -m (i - j) + self).
from cem_core.model.positions import alibi_bias, alibi_slopes

B_TIME, B_GATE, L, HEADS, HEAD_DIM, D_MODEL = 8, 2, 2048, 12, 64, 768
SHAPES: dict[str, tuple[int, bool]] = {  # name -> (query/key width, a [B, L, L] score matrix read): 134M's calls
    "shared": (HEAD_DIM, True),  # the shared KQ diagonal: the bench rows and full CEM
    "per_head": (HEAD_DIM + D_MODEL, False),  # q, k widened by D u and n: needs more shared memory than Hopper has
    "none": (HEAD_DIM, False),
}
# Candidates in the order they are tried; {} is Triton's defaults. "mode" is torch.compile's mode.
CANDIDATES: dict[str, dict[str, Any]] = {
    "default": {},
    "max-autotune": {"mode": "max-autotune-no-cudagraphs"},
    "fwd 128x64 w4 s3": {"fwd_BLOCK_M": 128, "fwd_BLOCK_N": 64, "fwd_num_warps": 4, "fwd_num_stages": 3},
    "fwd 128x128 w8 s2": {"fwd_BLOCK_M": 128, "fwd_BLOCK_N": 128, "fwd_num_warps": 8, "fwd_num_stages": 2},
    "bwd 64/128 w8 s2": {"bwd_BLOCK_M1": 64, "bwd_BLOCK_N1": 128, "bwd_BLOCK_M2": 128, "bwd_BLOCK_N2": 64,
                         "bwd_num_warps": 8, "bwd_num_stages": 2},
    "bwd 32/64 w4 s3": {"bwd_BLOCK_M1": 32, "bwd_BLOCK_N1": 64, "bwd_BLOCK_M2": 64, "bwd_BLOCK_N2": 32,
                        "bwd_num_warps": 4, "bwd_num_stages": 3},
    "tma": {"USE_TMA": True},  # inductor turns it off where the tensors do not allow it: then the defaults' time
    # Not PRESCALE_QK: with it the score modification sees base-2 scores, so ALiBi, the self bias and the score
    # matrix would enter scaled by log2(e): another function (torch's Triton template), which the gate rejects.
    "flash backend": {"BACKEND": "FLASH"},  # CuTe: only where flash_attn.cute imports (`needs_package`)
    "small blocks s1": {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1, "bwd_BLOCK_M1": 16,
                        "bwd_BLOCK_N1": 32, "bwd_BLOCK_M2": 32, "bwd_BLOCK_N2": 16},  # per_head's 832-wide q/k
}
F32_TOLERANCE = 2e-2  # relative, float32 against float32 (tests/gpu/test_gpu.py)


def needs_package(candidate: dict[str, Any]) -> str:
    """The package a candidate needs that this Python lacks ("" when none): such a candidate is not compiled."""
    import importlib.util

    if candidate.get("BACKEND") == "FLASH":
        try:
            found = importlib.util.find_spec("flash_attn.cute") is not None
        except ImportError:  # no flash_attn at all
            found = False
        return "" if found else "flash_attn.cute"
    return ""


def passes(e_f32: float | None, e_bf16: float, e_sdpa_bf16: float) -> bool:
    """The GPU tests' gate for one output or gradient: float32 within 2 %, bf16 within 2x SDPA's bf16 + 0.005.
    `e_f32` None: FlexAttention could not run this shape in float32 (its kernel needs more shared memory there
    than in bf16), so the bf16 half alone decides; the row says so."""
    return (e_f32 is None or e_f32 < F32_TOLERANCE) and e_bf16 <= 2 * e_sdpa_bf16 + 5e-3


def fastest_passing(rows: list[dict[str, Any]], shape: str) -> dict[str, Any] | None:
    """The row of `shape` with the least ms among those that ran and passed the gate (None if none did)."""
    ok = [r for r in rows if r["shape"] == shape and r.get("passes") and isinstance(r.get("ms"), float)]
    return min(ok, key=lambda r: r["ms"]) if ok else None


def unknown_options(options: dict[str, Any]) -> list[str]:
    """The keys (less a fwd_ / bwd_ prefix) that this torch's FlexAttention does not declare: such a candidate
    would be timed as Triton's defaults, so the sweep reports it instead of timing it."""
    from torch.nn.attention.flex_attention import FlexKernelOptions

    known = set(typing.get_type_hints(FlexKernelOptions)) | {"BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2"}
    return [k for k in options if k.removeprefix("fwd_").removeprefix("bwd_") not in known]


def split(candidate: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(kernel options, torch.compile mode) of a candidate."""
    options = {k: v for k, v in candidate.items() if k != "mode"}
    return options, candidate.get("mode")


def inputs(shape: str, batch: int, device: str, seed: int = 0, length: int = L) -> dict[str, torch.Tensor]:
    """q, k [B, K, L, Dq], v [B, K, L, Dh], the self bias and ALiBi slopes [K], and the score matrix [B, L, L] if
    the shape reads one. Every tensor but the slopes requires grad."""
    width, reads_matrix = SHAPES[shape]
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*size: int, scale: float = 1.0) -> torch.Tensor:
        return (scale * torch.randn(*size, generator=g, device=device)).requires_grad_()

    x = {"q": randn(batch, HEADS, length, width), "k": randn(batch, HEADS, length, width),
         "v": randn(batch, HEADS, length, HEAD_DIM), "delta": randn(HEADS, scale=0.5),
         "slopes": alibi_slopes(HEADS).to(device)}  # constants, on the device once (not copied at every call)
    if reads_matrix:
        x["extra"] = randn(batch, length, length, scale=0.5)
    return x


def reference(x: dict[str, torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """The SDPA path: a dense bias (ALiBi + self bias + the score matrix, causal) on the math kernel."""
    bias = alibi_bias(x["slopes"], x["delta"], torch.zeros_like(x["delta"]), x["q"].shape[2])[None]  # [1, K, L, L]
    if "extra" in x:
        bias = bias + x["extra"][:, None]  # [B, K, L, L]
    q, k, v = (x[n].to(dtype) for n in "qkv")
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(dtype),
                                                            scale=1 / math.sqrt(HEAD_DIM))


def flex_call(x: dict[str, torch.Tensor], dtype: torch.dtype, options: dict[str, Any],
              compiled: bool = True) -> torch.Tensor:
    """The model's FlexAttention call (`cem_flex_attention`) on the same inputs."""
    from cem_core.model.flex import cem_flex_attention

    extra = x["extra"].to(dtype) if "extra" in x else None
    with kernel_options(options):
        return cem_flex_attention(x["q"].to(dtype), x["k"].to(dtype), x["v"].to(dtype), scale=1 / math.sqrt(HEAD_DIM),
                                  slopes=x["slopes"], delta=x["delta"], extra=extra, compiled=compiled)


@contextmanager
def kernel_options(options: dict[str, Any]) -> Iterator[None]:
    """Every compiled FlexAttention call of the model (`cem_core.model.flex._flex`, in a compiled model or not)
    gets these kernel options while inside; eager FlexAttention (the CPU reference) does not take them."""
    from cem_core.model import flex

    original = flex._flex
    if options:
        flex._flex = lambda: partial(original(), kernel_options=dict(options))  # type: ignore[assignment]
    try:
        yield
    finally:
        flex._flex = original  # type: ignore[assignment]


def outputs_and_gradients(fn: Any, x: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    for t in x.values():
        t.grad = None
    out = fn(x, dtype)
    g = torch.Generator(device=out.device).manual_seed(1)
    (out.float() * torch.randn(out.shape, generator=g, device=out.device)).sum().backward()
    return {"output": out.detach().float(), **{f"d{n}": t.grad.detach().float().clone() for n, t in x.items()
                                                  if t.grad is not None}}


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-6))


def gate(shape: str, options: dict[str, Any], device: str) -> dict[str, Any]:
    """The error gate on batch `B_GATE`: worst float32 error, worst bf16 excess over its allowance, and `passes`."""
    x = inputs(shape, B_GATE, device)
    ref = outputs_and_gradients(reference, x, torch.float32)
    sdpa16 = outputs_and_gradients(reference, x, torch.bfloat16)
    f16 = outputs_and_gradients(lambda x, d: flex_call(x, d, options), x, torch.bfloat16)
    f32: dict[str, torch.Tensor] | None = None
    f32_failed = ""
    try:
        f32 = outputs_and_gradients(lambda x, d: flex_call(x, d, options), x, torch.float32)
    except Exception as e:  # noqa: BLE001 - e.g. out of shared memory in float32 only: the bf16 half still gates
        f32_failed = f"{type(e).__name__}: {' '.join(str(e).split())}"[:200]
    errs = {n: (relative_error(f32[n], ref[n]) if f32 is not None else None, relative_error(f16[n], ref[n]),
                relative_error(sdpa16[n], ref[n])) for n in ref}
    worst = max(errs, key=lambda n: errs[n][1] - 2 * errs[n][2])
    return {"passes": all(passes(*e) for e in errs.values()),
            "worst f32 error": max(e[0] for e in errs.values() if e[0] is not None) if f32 is not None else None,
            "worst bf16": f"{worst}: {errs[worst][1]:.3g} (SDPA {errs[worst][2]:.3g})",
            **({"float32 not run": f32_failed} if f32_failed else {})}


def time_call(shape: str, options: dict[str, Any], device: str, calls: int = 10) -> float:
    """ms per forward + backward of the attention call at batch `B_TIME` in bf16, after 3 warm-up calls."""
    x = inputs(shape, B_TIME, device)
    x16 = {n: t.detach().to(torch.bfloat16).requires_grad_() if n in ("q", "k", "v", "extra") else t
           for n, t in x.items()}  # the self bias stays float32 (its gradient is computed in float32)
    grad = torch.randn(x["v"].shape, device=device, dtype=torch.bfloat16)

    def call() -> None:
        out = flex_call(x16, torch.bfloat16, options)
        out.backward(grad)

    from bench.gpu import _cuda_seconds

    return 1e3 * _cuda_seconds(call, warmup=3, calls=calls)


def _fresh_compile(mode: str | None) -> None:
    """A new compiled FlexAttention for the next candidate (dynamo's recompile limit would otherwise fall back)."""
    from torch.nn.attention.flex_attention import flex_attention

    from cem_core.model import flex

    torch._dynamo.reset()
    flex._disabled.clear()
    flex._compiled = torch.compile(flex_attention, dynamic=False, mode=mode) if mode else None


def sweep(shapes: list[str], names: list[str], device: str, warm: bool,
          out: Path | None = None) -> list[dict[str, Any]]:
    """One row a (shape, candidate); with `out`, flexopts.json is rewritten after every row (`write`)."""
    rows: list[dict[str, Any]] = []
    for shape in shapes:
        for name in names:
            options, mode = split(CANDIDATES[name])
            row: dict[str, Any] = {"shape": shape, "candidate": name, "options": CANDIDATES[name]}
            t0 = time.perf_counter()
            try:
                if unknown_options(options):
                    raise ValueError(f"options unknown to torch {torch.__version__}: {unknown_options(options)}")
                if needs_package(CANDIDATES[name]):
                    raise ModuleNotFoundError(f"not compiled: needs {needs_package(CANDIDATES[name])}")
                _fresh_compile(mode)
                if warm:  # every call shape and dtype the timed run compiles: the timing's and the gate's
                    time_call(shape, options, device, calls=1)
                    gate(shape, options, device)
                else:
                    row["ms"] = time_call(shape, options, device)
                    row.update(gate(shape, options, device))
            except Exception as e:  # noqa: BLE001 - a candidate that cannot run is a row; the others still run
                row["failed"] = f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(f"[flexopts] {json.dumps(row)}", flush=True)
            if out is not None:
                write(out / "flexopts.json", rows, shapes)
            gc.collect()
            torch.cuda.empty_cache()
    return rows


def write(path: Path, rows: list[dict[str, Any]], shapes: list[str]) -> None:
    """flexopts.json: the device, every row so far, each shape's fastest passing candidate."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                                "torch": torch.__version__, "rows": rows,
                                "best": {s: fastest_passing(rows, s) for s in shapes}}, indent=1))


def step_settings(sweep_file: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, kernel options) to time whole steps with: Triton's defaults, then the shared shape's fastest
    passing candidate that sets kernel options (a compile mode is the whole model's, not FlexAttention's), if it
    sets any (the defaults again would only repeat the first pass)."""
    rows = [r for r in sweep_file.get("rows", []) if "mode" not in r.get("options", {})]
    best = fastest_passing(rows, "shared")
    settings: list[tuple[str, dict[str, Any]]] = [("default", {})]
    if best and split(best["options"])[0]:
        settings.append((best["candidate"], split(best["options"])[0]))
    return settings


def steps(settings: list[tuple[str, dict[str, Any]]], out: Path) -> list[dict[str, Any]]:
    """Whole training steps at 134M (bench/gpu.py's rows 2, 4, 8: Llama, CEM attention T=1, full CEM T=2) for each
    setting; Llama only once (it makes no FlexAttention call). steps.json is rewritten after every row."""
    from bench.gpu import CONTEXT, GPU_BATCH_SEQS, GPU_ROWS, _kernel, _time_step
    from bench.models import model_config
    from cem_core.counts import train_flops_per_token

    rows: list[dict[str, Any]] = []
    for label, options in settings:
        for number in (2, 4, 8) if label == "default" else (4, 8):
            name, impl, overrides, compile_, kernel = GPU_ROWS[number - 1]
            m = model_config("134M", **overrides, context_len=CONTEXT, vocab_size=32000)
            _fresh_compile(None)
            try:
                with _kernel(kernel), kernel_options(options):
                    t, peak_gib, _ = _time_step(impl, m, GPU_BATCH_SEQS, compile_, 20)
                row: dict[str, Any] = {"row": number, "model": name, "options": label, "ms": 1e3 * t,
                                       "peak GiB": peak_gib,
                                       "TFLOP/s": train_flops_per_token(m) * GPU_BATCH_SEQS * CONTEXT / t / 1e12}
            except Exception as e:  # noqa: BLE001
                row = {"row": number, "model": name, "options": label, "failed": f"{type(e).__name__}: {e}"[:300]}
            rows.append(row)
            print(f"[flexopts-step] {json.dumps(row)}", flush=True)
            out.mkdir(parents=True, exist_ok=True)
            (out / "steps.json").write_text(json.dumps(rows, indent=1))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="shared")
    p.add_argument("--candidates", default=",".join(CANDIDATES))
    p.add_argument("--warm", action="store_true")
    p.add_argument("--steps-from", type=Path, help="a flexopts.json: time whole steps with its winner")
    p.add_argument("--out", type=Path, default=Path("/tmp/flexopts"))
    a = p.parse_args(argv)
    shapes, names = a.shapes.split(","), a.candidates.split(",")
    unknown = [s for s in shapes if s not in SHAPES] + [n for n in names if n not in CANDIDATES]
    if unknown:
        print(f"flexopts: unknown {unknown}; shapes {list(SHAPES)}, candidates {list(CANDIDATES)}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("flexopts: no CUDA device here (FlexAttention's backward runs only on a GPU)", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the gate's float32 is float32 (PyTorch's default)
    if a.steps_from:
        steps(step_settings(json.loads(a.steps_from.read_text())), a.out)
        return 0
    rows = sweep(shapes, names, "cuda", a.warm, out=None if a.warm else a.out)
    for s in shapes:
        r = fastest_passing(rows, s)
        print(f"[flexopts-best] {s}: " + (f"{r['candidate']} {r['ms']:.2f} ms" if r else "none passed"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
