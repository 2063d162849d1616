"""Every experiments/*.toml validates at both scales and expands to the run counts it documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cem_core.config import field_names
from cem_core.errors import ConfigError
from cem_core.sizes import GPU_SCALE_SIZES, PAPER_SIZES
from cemctl.grid import FIGURE_KINDS, load_grid, run_cost
from cemctl.grid.spec import parse_toml

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
FILES = sorted(p.name for p in EXPERIMENTS.glob("*.toml"))
FIGURES = {
    "fig2a.toml": "components", "fig2b.toml": "components", "fig2c.toml": "recursion", "fig2d.toml": "recursion",
    "fig3a.toml": "lr_sweep", "fig3b.toml": "kq_diagonal", "fig3c.toml": "reuse_vs_recursion",
    "fig4.toml": "reuse_vs_recursion", "gp.toml": "gp_table", "demo.toml": "curves",
}
LM_FIGURES = ("fig2a.toml", "fig2b.toml", "fig2c.toml", "fig2d.toml", "fig3a.toml", "fig3b.toml", "fig3c.toml", "fig4.toml")
H100_BF16_TFLOPS = 989.0
CPU_SIZES = ("nano", "micro", "mini")


def documented_runs(name: str) -> dict[str, int]:
    doc, _ = parse_toml(EXPERIMENTS / name)
    return {scale: int(n) for scale, n in re.findall(r"(tiny|cpu|gpu|paper): (\d+) runs", doc["experiment"]["description"])}


def test_one_file_per_figure():
    assert set(FIGURES) <= set(FILES)
    assert set(FIGURES.values()) <= set(FIGURE_KINDS.names())


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("scale", ["tiny", "cpu", "gpu", "paper"])
def test_grid_file_validates_and_matches_its_documented_run_count(name, scale):
    counts = documented_runs(name)
    assert counts, "document the run counts in [experiment].description"
    if scale not in counts:
        with pytest.raises(ConfigError, match="--scale"):
            load_grid(EXPERIMENTS / name, scale)
        return
    plan = load_grid(EXPERIMENTS / name, scale)
    assert len(plan.runs) == counts[scale]
    assert plan.figure == FIGURES.get(name, plan.figure)
    assert all(k in field_names() for k in plan.varied)
    cfgs = [r.config for r in plan.runs]
    if scale == "tiny":
        assert {c.model.size for c in cfgs} <= set(CPU_SIZES)
        assert all(0 < c.train.max_steps <= 500 for c in cfgs)
        assert all(c.data.tokenizer == "bpe" and c.data.corpus == "builtin" for c in cfgs if c.task == "lm")
        seeds = {c.train.seed for c in cfgs}
        assert 1 <= len(seeds) <= 3
    elif scale == "cpu":
        assert {c.model.size for c in cfgs} == {"micro"} and {c.data.tokenizer for c in cfgs} == {"byte"}
        assert {c.train.max_steps for c in cfgs} == {900}
        assert {c.train.seed for c in cfgs} in ({0, 1, 2}, {0, 1})
    elif scale == "gpu":
        assert {c.model.size for c in cfgs} <= set(GPU_SCALE_SIZES) and {c.model.context_len for c in cfgs} == {1024}
        assert all(c.data.corpus == "slimpajama" and c.data.tokenizer == "hf" and c.train.max_steps == 0 for c in cfgs)
        assert {c.train.seed for c in cfgs} == {0, 1, 2}
        # the README's "at most ~2 H100-hours a run", by the plan's estimate (MFU measured on an H200 by width)
        worst = max(run_cost(c, gpu_tflops=H100_BF16_TFLOPS).gpu_hours for c in cfgs)
        assert worst <= 2.0, f"{name}: a run of {worst:.2f} H100-hours by the plan's estimate"
    elif name != "gp.toml":
        assert {c.model.size for c in cfgs} == set(PAPER_SIZES)
        assert all(c.data.corpus == "slimpajama" and c.data.tokenizer == "hf" for c in cfgs)
        assert all(c.train.max_steps == 0 and c.train.batch_seqs == 128 for c in cfgs)  # Chinchilla budgets


def test_paper_figures_pair_every_cem_run_with_a_same_size_baseline():
    for name in ("fig2a.toml", "fig2c.toml", "fig2d.toml", "fig3b.toml", "fig3a.toml"):
        plan = load_grid(EXPERIMENTS / name, "paper")
        llama = {(r.config.model.size, r.config.train.lr, r.config.train.max_tokens) for r in plan.runs
                 if r.config.model.attention == "llama" and r.config.model.mlp == "llama"}
        for r in plan.runs:
            c = r.config
            assert (c.model.size, c.train.lr, c.train.max_tokens) in llama, (name, r.axes)


def test_full_cem_sweep_has_the_papers_learning_rates():
    plan = load_grid(EXPERIMENTS / "fig3a.toml", "paper")
    assert sorted({r.config.train.lr for r in plan.runs}) == [0.0005, 0.001, 0.002, 0.004, 0.008]
    cem = [r.config.model for r in plan.runs if r.config.model.attention == "cem"]
    assert cem and all(
        (m.mlp, m.attn_steps, m.mlp_steps, m.attn_precond, m.mlp_precond) == ("cem", 2, 2, "diag_lowrank", "diag_lowrank")
        for m in cem
    )


def test_cpu_scales_share_one_recipe_so_shared_runs_train_once():
    """Every LM grid's cpu scale differs only in its arms: a Llama baseline is one run for all figures."""
    keys = ("model.size", "data.corpus", "data.tokenizer", "train.max_steps", "train.batch_seqs",
            "train.micro_batch_seqs", "train.eval_every_steps", "train.val_tokens", "train.test_tokens")
    bases = {}
    llama_ids: dict[str, set[str]] = {}
    for name in LM_FIGURES:
        doc, _ = parse_toml(EXPERIMENTS / name)
        bases[name] = {k: doc["scale"]["cpu"]["base"].get(k) for k in keys}
        plan = load_grid(EXPERIMENTS / name, "cpu")
        llama_ids[name] = {r.run_id for r in plan.runs if (r.config.model.attention, r.config.model.mlp) == ("llama", "llama")
                           and r.config.train.lr == 0.004}  # the scale's Llama-optimal rate (fig3a)
    assert len({tuple(b.items()) for b in bases.values()}) == 1, bases
    with_llama = [ids for ids in llama_ids.values() if ids]
    assert len(with_llama) >= 5 and all(ids == with_llama[0] for ids in with_llama)


