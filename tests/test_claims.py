"""`cemctl claims`: the six findings tested on synthetic results shaped like every figure grid's cpu scale.

The losses are designed (not measured): each arm's effect is written below, so every verdict is known in
advance: claims that hold, one reversed (CEM MLP at T=2), one inconclusive (recursion vs reuse in
attention: seed noise larger than the effect), one not run (the KQ-diagonal grid left out).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from cemctl.report.claims import PARTS, TOLERANCE, Estimate, claim_verdicts, evaluate_claims, verdict
from cemctl.report.synthetic import synthetic_from_grid

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ("fig2a", "fig2b", "fig2c", "fig2d", "fig3a", "fig3b", "fig3c", "fig4")


def designed_loss(r: dict) -> float:
    """1.5 nats plus the effect of each component, plus seed noise; see the module docstring."""
    seed = int(r["train.seed"])
    loss = 1.5 + 0.001 * ((seed * 7) % 3 - 1)
    attn, mlp = r["model.attention"], r["model.mlp"]
    a_t, m_t = int(r["model.attn_steps"]), int(r["model.mlp_steps"])
    if attn == "cem":
        loss += 0.004  # close to Llama
        loss += -0.05 * (a_t - 1)  # T=2 helps
        if r["model.attn_precond"] == "diag_lowrank" and a_t == 2:
            loss -= 0.02  # preconditioners help at T=2 only
        loss += {"none": 0.06, "shared": 0.0, "per_head": -0.004}[r["model.kq_diagonal"]] if r["model.attn_precond"] == "diag" else 0.0
    if mlp.startswith("cem"):
        loss += 0.10 if mlp == "cem" else 0.05  # worse; parameter matching narrows it
        loss += 0.04 * (m_t - 1)  # REVERSED: T=2 hurts the CEM MLP here
        if r["model.mlp_precond"] == "diag_lowrank" and m_t == 2:
            loss -= 0.01
    if attn == "reuse":  # INCONCLUSIVE: reuse gains as much as CEM recursion, give or take seed noise
        loss += -0.05 * (a_t - 1) + (0.03 * (1 if seed % 2 else -1) if a_t == 2 else 0.0)
    if mlp == "reuse":
        loss += -0.005 * (m_t - 1)
    best = 0.004 if (attn == "cem" and mlp == "cem") else 0.002  # full CEM prefers a higher lr
    loss += 0.05 * math.log2(float(r["train.lr"]) / best) ** 2
    if attn == "cem" and mlp == "cem":
        loss -= 0.15  # ... and matches Llama at its optimum (after its T=2 and MLP terms)
    return loss


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    frames = [synthetic_from_grid(str(ROOT / "experiments" / f"{g}.toml"), "cpu", failures=False)[0] for g in GRIDS
              if g != "fig3b"]
    frame = pd.concat(frames, ignore_index=True).drop_duplicates("run_id").reset_index(drop=True)
    frame["test_loss"] = [designed_loss(r) for r in frame.to_dict("records")]
    frame["test_ppl"] = frame["test_loss"].map(math.exp)
    return frame.assign(scale="cpu")


def _verdicts(table: pd.DataFrame) -> dict[str, str]:
    return {r.part: r.verdict for r in table.itertuples()}


def test_every_claim_gets_the_verdict_its_design_implies(runs):
    table = evaluate_claims(runs)
    v = _verdicts(table)
    assert len(table) == len(PARTS) and set(table["scale"]) == {"cpu"}
    assert v["CEM attention T=1 (no diagonal, the paper's arm) - Llama"] == "holds"
    assert v["gated MLP - CEM MLP T=1 (CEM worse: expected < 0)"] == "holds"
    assert v["param-matched CEM MLP - CEM MLP (the gap narrows: expected < 0)"] == "holds"
    assert v["CEM attention T=2 - T=1 (diag+low-rank, shared diagonal)"] == "holds"
    assert v["CEM MLP T=2 - T=1 (diag+low-rank)"] == "reversed"
    assert v["attention: preconditioner gain at T=2 - gain at T=1 (diag+low-rank vs none)"] == "holds"
    assert v["attention: CEM recursion gain (T=2 - T=1) - plain reuse gain"] == "inconclusive"
    assert v["shared KQ diagonal - no diagonal (the diagonal matters: expected < 0)"] == "not run"
    assert v["optimal log2(lr): Llama - full CEM (CEM prefers higher: expected < 0)"] == "holds"
    assert v["optimal test loss: full CEM - Llama (matches with fewer parameters)"] == "holds"
    summary = {r.claim: r.verdict for r in claim_verdicts(table).itertuples()}
    assert summary[1] == "holds" and summary[2] == "holds" and summary[4] == "not run"
    assert summary[3] == "partly reversed" and summary[6] == "holds"
    # a claim without runs says which grid to launch
    row = table[table["claim"] == 4].iloc[0]
    assert "experiments/fig3b.toml --scale cpu" in row["next"]


def test_effects_are_paired_by_setting_and_seed_with_the_runs_listed(runs):
    table = evaluate_claims(runs).set_index("part")
    row = table.loc["CEM attention T=2 - T=1 (diag+low-rank, shared diagonal)"]
    assert row["n"] == 3 and row["paired"]  # three seeds of one size
    assert row["effect"] == pytest.approx(-0.07, abs=1e-9)  # -0.05 (T=2) - 0.02 (precond at T=2)
    assert row["ci95_low"] == pytest.approx(-0.07, abs=1e-6) and row["ci95_high"] == pytest.approx(-0.07, abs=1e-6)
    assert len(row["runs"].split(",")) == 6
    lr = table.loc["optimal log2(lr): Llama - full CEM (CEM prefers higher: expected < 0)"]
    assert lr["unit"] == "log2(lr)" and lr["effect"] == pytest.approx(-1.0, abs=0.05)  # 0.002 vs 0.004


def test_scales_are_kept_apart(runs):
    other = runs.copy()
    other["scale"] = "gpu"
    other["test_loss"] = other["test_loss"] + 0.5  # a constant shift changes no contrast
    table = evaluate_claims(pd.concat([runs, other], ignore_index=True))
    assert set(table["scale"]) == {"cpu", "gpu"}
    for part, group in table.groupby("part"):
        effects = group.set_index("scale")["effect"]
        if not effects.isna().all():
            assert effects["cpu"] == pytest.approx(effects["gpu"], abs=1e-9), part


def test_unmatched_seeds_fall_back_to_a_welch_interval(runs):
    shifted = runs.copy()
    cem = (shifted["model.attention"] == "cem") & (shifted["model.mlp"] == "llama")
    shifted.loc[cem, "train.seed"] = shifted.loc[cem, "train.seed"] + 10  # no pairs left for attention parts
    row = evaluate_claims(shifted).set_index("part").loc["CEM attention T=1 (no diagonal, the paper's arm) - Llama"]
    assert not row["paired"] and row["n"] == 3 and row["verdict"] in ("holds", "inconclusive")
    assert row["effect"] == pytest.approx(0.004, abs=0.003)


@pytest.mark.parametrize("effect, low, high, expect, expected", [
    (-0.1, -0.2, -0.01, "lower", "holds"),
    (0.1, 0.01, 0.2, "lower", "reversed"),
    (-0.1, -0.2, 0.05, "lower", "inconclusive"),
    (0.0, -TOLERANCE / 2, TOLERANCE / 2, "close", "holds"),
    (0.1, 0.05, 0.15, "close", "reversed"),
    (0.0, -0.05, 0.05, "close", "inconclusive"),
    (0.1, 0.05, 0.15, "not_worse", "reversed"),
    (-0.3, -0.5, -0.1, "not_worse", "holds"),
])
def test_verdict_rules(effect, low, high, expect, expected):
    assert verdict(Estimate(effect, low, high, 3), expect) == expected
    assert verdict(Estimate(effect, float("nan"), float("nan"), 1), expect) == "inconclusive"
    assert verdict(Estimate(), expect) == "not run"


def test_claims_command_writes_markdown_csv_and_a_figure(tmp_path):
    from tests.helpers import cli, finish_run, tiny_grid

    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g", seeds="[0, 1, 2]", extra='\n[axes]\n"model.attention" = ["llama", "cem"]\n'))
    res = cli(tmp_path, "plan", str(grid), "--json")
    import json

    for r in json.loads(res.stdout)["runs"]:
        finish_run(tmp_path / "runs" / r["run_id"], test_loss=1.5 + (0.001 * r["axes"]["train.seed"]
                                                                     if r["axes"]["model.attention"] == "cem" else 0.0))
    out = tmp_path / "claims"
    res = cli(tmp_path, "claims", "--out", str(out))
    assert res.returncode == 0, res.output
    md = (out / "claims.md").read_text()
    assert "| 1 | tiny | holds |" in md and "not run" in md and "experiments/fig2b.toml --scale tiny" in md
    assert (out / "claims.png").read_bytes().startswith(b"\x89PNG")
    parts = pd.read_csv(out / "claims.csv")
    assert set(parts["scale"]) == {"tiny"} and parts["runs"].fillna("").str.len().max() > 0
    again = cli(tmp_path, "claims", "--out", str(out))  # an earlier claims folder is ours to replace
    assert again.returncode == 0
    (out / "mine.txt").write_text("x")
    assert cli(tmp_path, "claims", "--out", str(out)).returncode == 2


def test_every_report_has_a_claims_section_for_what_its_runs_test(tmp_path):
    from cemctl.report.build import ExperimentInfo, build_report

    runs, curves = synthetic_from_grid(str(ROOT / "experiments" / "fig2c.toml"), "cpu", failures=False)
    runs["test_loss"] = [designed_loss(r) for r in runs.to_dict("records")]
    result = build_report(ExperimentInfo("fig2c", "recursion"), runs.assign(scale="cpu"), curves, tmp_path / "r",
                          formats="png")
    md = result.index_md.read_text()
    assert "### claims" in md and "CEM attention T=2 - T=1" in md and "holds" in md
