"""The GP study through the training engine: `run_training` of a task = "gp" run directory."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from cem_core.config import RunConfig, resolve
from cem_core.gp.counts import gp_flops_per_example, gp_param_counts
from cem_core.gp.data import make_gp_dataset
from cem_core.gp.task import GPTask
from cem_core.train import run_training
from cem_core.train.checkpoint import load_latest
from cem_core.runfiles import read_jsonl


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("CEMCTL_NUM_THREADS", "1")


def test_tiny_gp_run_learns_and_keeps_the_run_directory_contract(tmp_path: Path):
    steps, batch = 100, 32
    cfg = resolve(RunConfig.from_dict({
        "task": "gp", "model.size": "nano", "model.mlp": "cem", "model.mlp_steps": 2,
        "gp.kernel": "rbf", "gp.n_train": 256, "gp.n_test": 64, "data.cache_dir": str(tmp_path / "cache"),
        "train.max_steps": steps, "train.batch_seqs": batch, "train.micro_batch_seqs": 16,
        "train.eval_every_steps": 25, "train.ckpt_every_steps": 50, "train.seed": 0,
    }))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))

    result = run_training(run_dir, device="cpu")

    assert result["state"] == "done", result["error"]
    assert json.loads((run_dir / "result.json").read_text()) == result
    data = make_gp_dataset(cfg.gp, cache_dir=cfg.data.cache_dir)
    y_std = float(np.std(data.y_test))
    # it learned something: better than predicting the mean, but not better than the GP posterior mean
    assert result["test_rmse"] < 0.95 * y_std, (result["test_rmse"], y_std)
    assert result["test_rmse"] > 0.5 * result["bayes_rmse"]
    assert result["test_rmse"] == pytest.approx(math.sqrt(result["test_loss"]))
    assert result["val_rmse"] == pytest.approx(math.sqrt(result["val_loss"]))
    assert result["test_ppl"] is None and result["val_ppl"] is None
    assert result["params_total"] == gp_param_counts(cfg.model, cfg.gp)["total"]
    fpe = gp_flops_per_example(cfg.model, cfg.gp)
    assert result["flops_per_token"] == fpe and result["train_flops"] == 3 * fpe * steps * batch
    assert result["tokens"] == steps * batch and result["steps"] == steps
    assert result["test_tokens"] == 64 and result["val_tokens"] == 64

    lines = read_jsonl(run_dir / "metrics.jsonl")
    train = [m for m in lines if m["kind"] == "train"]
    val = [m for m in lines if m["kind"] == "val"]
    assert [m["step"] for m in train] == list(range(1, steps + 1))
    assert [m["step"] for m in val] == [25, 50, 75, 100]
    assert all(math.isfinite(m["train_loss"]) for m in train)
    assert np.mean([m["train_loss"] for m in train[-10:]]) < np.mean([m["train_loss"] for m in train[:10]])
    assert val[-1]["val_loss"] == pytest.approx(result["val_loss"])

    # the result is the final model's: evaluate the last checkpoint again
    ckpt = load_latest(run_dir / "checkpoints")
    assert ckpt is not None and ckpt["step"] == steps
    task = GPTask(cfg, "cpu", data=data)
    model = task.build_model()
    model.load_state_dict(ckpt["model"])
    again = task.evaluate(model, "test", micro_batch=64)
    assert again.loss == pytest.approx(result["test_loss"], rel=1e-5)

    # a finished run is not trained again
    assert run_training(run_dir, device="cpu") == result


def _gp_run(root: Path, name: str, **overrides) -> tuple[Path, RunConfig]:
    base = {
        "task": "gp", "model.size": "nano", "model.mlp": "cem", "model.mlp_steps": 2, "gp.kernel": "gibbs",
        "gp.n_train": 64, "gp.n_test": 16, "data.cache_dir": str(root / "cache"), "train.max_steps": 30,
        "train.batch_seqs": 16, "train.micro_batch_seqs": 8, "train.eval_every_steps": 10,
        "train.ckpt_every_steps": 10, "train.seed": 3,
    }
    base.update(overrides)
    cfg = resolve(RunConfig.from_dict(base))
    run_dir = root / name
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    return run_dir, cfg


def _metrics(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in ("time_s", "tokens_per_s")}
            for m in read_jsonl(run_dir / "metrics.jsonl")]


def test_gp_run_resumes_exactly_after_a_crash(tmp_path: Path, monkeypatch):
    straight, _ = _gp_run(tmp_path, "straight")
    reference = run_training(straight, device="cpu")
    crashed, _ = _gp_run(tmp_path, "crashed")
    monkeypatch.setenv("CEMCTL_TEST_CRASH_AT_STEP", "25")
    first = run_training(crashed, device="cpu")
    assert first["state"] == "failed" and first["test_rmse"] is None and first["steps"] == 24
    assert first["params_total"] == reference["params_total"]  # GP counts even for a failed run
    second = run_training(crashed, device="cpu")  # attempt 2: resumes from the step-20 checkpoint
    assert second["state"] == "done" and second["attempt"] == 2
    assert _metrics(crashed) == _metrics(straight)
    assert second["test_loss"] == reference["test_loss"] and second["test_rmse"] == reference["test_rmse"]


def test_gp_run_with_a_nan_loss_is_recorded_diverged(tmp_path: Path, monkeypatch):
    run_dir, _ = _gp_run(tmp_path, "nan")
    monkeypatch.setenv("CEMCTL_TEST_NAN_AT_STEP", "5")
    result = run_training(run_dir, device="cpu")
    assert result["state"] == "diverged" and result["diverged_step"] == 5
    assert result["test_rmse"] is None and result["test_ppl"] is None
