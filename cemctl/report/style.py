"""Names, colours and plotting helpers shared by every figure of `cemctl report`.

Series are named by `cemctl.records.labels` (the one labelling path); here only how a
value is shown (a preconditioner's spec label, a KQ diagonal's words). Every figure marks seeds the same
way: a filled marker with error bars = mean +- 1 sample standard deviation
(ddof=1) over n >= 2 seeds; a hollow marker = a single seed (n = 1).

Figures are built with `matplotlib.figure.Figure` directly (no pyplot, no global
state, Agg rendering by `savefig`), so reports can be built in any process.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from cem_core.sizes import SIZES

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

KQ_LABELS = {"none": "no diagonal", "shared": "shared diagonal", "per_head": "per-head diagonal"}

# One presentation: what every figure of the report and every chart of the dashboard (`cemctl serve`) draw alike.
# The spread of a mean over seeds is drawn one way everywhere: whiskers (a band) of +-1 sample standard deviation
# (ddof=1), a hollow marker for a single seed; the 95% t interval is a table column (the arms tables), never a
# whisker.
SPREAD_NOTE = "Error bars: mean \u00b1 1 s.d. over seeds (ddof=1); hollow marker: single seed (n=1)"
SPREAD_SHORT = "whiskers: mean \u00b1 1 s.d. over seeds (ddof=1); a hollow marker: a single seed"
SMOOTH_FRACTION = 0.05  # a training curve is drawn as its rolling mean over this fraction of its points (centred)
# A line style (matplotlib's) as the dashboard's dash pattern in pixels: the same series, the same look.
DASHES: dict[str, list[int] | None] = {"-": None, "--": [6, 4], ":": [2, 3], "-.": [8, 3, 2, 3]}
GREY = "#737373"  # a value no arm of the report has

# A figure never picks a colour of its own: the report's palette (`report.generic.Palette`) gives each hue value
# one, the Llama baseline the paper's pink.
LLAMA_COLOR = "#d6458f"
CYCLE = ("#2a6fdb", "#f28e2b", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
# A report's hue colours (`report.generic.Palette`), in the order hue values get them: the cycle, then darker ones
# of other hues for a grid with many (never a lighter shade of one above: those mean "the same value"), grey last.
HUE_COLORS = tuple(c for c in CYCLE if c != "#7f7f7f") + ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
                                                          "#3182bd", "#e6550d", "#31a354", "#756bb1", "#7f7f7f")
SIZE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "<", ">")

# The component swap's keys (what a variant's Llama baseline may differ in) come from the variant specs:
# `cemctl.records.labels.arch_keys` / `pairing_keys`.
DIM_COLUMNS = ("model.size", "model.d_model", "model.n_layers", "model.n_heads", "model.d_mlp",
               "model.context_len", "model.vocab_size")


def mean_sd(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, sample s.d. (ddof=1; NaN below two values), n) of the finite values: the whiskers' rule."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(vals)
    if not n:
        return math.nan, math.nan, 0
    mean = sum(vals) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else math.nan
    return mean, sd, n


def smooth_window(points: int, fraction: float = SMOOTH_FRACTION) -> int:
    """The rolling window of a curve of `points` points: `fraction` of them (at least 1; 0: no smoothing)."""
    return max(1, int(points * fraction + 1e-9))


def lighter(color: str, amount: float) -> tuple[float, float, float]:
    """A '#rrggbb' colour mixed with white (amount 0: itself, 1: white), as an RGB triple in [0, 1]."""
    c = color.lstrip("#")
    return tuple(v + (1 - v) * amount for v in (int(c[i:i + 2], 16) / 255 for i in (0, 2, 4)))  # type: ignore[return-value]


def hex_of(color: Any) -> str:
    """A colour as the dashboard writes it ('#rrggbb'): a '#rrggbb' string, an RGB triple in [0, 1], or GREY for
    anything else (matplotlib's '0.45')."""
    if isinstance(color, str):
        return color if color.startswith("#") and len(color) == 7 else GREY
    return "#" + "".join(f"{round(min(1.0, max(0.0, float(v))) * 255):02x}" for v in list(color)[:3])


def _get(row: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = row.get(key, default) if hasattr(row, "get") else default
    if isinstance(value, float) and math.isnan(value):
        return default
    return value


def _int(value: Any, default: int = 1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _family(registry: Any, name: Any) -> str:
    """A variant's family from its spec (`cem_core.variants`): baseline, cem, reuse, or its own name."""
    try:
        return registry.spec(str(name)).family
    except Exception:  # noqa: BLE001 - a name no spec knows (a plugin not loaded here): shown by name
        return str(name)


def role(row: Mapping[str, Any]) -> str:
    """Which comparison a run belongs to, from its variants' families (cem_core.spec): llama | attention | mlp |
    full | attention_reuse | mlp_reuse | other."""
    from cem_core.variants import ATTENTION, MLPS

    attn = _family(ATTENTION, _get(row, "model.attention", "llama"))
    mlp = _family(MLPS, _get(row, "model.mlp", "llama"))
    return {("baseline", "baseline"): "llama", ("cem", "baseline"): "attention", ("baseline", "cem"): "mlp",
            ("cem", "cem"): "full", ("reuse", "baseline"): "attention_reuse",
            ("baseline", "reuse"): "mlp_reuse"}.get((attn, mlp), "other")


def _label(registry: Any, name: Any) -> str:
    try:
        return registry.spec(str(name)).label
    except Exception:  # noqa: BLE001 - not a registered name here: its own name
        return str(name)


def size_order(sizes: Iterable[Any]) -> list[Any]:
    """Sizes in the order of `cem_core.sizes.SIZES` (unknown names last, alphabetically)."""
    known = list(SIZES)
    uniq = list(dict.fromkeys(sizes))
    return sorted(uniq, key=lambda s: (known.index(s) if s in known else len(known), str(s)))


def sort_by_size(frame: "pd.DataFrame", by: Sequence[str]) -> "pd.DataFrame":
    """`frame` sorted by the columns `by`, its `size` column in the order of the sizes (stable)."""
    order = {s: i for i, s in enumerate(size_order(frame["size"]))}
    return frame.sort_values(list(by), key=lambda c: c.map(order) if c.name == "size" else c,
                             kind="stable").reset_index(drop=True)


def size_marker(size: Any, sizes: Sequence[Any]) -> str:
    ordered = size_order(sizes)
    i = ordered.index(size) if size in ordered else 0
    return SIZE_MARKERS[i % len(SIZE_MARKERS)]


def n_note(ns: Iterable[Any]) -> str:
    """'n=3' or 'n=1-3' for a legend label."""
    values = sorted({_int(n, 0) for n in ns})
    if not values:
        return "n=0"
    return f"n={values[0]}" if len(values) == 1 else f"n={values[0]}\u2013{values[-1]}"


def new_figure(ncols: int = 1, nrows: int = 1, *, panel_w: float = 4.4, panel_h: float = 3.5,
               sharey: bool = False) -> tuple["Figure", list["Axes"]]:
    """A constrained-layout Figure (no pyplot) and its axes as a flat list."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(panel_w * ncols, panel_h * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)
    for ax in axes.ravel():
        ax.grid(True, alpha=0.3, linewidth=0.6)
    return fig, list(axes.ravel())


def freeze_layout(fig: "Figure") -> None:
    """Lay the figure out once (its constrained layout) and keep that layout: each `savefig` after draws without
    solving it again (a report saves every figure as png and pdf; the layout was a third of each save)."""
    if fig.get_layout_engine() is None:
        return
    fig.draw_without_rendering()
    fig.set_layout_engine("none")


def grid_shape(n_panels: int, max_cols: int = 3) -> tuple[int, int]:
    """(ncols, nrows): one row up to `max_cols` panels, else a near-square grid (4 -> 2 x 2)."""
    ncols = n_panels if n_panels <= max_cols else min(max_cols, math.ceil(math.sqrt(n_panels)))
    ncols = max(1, ncols)
    nrows = max(1, math.ceil(n_panels / ncols))
    return ncols, nrows


RUNS_ATTR = "cemctl_runs"  # on what a figure drew for a series: the run ids it stands for


def runs_of(value: Any) -> frozenset[str]:
    """Run ids from a comma-joined text (an aggregated row's `run_ids`), a list of them, or a frame's `run_id`s."""
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(r for r in value.split(",") if r)
    out: set[str] = set()
    for v in value:
        out |= runs_of(v) if isinstance(v, str) else {str(v)}
    return frozenset(out)


def tag(artists: Any, runs: Iterable[str] | None) -> Any:
    """Mark artists (a container's children too) with the runs they stand for (`RUNS_ATTR`), so what a figure drew
    can be read back: which runs, in which colour (the report tests read every figure so)."""
    if runs is None:
        return artists
    from matplotlib.container import Container

    ids = runs_of(runs)
    for artist in artists if isinstance(artists, (list, tuple)) and not isinstance(artists, Container) else [artists]:
        for part in (artist.get_children() if isinstance(artist, Container) else [artist]):
            if part is not None:
                setattr(part, RUNS_ATTR, ids)
    return artists


def plot_seed_points(ax: "Axes", x: Sequence[float], stats: "pd.DataFrame", *, color: str, marker: str = "o",
                     label: str | None = None, line: str | None = "-", markersize: float = 6.5,
                     zorder: float = 3, label_ns: Iterable[Any] | None = None, runs: Iterable[str] | None = None
                     ) -> None:
    """Mean points with +-1 s.d. error bars (n >= 2, filled) or hollow markers (n = 1).

    `stats` has columns mean, std, n (one row per x, same order as `x`). The legend
    label gets the seed counts of `label_ns` (default: these points' n). `runs`: the run
    ids the points stand for (default: the `run_ids` column of `stats`, if any), see `tag`.
    """
    import numpy as np

    if runs is None and "run_ids" in stats.columns:
        runs = runs_of(stats["run_ids"])
    xs = np.asarray(list(x), dtype=float)
    means = stats["mean"].to_numpy(dtype=float)
    stds = np.nan_to_num(stats["std"].to_numpy(dtype=float), nan=0.0)
    ns = stats["n"].to_numpy(dtype=int)
    if line and len(xs) > 1:
        order = np.argsort(xs)
        tag(ax.plot(xs[order], means[order], line, color=color, linewidth=1.4, zorder=zorder - 1), runs)
    multi = ns >= 2
    if multi.any():
        tag(ax.errorbar(xs[multi], means[multi], yerr=stds[multi], fmt=marker, color=color, markersize=markersize,
                        capsize=3, elinewidth=1.1, markeredgecolor=color, zorder=zorder, linestyle="none"), runs)
    if (~multi).any():
        tag(ax.plot(xs[~multi], means[~multi], marker, markerfacecolor="white", markeredgecolor=color,
                    markeredgewidth=1.6, markersize=markersize, linestyle="none", zorder=zorder), runs)
    if label is not None:  # one legend entry per series (hollow when every point is a single seed)
        label_n = list(ns if label_ns is None else label_ns)
        hollow = bool(label_n) and max(int(n) for n in label_n) < 2
        ax.plot([], [], marker, color=color, linestyle=line or "none", markersize=markersize,
                markerfacecolor="white" if hollow else color, markeredgecolor=color,
                label=f"{label}, {n_note(label_n)}")


def baseline_line(ax: "Axes", stats: Mapping[str, Any], *, label: str | None = "Llama",
                  color: str = LLAMA_COLOR, label_ns: Iterable[Any] | None = None) -> None:
    """The Llama baseline as a dashed horizontal line (+-1 s.d. band when n >= 2), in the report's colour of its
    hue (`color`), tagged with its runs (`stats["run_ids"]`)."""
    mean, std, n = float(stats["mean"]), float(stats.get("std", float("nan"))), _int(stats.get("n", 1))
    runs = runs_of(stats.get("run_ids")) if "run_ids" in stats else None
    tag(ax.axhline(mean, linestyle="--", color=color, linewidth=1.4, zorder=1,
                   label=f"{label}, {n_note([n] if label_ns is None else label_ns)}" if label else None), runs)
    if n >= 2 and math.isfinite(std):
        tag(ax.axhspan(mean - std, mean + std, color=color, alpha=0.12, linewidth=0, zorder=0), runs)


def baseline_line_vertical(ax: "Axes", mean: float, std: float, n: int, *, label: str = "Llama",
                           color: str = LLAMA_COLOR, runs: Iterable[str] | None = None) -> None:
    """The Llama reference as a dashed vertical line (+-1 s.d. band when n >= 2), for dot plots."""
    tag(ax.axvline(mean, linestyle="--", color=color, linewidth=1.4, zorder=1, label=f"{label}, {n_note([n])}"), runs)
    if n >= 2 and math.isfinite(std):
        tag(ax.axvspan(mean - std, mean + std, color=color, alpha=0.12, linewidth=0, zorder=0), runs)


def seed_legend_handles(ns: Iterable[Any]) -> list[Any]:
    """Legend proxies explaining filled (n >= 2) and hollow (n = 1) markers, for those present."""
    from matplotlib.lines import Line2D

    values = {_int(n, 0) for n in ns}
    handles = []
    if any(v >= 2 for v in values):
        handles.append(Line2D([], [], marker="o", color="0.3", linestyle="none",
                              label="mean \u00b1 1 s.d. over seeds"))
    if 1 in values:
        handles.append(Line2D([], [], marker="o", markerfacecolor="white", markeredgecolor="0.3",
                              linestyle="none", label="single seed (n=1)"))
    return handles


def figure_legend(fig: "Figure", axes: Sequence["Axes"], ns: Iterable[Any], *, max_cols: int = 4,
                  extra: Sequence[Any] = ()) -> None:
    """One legend for the whole figure, outside the axes (below), de-duplicated by label."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    for h in list(extra) + seed_legend_handles(ns):
        if h.get_label() not in labels:
            handles.append(h)
            labels.append(h.get_label())
    if handles:
        import textwrap

        width_in = fig.get_size_inches()[0]
        longest = max(len(lab) for lab in labels)
        ncols = min(max_cols, len(handles), max(1, int(width_in / max(1.6, 0.075 * longest + 0.5))))
        # a legend never leaves the figure: labels wider than a column wrap onto more lines
        chars = max(18, int(width_in * 72 / (8.5 * 0.55) / ncols) - 6)
        labels = ["\n".join(textwrap.wrap(lab, chars)) or lab for lab in labels]
        lines = [lab.count("\n") + 1 for lab in labels]
        rows = [max(lines[i:i + ncols]) for i in range(0, len(lines), ncols)]
        if sum(rows) > 3:  # a long legend: the figure grows by its height, the axes keep theirs
            w, h = fig.get_size_inches()
            fig.set_size_inches(w, h + 0.19 * (sum(rows) - 3))
        fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=8.5, frameon=False)


def suptitle(fig: "Figure", text: str, *, fontsize: float = 11) -> None:
    """A figure's title, wrapped to the figure's width (a one-panel figure cut a long one at both edges)."""
    import textwrap

    chars = max(20, int(fig.get_size_inches()[0] * 72 / (fontsize * 0.55)))
    fig.suptitle(textwrap.fill(text, chars), fontsize=fontsize)


def lr_axis(ax: "Axes", lrs: Iterable[float], *, fontsize: float = 8.5, rotate_over: int | None = None) -> None:
    """A log learning-rate x axis ticked at exactly the rates run (`rotate_over`: tilt the labels past that many)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    lrs = sorted({float(lr) for lr in lrs})
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(lrs))
    tilt = 45 if rotate_over is not None and len(lrs) > rotate_over else 0
    ax.set_xticklabels([f"{lr:g}" for lr in lrs], fontsize=fontsize, rotation=tilt)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("learning rate (peak, log scale)")


def human_count(value: Any) -> str:
    """1024 -> '1.02k', 6553600 -> '6.55M' (3 significant digits)."""
    v = float(value)
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def params_m(value: Any) -> float:
    return float(value) / 1e6
