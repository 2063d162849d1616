"""The training engine (`python -m cem_core.train RUN_DIR`): recipe, data order, resume, outcomes.

Real model, real built-in corpus (byte tokenizer, cached once per session),
tiny sizes on the CPU.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cem_core.config import DataConfig, RunConfig, resolve, total_steps
from cem_core.train import run_training
from cem_core.train.checkpoint import list_checkpoints, load_latest, save_checkpoint
from cem_core.train.optim import lr_multiplier, warmup_steps
from cem_core.runfiles import read_jsonl, truncate_metrics
from cem_core.train.sampler import BatchSampler

REPO = Path(__file__).resolve().parents[1]
TIME_KEYS = ("time_s", "tokens_per_s")


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory) -> str:
    """One byte-tokenized built-in corpus cache for the whole session."""
    from cem_core.data import prepare_data

    cache = str(tmp_path_factory.mktemp("train-data-cache"))
    prepare_data(DataConfig(tokenizer="byte", cache_dir=cache))
    return cache


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """In-process runs use one thread (CEMCTL_NUM_THREADS): tiny matmuls, a shared 2-core machine."""
    monkeypatch.setenv("CEMCTL_NUM_THREADS", "1")


def tiny_config(cache: str, **overrides) -> RunConfig:
    base = {
        "model.size": "nano", "model.context_len": 32, "data.tokenizer": "byte", "data.cache_dir": cache,
        "train.max_steps": 8, "train.batch_seqs": 8, "train.micro_batch_seqs": 4,
        "train.val_tokens": 1024, "train.test_tokens": 2048, "train.ckpt_every_steps": 3,
        "train.eval_every_steps": 4, "train.seed": 1,
    }
    base.update(overrides)
    return resolve(RunConfig.from_dict(base))


def make_run(root: Path, name: str, cfg: RunConfig) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    return run_dir


def metrics(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in TIME_KEYS} for m in read_jsonl(run_dir / "metrics.jsonl")]


def no_temp_files(run_dir: Path) -> bool:
    return not [p for p in run_dir.rglob("*") if p.name.endswith(".tmp")]


def run_cli(run_dir: Path, env_extra: dict[str, str] | None = None, *, torchrun: int = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(env_extra or {})}
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={torchrun}",
               "-m", "cem_core.train", str(run_dir)]
    else:
        cmd = [sys.executable, "-m", "cem_core.train", str(run_dir), "--device", "cpu"]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------------------
# Recipe and data order


@pytest.mark.parametrize("total", [1, 7, 20, 1000])
def test_lr_schedule_warmup_then_cosine_to_final_fraction(total):
    mult = [lr_multiplier(s, total, 0.05, 0.1) for s in range(1, total + 1)]
    w = warmup_steps(total, 0.05)
    assert w >= 1
    if total > w:
        assert mult[-1] == pytest.approx(0.1)
    if w:
        assert mult[w - 1] == pytest.approx(1.0)
        assert all(a < b for a, b in zip(mult[:w], mult[1:w]))
    assert all(a >= b for a, b in zip(mult[w:], mult[w + 1:]))
    assert max(mult) <= 1.0 + 1e-12 and min(mult[w - 1:]) >= 0.1 - 1e-12
    assert mult[0] == pytest.approx(1.0 / w)


def test_data_order_is_a_pure_function_and_ranks_split_the_same_global_batch():
    one = BatchSampler(seed=3, num_sequences=50, batch_seqs=8, micro_batch_seqs=4, world_size=1)
    two = BatchSampler(seed=3, num_sequences=50, batch_seqs=8, micro_batch_seqs=2, world_size=2)
    again = BatchSampler(seed=3, num_sequences=50, batch_seqs=8, micro_batch_seqs=4, world_size=1)
    other_seed = BatchSampler(seed=4, num_sequences=50, batch_seqs=8, micro_batch_seqs=4, world_size=1)
    assert one.grad_accum == two.grad_accum == 2
    for step in (1, 7, 13):  # step 7 crosses the first epoch boundary (positions 48..55)
        for a in range(2):
            r0, r1 = two.indices(step, a, 0), two.indices(step, a, 1)
            assert not set(r0) & set(r1)
            np.testing.assert_array_equal(np.concatenate([r0, r1]), one.indices(step, a, 0))
            np.testing.assert_array_equal(again.indices(step, a, 0), one.indices(step, a, 0))
    epoch0 = np.concatenate([one.indices(s, a, 0) for s in range(1, 7) for a in range(2)])
    epoch0 = np.concatenate([epoch0, one.indices(7, 0, 0)[:2]])  # stream positions 0..49
    assert sorted(epoch0) == list(range(50))  # epoch 0 is a permutation of the 50 sequences
    assert not np.array_equal(other_seed.indices(1, 0, 0), one.indices(1, 0, 0))
    with pytest.raises(ValueError, match="multiple"):
        BatchSampler(seed=0, num_sequences=10, batch_seqs=6, micro_batch_seqs=4)


# ---------------------------------------------------------------------------
# Run directory pieces


def test_truncate_metrics_drops_later_steps_and_a_truncated_tail(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [{"kind": "train", "step": s, "train_loss": 1.0 / s} for s in range(1, 6)]
    path.write_text("".join(json.dumps(m) + "\n" for m in lines) + '{"kind": "train", "st')
    assert len(read_jsonl(path)) == 5
    assert truncate_metrics(path, 3) == 3
    assert [m["step"] for m in read_jsonl(path)] == [1, 2, 3]
    assert path.read_text().endswith("\n")


def test_checkpoints_rotate_and_a_truncated_newest_falls_back(tmp_path):
    ckpt_dir = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        state = {"model": {"w": torch.full((3,), float(step))}, "optimizer": {}, "scheduler": {},
                 "step": step, "tokens": step * 10}
        save_checkpoint(ckpt_dir, state, keep=2)
    assert [s for s, _ in list_checkpoints(ckpt_dir)] == [3, 4]
    assert load_latest(ckpt_dir)["step"] == 4
    newest = ckpt_dir / "step_00000004.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    state = load_latest(ckpt_dir)
    assert state["step"] == 3 and float(state["model"]["w"][0]) == 3.0
    (ckpt_dir / "step_00000003.pt").write_bytes(b"garbage")
    assert load_latest(ckpt_dir) is None


def test_heartbeat_thread_keeps_the_file_fresh_between_steps(tmp_path):
    import time

    from cem_core.runfiles import Heartbeat

    hb = Heartbeat(tmp_path / "heartbeat.json", total_steps=10, attempt=3, interval_s=0.05).start()
    try:
        first = json.loads((tmp_path / "heartbeat.json").read_text())
        hb.update(step=4, tokens=400)
        time.sleep(0.5)
        later = json.loads((tmp_path / "heartbeat.json").read_text())
    finally:
        hb.stop()
    assert first["step"] == 0 and first["attempt"] == 3 and first["pid"] == os.getpid()
    assert later["step"] == 4 and later["tokens"] == 400 and later["time"] > first["time"]


@pytest.mark.parametrize("tty", [True, False])
def test_console_logs_to_train_log_with_or_without_a_progress_bar(tmp_path, tty, capsys):
    import logging

    from cem_core.train.console import LOGGER_NAME, PROGRESS_LINE, RunConsole

    log = logging.getLogger(LOGGER_NAME)
    with RunConsole(tmp_path / "train.log", rank=0, total_steps=5, tty=tty) as ui:
        log.info("step 2/5 loss 1.0", extra={PROGRESS_LINE: True})
        ui.progress(2, "loss 1.0")
        log.info("val loss 2.0")
    text, out = (tmp_path / "train.log").read_text(), capsys.readouterr().out
    assert "step 2/5 loss 1.0" in text and "val loss 2.0" in text  # the file always has every line
    assert "val loss 2.0" in out
    assert ("step 2/5 loss 1.0" in out) is (not tty)  # on a terminal the bar replaces per-step lines
    assert not logging.getLogger(LOGGER_NAME).handlers  # removed again: runs in one process do not pile up


# ---------------------------------------------------------------------------
# Whole runs


def test_resume_after_crash_repeats_the_uninterrupted_run_exactly(tmp_path, data_cache, monkeypatch):
    cfg = tiny_config(data_cache)
    full = make_run(tmp_path, "full", cfg)
    result_full = run_training(full, device="cpu")
    assert result_full["state"] == "done" and result_full["steps"] == total_steps(cfg) == 8
    assert [s for s, _ in list_checkpoints(full / "checkpoints")] == [6, 8]  # keep the last two

    crashed = make_run(tmp_path, "crashed", cfg)
    monkeypatch.setenv("CEMCTL_TEST_CRASH_AT_STEP", "8")
    first = run_training(crashed, device="cpu")
    assert first["state"] == "failed" and "test crash at step 8" in first["error"]
    assert first["steps"] == 7 and json.loads((crashed / "result.json").read_text())["state"] == "failed"
    assert max(m["step"] for m in metrics(crashed)) == 7  # steps 7 were logged after the step-6 checkpoint
    # The crash hook fires on the first attempt only: the retry resumes from step 6 and finishes.
    second = run_training(crashed, device="cpu")
    assert second["state"] == "done" and second["attempt"] == 2

    assert metrics(crashed) == metrics(full)  # every line, exactly: no gap, no duplicate, same losses
    train_steps = [m["step"] for m in metrics(crashed) if m["kind"] == "train"]
    assert train_steps == list(range(1, 9))
    assert [m["step"] for m in metrics(crashed) if m["kind"] == "val"] == [4, 8]
    assert second["test_loss"] == result_full["test_loss"] and second["val_loss"] == result_full["val_loss"]
    states = [e["state"] for e in read_jsonl(crashed / "events.jsonl")]
    assert states == ["running", "failed", "running", "done"]
    # Each attempt records the fingerprint of the model and training code it ran (cem_core.fingerprint).
    from cem_core.fingerprint import code_fingerprint

    code = code_fingerprint()
    assert second["code_fingerprint"] == result_full["code_fingerprint"] == code
    assert [e.get("code_fingerprint") for e in read_jsonl(crashed / "events.jsonl") if e["state"] == "running"] == [code] * 2
    hb = json.loads((crashed / "heartbeat.json").read_text())
    assert hb["step"] == 8 and hb["total_steps"] == 8 and hb["attempt"] == 2
    assert hb["time"] <= (crashed / "result.json").stat().st_mtime  # no heartbeat after the result
    assert no_temp_files(crashed)
    # A finished run is not trained again.
    assert run_training(crashed, device="cpu") == second
    assert len(read_jsonl(crashed / "events.jsonl")) == 4


def test_truncated_checkpoint_on_resume_falls_back_to_the_previous_one(tmp_path, data_cache, monkeypatch):
    cfg = tiny_config(data_cache, **{"train.ckpt_keep": 3})
    full = make_run(tmp_path, "full", cfg)
    run_training(full, device="cpu")

    run_dir = make_run(tmp_path, "run", cfg)
    monkeypatch.setenv("CEMCTL_TEST_CRASH_AT_STEP", "8")
    run_training(run_dir, device="cpu")
    newest = run_dir / "checkpoints" / "step_00000006.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # a half-written file from an unsafe copy
    result = run_training(run_dir, device="cpu")
    assert result["state"] == "done"
    assert "resumed from checkpoint step 3" in (run_dir / "train.log").read_text()
    assert metrics(run_dir) == metrics(full)


def train_main(run_dir: Path, monkeypatch, capsys, *, device: str = "cpu", **env: str) -> tuple[int, str]:
    """`python -m cem_core.train RUN_DIR --device DEVICE` as its entry point runs it (`__main__.main`: the exit
    code and the lines on stderr), in this process; `env`: the test hooks (cem_core.train.hooks)."""
    from cem_core.train.__main__ import main

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    code = main([str(run_dir), "--device", device])
    return code, capsys.readouterr().err


def test_nan_loss_marks_the_run_diverged_with_exit_code_3(tmp_path, data_cache, monkeypatch, capsys):
    run_dir = make_run(tmp_path, "nan", tiny_config(data_cache))
    code, err = train_main(run_dir, monkeypatch, capsys, CEMCTL_TEST_NAN_AT_STEP="5")
    assert code == 3, err[-2000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["state"] == "diverged" and result["diverged_step"] == 5
    assert result["steps"] == 4 and result["test_loss"] is None
    assert "non-finite" in result["error"]
    assert max(m["step"] for m in metrics(run_dir)) == 4
    assert [e["state"] for e in read_jsonl(run_dir / "events.jsonl")] == ["running", "diverged"]
    assert no_temp_files(run_dir)


def test_crash_marks_the_run_failed_with_exit_code_1(tmp_path, data_cache, monkeypatch, capsys):
    run_dir = make_run(tmp_path, "crash", tiny_config(data_cache))
    code, err = train_main(run_dir, monkeypatch, capsys, CEMCTL_TEST_CRASH_AT_STEP="2")
    assert code == 1, err[-2000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["state"] == "failed" and result["diverged_step"] is None
    assert result["error"].splitlines()[-1] == "RuntimeError: test crash at step 2 (CEMCTL_TEST_CRASH_AT_STEP)"
    assert "test crash" in (run_dir / "train.log").read_text()
    assert no_temp_files(run_dir)


def test_missing_config_or_bad_device_is_a_one_line_error_with_exit_code_2(tmp_path, data_cache, monkeypatch, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = train_main(empty, monkeypatch, capsys)
    assert code == 2
    assert "config.json" in err and len(err.strip().splitlines()) == 1
    assert list(empty.iterdir()) == []

    run_dir = make_run(tmp_path, "dev", tiny_config(data_cache))
    code, err = train_main(run_dir, monkeypatch, capsys, device="tpu")
    assert code == 2 and "--device" in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]


def unigram_cross_entropy(train: np.ndarray, val: np.ndarray, vocab: int) -> float:
    """Nats per token of the val split under the train split's (add-one) unigram distribution."""
    counts = np.bincount(np.asarray(train, dtype=np.int64), minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[np.asarray(val, dtype=np.int64)].mean())