def test_fig2a_has_the_papers_no_diagonal_arm_beside_the_shared_one_at_every_scale():
    for scale in ("tiny", "cpu", "gpu", "paper"):
        plan = load_grid(EXPERIMENTS / "fig2a.toml", scale)
        arms = {(r.config.model.attention, r.config.model.kq_diagonal, r.config.model.attn_steps,
                 r.config.model.attn_precond) for r in plan.runs}
        assert arms == {("llama", "none", 1, "identity"), ("cem", "none", 1, "identity"), ("cem", "shared", 1, "identity")}
        per_size = {}
        for r in plan.runs:
            per_size.setdefault((r.config.model.size, r.config.train.seed), set()).add(r.config.model.kq_diagonal + r.config.model.attention)
        assert all(len(v) == 3 for v in per_size.values()), scale


def test_fig3a_marks_the_162m_full_cem_runs_beyond_the_paper_and_256m_is_an_optional_extra():
    plan = load_grid(EXPERIMENTS / "fig3a.toml", "paper")
    marked = [r for r in plan.runs if r.marks]
    assert len(marked) == 5 and all(r.config.model.size == "162M" and r.config.model.attention == "cem" for r in marked)
    assert all(m == ["beyond the paper"] for m in (r.marks for r in marked))
    extra = load_grid(EXPERIMENTS / "fig3a.toml", "paper", {"model.size": "256M"})
    assert {r.config.model.size for r in extra.runs} == {"256M"} and len(extra.runs) == 10
    cpu = load_grid(EXPERIMENTS / "fig3a.toml", "cpu").runs
    ours = [r for r in cpu if r.marks]  # the cpu scale's only mark: our T=1-attention arm (claim 6)
    assert ours and all(r.marks == ["ours: full CEM with T=1 attention"] and r.config.model.attn_steps == 1
                        and r.config.model.attention == "cem" for r in ours)
