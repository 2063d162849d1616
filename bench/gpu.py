"""GPU training speed and memory (`python -m bench --gpu` on a machine with CUDA): the paper-scale path.

Training rows (bf16 autocast, fused AdamW, batch `GPU_BATCH_SEQS` x 2048 tokens, vocab 32,000):
- 134M Llama: ours (compile off and on) and Hugging Face `LlamaForCausalLM` (sdpa attention, compiled alike);
- CEM attention T=1 and T=2 (shared KQ diagonal) and full CEM T=2, each with FlexAttention and with the
  SDPA float-mask path (`$CEMCTL_ATTENTION_KERNEL`), compiled.
MFU = train FLOPs/token (cem_core.counts) x tokens/s over the best measured bf16 8192^3 matmul of this GPU.
The CEM attention sublayer alone (forward + backward, T=1, shared diagonal, ALiBi) is timed with both
kernels for the FlexAttention target. Memory: the largest micro-batch at context 2048 that trains (forward,
backward, optimizer step) on this GPU, per Table 1 size, for Llama and full CEM T=2.
Without CUDA every section is skipped with the reason recorded.
"""

from __future__ import annotations

import gc
import os
import time
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from bench.mfu import matmul_peak_flops
from bench.models import make_step, model_config
from bench.settings import Settings
from bench.table import Section, Target

GPU_BATCH_SEQS = 8
CONTEXT = 2048
CEM_ATTN = {"attention": "cem", "kq_diagonal": "shared"}
FULL_CEM = {"attention": "cem", "attn_steps": 2, "kq_diagonal": "shared", "attn_precond": "diag",
            "mlp": "cem", "mlp_steps": 2, "mlp_precond": "diag"}
# (row name, implementation, model overrides, compile, attention kernel)
GPU_ROWS: list[tuple[str, str, dict[str, Any], bool, str]] = [
    ("134M Llama, ours", "ours", {}, False, "-"),
    ("134M Llama, ours", "ours", {}, True, "-"),
    ("134M Llama, Hugging Face", "hf", {}, True, "-"),
    ("134M CEM attention T=1 (shared diag)", "ours", {**CEM_ATTN, "attn_steps": 1}, True, "flex"),
    ("134M CEM attention T=1 (shared diag)", "ours", {**CEM_ATTN, "attn_steps": 1}, True, "sdpa"),
    ("134M CEM attention T=2 (shared diag)", "ours", {**CEM_ATTN, "attn_steps": 2}, True, "flex"),
    ("134M CEM attention T=2 (shared diag)", "ours", {**CEM_ATTN, "attn_steps": 2}, True, "sdpa"),
    ("134M full CEM T=2", "ours", FULL_CEM, True, "flex"),
    ("134M full CEM T=2", "ours", FULL_CEM, True, "sdpa"),
]
MEMORY_SIZES = ("86M", "108M", "134M", "162M")


def _no_cuda(section: Section) -> Section:
    section.skipped = ("no CUDA device on this machine (torch.cuda.is_available() is False); "
                       "GPU numbers still to be measured")
    return section


@contextmanager
def _kernel(kernel: str) -> Iterator[None]:
    from cem_core.model import flex

    before = os.environ.get(flex.KERNEL_ENV)
    if kernel != "-":
        os.environ[flex.KERNEL_ENV] = kernel
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(flex.KERNEL_ENV, None)
        else:
            os.environ[flex.KERNEL_ENV] = before


