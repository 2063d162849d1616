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
    # each arm's best learning rate is bracketed by its cpu lr profile (between its second and second-last rates,
    # cemctl.report.tuned.edge_side; claim 6: full CEM prefers a higher lr)
    if attn == "cem" and mlp == "cem":
        best = 0.0033
    elif attn == "cem":
        best = 0.0024
    elif mlp in ("cem", "cem_param_matched", "reuse") or attn == "reuse":
        best = 0.0033
    else:
        best = 0.0024  # Llama
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
    assert tuned["optima"] == "0.0024 / 0.0024"  # each arm's designed optimum, found from its own profile
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


def test_a_contrast_that_could_not_be_made_does_not_disagree_with_the_other():
    """Regression: with only the fixed-lr runs (no lr profile), claim 1's own-optimum contrast is `not run` and its
    fixed contrast `close`; the part was flagged DIFFERS as if the two contrasts had reached different conclusions."""
    from cemctl.report.claims import evaluate_page

    frame = _frame(("fig2a", "fig3a"))  # fig3a: Llama's lr sweep (its profile)
    fixed_only = frame[frame["train.lr"].astype(float) == 0.004]
    row = evaluate_page(fixed_only, _claims(("fig2a",))).parts.iloc[0]
    assert (row["at"], row["label"], row["other_label"]) == ("own optimum", "not run", "close")
    assert not row["disagree"]
    row = evaluate_page(frame, _claims(("fig2a",))).parts.iloc[0]  # both made, both close: agree
    assert (row["label"], row["other_label"], bool(row["disagree"])) == ("close", "close", False)


@pytest.mark.parametrize("primary,other,flag", [
    ("not run", "higher", False), ("higher", "not run", False), ("close", "close", False),
    ("inconclusive", "inconclusive", False), ("higher", "close", True), ("lower", "higher", True),
    ("inconclusive", "higher", True),  # contradicted at one rate, undecided at the arms' own optima (claim 5)
])
def test_the_contrasts_disagree_only_when_both_were_made_and_one_is_decisive(primary, other, flag):
    from cemctl.report.claims import disagree

    assert disagree(primary, other) is flag


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
    assert list(parts["experiment"]) == ["mine"]  # which grid the part comes from (a claim may span grids)
    assert "| claim | part | experiment | scale |" in md
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


def _hand_seeds(margin: float, sd: float, level: float) -> int:
    """Seeds per arm for 80% power of a two-arm pooled-t part (2 (n - 1) df) to decide the direction of a true
    difference of `margin` at two-sided `level`: the first n whose noncentral t gives 0.8."""
    from scipy import stats as st

    for n in range(2, 2000):
        df, se = 2 * (n - 1), sd * math.sqrt(2 / n)
        crit = st.t.ppf(1 - level / 2, df)
        if st.nct.sf(crit, df, margin / se) + st.nct.cdf(-crit, df, margin / se) >= 0.8:
            return n
    raise AssertionError("no n up to 2000")


def test_claims_power_quotes_seeds_at_the_adjusted_level_with_the_sd_uncertainty(tmp_path):
    """The undecided part (step 0.5 - step 1: equal arms, pooled within-arm s.d. 0.008 from the designed losses
    -0.008, 0, +0.008 of each arm) is tested at the step-down level 0.025 (two parts); its seeds for 80% power are
    quoted at that level, at 5% (fewer), and at the ends of the 80% chi-square interval of its s.d. (4 df)."""
    from scipy import stats as st

    _two_part_project(tmp_path)
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"), "--power", env={"COLUMNS": "150"})
    assert res.returncode == 0, res.output
    row = pd.read_csv(tmp_path / "c" / "claims.csv").set_index("part").loc["CEM attention step 0.5 - step 1"]
    assert row["verdict_holm"] == "inconclusive" and row["variance"] == "pooled"
    assert row["holm_level"] == pytest.approx(0.025)
    margin, sd, df = row["margin"], 0.008, 4
    need, unadjusted = int(row["seeds_for_80pct_power"]), int(row["seeds_unadjusted"])
    assert need == _hand_seeds(margin, sd, 0.025) and unadjusted == _hand_seeds(margin, sd, 0.05)
    assert need > unadjusted
    low_sd, high_sd = sd * math.sqrt(df / st.chi2.ppf(0.9, df)), sd * math.sqrt(df / st.chi2.ppf(0.1, df))
    assert int(row["seeds_low"]) == _hand_seeds(margin, low_sd, 0.025) < need
    assert int(row["seeds_high"]) == _hand_seeds(margin, high_sd, 0.025) > need
    assert f"{need} seeds per arm for 80% power at its margin and adjusted level ({int(row['seeds_low'])}-" \
           f"{int(row['seeds_high'])} over the s.d.'s 80% interval)" in " ".join(res.stdout.split())


