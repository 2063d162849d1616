"""`cemctl claims`: claims declared in the grids, tested on results whose truth is designed.

The losses below are made up so that each verdict is known in advance; the statistics themselves are tested
against simulations (tests/test_claims_page_sim.py, test_claims_stats.py). Here: stage 1 (each arm's rate chosen
by the grid's rule, shown as exploratory and never decided), fixed parts decided and adjusted, a part that cannot
be evaluated says why on its own row while the others are evaluated, the page (one line per claim, a body of seven
columns, intervals rounded to what they support and written open where open), the terminal at 80 and 120 columns,
robustness rows and the declared step-size row, the gap's trend and convergence, the size ladder with its slope and
compute equivalent, bad [[claim]] tables. Stage 2 (`cemctl confirm`): tests/test_claims_confirm.py.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from cem_core.errors import ConfigError
from cemctl.grid.claims import parse_claims
from cemctl.grid.spec import parse_grid
from cemctl.report.claims import claim_verdicts, evaluate_claims, evaluate_page
from tests.helpers import assert_clean_error, cli, finish_run, tiny_grid
from tests.synthetic import synthetic_from_grid

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ("fig2a", "fig2b", "fig2c", "fig2d", "fig3a", "fig3c", "fig4")

BEST = {"full": 0.0028, "cem attention": 0.002, "cem mlp": 0.0028, "llama": 0.004}  # on the rate ladder


def _best(r: dict) -> float:
    attn, mlp = r["model.attention"], r["model.mlp"]
    if attn == "cem" and mlp == "cem":
        return BEST["full"]
    if attn == "cem":
        return BEST["cem attention"]
    if mlp in ("cem", "cem_param_matched", "reuse") or attn == "reuse":
        return BEST["cem mlp"]
    return BEST["llama"]


def designed_loss(r: dict) -> float:
    """1.5 nats + each component's designed effect + a small seed effect shared by every arm + run noise + a
    parabola in log2(lr) around each arm's designed optimum (claim 6: full CEM prefers a higher rate)."""
    seed = int(r["train.seed"])
    loss = 1.5 + 0.003 * seed + 0.0005 * ((int(r["run_id"], 16) % 7) - 3)
    attn, mlp = r["model.attention"], r["model.mlp"]
    a_t, m_t = int(r["model.attn_steps"]), int(r["model.mlp_steps"])
    if attn == "cem":
        loss += 0.004 - 0.05 * (a_t - 1)
        if r["model.attn_precond"] == "diag_lowrank" and a_t == 2:
            loss -= 0.02
    if mlp in ("cem", "cem_param_matched"):
        loss += (0.10 if mlp == "cem" else 0.05) + 0.04 * (m_t - 1)
    if attn == "reuse":
        loss += -0.05 * (a_t - 1)
    return loss + 0.05 * math.log2(float(r["train.lr"]) / _best(r)) ** 2


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
    """Every grid's runs once, each with the experiments linking it; validation loss a little above the test loss."""
    frames = [synthetic_from_grid(str(ROOT / "experiments" / f"{g}.toml"), "cpu", failures=False, steps=2)[0]
              .assign(experiment=g) for g in grids]
    frame = pd.concat(frames, ignore_index=True)
    linked = frame.groupby("run_id", sort=False)["experiment"].agg(", ".join)
    frame = frame.drop_duplicates("run_id").reset_index(drop=True)
    frame["experiment"] = frame["run_id"].map(linked)
    frame["test_loss"] = [designed_loss(r) for r in frame.to_dict("records")]
    frame["val_loss"] = frame["test_loss"] + 0.001
    frame["test_ppl"] = frame["test_loss"].map(math.exp)
    return frame.assign(scale="cpu")


@pytest.fixture(scope="module")
def page():
    return evaluate_page(_frame(), _claims(GRIDS + ("fig3b", "t2_ablation")))


def _part(table, text):
    rows = table[table["part"].str.contains(text, regex=False)]
    assert len(rows) == 1, (text, list(table["part"]))
    return rows.iloc[0]


def _nearest(rates, best):
    return min(rates, key=lambda r: abs(math.log2(r / best)))


# ---------------------------------------------------------------------------------------------- stage 1