@pytest.mark.slow
def test_a_tiny_model_learns_well_below_the_unigram_baseline(tmp_path, data_cache):
    from cem_core.data import prepare_data

    cfg = tiny_config(data_cache, **{
        "model.context_len": 64, "train.max_steps": 150, "train.batch_seqs": 16, "train.micro_batch_seqs": 16,
        "train.lr": 0.006, "train.val_tokens": 4096, "train.test_tokens": 4096, "train.ckpt_every_steps": 0,
        "train.eval_every_steps": 0,
    })
    data = prepare_data(cfg.data)
    n_val = (4096 // 64) * 64 + 1
    baseline = unigram_cross_entropy(data.tokens("train"), data.tokens("val")[:n_val], data.vocab_size)
    result = run_training(make_run(tmp_path, "learn", cfg), device="cpu")
    assert result["state"] == "done"
    assert result["val_tokens"] == 4096 and result["test_tokens"] == 4096
    assert result["val_ppl"] == pytest.approx(math.exp(result["val_loss"]))
    # Starts near log(257) = 5.55, the byte unigram baseline is ~3.3 nats; the model must beat it clearly.
    assert result["val_loss"] < baseline - 0.4, (result["val_loss"], baseline)
    vals = [m["val_loss"] for m in metrics(tmp_path / "learn") if m["kind"] == "val"]
    assert len(vals) == 10 and vals[-1] < vals[0]


@pytest.mark.slow
def test_ddp_two_gloo_processes_match_one_process_with_the_same_global_batch(tmp_path, data_cache):
    single = make_run(tmp_path, "single", tiny_config(data_cache, **{"train.max_steps": 4, "train.micro_batch_seqs": 4}))
    ddp = make_run(tmp_path, "ddp", tiny_config(data_cache, **{"train.max_steps": 4, "train.micro_batch_seqs": 2}))
    assert run_cli(single).returncode == 0
    proc = run_cli(ddp, torchrun=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = metrics(single), metrics(ddp)
    assert [(m["kind"], m["step"]) for m in a] == [(m["kind"], m["step"]) for m in b]
    for x, y in zip(a, b):
        key = "train_loss" if x["kind"] == "train" else "val_loss"
        assert y[key] == pytest.approx(x[key], rel=1e-5, abs=1e-6)
    ra, rb = (json.loads((d / "result.json").read_text()) for d in (single, ddp))
    assert rb["world_size"] == 2 and rb["test_loss"] == pytest.approx(ra["test_loss"], rel=1e-5)
    assert [e["state"] for e in read_jsonl(ddp / "events.jsonl")] == ["running", "done"]  # rank 0 only


def test_energy_layers_log_energy_lines_at_each_evaluation(tmp_path, data_cache):
    cfg = tiny_config(data_cache, **{
        "model.attention": "cem", "model.attn_steps": 2, "model.mlp": "cem", "train.energy_layers": "all",
        "train.max_steps": 4, "train.eval_every_steps": 2,
    })
    run_dir = make_run(tmp_path, "energy", cfg)
    assert run_training(run_dir, device="cpu")["state"] == "done"
    lines = [m for m in metrics(run_dir) if m["kind"] == "energy"]
    assert {m["step"] for m in lines} == {2, 4}
    assert {(m["layer"], m["sublayer"]) for m in lines} == {(i, s) for i in range(cfg.model.n_layers) for s in ("attention", "mlp")}
    attn = [m for m in lines if m["sublayer"] == "attention" and m["layer"] == 0 and m["step"] == 4]
    assert [m["t"] for m in attn] == [0, 1, 2] and attn[0]["descent_frac"] is None
    assert all(math.isfinite(m["energy"]) for m in lines)


def test_a_model_that_fails_to_compile_at_its_first_step_trains_eagerly_with_the_same_losses(tmp_path, data_cache,
                                                                                              monkeypatch):
    """torch.compile is lazy: the failure comes at the first call. The trainer probes one micro-batch, logs the
    reason and trains eagerly; the probe changes nothing (same metrics as compile=off)."""
    import cem_core.train.loop as loop

    eager = make_run(tmp_path, "eager", tiny_config(data_cache, **{"train.compile": "off", "model.attention": "cem",
                                                                   "model.kq_diagonal": "shared"}))
    ref = run_training(eager, device="cpu")

    class FailsAtFirstCall(torch.nn.Module):
        def __init__(self, inner):  # noqa: ANN001
            super().__init__()
            self.inner = inner

        def forward(self, *a):  # noqa: ANN002
            raise RuntimeError("InductorError: LoweringException: unsupported op")

    monkeypatch.setattr(loop.torch, "compile", lambda model, **kw: FailsAtFirstCall(model))
    run_dir = make_run(tmp_path, "compiled", tiny_config(data_cache, **{"train.compile": "on",
                                                                        "model.attention": "cem",
                                                                        "model.kq_diagonal": "shared"}))
    result = run_training(run_dir, device="cpu")
    log = (run_dir / "train.log").read_text()
    assert result["state"] == "done", result.get("error")
    assert "torch.compile failed at the first step (RuntimeError: InductorError: LoweringException" in log
    assert "training eagerly" in log and "CEM attention with a bias: SDPA" in log
    assert metrics(run_dir) == metrics(eager) and result["test_loss"] == ref["test_loss"]
