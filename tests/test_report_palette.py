"""The generic figures' colours on a grid of our own: the colour follows the hue series in the metric figure and
the training curves; when the hue gives every arm one colour, the curves colour each arm instead."""

from __future__ import annotations

import json

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.colors import to_hex  # noqa: E402

from cemctl.report.arms import with_arms  # noqa: E402
from cemctl.report.generic import Palette, arm_curves, default_x, varying  # noqa: E402
from tests.helpers import tiny_grid  # noqa: E402
from tests.synthetic import synthetic_from_grid  # noqa: E402


def _frames(tmp_path, extra):
    grid = tmp_path / "pal.toml"
    grid.write_text(tiny_grid("pal", extra=extra))
    runs, curves = synthetic_from_grid(str(grid), "tiny", failures=False)
    return with_arms(runs), curves


def _lines(part):
    """(colour, line style, legend label) of each curve drawn (the validation dots have no line)."""
    (ax,) = part.figure.axes
    lines = [ln for ln in ax.get_lines() if ln.get_linestyle() not in ("None", "")]
    labels = [t.get_text() for leg in part.figure.legends for t in leg.get_texts()]
    return [(to_hex(ln.get_color()), ln.get_linestyle()) for ln in lines], labels


def test_curves_of_arms_that_share_one_hue_get_a_colour_each(tmp_path):
    runs, curves = _frames(tmp_path, '"model.attention" = "cem"\n\n[[zip]]\n"model.attn_precond" = ["identity", "diag", "diag_lowrank"]\n')
    palette = Palette(runs, x=default_x(runs, varying(runs)))
    assert len(set(palette.hue_of.values())) == 1  # x is the preconditioner: nothing else varies
    drawn, labels = _lines(arm_curves(runs, curves, palette=palette))
    assert len(drawn) == 3 and len({c for c, _ in drawn}) == 3 and {ls for _, ls in drawn} == {"-"}
    assert len([t for t in labels if "n=2" in t]) == 3 and len(set(labels)) == len(labels)


def test_curves_follow_the_hue_when_it_varies(tmp_path):
    runs, curves = _frames(tmp_path, '"model.attention" = "cem"\n\n[axes]\n"model.attn_steps" = [1, 2]\n'
                           '"model.attn_precond" = ["identity", "diag"]\n')
    palette = Palette(runs, x="model.attn_steps")
    hues = set(palette.hue_of.values())
    assert len(hues) == 2  # the preconditioner colours; the depth is the metric figure's x
    part = arm_curves(runs, curves, palette=palette)
    drawn, _ = _lines(part)
    arms = list(dict.fromkeys(runs["arm"]))
    assert len(drawn) == 4
    for (color, _), arm in zip(drawn, arms):  # the metric figure's colour of the arm's hue
        assert color == to_hex(palette.color[palette.hue_of[arm]])
    assert len(set(drawn)) == 4  # one colour per hue, the line style tells the depths apart


# -- one colour per hue value in every figure of a report (issue 32) --------------------------------------------

# What each figure kind plots on its own axes, panels or markers (never its colour), as the figures draw it.
PLOTTED = {"generic": (), "curves": (), "components": ("model.size",),
           "recursion": ("model.size", "model.attn_steps", "model.mlp_steps"),
           "lr_sweep": ("model.size", "train.lr"), "kq_diagonal": ("model.size", "model.kq_diagonal"),
           "reuse_vs_recursion": ("model.size", "model.attn_steps", "model.mlp_steps"),
           "ablation": ("model.attn_steps", "model.mlp_steps"), "gp_table": ("model.mlp_steps",)}
SIZE_DIMS = ("model.d_model", "model.n_layers", "model.n_heads", "model.d_mlp", "model.context_len")
OWN = """seeds = [0, 1]
[experiment]
name = "own_colours"
x = "model.attn_step_size"
[base]
"model.size" = "nano"
"model.attention" = "cem"
"data.tokenizer" = "byte"
[axes]
"model.attn_step_size" = [0.5, 1.0]
"model.attn_start" = ["h", "norm"]
"""
_SECOND = pytest.mark.slow  # a second grid of a figure kind: the fast tier draws one grid of every kind
REPORTS = [("generic", None), ("curves", "demo"), ("components", "fig2a"), pytest.param("components", "fig2b",
           marks=_SECOND), ("recursion", "fig2c"), pytest.param("recursion", "fig2d", marks=_SECOND),
           ("lr_sweep", "fig3a"), ("kq_diagonal", "fig3b"), ("reuse_vs_recursion", "fig3c"),
           pytest.param("reuse_vs_recursion", "fig4", marks=_SECOND), ("gp_table", "gp"), ("ablation", "t2_ablation")]


