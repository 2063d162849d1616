"""The GPU session's measuring scripts (bench/gpu_session/), checked on the CPU before device time is spent.

They run only on a GPU; what can be wrong before they get there is checked here.
- flexopts.py (FlexAttention's kernel options): a candidate spelling an option FlexAttention does not know (it
  would be timed as the default), the gate and the choice of the winner, and the sweep's dense reference
  computing another function than the model's FlexAttention call.
- concurrency.py (N runs at once on one GPU): its grid plans N distinct runs, and its table reads what the
  trainer writes (result.json's tokens, metrics.jsonl's interval rates) from real run folders.
"""

from __future__ import annotations

import pytest
import torch

from bench.gpu_session import concurrency, flexopts
from cem_core.model import flex

pytestmark = pytest.mark.skipif(not flex.flex_importable(), reason="this torch has no FlexAttention")


def test_every_candidate_spells_options_flex_attention_knows():
    for name, candidate in flexopts.CANDIDATES.items():
        options, mode = flexopts.split(candidate)
        assert flexopts.unknown_options(options) == [], name
        assert mode in (None, "max-autotune-no-cudagraphs", "max-autotune"), name
    assert flexopts.unknown_options({"fwd_BLOKC_M": 64, "bwd_BLOCK_M1": 32, "num_warps": 4}) == ["fwd_BLOKC_M"]


def test_the_options_reach_the_models_own_flex_attention_call_and_only_inside(monkeypatch):
    """`kernel_options` wraps the function the model's FlexAttention call compiles (cem_core.model.flex): the
    model code is not changed, so the code fingerprint that says which code trained a run stays."""
    from torch.nn.attention.flex_attention import flex_attention

    seen = []

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - stands in for the compiled function
        seen.append(kwargs.get("kernel_options"))
        return flex_attention(*args, **kwargs)

    monkeypatch.setattr(flex, "_compiled", recording)
    x = {n: t.detach() for n, t in flexopts.inputs("shared", batch=1, device="cpu", length=32).items()}
    with flexopts.kernel_options({"BLOCK_M": 32, "num_stages": 1}):
        inside = flexopts.flex_call(x, torch.float32, {}, compiled=True)
    flexopts.flex_call(x, torch.float32, {}, compiled=True)
    flexopts.flex_call(x, torch.float32, {"fwd_BLOCK_N": 64}, compiled=True)
    assert seen == [{"BLOCK_M": 32, "num_stages": 1}, None, {"fwd_BLOCK_N": 64}]
    assert flexopts.relative_error(inside, flexopts.reference(x, torch.float32)) < 1e-5


@pytest.mark.parametrize(("e_f32", "e_bf16", "e_sdpa", "ok"), [
    (1e-3, 0.010, 0.005, True),   # bf16 at exactly twice SDPA's error: within the 0.005 slack
    (1e-3, 0.016, 0.005, False),  # past 2x + 0.005
    (0.02, 0.001, 0.005, False),  # float32 error at the tolerance fails
    (0.019, 0.0, 0.0, True),
    (None, 0.010, 0.005, True),   # float32 could not run: the bf16 half decides
    (None, 0.016, 0.005, False),
])
def test_the_gate_is_the_gpu_tests_gate(e_f32, e_bf16, e_sdpa, ok):
    assert flexopts.passes(e_f32, e_bf16, e_sdpa) is ok


def test_the_winner_is_the_fastest_candidate_that_ran_and_passed():
    rows = [
        {"shape": "shared", "candidate": "default", "ms": 5.4, "passes": True},
        {"shape": "shared", "candidate": "fast but wrong", "ms": 3.0, "passes": False},
        {"shape": "shared", "candidate": "failed", "failed": "OutOfResources"},
        {"shape": "shared", "candidate": "tuned", "ms": 4.1, "passes": True},
        {"shape": "none", "candidate": "other shape", "ms": 1.0, "passes": True},
    ]
    assert flexopts.fastest_passing(rows, "shared")["candidate"] == "tuned"
    assert flexopts.fastest_passing(rows, "per_head") is None


@pytest.mark.parametrize("shape", list(flexopts.SHAPES))
def test_the_sweeps_reference_is_the_models_flex_attention_function(shape):
    """Forward, on the CPU (FlexAttention's backward needs a GPU): the dense reference the gate measures
    against equals the model's `cem_flex_attention` on the same inputs (ALiBi, self bias, score matrix)."""
    x = {n: t.detach() for n, t in flexopts.inputs(shape, batch=1, device="cpu", length=64).items()}
    ref = flexopts.reference(x, torch.float32)
    out = flexopts.flex_call(x, torch.float32, {"BLOCK_M": 32}, compiled=False)
    assert out.shape == x["v"].shape
    assert flexopts.relative_error(out, ref) < 1e-5
    # the reference reads every input: a different self bias or score matrix changes it
    x2 = dict(x, delta=x["delta"] + 1.0)
    assert flexopts.relative_error(flexopts.reference(x2, torch.float32), ref) > 1e-3