def test_every_report_has_a_claims_table_for_its_grid(tmp_path):
    from cemctl.report.build import ExperimentInfo, build_report

    runs, curves = synthetic_from_grid(str(ROOT / "experiments" / "fig2c.toml"), "cpu", failures=False)
    runs["test_loss"] = [designed_loss(r) for r in runs.to_dict("records")]
    result = build_report(ExperimentInfo("fig2c", "recursion", claims=_claims(("fig2c",))), runs.assign(scale="cpu"),
                          curves, tmp_path / "r", formats="png")
    md = result.index_md.read_text()
    assert "### claims" in md and "CEM attention T=2 - T=1 (diag preconditioner)" in md and "holds" in md


# ---------------------------------------------------------------------------------------------- issue 36/37


def _two_part_project(tmp_path, gap=0.05, llama_still_falling=False):
    """A grid with a decided part (CEM attention worse by `gap`) and an inconclusive one (two equal step sizes)."""
    extra = '''
[axes]
"model.attention" = ["llama", "cem"]
"model.attn_step_size" = [1.0, 0.5]

[[claim]]
id = "B"
statement = "CEM attention is worse than Llama attention here; its step size does not matter"
[[claim.part]]
name = "CEM attention, a rather long description of the arms - Llama attention at the same settings"
arms = [{ "model.attention" = "cem", "model.attn_step_size" = 1.0 }, { "model.attention" = "llama", "model.attn_step_size" = 1.0 }]
expect = "higher"
[[claim.part]]
name = "CEM attention step 0.5 - step 1"
arms = [{ "model.attention" = "cem", "model.attn_step_size" = 0.5 }, { "model.attention" = "cem", "model.attn_step_size" = 1.0 }]
expect = "lower"
'''
    (tmp_path / "b.toml").write_text(tiny_grid("b", seeds="[0, 1, 2]", steps=10, extra=extra))
    res = cli(tmp_path, "plan", str(tmp_path / "b.toml"), "--json")
    assert res.returncode == 0, res.output
    for r in json.loads(res.stdout)["runs"]:
        a = r["axes"]
        noise = 0.004 * ((a["train.seed"] * 7 + int(a["model.attn_step_size"] * 10)) % 5 - 2)
        loss = 1.5 + noise + (gap if a["model.attention"] == "cem" else 0.0)
        finish_run(tmp_path / "runs" / r["run_id"], test_loss=loss, steps=10)
        if llama_still_falling:  # validation every 2 of 10 steps; Llama's still falls 0.05 per step at the end
            fall = 0.05 if a["model.attention"] == "llama" else 0.0005
            lines = [json.dumps({"kind": "val", "step": s, "tokens": s * 128, "val_loss": loss + fall * (10 - s),
                                 "time_s": float(s)}) for s in (2, 4, 6, 8, 10)]
            (tmp_path / "runs" / r["run_id"] / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


@pytest.mark.parametrize("cols", [80, 120])
def test_claims_prints_every_part_within_the_terminal(tmp_path, cols):
    from tests.helpers import on_pty

    _two_part_project(tmp_path)
    screen = on_pty(["claims", "--out", str(tmp_path / "c"), "--power"], tmp_path, cols=cols, rows=60)
    screen.assert_clean()
    screen.assert_fits()
    lines = screen.lines
    text = screen.text
    for header in ("effect", "95% interval", "label", "verdict", "adjusted"):
        assert header in text
    assert "+0.050" in text and "higher" in text and "holds" in text  # the decided part's numbers and verdict
    numbers = [line for line in lines if "[+0.0" in line or "[-0.0" in line]
    assert len(numbers) == 2  # one line of numbers per part
    if cols == 80:  # the part's name above its numbers, cut with an ellipsis
        assert any(line.startswith("B. CEM attention, a rather long") and line.endswith("\u2026") for line in lines)
        assert all(line.startswith("   ") for line in numbers)
    else:  # beside them
        assert any(line.startswith("B. CEM attention step 0.5 - step 1") and "[" in line for line in lines)
    assert "seeds per arm for 80% power" in text  # a note (a terminal wraps it between words)


def test_claims_md_fills_df_and_names_the_test_of_its_p(tmp_path):
    _two_part_project(tmp_path)
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"))
    assert res.returncode == 0, res.output
    md = (tmp_path / "c" / "claims.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| B |") and line.count("|") > 12]
    header = next(line for line in md.splitlines() if line.startswith("| claim | part | experiment | scale | at |"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    df, p_of = cells.index("df"), cells.index("p_of")
    for row in table[:2]:
        values = [c.strip() for c in row.strip("|").split("|")]
        assert values[df] not in ("", "nan") and float(values[df]) > 0
        assert values[p_of] in ("lower", "higher", "close", "not close")
    assert "`p_of` names that test" in md and "`boot`: a bootstrap" in md
    parts = pd.read_csv(tmp_path / "c" / "claims.csv")
    assert list(parts["variance"]) == ["welch", "pooled"]  # the rule: kinds differ -> Welch; one kind -> pooled
    assert parts.loc[1, "variance_rule"] == "rule: arms of one kind at one learning rate"


def test_the_claims_figure_draws_a_legend_only_for_what_is_there():
    from cemctl.services.claims import claims_figure

    def row(claim, part, effect, lo, hi, hlo, hhi, verdict, unit="nats", margin=0.015):
        return {"claim": claim, "part": part, "scale": "cpu", "unit": unit, "margin": margin, "effect": effect,
                "ci95_low": lo, "ci95_high": hi, "holm_low": hlo, "holm_high": hhi, "verdict_holm": verdict}

    parts = pd.DataFrame([row("1", "a", 0.1, 0.08, 0.12, 0.06, 0.14, "contradicted"),
                          row("2", "b", 0.02, -0.01, 0.05, -0.9, 0.95, "inconclusive"),
                          row("3", "c", math.nan, math.nan, math.nan, math.nan, math.nan, "not run")])
    fig = claims_figure(parts)
    ax = fig.axes[0]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "holds (95% interval)" not in legend and "contradicted (95% interval)" in legend
    assert "adjusted interval (step-down level)" in legend and "goes on beyond the axis" in legend
    assert not any(t.startswith("scale ") for t in legend)  # one scale: no marker legend
    assert "learning-rate" not in ax.get_xlabel()  # no lr part drawn
    assert any(t.get_text() == "not run" for t in ax.texts)
    assert ax.get_xlim()[1] < 0.9  # the wide adjusted interval is cut (an arrow), not the axis stretched to it
    fig.clear()


def test_the_claims_figure_draws_an_interval_open_on_both_sides_across_the_axis():
    """Regression (the cpu page, 2026-11-27): a part whose optima are censored on both sides has the interval
    (-inf, +inf); the figure drew only its dot, as if it had no interval at all."""
    from cemctl.services.claims import claims_figure

    parts = pd.DataFrame([{"claim": "5", "part": "open", "scale": "cpu", "unit": "nats", "margin": 0.015,
                           "effect": 0.03, "ci95_low": -math.inf, "ci95_high": math.inf, "holm_low": -math.inf,
                           "holm_high": math.inf, "verdict_holm": "inconclusive"}])
    fig = claims_figure(parts)
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    segments = [line.get_xdata() for line in ax.get_lines() if len(line.get_xdata()) == 2]
    assert any(min(x) == lo and max(x) == hi for x in segments)  # the 95% interval spans the axis
    assert any(p.get_width() == pytest.approx(hi - lo) for p in ax.patches if p.get_fill() is False)  # the box too
    assert len([t for t in ax.texts if t.arrow_patch is not None]) >= 4  # arrows both ways, for both
    fig.clear()


def test_robustness_rows_hold_the_same_contrast_under_other_settings():
    frame = _frame(("fig2c", "fig4"))
    claims = _claims(("fig4",))
    part = claims[0].parts[0]  # attention: CEM recursion gain - reuse gain, CEM arms without a preconditioner
    fixed = parse_claims([{"id": "5", "statement": "s", "part": [{
        "name": "fixed", "statistic": "interaction", "expect": "lower", "arms": part.arms}]}], "x.toml")
    from cemctl.report.claims import evaluate_page

    page = evaluate_page(frame, fixed)
    rows = page.robustness
    assert set(zip(rows["key"], rows["value"])) >= {("model.attn_precond", "diag"),
                                                    ("model.attn_precond", "diag_lowrank")}
    # designed: the low-rank preconditioner gains 0.02 at T=2 only, so its interaction is 0.02 lower
    by = rows.set_index("value")["effect"]
    assert by["diag_lowrank"] - by["diag"] == pytest.approx(-0.02, abs=0.003)
    summary = page.parts.iloc[0]["robustness"]
    assert summary.startswith("sign ") and "settings" in summary


def test_a_part_whose_arms_still_fall_faster_than_its_margin_is_not_converged():
    from cemctl.report.claims import convergence

    assert convergence([["a", "b"], ["c"]], {"a": -0.03, "b": -0.01, "c": -0.001}, 0.015) == (0.02, "not converged")
    assert convergence([["a"], ["c"]], {"a": -0.01, "c": 0.002}, 0.015) == (0.01, "converged")
    assert convergence([["a"]], {}, 0.015)[1] == ""


def test_the_page_shows_convergence_from_the_validation_curves(tmp_path):
    _two_part_project(tmp_path, llama_still_falling=True)
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.output
    parts = pd.read_csv(tmp_path / "c" / "claims.csv")
    # Llama falls 0.05 a step, 0.05 per 10% of its 10 steps, more than the 0.015 margin; CEM's arms 0.0005
    assert list(parts["convergence"]) == ["not converged", "converged"]
    assert parts.loc[0, "fall_per_10pct"] == pytest.approx(0.05, rel=1e-6)
    assert "not converged (an arm still falls 0.0500 per 10% of its budget" in res.stdout
    assert "not converged (+0.0500 per 10%)" in (tmp_path / "c" / "claims.md").read_text()


@pytest.mark.parametrize("part,what", [
    ({"name": "p", "expect": "lower", "arms": [{"model.attn_steps": 2, "model.attn_step_size": 0.5},
                                              {"model.attn_steps": 1, "model.attn_step_size": 1.0}]},
     "the arms differ in 2 keys (model.attn_step_size, model.attn_steps)"),
    ({"name": "p", "expect": "lower", "changes": ["model.attn_steps"],
      "arms": [{"model.attn_steps": 2, "model.attn_step_size": 0.5}, {"model.attn_steps": 1, "model.attn_step_size": 1.0}]},
     "lists ['model.attn_steps'] but the arms differ in"),
    ({"name": "p", "expect": "lower", "at": "best", "arms": [{"model.attn_steps": 2}, {"model.attn_steps": 1}]},
     "unknown contrast 'best'"),
    ({"name": "p", "expect": "lower", "variance": "bayes", "arms": [{"model.attn_steps": 2}, {"model.attn_steps": 1}]},
     "unknown variance model 'bayes'"),
    ({"name": "p", "expect": "lower", "statistic": "lr_optimum", "at": "fixed",
      "arms": [{"model.attention": "cem"}, {"model.attention": "llama"}]}, "`at` is for loss contrasts"),
])
def test_new_claim_keys_are_checked_at_plan(part, what):
    with pytest.raises(ConfigError) as info:
        parse_claims([{"id": "1", "statement": "s", "part": [part]}], "g.toml")
    assert what in str(info.value) and "\n" not in str(info.value)


def test_a_part_that_says_what_it_changes_is_accepted_and_keeps_its_declaration():
    from cemctl.grid.claims import variance_model

    claim = parse_claims([{"id": "1", "statement": "s", "part": [{
        "name": "p", "expect": "lower", "at": "own_optimum", "changes": ["model.attn_steps", "model.attn_step_size"],
        "arms": [{"model.attn_steps": 2, "model.attn_step_size": 0.5},
                 {"model.attn_steps": 1, "model.attn_step_size": 1.0}]}]}], "g.toml")[0]
    part = claim.parts[0]
    assert part.tuned and part.changes == ("model.attn_step_size", "model.attn_steps")
    assert variance_model(part) == ("welch", "rule: each arm tuned to its own optimum")
    assert variance_model(part, tuned=False) == ("pooled", "rule: arms of one kind at one learning rate")
    # an older recorded grid's two-key part is read (the refusal is for planning)
    from cemctl.grid.claims import recorded_claims

    old = 'id = "T2"\nstatement = "s"\n[[claim.part]]\nname = "p"\nexpect = "lower"\n' \
          'arms = [{ "model.attn_steps" = 2, "model.attn_step_size" = 0.5 }, { "model.attn_steps" = 1, ' \
          '"model.attn_step_size" = 1.0 }]\n'
    assert [c.id for c in recorded_claims("[[claim]]\n" + old)] == ["T2"]


def test_the_packaged_grids_are_the_experiments_folder():
    import filecmp

    packaged = ROOT / "cemctl" / "experiments"
    names = sorted(p.name for p in (ROOT / "experiments").glob("*.toml"))
    assert names and names == sorted(p.name for p in packaged.glob("*.toml"))
    assert all(filecmp.cmp(ROOT / "experiments" / n, packaged / n, shallow=False) for n in names)