def _report(tmp_path, grid):
    """A report as `cemctl report` renders it (synthetic results of every run of a grid file): the runs frame, the
    figures of the generic parts, the figure kind, and the test-time recursion and energy figures."""
    import json as _json
    from pathlib import Path

    import pandas as pd

    from cemctl.grid.expand import load_grid
    from cemctl.grid.spec import options_from_text
    from cemctl.report.build import ExperimentInfo, render_parts, report_palette
    from cemctl.report.figures import energy, test_time

    path = Path(__file__).resolve().parents[1] / "experiments" / f"{grid}.toml" if grid else tmp_path / "own.toml"
    if grid is None:
        path.write_text(OWN)
    scale = "cpu" if grid == "t2_ablation" else "tiny"
    plan = load_grid(str(path), scale)
    runs, curves = synthetic_from_grid(str(path), scale, failures=False)
    runs = with_arms(runs, order=plan.varied)
    info = ExperimentInfo(plan.name, plan.figure, axes=plan.varied, options=options_from_text(plan.text, str(path)))
    report_palette(info, runs)  # as report_experiment does, before the extra figures
    evals, lines = [], []
    for r in runs.to_dict("records"):
        if r.get("task") == "gp":
            continue
        for sub, key in (("attention", "model.attn_steps"), ("mlp", "model.mlp_steps")):
            if r[f"model.{'attention' if sub == 'attention' else 'mlp'}"] != "cem":
                continue
            for t in (1, 2, 4):
                evals.append({"run_id": r["run_id"], "attn_steps": t if sub == "attention" else r["model.attn_steps"],
                              "mlp_steps": t if sub == "mlp" else r["model.mlp_steps"], "eval_steps": t,
                              "sublayer": sub, "test_loss": r["test_loss"] + 0.01 * t, "test_ppl": r["test_ppl"] + t,
                              "test_tokens": 256, "flops_per_token": 1000 * t,
                              "trained_attn_steps": r["model.attn_steps"], "trained_mlp_steps": r["model.mlp_steps"]})
            lines += [{"run_id": r["run_id"], "step": step, "tokens": step * 100, "layer": 0, "sublayer": sub, "t": t,
                       "energy": 1.0 - 0.1 * t, "descent_frac": 0.6} for step in (4, 8) for t in range(3)]
    parts = render_parts(info, runs, curves)
    parts.extend(test_time.render(runs, pd.DataFrame(evals, columns=list(test_time.EVAL_COLUMNS))))
    parts.extend(energy.render(runs, pd.DataFrame(lines)))
    assert _json.dumps(sorted(p.name for p in parts.figures))  # something was drawn
    return runs, info, parts


def _hue_groups(runs, info) -> dict[str, str]:
    """Run id -> its hue value, worked out from the configs alone: every key that varies among the arms but the metric
    figure's x, what the figure kind plots (and the dims a plotted size determines) and the seed."""
    from cem_core.arms import config_of
    from cemctl.report.generic import PALETTE_ATTR

    configs = {r["run_id"]: config_of(r) for r in runs.to_dict("records")}
    text = {rid: {k: json.dumps(v, default=str) for k, v in c.items()} for rid, c in configs.items()}
    keys = {k for c in text.values() for k in c}
    varying = {k for k in keys if len({c.get(k) for c in text.values()}) > 1} - {"train.seed"}
    plotted = {runs.attrs[PALETTE_ATTR].x, *PLOTTED[info.figure]}
    from cemctl.report.build import figure_runs

    if figure_runs(info, runs)[1] is not None:  # each arm drawn at a chosen learning rate: the rate never colours
        plotted.add("train.lr")
    if "model.size" in plotted:
        plotted |= {k for k in SIZE_DIMS if all(len({c[k] for c in text.values() if c["model.size"] == s}) == 1
                                                for s in {c["model.size"] for c in text.values()})}
    hue = sorted(varying - plotted)
    return {rid: json.dumps({k: c.get(k) for k in hue}) for rid, c in text.items()}