def test_stage_1_chooses_each_arms_rate_by_the_rule_and_never_decides(page):
    """Every packaged part chooses its arms' rates (own optimum): the sampled rate nearest each arm's designed
    optimum (its lowest validation loss), the contrast there is exploratory, outside the family, never a verdict."""
    table = page.parts
    tuned = _part(table, "CEM attention T=2 - T=1 (diag preconditioner)")
    assert tuned["stage"] == "stage 1" and not tuned["decisive"]
    assert tuned["rates"] == " / ".join(f"{_nearest(rs, BEST['cem attention']):.2g}"
                                        for rs in ([0.001, 0.0014, 0.002, 0.0028, 0.004],
                                                   [0.0014, 0.002, 0.0028, 0.004]))
    assert tuned["effect"] == pytest.approx(-0.05, abs=0.004)  # the designed T=2 gain, at the chosen rates
    assert tuned["label"] == "lower" and tuned["verdict"] == "inconclusive" and math.isnan(tuned["p"])
    assert tuned["verdict_holm"] == "inconclusive" and math.isnan(tuned["p_holm"])
    lr = _part(table, "optimal log2(lr): full CEM - Llama")
    assert lr["stage"] == "stage 1" and lr["unit"] == "log2(lr)" and lr["rates"] == "0.0028 / 0.004"
    assert lr["effect"] == pytest.approx(math.log2(0.0028 / 0.004))  # full CEM prefers the lower rate here
    assert not table["advice"].any()  # every designed optimum is inside its profile
    assert set(table["stage"]) == {"stage 1"} and not table["decisive"].any()
    assert set(claim_verdicts(table)["verdict"]) <= {"inconclusive", "not run"}


def test_an_arm_chosen_at_the_edge_of_its_profile_is_open_on_that_side_and_says_what_to_add():
    frame = _frame(("fig2a",))
    frame = frame[~((frame["model.attention"] == "cem") & (frame["train.lr"].astype(float) > 0.0021))]
    row = evaluate_page(frame, _claims(("fig2a",))).parts.iloc[0]
    # CEM attention's best rate 0.002 is its profile's highest (0.0014, 0.002): it could gain at a higher rate, so
    # the contrast (CEM - Llama) is open below
    assert row["rates"].startswith("0.002 /") and row["open"] == "low"
    assert row["ci95_low"] == -math.inf and math.isfinite(row["ci95_high"])
    assert "arm 1's rate 0.002 is the highest of its profile: extend the profile with train.lr = 0.001, 0.0028" \
        in row["advice"]


def test_the_interpolated_rule_puts_the_akima_optimum_on_the_ladder():
    import dataclasses

    from cemctl.report.claims import choose_rate, evaluate_page

    frame = _frame(("fig2a",))
    cem = frame["model.attention"] == "cem"
    frame = frame[~(cem & (frame["train.lr"].astype(float) == 0.0028))].copy()  # a profile with a gap: 2e-3, 4e-3
    cem = frame["model.attention"] == "cem"
    lrs = frame.loc[cem, "train.lr"].astype(float)
    frame.loc[cem, "val_loss"] = 1.5 + 0.05 * (lrs.map(math.log2) - math.log2(0.0026)) ** 2  # optimum 2.6e-3
    claims = _claims(("fig2a",))
    assert evaluate_page(frame, claims).parts.iloc[0]["rates"] == "0.002 / 0.004"  # the best sampled
    claims[0].parts[0] = dataclasses.replace(claims[0].parts[0], choose="interpolated")
    row = evaluate_page(frame, claims).parts.iloc[0]
    assert row["rates"] == "0.0028 / 0.004"  # the Akima optimum (2.6e-3) on the half-octave ladder, not sampled
    assert choose_rate([], "interpolated") is None


# ---------------------------------------------------------------------------------------------- fixed parts


