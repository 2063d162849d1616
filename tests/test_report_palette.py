"""The generic figures' colours on a grid of our own: the colour follows the hue series in the metric figure and
the training curves; when the hue gives every arm one colour, the curves colour each arm instead."""

from __future__ import annotations

import matplotlib

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
