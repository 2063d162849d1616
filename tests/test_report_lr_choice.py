"""A report of a grid whose arms ran at several learning rates (own-optimum profiles) draws each arm at one rate:
the lowest mean validation loss among the rates with the arm's full seed count; the profiles get a figure of their
own, the arms table keeps every rate. Before, every (arm, rate) was its own series: fig4 drew fifteen panels."""

from __future__ import annotations

import math

import matplotlib
import pytest

matplotlib.use("Agg")

from cemctl.report.arms import with_arms  # noqa: E402
from cemctl.report.build import ExperimentInfo, build_report, render_parts  # noqa: E402
from cemctl.report.lr_choice import choose, rate_choice  # noqa: E402
from cemctl.report.style import RUNS_ATTR  # noqa: E402
from tests.helpers import tiny_grid  # noqa: E402
from tests.synthetic import synthetic_from_grid  # noqa: E402

PROFILE = """"model.attention" = "cem"
"model.attn_precond" = "diag"

[axes]
"model.attn_steps" = [1, 2]
"train.lr" = [0.001, 0.002, 0.004]
"""


def _runs(tmp_path, extra=PROFILE, figure="recursion"):
    grid = tmp_path / "own.toml"
    grid.write_text(tiny_grid("own", extra=extra, figure=figure))
    runs, curves = synthetic_from_grid(str(grid), "tiny", failures=False)
    return with_arms(runs), curves


def _set(runs, steps, lr, **values):
    """Give every seed of (T, lr) these results."""
    at = runs["model.attn_steps"].eq(steps) & runs["train.lr"].eq(lr)
    for key, value in values.items():
        runs.loc[at, key] = value
    return set(runs.loc[at, "run_id"])


def _drawn(part):
    runs = set()
    for artist in part.figure.findobj(lambda a: hasattr(a, RUNS_ATTR)):
        runs |= set(getattr(artist, RUNS_ATTR))
    return runs


def test_each_arm_is_drawn_at_its_rate_of_lowest_validation_loss_not_test_loss(tmp_path):
    runs, curves = _runs(tmp_path)
    # T=2: validation prefers 0.001, the test loss 0.004 (a choice on test would pick 0.004)
    t2 = _set(runs, 2, 0.001, val_loss=0.50, test_loss=0.80)
    _set(runs, 2, 0.004, val_loss=0.70, test_loss=0.40)
    _set(runs, 2, 0.002, val_loss=0.90, test_loss=0.90)
    t1 = _set(runs, 1, 0.002, val_loss=0.30, test_loss=0.30)
    _set(runs, 1, 0.001, val_loss=0.60, test_loss=0.60)
    _set(runs, 1, 0.004, val_loss=0.60, test_loss=0.60)
    runs["test_ppl"] = runs["test_loss"].map(math.exp)
    runs["in_grid"] = ~runs["run_id"].isin(t1)  # T=1's best rate was planned by an earlier version of the grid
    info = ExperimentInfo("own", "recursion", axes=["model.attn_steps", "train.lr"])
    parts = render_parts(info, runs, curves)
    by_name = {f.name: f for f in parts.figures}
    assert _drawn(by_name["recursion_attention"]) == t1 | t2  # one rate per arm, and the validation's
    legend = [t.get_text() for leg in by_name["recursion_attention"].figure.legends for t in leg.get_texts()]
    assert not any("lr=" in t for t in legend)  # one series, not one per rate
    assert _drawn(by_name["training_curves"]) <= t1 | t2 and _drawn(by_name["metric"]) == t1 | t2
    assert "validation loss" in by_name["recursion_attention"].caption
    assert "figure lr_profiles" in by_name["metric"].caption  # the figure the report has, by its name
    assert _drawn(by_name["lr_profiles"]) == set(runs["run_id"])  # the profiles: every run
    tables = {t.name: t.frame for t in parts.tables}
    chosen = dict(zip(tables["learning_rates"]["arm"].str.contains("attn_steps=2"), tables["learning_rates"]["chosen lr"]))
    assert chosen == {True: 0.001, False: 0.002}
    table = tables["learning_rates"].set_index("chosen lr")
    assert table.loc[0.001, "at an end"] == "low" and table.loc[0.001, "next best lr"] == 0.004
    assert table.loc[0.002, "in the grid"].startswith("no") and table.loc[0.001, "in the grid"] == "yes"
    assert table.loc[0.001, "mean at chosen"] == pytest.approx(0.50) and table.loc[0.001, "next best mean"] == pytest.approx(0.70)
    assert len(tables["arms"]) == 6  # every (arm, rate) in the arms table


def test_the_report_writes_the_profiles_and_the_choice(tmp_path):
    runs, curves = _runs(tmp_path)
    result = build_report(ExperimentInfo("own", "recursion"), runs, curves, tmp_path / "out", formats="png", dpi=50)
    names = {p.name for p in result.figures}
    assert {"lr_profiles.png", "recursion_attention.png"} <= names
    text = (tmp_path / "out" / "tables" / "learning_rates.csv").read_text()
    assert "validation loss" in text and text.count("\n") == 3  # a header and the two arms


def test_a_rate_with_fewer_finished_seeds_cannot_win():
    lr, by, n, means = choose({0.001: [(1.0, 1.0), (1.1, 1.1), (1.2, 1.2)], 0.002: [(0.1, 0.1)],
                               0.004: [(0.9, 0.9), (1.0, 1.0), (1.0, 1.0)]})
    assert (lr, by, n) == (0.004, "validation loss", 3) and means[0.004] == pytest.approx(2.9 / 3)
    assert set(means) == {0.001, 0.004}  # the one-seed rate is no candidate
    # no validation loss: chosen by the metric, and said so
    lr, by, _, _ = choose({0.001: [(None, 2.0)], 0.002: [(None, 1.0)]})
    assert (lr, by) == (0.002, "metric (no validation loss)")


def test_nothing_is_chosen_when_the_figure_shows_the_rate_or_no_arm_has_a_profile(tmp_path):
    runs, _ = _runs(tmp_path)
    from cemctl.grid.spec import ReportOptions
    from cemctl.report.build import figure_runs

    def chosen(frame, figure="recursion", **options):
        return figure_runs(ExperimentInfo("own", figure, options=ReportOptions(**options)), frame)[1]

    assert chosen(runs) is not None
    assert chosen(runs, "lr_sweep") is None  # the kind draws the rate
    assert chosen(runs, x="train.lr") is None and chosen(runs, hue=("train.lr",)) is None  # the grid draws it
    assert rate_choice(runs, metric="test_loss", drawn=["train.lr"]) is None
    one = runs[runs["train.lr"].eq(0.002)]
    assert chosen(one) is None  # one rate each: nothing to choose
    # one arm at one rate beside arms tuned over several: every rate is drawn as it ran (no tuned-vs-untuned figure)
    mixed = runs[~(runs["model.attn_steps"].eq(1) & ~runs["train.lr"].eq(0.002))]
    assert chosen(mixed) is None
    # a rate that has not finished is not a profile yet
    unfinished = runs.copy()
    unfinished.loc[~unfinished["train.lr"].eq(0.002), "state"] = "running"
    assert chosen(unfinished) is None