def _time_step(impl: str, m: Any, batch: int, compile_: bool, steps: int,
               profile_steps: int = 0) -> tuple[float, float, list[dict[str, Any]]]:
    """(seconds per training step, peak GiB, top kernels) after warm-up (compilation happens in the first calls).

    With `profile_steps`, that many more steps run under torch.profiler after the timed ones (not in the time);
    the kernels are `kernel_table`'s rows, else []."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    step = make_step(impl, m, batch, device="cuda", autocast_dtype=torch.bfloat16, compile=compile_)
    try:
        t = _cuda_seconds(step, warmup=3 if compile_ else 2, calls=steps)
        peak_gib = torch.cuda.max_memory_allocated() / 2**30
        kernels = profile_kernels(step, profile_steps, device="cuda") if profile_steps else []
        return t, peak_gib, kernels
    finally:
        del step
        gc.collect()


# Kernel families by name, first match wins: where a step's GPU time goes (matrix products, attention, the
# fused elementwise kernels inductor writes, the optimizer, the rest).
KERNEL_FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("flash", "fmha", "flex", "attention", "sdpa", "efficient_attention")),
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "matmul", "::mm", "mm_", "sm90_", "cublas", "addmm", "bmm")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("fused elementwise / reductions (triton)", ("triton",)),
)


def kernel_family(name: str) -> str:
    low = name.lower()
    for family, needles in KERNEL_FAMILIES:
        if any(n in low for n in needles):
            return family
    return "other"


def profile_kernels(fn: Any, steps: int, *, device: str, top: int = 12) -> list[dict[str, Any]]:
    """Run `fn` `steps` times under torch.profiler; the `top` kernels by self time on `device` per call of `fn`
    (name, family, ms per call, share of the profiled time, launches per call), then one row per family."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        if on_gpu:
            torch.cuda.synchronize()
    return kernel_table(prof.key_averages(), steps, on_gpu=on_gpu, top=top)


def kernel_table(events: Any, steps: int, *, on_gpu: bool, top: int = 12) -> list[dict[str, Any]]:
    """`profile_kernels`' rows from a profiler's key averages: device kernels on a GPU (self device time), the
    leaf operators on the CPU (self CPU time of `aten::` events)."""
    def self_us(e: Any) -> float:
        return float(getattr(e, "self_device_time_total", 0.0) if on_gpu else e.self_cpu_time_total)

    kernels = [e for e in events if self_us(e) > 0 and (on_gpu or e.key.startswith("aten::"))]
    if on_gpu:  # only the device's own events: an operator, and the CPU-side record inductor gives each Triton
        # launch under the kernel's own name, carry their kernels' device time too (on an H200, 2026-11-27, every
        # Triton kernel was listed twice and the families summed to 1.5x the step)
        from torch.autograd import DeviceType

        kernels = [e for e in kernels if getattr(e, "device_type", None) == DeviceType.CUDA]
    total = sum(self_us(e) for e in kernels) or 1.0
    kernels.sort(key=self_us, reverse=True)
    rows = [{"kernel": e.key[:90], "family": kernel_family(e.key), "ms per step": self_us(e) / 1e3 / steps,
             "share": f"{100 * self_us(e) / total:.1f}%", "calls per step": e.count / steps}
            for e in kernels[:top]]
    families: dict[str, float] = {}
    for e in kernels:
        families[kernel_family(e.key)] = families.get(kernel_family(e.key), 0.0) + self_us(e)
    rows += [{"kernel": f"all {family}", "family": family, "ms per step": us / 1e3 / steps,
              "share": f"{100 * us / total:.1f}%", "calls per step": "-"}
             for family, us in sorted(families.items(), key=lambda kv: -kv[1])]
    return rows


