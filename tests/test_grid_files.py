"""Every experiments/*.toml validates at both scales and expands to the run counts it documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cem_core.config import field_names
from cem_core.errors import ConfigError
from cem_core.sizes import PAPER_SIZES
from cemctl.grid import REPORT_KINDS, load_grid
from cemctl.grid.spec import parse_toml

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
FILES = sorted(p.name for p in EXPERIMENTS.glob("*.toml"))
FIGURES = {
    "fig2a.toml": "components", "fig2b.toml": "components", "fig2c.toml": "recursion", "fig2d.toml": "recursion",
    "fig3a.toml": "lr_sweep", "fig3b.toml": "kq_diagonal", "fig3c.toml": "reuse_vs_recursion",
    "fig4.toml": "reuse_vs_recursion", "gp.toml": "gp_table", "demo.toml": "curves",
}
CPU_SIZES = ("nano", "micro", "mini")


def documented_runs(name: str) -> dict[str, int]:
    doc, _ = parse_toml(EXPERIMENTS / name)
    return {scale: int(n) for scale, n in re.findall(r"(tiny|paper): (\d+) runs", doc["experiment"]["description"])}


def test_one_file_per_figure():
    assert set(FIGURES) <= set(FILES)
    assert set(FIGURES.values()) == set(REPORT_KINDS)


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("scale", ["tiny", "paper"])
def test_grid_file_validates_and_matches_its_documented_run_count(name, scale):
    counts = documented_runs(name)
    assert "tiny" in counts, "document the run counts in [experiment].description"
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