def _colours(artist) -> list[tuple]:
    """The colours an artist is drawn in (RGB), but white, black and greys (hollow faces, edges, axes)."""
    from matplotlib.collections import Collection
    from matplotlib.colors import to_rgb
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    found = []
    if isinstance(artist, Line2D):  # what is drawn of it: the line if it has a style, the markers if any
        found = [artist.get_color()] if artist.get_linestyle() not in ("None", "none", "") else []
        if artist.get_marker() not in (None, "None", "none", ""):
            found += [artist.get_markerfacecolor(), artist.get_markeredgecolor()]
    elif isinstance(artist, Collection):
        found = [*artist.get_facecolor(), *artist.get_edgecolor()]
    elif isinstance(artist, Patch):
        found = [artist.get_facecolor()]
    out = []
    for c in found:
        if isinstance(c, str) and c in ("none", "None"):
            continue
        rgb = tuple(round(v, 3) for v in to_rgb(c))
        if max(rgb) - min(rgb) > 0.02:  # not white, black or a grey
            out.append(rgb)
    return out


def _tint_of(colour, base) -> bool:
    """Whether `colour` is `base` mixed with white (a lighter shade of it, or itself)."""
    amounts = [(c - b) / (1 - b) for c, b in zip(colour, base) if b < 0.999]
    return all(-0.01 <= a < 0.99 for a in amounts) and max(amounts) - min(amounts) < 0.02


@pytest.mark.parametrize("kind,grid", REPORTS, ids=[(r.values if hasattr(r, "values") else r)[1] or "own"
                                                    for r in REPORTS])
def test_every_figure_of_a_report_draws_a_hue_value_in_one_colour(tmp_path, kind, grid):
    """Issue 32: the paper figure kinds picked their own colours (Llama blue in the metric figure, pink in
    recursion_attention; 'CEM MLP' orange, then blue). Every artist a figure draws for some runs (read back from the
    figure: `style.RUNS_ATTR` and its colours) is in the colour of their hue value, the same in every figure; two hue
    values never share one."""
    from cemctl.report.style import RUNS_ATTR

    runs, info, parts = _report(tmp_path, grid)
    assert info.figure == kind
    group_of = _hue_groups(runs, info)
    seen: dict[str, list[tuple]] = {}
    for part in parts.figures:
        drawn = part.figure.findobj(lambda a: hasattr(a, RUNS_ATTR))
        assert drawn, f"{part.name}: nothing drawn is tagged with its runs"
        for artist in drawn:
            groups = {group_of[r] for r in getattr(artist, RUNS_ATTR)}
            colours = _colours(artist)
            if not colours:
                continue
            assert len(groups) == 1, (part.name, "one artist for several hue values", groups)
            seen.setdefault(groups.pop(), []).extend((part.name, c) for c in colours)
    bases = {}
    for group, drawn in seen.items():
        curves_only = {name for name, _ in drawn} == {"training_curves"}
        base = min((c for _, c in drawn), key=sum)  # the full colour; the others may be its lighter shades
        off = [(name, c) for name, c in drawn if not _tint_of(c, base)]
        if len(seen) > 1 or not curves_only:
            assert not off, (group, base, off[:5])
        bases[group] = base
    if len(seen) > 1:  # the curves colour each arm apart only when all arms share one hue value
        assert len(set(bases.values())) == len(bases), bases
    names = {p.name for p in parts.figures}
    assert {"metric", "training_curves"} <= names and len(names) >= 3, names
    for part in parts.figures:
        part.figure.clear()


def test_every_frame_derived_from_the_runs_shares_the_one_palette(tmp_path):
    """pandas deep-copies a frame's attrs into each frame derived from it: a copied palette per slice cost a quarter
    of a report's drawing time, and a figure kind colouring from a copy is not the one palette."""
    from cemctl.report.generic import PALETTE_ATTR, palette_of

    runs, _ = _frames(tmp_path, '"model.attention" = "cem"\n\n[axes]\n"model.attn_steps" = [1, 2]\n')
    palette = Palette(runs, x="model.attn_steps")
    runs.attrs[PALETTE_ATTR] = palette
    derived = runs[runs["model.attn_steps"].eq(2)].sort_values("run_id").groupby("arm", sort=False).head(1)
    assert palette_of(derived) is palette and palette_of(runs.copy(deep=True)) is palette


def test_a_figure_saved_in_two_formats_is_laid_out_once(tmp_path):
    """`freeze_layout`: the constrained layout is solved once, and saving png then pdf keeps it."""
    from cemctl.report import style

    fig, (ax,) = style.new_figure()
    ax.set_ylabel("a long label that needs room\non two lines")
    ax.plot([1, 2], [3, 4])
    before = ax.get_position().bounds
    style.freeze_layout(fig)
    laid_out = ax.get_position().bounds
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    assert laid_out != before  # laid out, and not again at each save:
    assert not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    for fmt in ("png", "pdf"):
        fig.savefig(tmp_path / f"f.{fmt}", format=fmt, dpi=150)
        assert ax.get_position().bounds == laid_out