def run(s: Settings) -> Section:
    from cem_core.counts import train_flops_per_token

    section = Section("gpu", "GPU training speed, 134M at context 2048 (bf16, fused AdamW)",
                      columns=["model", "compile", "attention kernel", "batch x context", "ms/step", "tokens/s",
                               "peak GiB", "achieved TFLOP/s", "MFU", "vs Llama ours (compiled)", "build + compile s"])
    if not torch.cuda.is_available():
        return _no_cuda(section)
    size = "nano" if s.quick else "134M"
    peak, _ = matmul_peak_flops(1024 if s.quick else 8192, dtype=torch.bfloat16, device="cuda", repeats=5)
    steps = 3 if s.quick else 20
    base_t = None
    by_name: dict[tuple[str, str, bool], float] = {}
    chosen = {int(x) for x in s.gpu_rows.split(",") if x.strip()} or set(range(1, len(GPU_ROWS) + 1))
    profiled = {int(x) for x in s.gpu_profile_rows.split(",") if x.strip()}
    for number, (name, impl, overrides, compile_, kernel) in enumerate(GPU_ROWS, 1):
        if number not in chosen:
            continue
        m = model_config(size, **overrides, context_len=256 if s.quick else CONTEXT,
                         **({} if s.quick else {"vocab_size": 32000}))
        try:
            with _kernel(kernel):
                t_row = time.perf_counter()
                t, peak_gib, kernels = _time_step(impl, m, GPU_BATCH_SEQS, compile_, steps,
                                                  profile_steps=3 if number in profiled else 0)
                setup_s = time.perf_counter() - t_row - t * steps  # building, compiling, warming up (and profiling)
        except Exception as e:  # a failed configuration is recorded, the others still run
            section.rows.append({"model": name, "compile": compile_, "attention kernel": kernel,
                                 "ms/step": f"failed: {type(e).__name__}: {e}"[:200]})
            print(f"[gpu] {section.rows[-1]}", flush=True)
            continue
        tokens = GPU_BATCH_SEQS * m.context_len
        achieved = train_flops_per_token(m) * tokens / t
        if impl == "ours" and not overrides and compile_:
            base_t = t
        by_name[(name, kernel, compile_)] = t
        section.rows.append({
            "model": name, "compile": compile_, "attention kernel": kernel,
            "batch x context": f"{GPU_BATCH_SEQS} x {m.context_len}", "ms/step": 1e3 * t, "tokens/s": tokens / t,
            "peak GiB": peak_gib, "achieved TFLOP/s": achieved / 1e12, "MFU": f"{100 * achieved / peak:.1f}%",
            "vs Llama ours (compiled)": f"{t / base_t:.2f}x" if base_t else "-", "build + compile s": setup_s})
        print(f"[gpu] {section.rows[-1]}", flush=True)  # an interrupted run keeps what it measured in its log
        for k in kernels:  # the profile of this row, as notes (the section's table keeps one shape of row)
            section.notes.append(f"profile of row {number} ({name}, {kernel}): {k['kernel']} [{k['family']}] "
                                 f"{k['ms per step']:.2f} ms/step, {k['share']}, {k['calls per step']} calls/step")
            print(f"[gpu_profile] row {number} {k}", flush=True)
    section.targets = _targets(by_name, peak, size)
    from cem_core.model import flex

    if flex.failed_shapes():  # a row that asked for FlexAttention and fell back to SDPA on some call shape says so
        section.notes.append(flex.describe_kernel(torch.device("cuda")))
    section.notes.append(f"Device: {torch.cuda.get_device_name(0)}; bf16 matmul peak {peak / 1e12:.0f} TFLOP/s; "
                         f"{steps} timed steps after warm-up.")
    return section


