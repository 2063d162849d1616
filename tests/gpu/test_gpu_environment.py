"""What a run on a real CUDA GPU records about its machine (environment.json) and its GPU samples (marker `gpu`).

    python -m pytest -q -m gpu tests/gpu/test_gpu_environment.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)")]


def test_a_gpu_run_records_its_gpu_driver_cuda_and_peak_memory(tmp_path: Path):
    from cem_core.config import DataConfig, RunConfig, resolve
    from cem_core.data import prepare_data
    from cem_core.runfiles import read_jsonl
    from cem_core.runfiles.environment import read_environment
    from cem_core.train import run_training

    prepare_data(DataConfig(tokenizer="byte"))
    cfg = resolve(RunConfig.from_dict({
        "model.size": "nano", "model.context_len": 64, "data.tokenizer": "byte", "train.max_steps": 20,
        "train.batch_seqs": 8, "train.micro_batch_seqs": 8, "train.val_tokens": 2048, "train.test_tokens": 2048,
        "train.compile": "off", "train.system_every_s": 0.01}))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    assert run_training(run_dir, device="cuda")["state"] == "done"
    env = read_environment(run_dir)
    dev = torch.device("cuda", torch.cuda.current_device())
    assert env["device"].startswith("cuda") and env["gpu_model"] == torch.cuda.get_device_name(dev)
    assert env["gpu_memory_bytes"] == torch.cuda.get_device_properties(dev).total_memory
    assert env["cuda_version"] == torch.version.cuda and env["gpu_count"] == torch.cuda.device_count()
    assert re.fullmatch(r"\d+\.\d+", env["gpu_capability"])
    assert env["driver_version"] and re.match(r"\d+\.", env["driver_version"])
    assert 0 < env["peak_gpu_allocated_bytes"] <= env["peak_gpu_reserved_bytes"] <= env["gpu_memory_bytes"]
    print(f"environment gathered on the GPU machine in {env['gather_ms']} ms")
    samples = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["kind"] == "system"]
    assert samples and all(m["gpu_mem_reserved_bytes"] is not None for m in samples)
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert all(m["gpu_util_pct"] is None for m in samples)  # torch's memory numbers only
    else:
        assert any(m["gpu_util_pct"] is not None for m in samples)
        assert all(m["gpu_mem_used_bytes"] is None or m["gpu_mem_used_bytes"] > 0 for m in samples)
