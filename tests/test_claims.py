"""`cemctl claims`: claims declared in the grids, tested on results whose truth is designed.

The losses below are made up so that each verdict is known in advance; the statistics themselves are tested
against simulations in tests/test_claims_stats.py. Here: the arms a part compares (never two configurations in
one cell, refused with the arms named), the estimate each part gets (paired, pooled with the stratum's df,
Welch, bootstrap), Holm's adjusted verdicts, the claims page, the report's claims table, bad [[claim]] tables.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from cem_core.errors import ConfigError
from cemctl.grid.claims import parse_claims
from cemctl.grid.spec import parse_grid
from cemctl.report.claims import PooledArms, claim_verdicts, evaluate_claims
from tests.synthetic import synthetic_from_grid
from tests.helpers import assert_clean_error, cli, finish_run, tiny_grid

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ("fig2a", "fig2b", "fig2c", "fig2d", "fig3a", "fig3c", "fig4")  # fig3b and t2_ablation left out: not run


def designed_loss(r: dict) -> float:
    """1.5 nats + each component's designed effect + a small seed effect shared by every arm + run noise."""
    seed = int(r["train.seed"])
    loss = 1.5 + 0.003 * seed + 0.0005 * ((int(r["run_id"], 16) % 7) - 3)
    attn, mlp = r["model.attention"], r["model.mlp"]
    a_t, m_t = int(r["model.attn_steps"]), int(r["model.mlp_steps"])
    if attn == "cem":
        loss += 0.004  # claim 1: close to Llama (margin 1% of 1.5 = 0.015)
        loss += -0.05 * (a_t - 1)  # claim 3: T=2 helps attention
        if r["model.attn_precond"] == "diag_lowrank" and a_t == 2:
            loss -= 0.02  # claim 3: the low-rank part helps at T=2 only
    if mlp in ("cem", "cem_param_matched"):
        loss += 0.10 if mlp == "cem" else 0.05  # claim 2: worse, parameter matching narrows it
        loss += 0.04 * (m_t - 1)  # claim 3 CONTRADICTED: T=2 hurts the CEM MLP here
    if attn == "reuse":
        loss += -0.05 * (a_t - 1)  # claim 5 (attention): reuse gains as much as recursion
    # each arm's best learning rate lies inside its cpu lr profile (claim 6: full CEM prefers a higher lr)
    if attn == "cem" and mlp == "cem":
        best = 0.0028
    elif attn == "cem":
        best = 0.002
    elif mlp in ("cem", "cem_param_matched", "reuse") or attn == "reuse":
        best = 0.0028
    else:
        best = 0.002  # Llama
    loss += 0.05 * math.log2(float(r["train.lr"]) / best) ** 2
    return loss


def _claims(grids=GRIDS):
    merged = {}
    for g in grids:
        for c in parse_grid(ROOT / "experiments" / f"{g}.toml", "cpu").claims:
            for p in c.parts:
                p.source = g
            if c.id in merged:
                merged[c.id].parts += c.parts
            else:
                merged[c.id] = c
    return list(merged.values())


def _frame(grids=GRIDS) -> pd.DataFrame:
    """Every grid's runs once, each with the experiments linking it (as `cemctl.report.frame` joins them)."""
    frames = [synthetic_from_grid(str(ROOT / "experiments" / f"{g}.toml"), "cpu", failures=False, steps=2)[0]
              .assign(experiment=g) for g in grids]
    frame = pd.concat(frames, ignore_index=True)
    linked = frame.groupby("run_id", sort=False)["experiment"].agg(", ".join)
    frame = frame.drop_duplicates("run_id").reset_index(drop=True)
    frame["experiment"] = frame["run_id"].map(linked)
    frame["test_loss"] = [designed_loss(r) for r in frame.to_dict("records")]
    frame["test_ppl"] = frame["test_loss"].map(math.exp)
    return frame.assign(scale="cpu")


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return evaluate_claims(_frame(), _claims(GRIDS + ("fig3b", "t2_ablation")))


def _part(table, text):
    rows = table[table["part"].str.contains(text, regex=False)]
    assert len(rows) == 1, (text, list(table["part"]))
    return rows.iloc[0]


