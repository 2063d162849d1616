"""Energy diagnostics (`train.energy_layers`): descent on a trained tiny model, cost only when enabled, report figure.

Real tiny CEM models trained on the CPU (byte-tokenized built-in corpus).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cem_core.config import DataConfig, RunConfig, resolve
from cem_core.train import run_training
from cem_core.runfiles import read_jsonl


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    from cem_core.data import prepare_data

    path = tmp_path_factory.getbasetemp() / "eval-energy-data-cache"  # shared with tests/test_eval.py
    prepare_data(DataConfig(tokenizer="byte", cache_dir=str(path)))
    return str(path)


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("CEMCTL_NUM_THREADS", "1")


def _config(cache: str, **overrides) -> RunConfig:
    base = {
        "model.size": "nano", "model.context_len": 32, "data.tokenizer": "byte", "data.cache_dir": cache,
        "model.attention": "cem", "model.mlp": "cem", "train.max_steps": 8, "train.batch_seqs": 8,
        "train.micro_batch_seqs": 4, "train.val_tokens": 1024, "train.test_tokens": 2048,
        "train.eval_every_steps": 4, "train.seed": 3,
    }
    base.update(overrides)
    return resolve(RunConfig.from_dict(base))


def _train(root: Path, name: str, cfg: RunConfig) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    assert run_training(run_dir, device="cpu")["state"] == "done"
    return run_dir


def test_energy_descends_along_the_recursion_of_a_trained_model_with_a_small_step_size(tmp_path, cache):
    cfg = _config(cache, **{"model.attn_steps": 3, "model.mlp_steps": 3, "model.attn_step_size": 0.1,
                            "model.mlp_step_size": 0.1, "train.energy_layers": "all"})
    run_dir = _train(tmp_path, "descent", cfg)
    lines = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["kind"] == "energy"]
    last = max(m["step"] for m in lines)
    assert last == 8  # the final evaluation
    at_last = [m for m in lines if m["step"] == last]
    series = {(m["layer"], m["sublayer"]) for m in at_last}
    assert series == {(i, s) for i in range(cfg.model.n_layers) for s in ("attention", "mlp")}
    steps = 0
    for layer, sub in sorted(series):
        e = {m["t"]: m for m in at_last if (m["layer"], m["sublayer"]) == (layer, sub)}
        assert sorted(e) == [0, 1, 2, 3] and e[0]["descent_frac"] is None
        for t in (1, 2, 3):
            # The exact assertion: at the last evaluation, in every chosen layer and sublayer, every recursive
            # step lowers the mean energy, and lowers it for at least 3/4 of the tokens.
            assert e[t]["energy"] < e[t - 1]["energy"], (layer, sub, t)
            assert e[t]["descent_frac"] >= 0.75, (layer, sub, t)
            steps += 1
    assert steps == 2 * 2 * 3


def test_no_energy_computation_when_the_option_is_empty(tmp_path, cache, monkeypatch):
    import cem_core.model.energy as energy_mod
    from cem_core.train.tasks import LMTask

    calls = {"write": 0, "diagnostics": 0}
    real_write, real_diag = LMTask.diagnostics, energy_mod.energy_diagnostics

    def counting_write(*args, **kwargs):
        calls["write"] += 1
        return real_write(*args, **kwargs)

    def counting_diag(*args, **kwargs):
        calls["diagnostics"] += 1
        return real_diag(*args, **kwargs)

    monkeypatch.setattr(LMTask, "diagnostics", counting_write)
    monkeypatch.setattr(energy_mod, "energy_diagnostics", counting_diag)
    off = _train(tmp_path, "off", _config(cache, **{"model.attn_steps": 2, "train.energy_layers": ""}))
    assert calls["diagnostics"] == 0
    calls["write"] = 0
    assert not [m for m in read_jsonl(off / "metrics.jsonl") if m["kind"] == "energy"]
    # The same counters see the computation when the option is on (2 evaluations: steps 4 and 8).
    on = _train(tmp_path, "on", _config(cache, **{"model.attn_steps": 2, "train.energy_layers": "1"}))
    assert calls == {"write": 2, "diagnostics": 2}
    layers = {m["layer"] for m in read_jsonl(on / "metrics.jsonl") if m["kind"] == "energy"}
    assert layers == {1}


def test_energy_figures_render_from_synthetic_lines_and_report_ascent_honestly():
    import pandas as pd

    from cemctl.report.figures import energy
    from cemctl.report.frame import runs_frame

    runs = runs_frame([{"run_id": "r1", "state": "done", "config": {"model": {"attention": "cem", "mlp": "cem",
                                                                              "size": "nano"}}}])
    rows = []
    for step in (10, 20):
        for t, (e_attn, e_mlp) in enumerate([(-1.0, -0.10), (-1.5, -0.08), (-1.8, -0.07)]):
            rows.append({"run_id": "r1", "step": step, "tokens": step * 100, "layer": 0, "sublayer": "attention",
                         "t": t, "energy": e_attn, "descent_frac": None if t == 0 else 0.9})
            rows.append({"run_id": "r1", "step": step, "tokens": step * 100, "layer": 0, "sublayer": "mlp",
                         "t": t, "energy": e_mlp, "descent_frac": None if t == 0 else 0.2})
    parts = energy.render(runs, pd.DataFrame(rows))
    assert [f.name for f in parts.figures] == ["energy_descent", "energy_training"]
    table = parts.tables[0].frame
    mlp = table[table["sublayer"].eq("mlp")]
    assert mlp["E_t - E_(t-1)"].dropna().round(6).tolist() == [0.02, 0.01]  # the MLP energy rose: shown as rising
    assert set(table["train step"]) == {20}  # the last evaluation only
    empty = energy.render(runs, pd.DataFrame(columns=["run_id", "step", "tokens", "layer", "sublayer", "t", "energy",
                                                       "descent_frac"]))
    assert empty.is_empty()
    for f in parts.figures:
        f.figure.clear()
    assert math.isfinite(float(table["energy"].sum()))