def _two_part_project(tmp_path, gap=0.05, llama_still_falling=False, variance=""):
    """A grid with a decided part (CEM attention worse by `gap`) and an inconclusive one (two equal step sizes)."""
    declared = f'\nvariance = "{variance}"' if variance else ""
    extra = f'''
[axes]
"model.attention" = ["llama", "cem"]
"model.attn_step_size" = [1.0, 0.5]

[[claim]]
id = "B"
statement = "CEM attention is worse than Llama attention here; its step size does not matter"
[[claim.part]]
name = "CEM attention, a rather long description of the arms - Llama attention at the same settings"
arms = [{{ "model.attention" = "cem", "model.attn_step_size" = 1.0 }}, {{ "model.attention" = "llama", "model.attn_step_size" = 1.0 }}]
expect = "higher"
[[claim.part]]
name = "CEM attention step 0.5 - step 1"
arms = [{{ "model.attention" = "cem", "model.attn_step_size" = 0.5 }}, {{ "model.attention" = "cem", "model.attn_step_size" = 1.0 }}]
expect = "lower"{declared}
'''
    (tmp_path / "b.toml").write_text(tiny_grid("b", seeds="[0, 1, 2]", steps=10, extra=extra))
    res = cli(tmp_path, "plan", str(tmp_path / "b.toml"), "--json")
    assert res.returncode == 0, res.output
    for r in json.loads(res.stdout)["runs"]:
        a = r["axes"]
        noise = 0.004 * ((a["train.seed"] * 7 + int(a["model.attn_step_size"] * 10)) % 5 - 2)
        loss = 1.5 + noise + (gap if a["model.attention"] == "cem" else 0.0)
        finish_run(tmp_path / "runs" / r["run_id"], test_loss=loss, steps=10)
        # validation every 2 of 10 steps; Llama's still falls 0.05 per step at the end when told so
        fall = 0.05 if llama_still_falling and a["model.attention"] == "llama" else 0.0005
        lines = [json.dumps({"kind": "val", "step": s, "tokens": s * 128, "val_loss": loss + fall * (10 - s),
                             "time_s": float(s)}) for s in (2, 4, 6, 8, 10)]
        (tmp_path / "runs" / r["run_id"] / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_fixed_parts_are_decided_adjusted_and_make_the_claim_verdict(tmp_path):
    _two_part_project(tmp_path)
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"))
    assert res.returncode == 0, res.output
    parts = pd.read_csv(tmp_path / "c" / "claims.csv")
    first, second = parts.iloc[0], parts.iloc[1]
    assert (first["stage"], first["label"], first["verdict_holm"]) == ("fixed", "higher", "holds")
    assert first["effect"] == pytest.approx(0.05, abs=1e-9) and first["variance"] == "welch"
    assert first["p_holm"] >= first["p"] and first["holm_low"] <= first["ci95_low"]
    assert (second["label"], second["verdict_holm"]) == ("inconclusive", "inconclusive")
    assert pd.read_csv(tmp_path / "c" / "claims_summary.csv").loc[0, "verdict"] == "partly holds"


def test_a_declared_pooled_part_pools_over_its_own_arms_only():
    """Regression: the variance was pooled over every arm at the scale, so the T=2 ablation's start-at-RMSNorm arm
    widened every unpaired part about threefold; a pooled part (declared) pools over its own declared arms."""
    frame = _frame(GRIDS + ("fig3b", "t2_ablation"))
    arms = _claims(GRIDS + ("fig3b", "t2_ablation"))[2].parts[2].arms  # claim 3's attention interaction, at 4e-3
    fixed = parse_claims([{"id": "3", "statement": "s", "part": [{
        "name": "fixed", "statistic": "interaction", "expect": "lower", "variance": "pooled", "arms": arms}]}],
        "x.toml")
    before = evaluate_claims(frame, fixed).iloc[0]
    assert before["method"] == "pooled t" and before["df"] == 4 * 2  # its four arms of three seeds
    wild = frame["model.attn_start"].astype(str).eq("norm") & frame["experiment"].eq("t2_ablation")
    assert wild.sum() >= 3
    frame.loc[wild, "test_loss"] += [0.6 * (i % 2) for i in range(int(wild.sum()))]
    after = evaluate_claims(frame, fixed).iloc[0]
    assert after["method"] == "pooled t" and after["df"] == before["df"]
    assert (after["ci95_low"], after["ci95_high"]) == pytest.approx((before["ci95_low"], before["ci95_high"]))


def test_a_part_that_cannot_be_evaluated_says_why_on_its_row_and_the_others_are_evaluated(tmp_path):
    """Regression (issue 47): a selector that another grid's runs make ambiguous made `cemctl claims` exit 2 for every
    claim, and the dashboard said "No recorded grid declares a claim"."""
    frame = _frame(("fig2c", "t2_ablation"))
    loose = parse_claims([{"id": "3", "statement": "T=2 beats T=1", "part": [{
        "name": "loose", "expect": "lower", "at": "own_optimum",
        "arms": [{"model.attention": "cem", "model.attn_precond": "diag_lowrank", "model.attn_steps": 2},
                 {"model.attention": "cem", "model.attn_precond": "diag_lowrank", "model.attn_steps": 1}]}]}],
        "x.toml")
    claims = loose + _claims(("fig2c",))
    table = evaluate_claims(frame, claims)
    bad = _part(table, "loose")
    assert bad["verdict"] == "not run" and "arm selector 1 matches" in bad["why_not_run"]
    assert "matches 2 arms" in bad["error"] and "pin the keys" in bad["error"]
    others = table[table["part"] != "loose"]
    assert len(others) == 3 and others["n"].gt(0).all()
    # the arms differ in a key the selectors do not name: refused on the row, the same way
    frame = _frame(("fig3a",))  # one full CEM arm at 2e-3, one Llama arm at 4e-3: they differ in the rate too
    frame = frame[((frame["model.attention"] == "cem") & (frame["model.attn_steps"] == 2) & (frame["train.lr"] == 0.002))
                  | ((frame["model.attention"] == "llama") & (frame["train.lr"] == 0.004))]
    sloppy = parse_claims([{"id": "x", "statement": "s", "part": [{
        "name": "different lrs", "expect": "lower", "changes": ["model.attention", "model.mlp"],
        "arms": [{"model.attention": "cem", "model.mlp": "cem", "model.attn_steps": 2},
                 {"model.attention": "llama", "model.mlp": "llama"}]}]}], "x.toml")
    row = evaluate_claims(frame, sloppy).iloc[0]
    assert row["verdict"] == "not run" and "differ in train.lr" in row["why_not_run"]


def test_claims_exits_0_and_every_surface_says_why_a_part_was_not_evaluated(tmp_path):
    """The same on a project: another grid's runs make one part's selector ambiguous; `cemctl claims` prints every
    claim (exit 0) with the part's reason, and the dashboard's claims fragment has the other parts and the reason."""
    _two_part_project(tmp_path)
    other = tiny_grid("other", seeds="[0, 1, 2]", steps=10, extra='''
[axes]
"model.attention" = ["cem"]
"model.attn_step_size" = [1.0]
"model.attn_steps" = [2]
''')
    (tmp_path / "other.toml").write_text(other)
    res = cli(tmp_path, "plan", str(tmp_path / "other.toml"), "--json")
    for r in json.loads(res.stdout)["runs"]:
        finish_run(tmp_path / "runs" / r["run_id"], test_loss=1.6, steps=10)
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"), env={"COLUMNS": "120"})
    assert res.returncode == 0, res.output
    assert "not evaluated: " in res.stdout and "matches 2 arms" in " ".join(res.stdout.split())
    parts = pd.read_csv(tmp_path / "c" / "claims.csv")
    assert list(parts["verdict"]) == ["not run", "not run"]  # both of B's parts name the ambiguous CEM arm
    assert "matches 2 arms" in (tmp_path / "c" / "claims.md").read_text()
    from cemctl.services.dashboard.source import open_source
    from cemctl.services.dashboard.tables import claim_parts

    src = open_source(f"sqlite:///{tmp_path / 'results.db'}", runs_root=tmp_path / "runs")
    rows = claim_parts(src, "b")
    assert len(rows) == 2 and all("matches 2 arms" in r.interval for r in rows)


# ---------------------------------------------------------------------------------------------- the page


def test_the_page_one_line_per_claim_a_body_of_seven_columns_numbers_as_their_intervals_support(tmp_path):
    _two_part_project(tmp_path)
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"))
    assert res.returncode == 0, res.output
    md = (tmp_path / "c" / "claims.md").read_text()
    top = md.split("## Every part")[0]
    line = next(x for x in top.splitlines() if x.startswith("- **Claim B**"))
    assert "**partly holds**" in line and "tiny" in line and "nano" in line and "3 seeds" in line
    assert "+0.050 [" in line and "nats" in line and "not registered" in line
    header = next(x for x in md.splitlines() if x.startswith("| claim | part | evidence |"))
    assert header.count("|") - 1 == 7
    body = [x for x in md.splitlines() if x.startswith("| B |")]
    assert len(body) == 2
    assert "`claims.csv`" in md


def test_effects_are_rounded_to_what_their_interval_supports_and_open_intervals_are_written_open():
    from cemctl.report.claims import effect_text

    assert effect_text(0.06763, 0.04114, 0.09401) == "+0.068 [+0.041, +0.094]"
    assert effect_text(0.0066, -0.0019, 0.0150) == "+0.0066 [-0.0019, +0.0150]"
    assert effect_text(0.37, -0.47, 1.21) == "+0.37 [-0.47, +1.21]"
    assert effect_text(0.17155, 0.1258, math.inf) == "+0.172 [+0.126, +inf)"
    assert effect_text(-0.0021, -math.inf, 0.038) == "-0.002 (-inf, +0.038]"
    assert effect_text(-1.97, unit="log2(lr)") == "-2.0 octaves"
    assert effect_text(math.nan) == "not run"


@pytest.mark.slow  # a terminal (its notes wrap between words only there); the page's text: the tests around it
@pytest.mark.parametrize("cols", [80, 120])
def test_claims_prints_every_part_within_the_terminal(tmp_path, cols):
    from tests.helpers import on_pty

    _two_part_project(tmp_path)
    screen = on_pty(["claims", "--out", str(tmp_path / "c"), "--power"], tmp_path, cols=cols, rows=60)
    screen.assert_clean()
    screen.assert_fits()
    lines = screen.lines
    text = screen.text
    for header in ("effect [95% interval]", "evidence", "verdict"):
        assert header in text
    assert "+0.050 [" in text and "higher: holds" in text
    numbers = [line for line in lines if "[+0.0" in line or "[-0.0" in line]
    assert len(numbers) == 2  # one line of numbers per part
    assert all("exploratory" in line for line in numbers)  # not registered: no part is confirmatory
    if cols == 80:  # the part's name above its numbers, cut with an ellipsis
        assert any(line.startswith("B. CEM attention, a rather long") and line.endswith("\u2026") for line in lines)
        assert all(line.startswith("   ") for line in numbers)
    else:  # beside them
        assert any(line.startswith("B. CEM attention step 0.5 - step 1") and "[" in line for line in lines)
    assert "seeds per arm for 80% power" in text  # a note (a terminal wraps it between words)


def test_claims_power_quotes_seeds_at_the_adjusted_level_with_the_sd_uncertainty(tmp_path):
    """The undecided part (step 0.5 - step 1: equal arms, a declared pooled within-arm s.d. 0.008 from the designed
    losses -0.008, 0, +0.008 of each arm) is tested at the step-down level 0.025 (two parts); its seeds for 80% power
    are quoted at that level, at 5% (fewer), and at the ends of the 80% chi-square interval of its s.d. (4 df)."""
    from scipy import stats as st

    _two_part_project(tmp_path, variance="pooled")
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"), "--power", env={"COLUMNS": "150"})
    assert res.returncode == 0, res.output
    row = pd.read_csv(tmp_path / "c" / "claims.csv").set_index("part").loc["CEM attention step 0.5 - step 1"]
    assert row["verdict_holm"] == "inconclusive" and row["variance"] == "pooled"
    assert row["holm_level"] == pytest.approx(0.025)
    margin, sd, df = row["margin"], 0.008, 4

    def hand(margin: float, sd: float, level: float) -> int:
        for n in range(2, 2000):
            d, se = 2 * (n - 1), sd * math.sqrt(2 / n)
            crit = st.t.ppf(1 - level / 2, d)
            if st.nct.sf(crit, d, margin / se) + st.nct.cdf(-crit, d, margin / se) >= 0.8:
                return n
        raise AssertionError("no n up to 2000")

    need, unadjusted = int(row["seeds_for_80pct_power"]), int(row["seeds_unadjusted"])
    assert need == hand(margin, sd, 0.025) and unadjusted == hand(margin, sd, 0.05) and need > unadjusted
    low_sd, high_sd = sd * math.sqrt(df / st.chi2.ppf(0.9, df)), sd * math.sqrt(df / st.chi2.ppf(0.1, df))
    assert int(row["seeds_low"]) == hand(margin, low_sd, 0.025) < need
    assert int(row["seeds_high"]) == hand(margin, high_sd, 0.025) > need


def test_every_report_has_a_claims_table_for_its_grid(tmp_path):
    from cemctl.report.build import ExperimentInfo, build_report

    runs, curves = synthetic_from_grid(str(ROOT / "experiments" / "fig2c.toml"), "cpu", failures=False)
    runs["test_loss"] = [designed_loss(r) for r in runs.to_dict("records")]
    result = build_report(ExperimentInfo("fig2c", "recursion", claims=_claims(("fig2c",))), runs.assign(scale="cpu"),
                          curves, tmp_path / "r", formats="png")
    md = result.index_md.read_text()
    assert "### claims" in md and "CEM attention T=2 - T=1 (diag preconditioner)" in md


def test_the_claims_figure_draws_a_legend_only_for_what_is_there():
    from cemctl.services.claims import claims_figure

    def row(claim, part, effect, lo, hi, hlo, hhi, verdict, stage="fixed", unit="nats", margin=0.015):
        return {"claim": claim, "part": part, "scale": "cpu", "unit": unit, "margin": margin, "effect": effect,
                "ci95_low": lo, "ci95_high": hi, "holm_low": hlo, "holm_high": hhi, "verdict_holm": verdict,
                "stage": stage}

    parts = pd.DataFrame([row("1", "a", 0.1, 0.08, 0.12, 0.06, 0.14, "contradicted"),
                          row("2", "b", 0.02, -0.01, 0.05, -0.9, 0.95, "inconclusive"),
                          row("3", "c", math.nan, math.nan, math.nan, math.nan, math.nan, "not run"),
                          row("4", "d", 0.03, 0.01, 0.05, math.nan, math.nan, "inconclusive", stage="stage 1")])
    fig = claims_figure(parts)
    ax = fig.axes[0]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "holds (95% interval)" not in legend and "contradicted (95% interval)" in legend
    assert "stage 1, exploratory (rates chosen on these seeds)" in legend
    assert "adjusted interval (step-down level)" in legend and "goes on beyond the axis" in legend
    assert not any(t.startswith("scale ") for t in legend)
    assert any(t.get_text() == "not run" for t in ax.texts)
    assert ax.get_xlim()[1] < 0.9
    fig.clear()


# ---------------------------------------------------------------------------------------------- checks


def test_robustness_rows_hold_the_same_contrast_under_other_settings():
    frame = _frame(("fig2c", "fig4"))
    part = _claims(("fig4",))[0].parts[0]  # attention: CEM recursion gain - reuse gain, CEM arms identity precond
    page = evaluate_page(frame, _claims(("fig4",)))
    rows = page.robustness
    assert {("model.attn_precond", "diag"), ("model.attn_precond", "diag_lowrank")} <= set(zip(rows["key"], rows["value"]))
    by = rows.set_index("value")["effect"]
    assert by["diag_lowrank"] - by["diag"] == pytest.approx(-0.02, abs=0.004)  # the low-rank gain at T=2 only
    assert page.parts.iloc[0]["robustness"].startswith("sign ")
    assert part.fixed_lr is not None and ("train.lr", "0.004 (every arm)") in set(zip(rows["key"], rows["value"]))


def test_a_part_with_a_t2_arm_has_a_step_size_row_declared_not_run_and_says_when_its_verdict_depends_on_it():
    from cemctl.report.claims import sign_summary, step_size_selectors

    part = _claims(("fig2c",))[0].parts[0]  # T=2 - T=1, both at eta = 1
    key, value, selectors = step_size_selectors(part)
    assert (key, value) == ("model.attn_step_size", "1/T")
    assert [s["model.attn_step_size"] for s in selectors] == [0.5, 1.0]  # each arm at 1/T
    page = evaluate_page(_frame(("fig2c",)), _claims(("fig2c",)))
    row = page.robustness[(page.robustness["part"] == part.name) & (page.robustness["key"] == key)].iloc[0]
    assert row["label"] == "not run" and "attn_step_size=1/T not run" in page.parts.iloc[0]["robustness"]
    assert "depends on the step size: attn_step_size=1/T reads inconclusive" in sign_summary(
        -0.05, "lower", [{"key": key, "value": "1/T", "effect": -0.01, "label": "inconclusive"}])
    assert "depends" not in sign_summary(-0.05, "lower", [{"key": key, "value": "1/T", "effect": -0.04,
                                                           "label": "lower"}])


def test_convergence_and_the_gap_trend_over_the_last_third(tmp_path):
    from cemctl.report.claims import convergence, gap_trend

    assert convergence([["a", "b"], ["c"]], {"a": -0.03, "b": -0.01, "c": -0.001}, 0.015) == (0.02, "not converged")
    assert convergence([["a"], ["c"]], {"a": -0.01, "c": 0.002}, 0.015) == (0.01, "converged")
    slopes = {"a": -0.03, "b": -0.031, "c": -0.029, "x": -0.01, "y": -0.011, "z": -0.009}
    trend, lo, hi = gap_trend([["a", "b", "c"], ["x", "y", "z"]], slopes, (1.0, -1.0))
    assert trend == pytest.approx(-0.02) and lo < trend < hi < 0  # the gap moves toward arm 1, and decidedly so
    _two_part_project(tmp_path, llama_still_falling=True)
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.output
    parts = pd.read_csv(tmp_path / "c" / "claims.csv")
    # Llama falls 0.05 a step over the last third (steps 8 and 10, at least the last two), 0.05 per 10% of 10 steps
    assert list(parts["convergence"]) == ["not converged", "converged"]
    assert parts.loc[0, "fall_per_10pct"] == pytest.approx(0.05, rel=1e-6)
    assert parts.loc[0, "trend"] == pytest.approx(0.0495, rel=1e-6)  # CEM - Llama: Llama catches up
    assert "not converged" in (tmp_path / "c" / "claims.md").read_text()


def test_val_slopes_take_the_last_third_and_match_a_least_squares_fit(tmp_path):
    import numpy as np

    from cemctl.db.engine import open_existing_db
    from cemctl.records import load_records
    from cemctl.services.claims import val_slopes

    _two_part_project(tmp_path, llama_still_falling=True)
    cli(tmp_path, "claims", "--out", str(tmp_path / "c"))
    engine = open_existing_db(f"sqlite:///{tmp_path / 'results.db'}")
    runs = load_records(engine, None).frame()
    got = val_slopes(engine, runs)
    run = runs.iloc[0]
    steps = np.array([8.0, 10.0])  # the evaluations in the last third of 10 steps (at least two)
    vals = np.array([json.loads(x)["val_loss"] for x in
                     (tmp_path / "runs" / run["run_id"] / "metrics.jsonl").read_text().splitlines()][-2:])
    assert got[run["run_id"]] == pytest.approx(np.polyfit(steps, vals, 1)[0] * 0.1 * 10)
    assert len(got) == len(runs)


def _ladder_project(tmp_path):
    """Three sizes (a ladder at one context length) of Llama and CEM attention; Llama's loss falls 0.1 per doubling
    of its compute, the CEM gap is 0.04 at nano, 0.02 at micro, 0.0 at mini (shrinking 0.02 per doubling of
    parameters)."""
    extra = '''
[axes]
"model.attention" = ["llama", "cem"]
"model.size" = ["nano", "micro", "mini"]

[[claim]]
id = "L"
statement = "CEM attention's gap to Llama shrinks with size"
[[claim.part]]
name = "CEM attention - Llama"
arms = [{ "model.attention" = "cem" }, { "model.attention" = "llama" }]
expect = "lower"
'''
    text = tiny_grid("ladder", seeds="[0, 1, 2]", steps=10, extra=extra).replace('"model.size" = "nano"\n', "")
    (tmp_path / "ladder.toml").write_text(text)
    res = cli(tmp_path, "plan", str(tmp_path / "ladder.toml"), "--json")
    assert res.returncode == 0, res.output
    k = {"nano": 0, "micro": 1, "mini": 2}
    for r in json.loads(res.stdout)["runs"]:
        a = r["axes"]
        i = k[a["model.size"]]
        gap = 0.04 - 0.02 * i if a["model.attention"] == "cem" else 0.0
        loss = 2.0 - 0.1 * i + gap + 0.002 * ((a["train.seed"] * 5 + i) % 3 - 1)
        result = finish_run(tmp_path / "runs" / r["run_id"], test_loss=loss, steps=10)
        result.update(params_non_embedding=1e5 * 2 ** i, train_flops=1e12 * 2 ** i)
        (tmp_path / "runs" / r["run_id"] / "result.json").write_text(json.dumps(result))
    return tmp_path


def test_the_size_ladder_gives_the_gap_per_size_its_slope_and_a_llama_compute_equivalent(tmp_path):
    _ladder_project(tmp_path)
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"))
    assert res.returncode == 0, res.output
    ladder = pd.read_csv(tmp_path / "c" / "claims_ladder.csv")
    assert list(ladder["size"]) == ["nano", "micro", "mini"]
    assert list(ladder["effect"]) == pytest.approx([0.04, 0.02, 0.0], abs=1e-9)
    assert ladder.loc[0, "slope_per_doubling"] == pytest.approx(-0.02, abs=1e-9)
    assert ladder.loc[0, "slope_low"] < -0.02 < ladder.loc[0, "slope_high"] < 0
    # 0.04 nats worse where Llama gains 0.1 per doubling of compute: Llama on 2^-0.4 = 0.76x the compute
    assert ladder.loc[0, "compute_x"] == pytest.approx(2 ** -0.4, rel=1e-6)
    assert ladder.loc[2, "compute_x"] == pytest.approx(1.0, rel=1e-6)
    assert ladder.loc[0, "llama_per_compute_doubling"] == pytest.approx(-0.1, abs=1e-3)
    md = (tmp_path / "c" / "claims.md").read_text()
    assert "## The size ladder (directional)" in md and "not its size at 86M-162M" in md
    assert "falls 0.1 nats per doubling of its training compute" in md
    assert re.search(r"Llama at 0\.7[56]\d*x", md) and (tmp_path / "c" / "claims_ladder.png").exists()


# ---------------------------------------------------------------------------------------------- bad input


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
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "lower", "choose": "median", "arms": [
        {"model.attention": "cem"}, {"model.attention": "llama"}]}]}, "unknown rule 'median'"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "lower", "rates": {"nano": [0.001, 0.002]},
                                             "arms": [{"model.attention": "cem"}, {"model.attention": "llama"}]}]},
     "only a confirmation grid"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "lower", "at": "best", "arms": [
        {"model.attn_steps": 2}, {"model.attn_steps": 1}]}]}, "unknown contrast 'best'"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "lower", "variance": "bayes", "arms": [
        {"model.attn_steps": 2}, {"model.attn_steps": 1}]}]}, "unknown variance model 'bayes'"),
    ({"id": "1", "statement": "s", "part": [{"name": "p", "expect": "lower", "arms": [
        {"model.attn_steps": 2, "model.attn_step_size": 0.5}, {"model.attn_steps": 1, "model.attn_step_size": 1.0}]}]},
     "the arms differ in 2 keys (model.attn_step_size, model.attn_steps)"),
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


