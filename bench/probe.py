"""Peak memory of training one model, in a fresh process (`python -m bench` runs `python -m bench.probe SPEC`).

torch's CPU allocations bypass tracemalloc, so we read the kernel's high-water
mark of the resident set. After the imports the high-water mark is reset to the
current RSS (Linux: write "5" to /proc/self/clear_refs) and the current RSS is
the base; after building the model and running the training steps the
high-water mark (VmHWM in /proc/self/status) is the peak. The difference is
the memory the model, its gradients, the optimizer state and the activations
add to the process (after a warm-up step of a tiny model of the same
implementation, so the kernels' code pages and thread pools are not counted), including allocator slack and oneDNN scratch space, which
is what a user pays. Where the reset is not possible the fallback is
`resource.getrusage(RUSAGE_SELF).ru_maxrss` before and after (it then cannot
see below the imports' own transient peak; the output says which was used).

SPEC is JSON: {"impl": "ours" | "hf", "model": ModelConfig dict, "batch_seqs": int,
"steps": int, "threads": int}. Prints one JSON line:
{"rss_base_mib", "rss_peak_mib", "peak_delta_mib", "method"}.
"""

from __future__ import annotations

import json
import resource
import sys


def _status_mib(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return None


def _reset_high_water() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    import torch

    from cem_core.config import ModelConfig

    from bench.models import make_step

    torch.set_num_threads(int(spec.get("threads", torch.get_num_threads())))
    m = ModelConfig(**spec["model"])
    if spec["impl"] == "hf":
        import transformers  # noqa: F401  (imported before the base is taken)
    # Warm-up: one step of a tiny model of the same implementation pages in the
    # kernels' code and starts the thread pools, so they are not counted as the model's.
    tiny = ModelConfig(**{**spec["model"], "d_model": 32, "n_heads": 2, "n_layers": 1, "d_mlp": 64, "vocab_size": 64,
                          "context_len": 16})
    warm = make_step(spec["impl"], tiny, 1)
    warm()
    del warm
    exact = _reset_high_water() and _status_mib("VmHWM") is not None
    base = _status_mib("VmRSS") if exact else _maxrss_mib()
    step = make_step(spec["impl"], m, int(spec["batch_seqs"]))
    for _ in range(int(spec.get("steps", 2))):
        step()
    peak = _status_mib("VmHWM") if exact else _maxrss_mib()
    print(json.dumps({"rss_base_mib": round(base, 1), "rss_peak_mib": round(peak, 1),
                      "peak_delta_mib": round(peak - base, 1), "method": "VmHWM reset" if exact else "ru_maxrss"}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