def _targets(t: dict[tuple[str, str, bool], float], peak: float, size: str) -> list[Target]:
    from cem_core.counts import train_flops_per_token

    def ratio(a: tuple[str, str, bool], b: tuple[str, str, bool]) -> float | None:
        return t[a] / t[b] if a in t and b in t else None

    llama = ("134M Llama, ours", "-", True)
    out = []
    hf = ratio(("134M Llama, Hugging Face", "-", True), llama)
    out.append(Target("ours vs HF Llama tokens/s (134M, compiled)", ">= 1.3x", f"{hf:.2f}x" if hf else "-",
                      hf >= 1.3 if hf else None))
    if llama in t:
        mfu = train_flops_per_token(model_config(size, vocab_size=32000)) * GPU_BATCH_SEQS * CONTEXT / t[llama] / peak
        out.append(Target("Llama 134M MFU", ">= 45%", f"{100 * mfu:.1f}%", mfu >= 0.45))
    # Issue 50's targets: T=1 at 1.05x Llama's step; full CEM T=2 at 95 % of Llama's FLOP rate (it does 1.82x the
    # FLOPs, so its step may take up to 1.9x).
    a1 = ratio(("134M CEM attention T=1 (shared diag)", "flex", True), llama)
    out.append(Target("CEM attention T=1 step vs Llama", "<= 1.05x", f"{a1:.2f}x" if a1 else "-",
                      a1 <= 1.05 if a1 else None))
    full_key = ("134M full CEM T=2", "flex", True)
    if full_key in t and llama in t:
        flops = {k: train_flops_per_token(model_config(size, **o, vocab_size=32000)) for k, o in
                 (("full", FULL_CEM), ("llama", {}))}
        rate = (flops["full"] / t[full_key]) / (flops["llama"] / t[llama])
        out.append(Target("full CEM T=2 FLOP rate vs Llama's", ">= 95%",
                          f"{100 * rate:.0f}% (step {t[full_key] / t[llama]:.2f}x)", rate >= 0.95))
    return out


def run_sublayer(s: Settings) -> Section:
    """CEM attention alone, forward + backward: FlexAttention vs the SDPA float-mask path."""
    section = Section("gpu_attention", "CEM attention sublayer forward + backward on the GPU: FlexAttention vs SDPA",
                      columns=["diagonal", "position", "T", "kernel", "ms", "speed-up vs sdpa"])
    if not torch.cuda.is_available():
        return _no_cuda(section)
    from cem_core.model import flex

    B, L = (2, 256) if s.quick else (8, CONTEXT)
    speedups = []
    for diagonal in ("none", "shared", "per_head"):
        for steps in (1, 2):
            m = model_config("nano" if s.quick else "134M", attention="cem", kq_diagonal=diagonal, attn_steps=steps)
            times = {}
            fell_back = False
            for kernel in ("sdpa", "flex"):
                before = len(flex.failed_shapes())
                try:
                    with _kernel(kernel):
                        times[kernel] = _time_sublayer(m, B, L)
                    fell_back = fell_back or (kernel == "flex" and len(flex.failed_shapes()) > before)
                except Exception as e:  # noqa: BLE001 - recorded, the other rows still run
                    times[kernel] = None
                    section.notes.append(f"{diagonal} T={steps} {kernel}: {type(e).__name__}: {e}"[:200])
                gc.collect()
                torch.cuda.empty_cache()
            for kernel, t in times.items():
                sp = times["sdpa"] / t if t and times.get("sdpa") else None
                if kernel == "flex" and sp and not fell_back:  # a shape FlexAttention cannot run is no speed-up of it
                    speedups.append(sp)
                label = "flex (fell back to sdpa)" if kernel == "flex" and fell_back else kernel
                section.rows.append({"diagonal": diagonal, "position": "alibi", "T": steps, "kernel": label,
                                     "ms": 1e3 * t if t else "failed", "speed-up vs sdpa": f"{sp:.2f}x" if sp else "-"})
                print(f"[gpu_attention] {section.rows[-1]}", flush=True)
    worst = min(speedups) if speedups else None
    section.targets = [Target("FlexAttention vs SDPA float mask, CEM attention fwd+bwd", ">= 1.5x",
                              f"worst {worst:.2f}x where it ran" if worst else "-", worst >= 1.5 if worst else None)]
    if flex.failed_shapes():
        section.notes.append(flex.describe_kernel(torch.device("cuda")))
    section.notes.append(f"Device: {torch.cuda.get_device_name(0)}; batch {B} x {L}, 10 timed calls.")
    return section


def _time_sublayer(m: Any, B: int, L: int, calls: int = 10) -> float:
    """Seconds per forward + backward of one CEM attention sublayer (bf16 autocast) on [B, L, d]."""
    from cem_core.model.attention import CEMAttention

    torch.manual_seed(0)
    layer = CEMAttention(m).cuda()
    h = torch.randn(B, L, m.d_model, device="cuda", requires_grad=True)

    def call() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = layer(h)
        out.float().sum().backward()

    return _cuda_seconds(call, warmup=3, calls=calls)


