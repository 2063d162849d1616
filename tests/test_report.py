"""`cemctl report` library: figures of every kind, Akima optimum, seed statistics, tables, index."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from cem_core.config import RunConfig, resolve, run_id
from cem_core.errors import ConfigError
from cemctl.report.aggregate import aggregate_seeds, match_baselines
from cemctl.report.build import ExperimentInfo, NoResults, build_report, parse_formats, problem_runs
from cemctl.report.figures import FIGURE_KINDS, get_figure_kind
from cemctl.report.figures.gp_table import gp_frame, rmse_table
from cemctl.report.frame import runs_frame
from cemctl.report.optimum import akima_optimum
from tests.synthetic import synthetic_frames, synthetic_gp_frame
from cemctl.report.tables import read_table_csv, to_latex, to_markdown, write_table

LRS = [0.0005, 0.001, 0.002, 0.004, 0.008]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _record(seed: int, value: float | None, state: str = "done", **overrides) -> dict:
    cfg = resolve(RunConfig.from_dict({"model.size": "nano", "train.seed": seed, "train.max_steps": 5, **overrides}))
    return {"run_id": run_id(cfg), "state": state, "config": cfg.to_dict(), "test_ppl": value,
            "params_total": 1000, "tokens": 100}


# -- every figure kind renders ---------------------------------------------------------------------------


def _frames_for(kind: str):
    if kind == "gp_table":
        return synthetic_gp_frame(seeds=(0, 1, 2)), None
    return synthetic_frames(kind, sizes=("nano",), seeds=(0, 1), steps=8)


def test_every_figure_kind_renders_png_and_pdf(tmp_path):
    """Every figure kind's whole report, one after another: png for each, png and pdf for one (saving does not
    depend on the kind: the pdf of every kind is the slow test below)."""
    for kind in sorted(FIGURE_KINDS):
        _check_kind_renders(kind, tmp_path, "png,pdf" if kind == "components" else "png")


@pytest.mark.slow
def test_every_figure_kind_renders_pdf_too(tmp_path):
    for kind in sorted(FIGURE_KINDS):
        _check_kind_renders(kind, tmp_path, "png,pdf")


def _check_kind_renders(kind, tmp_path, formats):
    runs, curves = _frames_for(kind)
    info = ExperimentInfo(f"test_{kind}", kind, grid_path=f"experiments/{kind}.toml",
                          planned_run_ids=(list(runs["run_id"]) + ["0123456789ab"]) if "run_id" in runs else None)
    result = build_report(info, runs, curves, tmp_path / kind, formats=formats, dpi=60)
    figures = [p for p in result.figures]
    assert {p.suffix for p in figures} == {"." + f for f in formats.split(",")}, kind
    for path in figures:
        data = path.read_bytes()
        assert len(data) > 1000, path
        assert data.startswith(PNG_MAGIC if path.suffix == ".png" else b"%PDF"), path
    md = result.index_md.read_text()
    html = result.index_html.read_text()
    for path in figures:
        if path.suffix == ".png":
            rel = f"figures/{path.name}"
            assert f"]({rel})" in md and f'src="{rel}"' in html
    assert f"experiments/{kind}.toml" in md and "git commit" in md
    assert "## Missing and failed runs" in md and "Missing and failed runs" in html
    if kind != "gp_table":
        assert "0123456789ab" in md  # planned but absent from the database
        assert "failed: RuntimeError: out of memory" in md
        assert "diverged at step 17" in md
    for table in result.tables:
        assert table.stat().st_size > 0


def test_kinds_produce_their_figures(tmp_path):
    expected = {
        "components": {"components"},
        "recursion": {"recursion_attention", "recursion_mlp"},
        "lr_sweep": {"lr_sweep"},
        "kq_diagonal": {"kq_diagonal"},
        "reuse_vs_recursion": {"reuse_vs_recursion_mlp", "reuse_vs_recursion_attention"},
        "curves": {"test_perplexity"},
        "ablation": {"ablation"},
    }
    for kind, names in expected.items():
        runs, curves = synthetic_frames(kind, sizes=("nano",), seeds=(0, 1), steps=6, failures=False)
        parts = get_figure_kind(kind)(runs, curves)
        assert {f.name for f in parts.figures} == names, kind
        assert parts.tables and all(not t.frame.empty for t in parts.tables), kind
        for f in parts.figures:
            for ax in f.figure.axes:
                if ax.get_visible():
                    assert ax.get_ylabel(), (kind, f.name)  # labelled axes
                    assert ax.get_xlabel(), (kind, f.name)
            f.figure.clear()


def test_unknown_figure_kind_lists_known_ones():
    with pytest.raises(ConfigError) as info:
        get_figure_kind("fig9z")
    assert info.value.key == "experiment.figure"
    for name in FIGURE_KINDS:
        assert name in (info.value.allowed or "")
    assert "\n" not in str(info.value)


def test_bad_format_is_rejected_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError) as info:
        parse_formats("png,jpg")
    assert "svg" in info.value.allowed and "jpg" in str(info.value)
    runs, curves = synthetic_frames("components", sizes=("nano",), seeds=(0,), steps=4)
    with pytest.raises(ConfigError):
        build_report(ExperimentInfo("x", "components"), runs, curves, tmp_path / "out", formats="gif")
    assert not (tmp_path / "out").exists()


def test_an_earlier_report_is_replaced_as_a_whole(tmp_path):
    runs, curves = synthetic_frames("curves", sizes=("nano",), seeds=(0,), steps=4, failures=False)
    out = tmp_path / "rep"
    build_report(ExperimentInfo("x", "curves"), runs, curves, out, formats="png,pdf")
    assert (out / "figures" / "test_perplexity.pdf").exists()
    build_report(ExperimentInfo("x", "curves"), runs, curves, out, formats="png")
    assert not (out / "figures" / "test_perplexity.pdf").exists()  # the old report's files went with it
    assert (out / "index.md").exists() and (out / "figures" / "test_perplexity.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no temporary folders left


def test_no_finished_runs_is_an_error(tmp_path):
    runs = runs_frame([_record(0, None, state="running"), _record(1, None, state="queued")])
    with pytest.raises(NoResults) as info:
        build_report(ExperimentInfo("empty", "components"), runs, None, tmp_path / "out")
    assert "no finished runs" in str(info.value) and "1 running" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_report_of_runs_that_all_failed_lists_them_with_their_reasons(tmp_path):
    """It used to refuse ("no finished runs yet"), hiding why every run had failed."""
    failed = _record(1, None, state="failed")
    failed["error"] = "RuntimeError: CUDA out of memory"
    runs = runs_frame([_record(0, None, state="running"), failed])
    result = build_report(ExperimentInfo("allfailed", "components"), runs, None, tmp_path / "out", formats="png")
    md = result.index_md.read_text()
    assert "no run has a usable result" in md and "failed: RuntimeError: CUDA out of memory" in md
    assert not result.figures


# -- Akima optimum -----------------------------------------------------------------------------------------


def test_akima_recovers_the_minimum_of_a_quadratic_in_log_lr():
    # Akima's slopes are exact for a quadratic on equally spaced points (central differences),
    # so the interpolant is the quadratic itself: minimum at lr = 0.003, value 7.
    c = math.log(0.003)
    values = [3.0 * (math.log(lr) - c) ** 2 + 7.0 for lr in LRS]
    opt = akima_optimum(LRS, values)
    assert opt.method == "akima" and not opt.at_edge
    assert opt.lr == pytest.approx(0.003, rel=1e-3)
    assert opt.value == pytest.approx(7.0, abs=1e-6)
    assert opt.value < min(values)  # the interpolated optimum beats every sample


def test_akima_close_for_a_smooth_non_polynomial():
    c = math.log(0.003)
    opt = akima_optimum(LRS, [math.cosh(math.log(lr) - c) for lr in LRS])
    assert opt.lr == pytest.approx(0.003, rel=0.03)
    assert opt.value == pytest.approx(1.0, abs=1e-3)


def test_akima_minimum_at_a_sample_point():
    # ppl = 10 + |k| at lr = 0.002 * 2^k: Akima's slope at k=0 is 0 (both weights vanish), and on
    # [0, 1] the Hermite cubic is 10 + 2s^2 - s^3 >= 10, so the minimum is the sample (0.002, 10).
    values = [10.0 + abs(k) for k in (-2, -1, 0, 1, 2)]
    opt = akima_optimum(LRS, values)
    assert opt.lr == pytest.approx(0.002, rel=1e-12)
    assert opt.value == pytest.approx(10.0, abs=1e-12)


def test_akima_edge_and_too_few_points():
    assert akima_optimum(LRS, [5, 4, 3, 2, 1]).at_edge
    few = akima_optimum([0.001, 0.004], [3.0, 2.0])
    assert few.method == "best sampled" and few.lr == pytest.approx(0.004) and few.value == 2.0
    # repeated learning rates are averaged
    rep = akima_optimum([0.001, 0.001, 0.002, 0.004], [3.0, 5.0, 2.0, 4.0])
    assert rep.value <= 2.0 + 1e-12
    with pytest.raises(ValueError):
        akima_optimum([0.001, -1.0, 0.1], [1.0, 2.0, 3.0])


def test_lr_sweep_table_uses_the_akima_optimum():
    from cemctl.report.aggregate import series_labels

    runs, curves = synthetic_frames("lr_sweep", sizes=("nano",), seeds=(0, 1, 2), failures=False,
                                    single_seed_variant=False)
    table = get_figure_kind("lr_sweep")(runs, curves).tables[0].frame
    agg = aggregate_seeds(runs)
    agg = agg.assign(variant=series_labels(agg, ["train.lr", "model.size"]))  # the figure's one labelling path
    for row in table.to_dict("records"):
        sub = agg[agg["variant"].eq(row["variant"])].sort_values("train.lr")
        expect = akima_optimum(sub["train.lr"].tolist(), sub["mean"].tolist())
        assert row["optimal lr"] == pytest.approx(expect.lr) and row["optimal test ppl"] == pytest.approx(expect.value)
    # the synthetic optima: 0.002 for Llama, 0.004 for full CEM
    by_variant = dict(zip(table["variant"], table["optimal lr"]))
    assert by_variant["Llama"] == pytest.approx(0.002, rel=0.15)
    assert by_variant["full CEM"] == pytest.approx(0.004, rel=0.15)  # the fewest keys that tell the two apart


# -- seed statistics ---------------------------------------------------------------------------------------


def test_seed_aggregation_mean_and_sample_std():
    records = [_record(s, v) for s, v in zip((0, 1, 2), (10.0, 12.0, 14.0))]
    records += [_record(0, 20.0, **{"model.attention": "cem"})]
    records += [_record(7, 99.0, state="failed"), _record(8, float("nan"))]  # never counted
    runs = runs_frame(records)
    agg = aggregate_seeds(runs).set_index("variant")
    llama = agg.loc["Llama"]
    assert llama["n"] == 3 and llama["seeds"] == "0,1,2"
    assert llama["mean"] == pytest.approx(12.0)
    assert llama["std"] == pytest.approx(2.0)  # sqrt(((-2)^2 + 0 + 2^2) / (3 - 1)), ddof=1
    assert (llama["min"], llama["max"]) == (10.0, 14.0)
    cem = agg.loc["CEM attention"]  # named by the one labelling path: what tells it from Llama
    assert cem["n"] == 1 and math.isnan(cem["std"]) and cem["mean"] == 20.0
    pop = aggregate_seeds(runs, ddof=0).set_index("variant").loc["Llama"]
    assert pop["std"] == pytest.approx(math.sqrt(8.0 / 3.0))


def test_baselines_match_same_dims_and_training_setup():
    records = [_record(0, 10.0, **{"model.size": size, "train.lr": lr}) for size in ("nano", "micro")
               for lr in (0.001, 0.002)]
    records += [_record(0, 11.0, **{"model.size": "micro", "train.lr": 0.002, "model.mlp": "cem"})]
    agg = aggregate_seeds(runs_frame(records))
    base = match_baselines(agg)
    cem = agg.index[agg["role"].eq("mlp")][0]
    b = agg.loc[base[cem]]
    assert b["role"] == "llama" and b["model.size"] == "micro" and b["train.lr"] == 0.002


@pytest.mark.parametrize("llama_lrs", [(0.002, 0.004), (0.004,)])
def test_a_variant_pairs_only_with_the_llama_of_its_own_training_setup(llama_lrs):
    """Issue 32: a run starting attention at RMSNorm(h) at lr 0.002 was paired with a Llama at lr 0.004 when no Llama
    ran at 0.002 (the fallback 'same dims, any training setup'). Now: the same setup, or no pairing and a note."""
    from cemctl.report.aggregate import unpaired_reasons
    from cemctl.report.figures.components import render

    cem = {"model.attention": "cem", "model.attn_start": "norm", "train.lr": 0.002}
    records = [_record(s, 20.0 + s, **cem) for s in (0, 1)]
    records += [_record(s, 10.0 * lr / 0.002 + s, **{"train.lr": lr}) for lr in llama_lrs for s in (0, 1)]
    runs = runs_frame([{**r, "params_non_embedding": 800} for r in records])
    agg = aggregate_seeds(runs)
    base = match_baselines(agg)
    row = agg.index[agg["role"].eq("attention")][0]
    parts = render(runs)
    table = parts.tables[0].frame
    cem_row = table[table["variant"].str.startswith("CEM attention")].iloc[0]
    if 0.002 in llama_lrs:
        assert agg.at[base[row], "train.lr"] == 0.002
        assert cem_row["ppl - Llama"] == pytest.approx(20.5 - 10.5)
        assert not [n for n in parts.notes if "not compared with Llama" in n]
    else:
        assert base[row] == -1  # never the Llama of another learning rate
        assert cem_row["ppl - Llama"] is None or math.isnan(cem_row["ppl - Llama"])
        assert unpaired_reasons(agg, base)[row] == "no Llama run with the same settings (lr 0.002 here, Llama at 0.004)"
        notes = [n for n in parts.notes if "not compared with Llama" in n]
        assert len(notes) == 1 and "lr 0.002 here, Llama at 0.004" in notes[0] and "CEM attention" in notes[0], notes
    parts.figures[0].figure.clear()


def test_a_marks_note_names_two_marked_arms_apart():
    """Issue 32: the [[mark]] note named each run by the paper's variant and size, so two marked arms that differ in
    another key ran together into one name."""
    from cemctl.report.build import mark_notes

    records = [_record(s, 10.0, **{"model.attention": "cem", "model.attn_precond": "diag_lowrank",
                                   "model.attn_precond_rank": rank}) for rank in (4, 16) for s in (0, 1)]
    records.append(_record(0, 9.0))
    runs = runs_frame(records).assign(marks=["beyond the paper"] * 4 + [""])
    (note,) = mark_notes(runs)
    label, _, arms = note.partition(": ")
    assert label == "beyond the paper"
    assert arms.split("; ") == ["CEM attention (attn_precond_rank=4)", "CEM attention (attn_precond_rank=16)"], note


def test_problem_runs_give_reasons():
    records = [_record(0, 10.0), _record(1, None, state="failed"), _record(2, None, state="running"),
               {**_record(3, None, state="diverged"), "diverged_step": 5, "error": "non-finite loss inf"}]
    records[1]["error"] = "Traceback (most recent call last):\n  ...\nValueError: boom"
    problems = problem_runs(runs_frame(records), planned_run_ids=[records[0]["run_id"], "ffffffffffff"])
    reasons = dict(zip(problems["state"], problems["reason"]))
    assert reasons["failed"] == "failed: ValueError: boom"
    assert reasons["diverged"] == "diverged at step 5: non-finite loss inf"
    assert reasons["running"].startswith("no result yet (state running)")
    assert "not in the database" in reasons["missing"]
    assert len(problems) == 4


# -- GP table ----------------------------------------------------------------------------------------------


def test_gp_table_mean_std_and_best_t():
    gp = pd.DataFrame({"kernel": ["rbf"] * 4 + ["gibbs"] * 2, "T": [1, 1, 4, 4, 1, 8], "seed": [0, 1, 0, 1, 0, 0],
                       "test_rmse": [0.5, 0.7, 0.2, 0.4, 0.9, 0.3], "params": 10, "flops": [1, 1, 4, 4, 1, 8]})
    table = rmse_table(gp).set_index(["kernel", "T"])
    assert table.loc[("rbf", 1), "test RMSE (mean)"] == pytest.approx(0.6)
    assert table.loc[("rbf", 1), "test RMSE (s.d.)"] == pytest.approx(math.sqrt(0.02))
    assert math.isnan(table.loc[("gibbs", 8), "test RMSE (s.d.)"])
    assert table.loc[("rbf", 4), "best T"] and not table.loc[("rbf", 1), "best T"]
    assert table.loc[("gibbs", 8), "best T"]


def test_gp_frame_from_runs_columns():
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "state": ["done", "done", "failed"],
                         "gp.kernel": ["rbf", "gibbs", "rbf"], "model.mlp_steps": [2, 4, 8],
                         "train.seed": [0, 0, 0], "test_rmse": [0.1, 0.2, None], "params_total": [5, 5, 5],
                         "flops": [1.0, 2.0, 3.0]})
    gp = gp_frame(runs)
    assert list(gp.columns) == ["kernel", "T", "seed", "test_rmse", "params", "flops", "setting"]
    assert gp["kernel"].tolist() == ["rbf", "gibbs"] and gp["T"].tolist() == [2, 4]


# -- tables ------------------------------------------------------------------------------------------------


def test_tables_round_trip_through_csv(tmp_path):
    runs, curves = synthetic_frames("components", sizes=("nano", "micro"), seeds=(0, 1, 2))
    table = get_figure_kind("components")(runs, curves).tables[0].frame
    assert table["test ppl (s.d.)"].isna().any()  # a single-seed row: NaN must survive
    paths = write_table(table, tmp_path, "components", caption="a caption with 50% and x_1")
    back = read_table_csv(paths["csv"])
    pd.testing.assert_frame_equal(back, table, check_dtype=False)
    md = paths["md"].read_text().splitlines()
    assert len(md) == len(table) + 2 and md[0].startswith("| size | variant |")
    tex = paths["tex"].read_text()
    assert r"\begin{tabular}" in tex and r"50\%" in tex and r"x\_1" in tex
    assert tex.count(r"\\") == len(table) + 1


def test_markdown_and_latex_escape_cells():
    frame = pd.DataFrame({"a|b": ["x|y", "p_q"], "v": [1.23456789, float("nan")], "n": [3, 4]})
    md = to_markdown(frame)
    assert "a\\|b" in md and "x\\|y" in md and "| 1.235 |" in md
    tex = to_latex(frame)
    assert r"p\_q" in tex and "{lrr}" in tex


# -- the CLI stays light -----------------------------------------------------------------------------------


def test_report_command_import_is_light():
    code = ("import sys, cemctl.commands.report, cemctl.report, cemctl.report.figures;"
            "heavy = [m for m in ('pandas', 'matplotlib', 'scipy', 'torch') if m in sys.modules];"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_numbers_in_figures_come_from_the_data():
    # the components table's difference to Llama is the difference of the seed means
    runs, curves = synthetic_frames("components", sizes=("nano",), seeds=(0, 1, 2), failures=False)
    from cemctl.report.aggregate import series_labels

    table = get_figure_kind("components")(runs, curves).tables[0].frame.set_index("variant")
    agg = aggregate_seeds(runs)
    agg = agg.assign(variant=series_labels(agg, ["model.size"])).set_index("variant")
    diff = agg.loc["CEM MLP", "mean"] - agg.loc["Llama", "mean"]
    assert table.loc["CEM MLP", "ppl - Llama"] == pytest.approx(diff)
    assert np.isclose(table.loc["Llama", "ppl - Llama"], 0.0)


def test_a_reuse_setting_without_t1_at_a_size_has_no_gain_bar_not_a_zero_one():
    """Regression (docs/findings' fig4, 2026-11-27): an lr profile plans reuse T=2 at rates where reuse T=1 is not
    run, and the gain panel drew each of those settings a bar at 0 with an error bar: a gain nobody measured. A
    setting that lacks T=1 or T=2 at a size has no bar; a note names it."""
    from matplotlib.patches import Rectangle

    runs, curves = synthetic_frames("reuse_vs_recursion", sizes=("nano", "micro"), seeds=(0, 1), failures=False)
    t1_gone = (runs["model.size"] == "micro") & (
        ((runs["model.attention"] == "reuse") & (runs["model.attn_steps"] == 1))
        | ((runs["model.attention"] == "llama") & (runs["model.mlp"] == "llama")))
    parts = get_figure_kind("reuse_vs_recursion")(runs[~t1_gone], curves)
    fig = next(f.figure for f in parts.figures if f.name == "reuse_vs_recursion_attention")
    table = next(t.frame for t in parts.tables if t.name == "reuse_vs_recursion_attention")
    gain_ax = next(ax for ax in fig.axes if ax.get_title() == "gain (higher is better)")
    bars = [b for b in gain_ax.patches if isinstance(b, Rectangle)]
    measured = table["gain (ppl T=1 - T=2)"].notna()
    assert (~measured).sum() == 1 and len(bars) == measured.sum() == len(table) - 1
    assert sorted(round(b.get_height(), 9) for b in bars) == \
        sorted(round(v, 9) for v in table.loc[measured, "gain (ppl T=1 - T=2)"])
    assert any("lacks T=1" in n and "micro" in n for n in parts.notes)


# -- the experiment files -----------------------------------------------------------------------------------

GRID_FIGURES = {
    "demo": {"training_curves", "test_perplexity", "metric"},
    "fig2a": {"components", "training_curves", "metric"},
    "fig2b": {"components", "training_curves", "metric"},
    "fig2c": {"recursion_attention", "training_curves", "metric"},
    "fig2d": {"recursion_mlp", "training_curves", "metric"},
    "fig3a": {"lr_sweep", "training_curves", "metric"},
    "fig3b": {"kq_diagonal", "training_curves", "metric"},
    "fig3c": {"reuse_vs_recursion_mlp", "training_curves", "metric"},
    "fig4": {"reuse_vs_recursion_attention", "training_curves", "metric"},
    "gp": {"gp_rmse", "training_curves", "metric"},
    "t2_ablation": {"ablation", "training_curves", "metric"},
}
# Grids whose every arm runs at several learning rates (own-optimum profiles) at a scale: their figures show each arm
# at one rate, and the profiles get a figure of their own (`cemctl.report.lr_choice`). Not fig3a (its kind draws the
# rate) nor t2_ablation (only the arms of its claims have profiles: the others ran at one rate).
PROFILED = {"cpu": {"fig2a", "fig2b", "fig2c", "fig2d", "fig3b", "fig3c", "fig4"}}


@pytest.mark.parametrize("scale", [pytest.param("tiny", marks=pytest.mark.slow), "cpu",
                                   pytest.param("gpu", marks=pytest.mark.slow),
                                   pytest.param("paper", marks=pytest.mark.slow)])
def test_every_experiment_file_has_its_figures(scale):
    from pathlib import Path

    from cemctl.grid.expand import load_grid
    from cemctl.report.build import render_parts
    from tests.synthetic import synthetic_from_grid

    grids = sorted(Path(__file__).resolve().parents[1].glob("experiments/*.toml"))
    assert {g.stem for g in grids} >= set(GRID_FIGURES)
    from cem_core.errors import ConfigError as _ConfigError

    for grid in grids:
        try:
            plan = load_grid(grid, scale)
        except _ConfigError as e:
            if e.key == "--scale":  # a grid without this scale (the demo has no paper scale)
                continue
            raise
        runs, curves = synthetic_from_grid(str(grid), scale, failures=False)
        parts = render_parts(ExperimentInfo(plan.name, plan.figure), runs, curves)
        names = {f.name for f in parts.figures}
        if grid.stem in GRID_FIGURES:
            profiles = {"lr_profiles"} if grid.stem in PROFILED.get(scale, ()) else set()
            assert names == GRID_FIGURES[grid.stem] | profiles, (grid.stem, scale)
        assert parts.tables and all(not t.frame.empty for t in parts.tables), grid.stem
        assert not [n for n in parts.notes if "no Llama baseline" in n], (grid.stem, parts.notes)
        for note in [n for n in parts.notes if "not compared with Llama" in n]:  # a point of an lr profile only
            assert "no Llama run with the same settings (lr " in note, (grid.stem, scale, note)
        for f in parts.figures:
            f.figure.clear()


def test_select_runs_by_config_values():
    from cemctl.records.where import filter_frame, parse_where

    def select_runs(frame, where):
        return filter_frame(frame, parse_where(where))

    runs, _ = synthetic_frames("lr_sweep", sizes=("nano", "micro"), seeds=(0,), failures=False,
                               single_seed_variant=False)
    sel = select_runs(runs, ["model.size=nano", "train.lr=0.002"])
    assert len(sel) == 2 and set(sel["model.attention"]) == {"llama", "cem"}
    assert set(select_runs(runs, ["model.attention=cem"])["model.mlp"]) == {"cem"}
    assert select_runs(runs, ["train.lr=0.003"]).empty
    with pytest.raises(ConfigError) as info:
        select_runs(runs, ["model.sise=nano"])
    assert info.value.key == "--where" and "unknown field 'model.sise'" in str(info.value)
    with pytest.raises(ConfigError):
        select_runs(runs, ["model.size"])


def test_ablation_table_names_each_arm_and_pairs_t2_with_t1_by_seed():
    from cemctl.report.figures.ablation import render

    runs, _ = synthetic_frames("ablation", sizes=("nano",), seeds=(0, 1, 2), failures=False, single_seed_variant=False)
    parts = render(runs)
    table = parts.tables[0].frame.set_index("arm")
    assert set(table.index) == {"defaults", "attn_step_size=0.5", "no preconditioner"}
    cem = runs[runs["model.attention"].eq("cem")]
    for arm, sel in (("defaults", {"model.attn_step_size": 1.0, "model.attn_precond": "diag_lowrank"}),
                     ("attn_step_size=0.5", {"model.attn_step_size": 0.5})):
        mask = cem["model.attn_step_size"].eq(sel["model.attn_step_size"])
        if "model.attn_precond" in sel:
            mask &= cem["model.attn_precond"].eq(sel["model.attn_precond"])
        t1 = cem[mask & cem["model.attn_steps"].eq(1)].set_index("train.seed")["test_loss"]
        t2 = cem[mask & cem["model.attn_steps"].eq(2)].set_index("train.seed")["test_loss"]
        assert table.at[arm, "T2 - T1 (mean)"] == pytest.approx((t2 - t1).mean())
        assert table.at[arm, "pairs"] == 3 and table.at[arm, "T2 - T1 (95% CI +-)"] > 0
    assert table["Llama loss"].notna().all()
    parts.figures[0].figure.clear()


@pytest.mark.parametrize("tokenizer,unit", [("byte", "nats/byte"), ("bpe", "nats/token")])
def test_every_loss_axis_names_the_unit_of_the_runs_tokenizer(tokenizer, unit):
    """Issue 32: the ablation figure wrote 'nats per token' on its axis for byte-tokenizer runs too."""
    from cemctl.report.build import render_parts

    runs, curves = synthetic_frames("ablation", sizes=("nano",), seeds=(0, 1), failures=False, steps=6)
    runs = runs.assign(**{"data.tokenizer": tokenizer})
    parts = render_parts(ExperimentInfo("units", "ablation"), runs, curves)
    labels = {p.name: [lab for ax in p.figure.axes for lab in (ax.get_xlabel(), ax.get_ylabel()) if "loss" in lab]
              for p in parts.figures}
    assert set(labels) == {"metric", "training_curves", "ablation"}
    for name, found in labels.items():
        assert found and all(lab.endswith(f"({unit})") for lab in found), (name, found)
    for p in parts.figures:
        p.figure.clear()


def test_fig2a_report_draws_the_papers_arm_and_the_shared_diagonal_arm_labelled():
    from pathlib import Path

    from cemctl.report.figures.components import render
    from tests.synthetic import synthetic_from_grid

    grid = Path(__file__).resolve().parents[1] / "experiments" / "fig2a.toml"
    runs, _ = synthetic_from_grid(str(grid), "cpu", failures=False)
    runs = runs[runs["train.lr"] == 0.004]  # the cpu grid's fixed rate (it also holds each arm's lr profile)
    parts = render(runs)
    table = parts.tables[0].frame
    # named by the one key that tells the two CEM arms apart, each value by its own name
    assert set(table["variant"]) == {"Llama", "CEM attention (no diagonal)", "CEM attention (shared diagonal)"}
    fig = parts.figures[0]
    labels = [t.get_text() for t in fig.figure.legends[0].get_texts()]
    assert any(lab.startswith("CEM attention (no diagonal),") for lab in labels)
    assert any(lab.startswith("CEM attention (shared diagonal)") for lab in labels)
    assert "paper's Sec. 4.1 arm" in fig.caption
    fig.figure.clear()


@pytest.mark.parametrize("df", [1, 2, 3, 5, 11, 30, 100, 1000])
@pytest.mark.parametrize("p", [0.5, 0.6, 0.9, 0.975, 0.995, 0.9999, 0.025])
def test_the_t_quantile_without_scipy_is_scipys(p, df):
    from scipy import stats

    from cemctl.report.tdist import t_quantile

    assert t_quantile(p, df) == pytest.approx(float(stats.t.ppf(p, df)), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("df", [1.5, 2, 4.7, 12, 60])
@pytest.mark.parametrize("t", [-40.0, -3.0, -0.5, 0.0, 0.7, 2.5, 9.0, 60.0])
def test_the_t_cdf_without_scipy_is_scipys_in_both_tails(t, df):
    from scipy import stats

    from cemctl.report.tdist import t_cdf

    assert t_cdf(t, df) == pytest.approx(float(stats.t.cdf(t, df)), rel=1e-9, abs=1e-300)
    assert t_cdf(-t, df) == pytest.approx(float(stats.t.sf(t, df)), rel=1e-9, abs=1e-300)
