"""Settings shared by every benchmark of `python -m bench` (full and --quick modes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Settings:
    quick: bool = False
    out_dir: Path = Path("bench/results")
    threads: int = 1  # torch intra-op threads (see README: why 1 on a shared 2-core machine)
    batch_seqs: int = 8  # sequences per training step (train.micro_batch_seqs default)
    warmup: int = 2  # untimed calls per model before timing
    repeats: int = 5  # timed rounds (median over rounds)
    calls_per_repeat: int = 1  # training steps per model per round
    sizes: list[str] = field(default_factory=lambda: ["micro", "mini", "small", "medium"])
    variant_size: str = "mini"
    memory: bool = True  # peak-RSS probes in fresh subprocesses
    scale: float = 1.0  # orchestration DB size: 10,000 runs x 1,000 points at scale 1
    cli_repeats: int = 5
    ingest_workers: int = 4
    cache_dir: Path = Path("/tmp/cemctl-bench")
    gpu_rows: str = ""  # comma list of row numbers (1-based) of bench/gpu.py's GPU_ROWS to time; "" = all
    gpu_profile_rows: str = ""  # comma list of those rows to profile after timing them (top kernels)
    gpu_memory_sizes: str = ""  # comma list of Table 1 sizes for the gpu_memory section; "" = all

    @classmethod
    def quick_mode(cls, out_dir: Path) -> "Settings":
        return cls(quick=True, out_dir=out_dir, warmup=1, repeats=2, calls_per_repeat=1, batch_seqs=2,
                   sizes=["nano"], variant_size="nano", memory=True, scale=0.001, cli_repeats=2,
                   ingest_workers=2)

    def public(self) -> dict[str, object]:
        return {"quick": self.quick, "threads": self.threads, "batch_seqs": self.batch_seqs,
                "warmup": self.warmup, "repeats": self.repeats, "calls_per_repeat": self.calls_per_repeat,
                "scale": self.scale}