def _cuda_seconds(fn: Any, *, warmup: int, calls: int) -> float:
    """Seconds per call of `fn` on the GPU after `warmup` calls (compilation, autotuning), synchronised."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls


def _peak_gib(m: Any, batch: int) -> float:
    """Peak GiB of one eager training step at this micro-batch (torch.OutOfMemoryError when it does not fit)."""
    try:
        return _time_step("ours", m, batch, False, 1)[1]
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def _fits(m: Any, batch: int) -> bool:
    try:
        _peak_gib(m, batch)
        return True
    except torch.OutOfMemoryError:
        return False


def largest_fitting(fits: Any, guess: int, known_fit: int, cap: int = 1024) -> int:
    """The largest n in [known_fit, cap] with fits(n), for a `fits` true up to some n and false beyond it; starts
    at `guess` (a prediction) and brackets outwards from it, then bisects, so a good guess costs few calls."""
    lo, hi = known_fit, None
    n = max(min(guess, cap), known_fit + 1)
    if n > cap:
        return lo
    if fits(n):
        lo, step = n, max(1, n // 8)
        while hi is None:  # up in growing steps until one fails or the cap
            n = min(lo + step, cap)
            if n == lo:
                return lo
            if fits(n):
                lo, step = n, step * 2
            else:
                hi = n
    else:
        hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def run_memory(s: Settings) -> Section:
    """The largest micro-batch (sequences of 2048) that trains on this GPU, per size: Llama and full CEM T=2.

    Peak memory is measured at micro-batches 1 and 4 and fitted as fixed + per-sequence GiB (how activations
    grow); the largest micro-batch is then searched from that line's prediction, so each row costs a few steps."""
    section = Section("gpu_memory", "Largest micro-batch at context 2048 that trains on this GPU (bf16, eager)",
                      columns=["size", "model", "peak GiB at 1", "peak GiB at 4", "fixed GiB", "GiB per sequence",
                               "predicted largest", "largest micro-batch", "peak GiB at it", "predicted for 80 GiB"])
    if not torch.cuda.is_available():
        return _no_cuda(section)
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    sizes = ("nano",) if s.quick else tuple(x for x in s.gpu_memory_sizes.split(",") if x) or MEMORY_SIZES
    for size in sizes:
        for name, overrides in (("Llama", {}), ("full CEM T=2", FULL_CEM)):
            m = model_config(size, **overrides, context_len=256 if s.quick else CONTEXT,
                             **({} if s.quick else {"vocab_size": 32000}))
            try:
                p1, p4 = _peak_gib(m, 1), _peak_gib(m, 4)
            except torch.OutOfMemoryError:
                section.rows.append({"size": size, "model": name, "largest micro-batch": 0})
                continue
            per_seq = (p4 - p1) / 3
            fixed = p1 - per_seq
            predicted = int((total - fixed) / per_seq) if per_seq > 0 else 1024
            lo = largest_fitting(lambda n: _fits(m, n), predicted, 4)
            peak = _peak_gib(m, lo)
            section.rows.append({
                "size": size, "model": name, "peak GiB at 1": p1, "peak GiB at 4": p4, "fixed GiB": fixed,
                "GiB per sequence": per_seq, "predicted largest": predicted, "largest micro-batch": lo,
                "peak GiB at it": peak,
                "predicted for 80 GiB": int((80 - fixed) / per_seq) if per_seq > 0 else "-"})
            print(f"[gpu_memory] {section.rows[-1]}", flush=True)
            gc.collect()
            torch.cuda.empty_cache()
    section.notes.append(f"Device: {torch.cuda.get_device_name(0)}, {total:.0f} GiB; eager (compiled models use "
                         "less); 'predicted for 80 GiB' is the fitted line's, for an H100.")
    return section