@pytest.mark.parametrize("part,label,verdict", [
    ("CEM attention T=1 (no diagonal", "close", "holds"),
    ("CEM MLP T=1 - gated MLP", "higher", "holds"),
    ("param-matched CEM MLP - CEM MLP", "lower", "holds"),
    ("CEM attention T=2 - T=1 (diag preconditioner)", "lower", "holds"),
    ("CEM MLP T=2 - T=1 (diag preconditioner)", "higher", "contradicted"),
    ("attention: low-rank gain", "lower", "holds"),
    ("optimal log2(lr): full CEM - Llama", "higher", "holds"),
    ("shared KQ diagonal - no diagonal", "not run", "not run"),
])
def test_each_part_gets_the_verdict_its_design_implies(table, part, label, verdict):
    row = _part(table, part)
    assert (row["label"], row["verdict"]) == (label, verdict), row.to_dict()


def test_estimates_tuned_pooled_welch_and_bootstrapped_as_the_rule_says(table):
    tuned = _part(table, "CEM attention T=2 - T=1 (diag preconditioner)")
    assert (tuned["at"], tuned["variance"], tuned["method"]) == ("own optimum", "welch", "Welch jackknife t")
    assert tuned["variance_rule"] == "rule: each arm tuned to its own optimum" and tuned["n"] == 3
    assert tuned["effect"] == pytest.approx(-0.05, abs=0.003)
    assert tuned["optima"] == "0.002 / 0.002"  # each arm's designed optimum, found from its own profile
    assert len(tuned["runs"].split(",")) == 3 * (5 + 4)  # T=2: five rates, T=1: four
    # the fixed-lr contrast beside it: the same arms at 4e-3, the within-arm variance pooled over the two arms
    assert tuned["other_at"] == "lr 0.004" and tuned["other_effect"] == pytest.approx(-0.05, abs=0.003)
    interaction = _part(table, "attention: low-rank gain")
    assert interaction["method"] == "Welch jackknife t" and interaction["df"] > 2
    welch = _part(table, "CEM MLP T=1 - gated MLP")
    assert welch["variance_rule"] == "rule: the arms differ in model.mlp" and welch["method"] == "Welch jackknife t"
    boot = _part(table, "optimal log2(lr): full CEM - Llama")
    assert boot["method"] == "bootstrap" and boot["effect"] == pytest.approx(0.5, abs=0.15)
    assert set(boot["runs"].split(",")) and len(boot["runs"].split(",")) == 3 * (7 + 6)
    optimal = _part(table, "optimal test loss: full CEM - Llama")
    assert optimal["at"] == "own optimum" and optimal["method"] == "Welch jackknife t"


def test_an_unstable_arm_of_another_experiment_leaves_a_pooled_part_alone():
    """Regression: the variance was pooled over every arm at the scale, so the T=2 ablation's start-at-RMSNorm arm
    (seeds at 1.48, 2.06, 2.10 in the cpu runs) widened every unpaired part of fig2a-2d about threefold; a pooled
    part now pools over its own declared arms only."""
    frame = _frame(GRIDS + ("fig3b", "t2_ablation"))
    arms = _claims(GRIDS + ("fig3b", "t2_ablation"))[2].parts[2].arms  # claim 3's attention interaction, at 4e-3
    fixed = parse_claims([{"id": "3", "statement": "s", "part": [{
        "name": "fixed", "statistic": "interaction", "expect": "lower", "arms": arms}]}], "x.toml")
    before = evaluate_claims(frame, fixed).iloc[0]
    assert before["method"] == "pooled t" and before["df"] == 4 * 2  # its four arms of three seeds
    wild = frame["model.attn_start"].astype(str).eq("norm") & frame["experiment"].eq("t2_ablation")
    assert wild.sum() >= 3
    frame.loc[wild, "test_loss"] += [0.6 * (i % 2) for i in range(int(wild.sum()))]
    after = evaluate_claims(frame, fixed).iloc[0]
    assert after["method"] == "pooled t" and after["df"] == before["df"]
    assert (after["ci95_low"], after["ci95_high"]) == pytest.approx((before["ci95_low"], before["ci95_high"]))


