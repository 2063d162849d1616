"""`plan`'s GPU estimate against what was measured on a GPU (bench/results/gpu-h200-2026-11-2{6,7}/, issue 35).

The committed bench rows are the truth here: the memory estimate must cover every measured peak without
overstating it by more than 15 %, the GPU-hours of the gpu-scale run must be within a factor 1.5 of its measured
wall time, and `plan` warns (one line per model, exit 0) when a micro-batch will not fit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cem_core.config import RunConfig, resolve
from cem_core.counts import run_counts
from cemctl.grid.estimate import gpu_peak_gib, measured_mfu, micro_batch_notes, run_cost
from helpers import cli

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "gpu-h200-2026-11-26"
RESULTS_2 = RESULTS.with_name("gpu-h200-2026-11-27")  # the second session: a compiled model compiles once
# bench/gpu.py's rows: model overrides by row name (its GPU_ROWS), at 134M, vocab 32,000, 8 x 2048
ROWS = {
    "134M Llama, ours": {},
    "134M CEM attention T=1 (shared diag)": {"model.attention": "cem", "model.kq_diagonal": "shared"},
    "134M full CEM T=2": {"model.attention": "cem", "model.attn_steps": 2, "model.kq_diagonal": "shared",
                          "model.attn_precond": "diag", "model.mlp": "cem", "model.mlp_steps": 2,
                          "model.mlp_precond": "diag"},
}


def _cfg(**kw):  # noqa: ANN003, ANN202
    return resolve(RunConfig.from_dict(kw))


def _measured_rows() -> list[dict]:
    rows = []
    for f in sorted(RESULTS.glob("call*-bench.json")) + sorted(RESULTS_2.glob("call*-bench.json")):
        for section in json.loads(f.read_text())["sections"]:
            if section["key"] == "gpu":
                rows += [r for r in section["rows"] if r.get("compile") is True and r["model"] in ROWS
                         and r.get("attention kernel") in ("-", "flex")]  # the path CUDA takes, not the SDPA mask
    return rows


def test_the_memory_estimate_covers_every_measured_peak_within_15_percent():
    rows = _measured_rows()
    assert {r["model"] for r in rows} == set(ROWS)  # the three models were measured
    for r in rows:
        cfg = _cfg(**{"model.size": "134M", "model.vocab_size": 32000, "model.context_len": 2048,
                      "train.batch_seqs": 8, "train.micro_batch_seqs": 8, **ROWS[r["model"]]})
        est = gpu_peak_gib(cfg, run_counts(cfg)["params_total"])
        assert r["peak GiB"] <= est <= 1.15 * r["peak GiB"], (r["model"], est, r["peak GiB"])


@pytest.mark.parametrize("log, overrides", [
    ("call3-gpu-scale-llama-20M.train.log", {}),
    ("call3-gpu-scale-fullcem-20M.train.log", ROWS["134M full CEM T=2"]),
], ids=["llama", "full cem T=2"])
def test_the_gpu_scale_runs_measured_time_is_within_a_factor_1_5_of_the_estimate(log, overrides):
    """The two 20M runs of bench/gpu_session/gpu_scale.toml: 120 steps of 128 x 1024 on the H200, compilation and
    evaluations included (their train.log): 38.5 s and 86.6 s. The old constants (312 TFLOP/s x 0.4, no start-up)
    said 6.8 s and 13.5 s; the first session's (one overhead, CEM at 0.775 of the Llama's rate) 73 s and 94 s."""
    text = (RESULTS_2 / log).read_text()
    measured_s = float(text.rsplit("tokens, ", 1)[1].split(" s")[0])
    cfg = _cfg(**{"model.size": "20M", "data.corpus": "builtin", "data.tokenizer": "bpe", "train.batch_seqs": 128,
                  "train.micro_batch_seqs": 16, "train.max_steps": 120, **overrides})
    est_s = run_cost(cfg).gpu_hours * 3600
    assert measured_s / 1.5 <= est_s <= measured_s * 1.5, (est_s, measured_s)
    assert run_cost(cfg).train_flops / (312e12 * 0.4) < measured_s / 3  # the old constants: far under


def test_the_cem_rate_is_the_measured_ratio_at_both_widths_and_held_beyond():
    from cemctl.grid.estimate import cem_rate

    assert cem_rate(256) == 1.58 and cem_rate(768) == 0.775 and cem_rate(128) == 1.58 and cem_rate(1024) == 0.775
    assert 0.775 < cem_rate(512) < 1.58


def test_measured_mfu_grows_with_width_and_is_held_beyond_the_measured_sizes():
    assert measured_mfu(128) == measured_mfu(256) < measured_mfu(512) < measured_mfu(768) == measured_mfu(2048)


def test_a_micro_batch_that_will_not_fit_is_named_with_one_that_does():
    big = _cfg(**{"model.size": "134M", "model.vocab_size": 32000, "train.batch_seqs": 128,
                  "train.micro_batch_seqs": 64})
    (line,) = micro_batch_notes([big, big], 80)  # one line per model, not per run
    assert line.startswith("warning: 134M (d_model 768, 12 layers, vocab 32000; attention=llama, mlp=llama) at "
                           "micro-batch 64 x 2048 needs about"), line
    fits = int(line.split("train.micro_batch_seqs = ", 1)[1].split()[0])
    assert 1 <= fits < 64 and 128 % fits == 0  # a micro-batch the batch of 128 can be split into
    ok = _cfg(**{"model.size": "134M", "model.vocab_size": 32000, "train.batch_seqs": 128,
                 "train.micro_batch_seqs": fits})
    assert gpu_peak_gib(ok, run_counts(ok)["params_total"]) <= 0.9 * 80
    assert micro_batch_notes([ok], 80) == []  # what it names, fits
    assert micro_batch_notes([big], 141) == []  # an H200 holds it


def test_models_that_differ_in_what_the_memory_estimate_reads_get_a_line_each():
    """Review finding: the line named only size and arm, so a grid varying model.d_model or model.kq_diagonal got one
    warning (for the first model) and the user, following it, met a second warning on the next plan."""
    base = {"model.size": "134M", "model.vocab_size": 32000, "train.batch_seqs": 128, "train.micro_batch_seqs": 128,
            "model.attention": "cem"}
    cfgs = [_cfg(**base, **{"model.d_model": d, "model.kq_diagonal": kq})
            for d in (768, 1536) for kq in ("none", "shared")]
    lines = micro_batch_notes(cfgs, 80)
    assert len(lines) == 4, lines
    for line in lines:  # following each line's advice, that model fits
        d = int(line.split("d_model ", 1)[1].split(",")[0])
        kq = line.split("kq_diagonal=", 1)[1].split(",")[0]
        n = int(line.split("train.micro_batch_seqs = ", 1)[1].split()[0])
        assert micro_batch_notes([_cfg(**{**base, "train.micro_batch_seqs": n, "model.d_model": d,
                                           "model.kq_diagonal": kq})], 80) == []


def test_a_gpu_too_small_for_the_weights_says_so():
    (line,) = micro_batch_notes([_cfg(**{"model.size": "134M", "model.vocab_size": 32000})], 0.5)
    assert "its weights and optimizer state alone need about 2.0 GiB" in line


@pytest.mark.parametrize("mem, warned", [("80", True), ("141", False)])
def test_plan_warns_on_its_error_stream_and_still_plans(tmp_path, mem, warned):
    (tmp_path / "g.toml").write_text('''seeds = [0]
[experiment]
name = "wide-batch"
figure = "curves"
[base]
"model.size" = "134M"
"model.vocab_size" = 32000
"train.batch_seqs" = 128
"train.micro_batch_seqs" = 64
"train.max_steps" = 10
[axes]
"model.attention" = ["llama", "cem"]
''')
    res = cli(tmp_path, "plan", str(tmp_path / "g.toml"), "--dry-run", "--gpu-mem-gib", mem, subprocess=True)
    assert res.returncode == 0, res.stderr
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert (len(warnings) == 2) == warned and (not warnings) == (not warned), res.stderr
    assert "GPU-hours" in res.stdout and "at 989 TFLOP/s x an MFU by model width from an H200" in res.stdout