def test_without_a_gpu_the_sweep_says_so_and_exits_2(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert flexopts.main(["--shapes", "shared"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert flexopts.main(["--shapes", "diagonal"]) == 2
    assert "unknown ['diagonal']" in capsys.readouterr().err


def _trained_folders(tmp_path, n: int, rates: list[list[float]], finished: int) -> "object":
    """Run folders of concurrency.toml with n seeds, as the trainer leaves them: `finished` of them with a result."""
    from cem_core.runfiles import RunDir, RunResult, append_jsonl
    from cemctl.grid import load_grid
    from cemctl.services.plan import write_run_configs

    tmp_path.mkdir(parents=True, exist_ok=True)
    grid = tmp_path / "concurrency.toml"
    grid.write_text(concurrency.grid_text(n, steps=40))
    plan = load_grid(grid)
    assert len({r.run_id for r in plan.runs}) == n and all(r.config.train.max_steps == 40 for r in plan.runs)
    runs = tmp_path / "runs"
    write_run_configs(plan, runs)
    for i, run in enumerate(plan.runs):
        rd = RunDir(runs / run.run_id)
        for step, rate in enumerate(rates[i], 1):
            append_jsonl(rd.metrics, {"kind": "train", "step": 10 * step, "tokens_per_s": rate})
            append_jsonl(rd.metrics, {"kind": "val", "step": 10 * step, "val_loss": 3.0})
        if i < finished:
            rd.write_result(RunResult(state="done", test_loss=3.0, tokens=40 * 64 * 1024, steps=40,
                                     run_id=run.run_id))
    return runs


def test_the_concurrency_table_reads_the_run_folders_a_launch_leaves(tmp_path):
    # steady rate: the median of the second half of each run's logged rates (the first half holds the compile)
    runs = _trained_folders(tmp_path, 2, [[10.0, 900.0, 1000.0, 1100.0], [5.0, 500.0, 700.0, 600.0]], finished=2)
    row = concurrency.measure(runs, 2, launch_s=50.0)
    assert row == {"jobs": 2, "done": 2, "launch s": 50.0, "tokens/s, launch": round(2 * 40 * 64 * 1024 / 50),
                   "tokens/s, steady": 1050 + 650, "per run, steady": 850}
    one = concurrency.measure(_trained_folders(tmp_path / "one", 1, [[1.0, 1200.0]], finished=1), 1, launch_s=40.0)
    text = concurrency.table([one, row])
    assert "| 2 | 2/2 | 50.0 |" in text and f"{1700 / 1200:.2f}x" in text
    assert "Most tokens/s over a whole launch: 2 runs at once." in text


def test_a_launch_that_did_not_finish_every_run_gives_no_throughput(tmp_path):
    """A time-boxed launch that left a run unfinished has no launch throughput (its tokens are not all there)."""
    runs = _trained_folders(tmp_path, 2, [[100.0, 100.0], [100.0, 100.0]], finished=1)
    row = concurrency.measure(runs, 2, launch_s=90.0)
    assert row["done"] == 1 and row["tokens/s, launch"] is None and row["tokens/s, steady"] is None
    assert "| 2 | 1/2 | 90.0 | - | - |" in concurrency.table([row])


def test_whole_steps_are_timed_with_the_defaults_and_with_a_winner_that_sets_options():
    def row(name, ms, passes=True):  # noqa: ANN001, ANN202
        return {"shape": "shared", "candidate": name, "options": flexopts.CANDIDATES[name], "ms": ms, "passes": passes}

    tuned = {"rows": [row("default", 5.0), row("max-autotune", 3.0), row("bwd 64/128 w8 s2", 4.0),
                      row("tma", 2.0, passes=False)]}
    assert flexopts.step_settings(tuned) == [("default", {}),
                                             ("bwd 64/128 w8 s2", flexopts.CANDIDATES["bwd 64/128 w8 s2"])]
    # the defaults won (max-autotune is a compile mode, not kernel options): one pass, not the same twice
    assert flexopts.step_settings({"rows": [row("default", 5.0), row("max-autotune", 3.0)]}) == [("default", {})]


def test_a_candidate_whose_package_is_missing_is_not_compiled(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert flexopts.needs_package(flexopts.CANDIDATES["flash backend"]) == "flash_attn.cute"
    assert flexopts.needs_package(flexopts.CANDIDATES["tma"]) == ""


def test_a_stopped_launch_leaves_no_process_that_names_its_folder(tmp_path):
    """Trainers run in sessions of their own, so stopping the launch's group is not enough: every process
    whose command line names the launch's folder is stopped (a real process here)."""
    import subprocess
    import sys

    marker = str(tmp_path / "runs") + "/"
    child = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                              "time.sleep(60)", marker], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"  # ignoring SIGTERM from here
        assert concurrency.processes_naming(marker) == [child.pid]
        concurrency.stop([child.pid], grace_s=1)  # it ignores SIGTERM: SIGKILL after the grace
        assert child.wait(timeout=10) == -9
        assert concurrency.processes_naming(marker) == []
    finally:
        child.kill()


def test_a_launch_that_failed_before_planning_is_a_row_not_a_crash(tmp_path):
    row = concurrency.measure(tmp_path / "no runs folder", 4, launch_s=3.0)
    assert row["done"] == 0 and row["tokens/s, launch"] is None