def test_a_sweep_with_a_single_seed_at_some_rate_is_not_decided():
    """Regression: a half-run sweep (one seed at most rates) was bootstrapped and called contradicted."""
    frame = _frame(("fig3a",))
    claims = _claims(("fig3a",))
    part = "optimal log2(lr): full CEM - Llama"
    assert _part(evaluate_claims(frame, claims), part)["verdict"] == "holds"
    one_seed = frame["model.attention"].eq("cem") & frame["train.seed"].astype(int).gt(0) \
        & frame["train.lr"].astype(float).lt(0.004)
    row = _part(evaluate_claims(frame[~one_seed], claims), part)
    assert (row["n"], row["verdict"]) == (0, "not run"), row.to_dict()
    two_seeds = one_seed & frame["train.seed"].astype(int).eq(1)
    assert _part(evaluate_claims(frame[~(one_seed & ~two_seeds)], claims), part)["n"] == 2


def test_holm_adjusted_verdicts_and_the_claim_verdict_uses_them(table):
    assert {"p_holm", "holm_low", "holm_high", "label_holm", "verdict_holm"} <= set(table.columns)
    decided = table[table["p"].notna()]
    assert (decided["p_holm"] >= decided["p"] - 1e-15).all()
    for r in decided.itertuples():  # the adjusted interval is wider
        if math.isfinite(r.holm_low) and math.isfinite(r.ci95_low):
            assert r.holm_low <= r.ci95_low and r.holm_high >= r.ci95_high
    verdicts = claim_verdicts(table).set_index("claim")["verdict"]
    assert verdicts["3"] == "partly contradicted" and verdicts["4"] == "not run" and verdicts["T2"] == "not run"


def test_a_part_pooling_two_configurations_is_refused():
    """The T=2 ablation adds arms that a selector pinning only T and the preconditioner would pool together."""
    frame = _frame(("fig2c", "t2_ablation"))
    loose = parse_claims([{"id": "3", "statement": "T=2 beats T=1", "part": [{
        "name": "loose", "expect": "lower", "paired": True,
        "arms": [{"model.attention": "cem", "model.attn_precond": "diag_lowrank", "model.attn_steps": 2},
                 {"model.attention": "cem", "model.attn_precond": "diag_lowrank", "model.attn_steps": 1}]}]}], "x.toml")
    with pytest.raises(PooledArms) as info:
        evaluate_claims(frame, loose)
    message = str(info.value)
    assert "arm selector 1 matches" in message and "attn_step_size=0.5" in message and "pin the keys" in message
    # the grid's own selectors pin them: one arm each
    assert evaluate_claims(frame, _claims(("fig2c",)))["n"].gt(0).all()


def test_arms_that_differ_in_a_key_the_selectors_do_not_name_are_refused():
    frame = _frame(("fig3a",))
    # one full CEM arm (at lr 0.002) and one Llama arm (at lr 0.004): each selector matches one arm, but the
    # two differ in the learning rate, which neither selector names
    frame = frame[((frame["model.attention"] == "cem") & (frame["model.attn_steps"] == 2) & (frame["train.lr"] == 0.002))
                  | ((frame["model.attention"] == "llama") & (frame["train.lr"] == 0.004))]
    sloppy = parse_claims([{"id": "x", "statement": "s", "part": [{
        "name": "different lrs", "expect": "lower", "changes": ["model.attention", "model.mlp"],
        "arms": [{"model.attention": "cem", "model.mlp": "cem", "model.attn_steps": 2},
                 {"model.attention": "llama", "model.mlp": "llama"}]}]}], "x.toml")
    with pytest.raises(PooledArms, match="differ in train.lr"):
        evaluate_claims(frame, sloppy)


@pytest.mark.parametrize("claim,what", [
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "lower", "statistic": "ratio", "arms": [{}, {}]}]},
     "unknown statistic 'ratio'"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "lower", "arms": [{"model.attention": "cem"}]}]},
     "needs 2 arm selectors"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "better", "arms": [
        {"model.attention": "cem"}, {"model.attention": "llama"}]}]}, "unknown expectation 'better'"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "close", "margin": "lots", "arms": [
        {"model.attention": "cem"}, {"model.attention": "llama"}]}]}, "must be a number, a percentage"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "higher", "statistic": "lr_optimum", "arms": [
        {"model.attention": "cem", "train.lr": 0.002}, {"model.attention": "llama"}]}]}, "do not pin train.lr"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "lower", "arms": [
        {"model.atention": "cem"}, {"model.attention": "llama"}]}]}, "model.atention"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "lower", "colour": "red", "arms": [
        {"model.attention": "cem"}, {"model.attention": "llama"}]}]}, "unknown key"),
])
def test_bad_claim_tables_are_one_line_naming_the_key(claim, what):
    with pytest.raises(ConfigError) as info:
        parse_claims([claim], "g.toml")
    assert what in str(info.value) and "\n" not in str(info.value) and "g.toml" in str(info.value)