def test_a_part_that_says_what_it_changes_keeps_its_declaration_and_older_registrations_their_hash():
    from cemctl.grid.claims import recorded_claims, variance_model

    part = parse_claims([{"id": "1", "statement": "s", "part": [{
        "name": "p", "expect": "lower", "at": "own_optimum", "changes": ["model.attn_steps", "model.attn_step_size"],
        "arms": [{"model.attn_steps": 2, "model.attn_step_size": 0.5},
                 {"model.attn_steps": 1, "model.attn_step_size": 1.0}]}]}], "g.toml")[0].parts[0]
    assert part.tuned and part.chooses and part.changes == ("model.attn_step_size", "model.attn_steps")
    assert variance_model(part) == ("welch", "the rule: each arm its own variance")
    # a declaration without the newer keys hashes as before (registrations made earlier stay matched)
    assert "choose" not in part.declaration() and "rates" not in part.declaration()
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


def test_the_dashboards_claims_are_computed_once_per_state_of_the_database_and_the_claims_files(tmp_path):
    """The dashboard's claims fragment reuses one evaluation while nothing changed, and never shows a page the
    registrations have moved on from: a registration written beside the runs (no database change) is a new key."""
    from cemctl.db.engine import open_existing_db
    from cemctl.services.claim_plans import register_claims
    from cemctl.services.dashboard.source import open_source
    from cemctl.services.dashboard.tables import claims_result

    _two_part_project(tmp_path)
    assert cli(tmp_path, "sync").returncode == 0
    src = open_source(f"sqlite:///{tmp_path / 'results.db'}", runs_root=tmp_path / "runs")
    first = claims_result(src)
    assert claims_result(src) is first  # cached
    assert set(first.parts["declared"]) == {"not registered"}
    register_claims(open_existing_db(f"sqlite:///{tmp_path / 'results.db'}"), "b", tmp_path / "runs")
    again = claims_result(src)
    assert again is not first and set(again.parts["declared"].str[:11]) == {"exploratory"}
    from cemctl.services.dashboard.tables import claim_verdicts

    [row] = claim_verdicts(src)  # the claims summary page carries the mark too
    assert row["evidence"].startswith("exploratory (2 of 2 parts: exploratory (first declared")
    assert "[exploratory" in row["statement"]


def test_the_terminal_says_when_a_verdict_depends_on_the_step_size(tmp_path):
    from cemctl.commands.claims import ClaimsView
    from cemctl.services.claims import claims_report

    _two_part_project(tmp_path)
    result = claims_report(f"sqlite:///{tmp_path / 'results.db'}", runs_root=tmp_path / "runs")
    result.parts.loc[0, "robustness"] = "sign + in 2 of 2 settings; depends on the step size: attn_step_size=1/T " \
                                        "reads inconclusive"
    lines = ClaimsView(result, 120, False).plain_lines()
    assert any(line.endswith("depends on the step size: attn_step_size=1/T reads inconclusive") for line in lines)