def test_plan_refuses_a_grid_with_a_bad_claim(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g") + '\n[[claim]]\nid = "1"\nstatement = "s"\n[[claim.part]]\nname = "p"\n'
                    'expect = "sideways"\narms = [{ "model.attention" = "cem" }, { "model.attention" = "llama" }]\n')
    assert_clean_error(cli(tmp_path, "plan", str(grid), subprocess=True), contains="claim[0].part[0].expect")
    assert not (tmp_path / "results.db").exists()


GRID_WITH_CLAIM = tiny_grid("mine", seeds="[0, 1, 2]", extra='''
[axes]
"model.attention" = ["llama", "cem"]

[[claim]]
id = "A"
statement = "CEM attention is close to Llama attention at this size"
[[claim.part]]
name = "CEM attention - Llama"
arms = [{ "model.attention" = "cem" }, { "model.attention" = "llama" }]
expect = "close"
margin = "2%"
''')


def _project(tmp_path, loss_gap=0.001, seed_effect=0.002):
    (tmp_path / "mine.toml").write_text(GRID_WITH_CLAIM)
    res = cli(tmp_path, "plan", str(tmp_path / "mine.toml"), "--json")
    assert res.returncode == 0, res.output
    for r in json.loads(res.stdout)["runs"]:
        a = r["axes"]
        finish_run(tmp_path / "runs" / r["run_id"], test_loss=1.5 + seed_effect * a["train.seed"]
                   + (loss_gap + 0.0003 * a["train.seed"] if a["model.attention"] == "cem" else 0.0))
    return tmp_path


def test_claims_command_writes_the_plan_the_verdicts_csv_and_a_figure(tmp_path):
    _project(tmp_path)
    out = tmp_path / "claims"
    res = cli(tmp_path, "claims", "--out", str(out), "--power", env={"COLUMNS": "120"})
    assert res.returncode == 0, res.output
    assert "A" in res.stdout and "holds" in res.stdout
    md = (out / "claims.md").read_text()
    assert "Shaffer's S1" in md and "Margins are ours" in md and "| A | tiny | holds |" in md
    parts = pd.read_csv(out / "claims.csv")
    assert {"claim", "part", "effect", "runs", "verdict", "verdict_holm", "holm_low", "holm_high"} <= set(parts.columns)
    assert len(parts.loc[0, "runs"].split(",")) == 6
    assert (out / "claims.png").read_bytes().startswith(b"\x89PNG")
    assert cli(tmp_path, "claims", "--out", str(out)).returncode == 0  # an earlier claims folder is ours to replace
    (out / "mine.txt").write_text("x")
    assert cli(tmp_path, "claims", "--out", str(out)).returncode == 2


def test_claims_power_says_how_many_seeds_an_undecided_part_needs(tmp_path):
    _project(tmp_path, loss_gap=0.005, seed_effect=0.02)  # too noisy to decide 'close' (margin 0.03) with 3 seeds
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"), "--power", env={"COLUMNS": "150"})
    assert res.returncode == 0, res.output
    parts = pd.read_csv(tmp_path / "c" / "claims.csv")
    assert parts.loc[0, "verdict_holm"] == "inconclusive"
    need = parts.loc[0, "seeds_for_80pct_power"]
    assert need == need and int(need) > 3 and f"{int(need)} seeds per arm" in res.stdout


def test_every_report_has_a_claims_table_for_its_grid(tmp_path):
    from cemctl.report.build import ExperimentInfo, build_report

    runs, curves = synthetic_from_grid(str(ROOT / "experiments" / "fig2c.toml"), "cpu", failures=False)
    runs["test_loss"] = [designed_loss(r) for r in runs.to_dict("records")]
    result = build_report(ExperimentInfo("fig2c", "recursion", claims=_claims(("fig2c",))), runs.assign(scale="cpu"),
                          curves, tmp_path / "r", formats="png")
    md = result.index_md.read_text()
    assert "### claims" in md and "CEM attention T=2 - T=1 (diag preconditioner)" in md and "holds" in md
