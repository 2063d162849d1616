"""Tables that fit the terminal (`cemctl status`, `cemctl plan`, `cemctl launch`, `cemctl compare`).

    cols = [Column("run", "run", required=True), Column("model.lr", "lr", priority=1), ...]
    rows = [{"run": Cell("3fa2c1d0"), "model.lr": Cell("0.002"), ...}, ...]
    layout = fit(cols, rows, width=80)       # which columns, how wide; the rest in layout.hidden
    text = render_plain(layout, rows)         # pipes and files; render_rich(...) for a terminal

A column is shown when it fits, in `priority` order (lower first): `required` columns
always (never cut), then the others at their natural width, or cut to no less than
`shrink_to` characters with an ellipsis; once one did not fit, no less important
column takes its place (but a shrinkable one may take what is left). Display order is the order of `columns`.
Optional columns with no value in any row are left out. `width=None` shows every
column at its natural width (a plain aligned table for pipes and files). Cells are
already formatted strings (`cemctl.commands.views.formats`); styles are rich style
names, used only on a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from rich.text import Text

GAP = 2  # spaces between columns
ELLIPSIS = "\u2026"


@dataclass(frozen=True)
class Column:
    key: str  # the name --columns and --sort use
    header: str
    priority: int = 5
    align: str = "left"  # left | right
    required: bool = False
    shrink_to: int = 0  # > 0: may be cut to this many characters (with an ellipsis) to fit


@dataclass(frozen=True)
class Cell:
    text: str
    style: str = ""


@dataclass
class Layout:
    columns: list[tuple[Column, int]]  # shown, in display order, with their widths
    hidden: list[Column] = field(default_factory=list)  # optional columns left out for lack of room
    width: int | None = None


def _text(row: dict[str, Cell], key: str) -> str:
    cell = row.get(key)
    return cell.text if cell is not None else ""


def line_width(widths: Iterable[int]) -> int:
    widths = list(widths)
    return sum(widths) + GAP * max(0, len(widths) - 1)


def natural_width(column: Column, rows: Sequence[dict[str, Cell]]) -> int:
    return max([len(column.header)] + [len(_text(r, column.key)) for r in rows])


def fit(columns: Sequence[Column], rows: Sequence[dict[str, Cell]], width: int | None, *,
        keep_empty: bool = False) -> Layout:
    """Choose and size the columns for a line of `width` characters (None: all, natural widths)."""
    present = [c for c in columns if c.required or keep_empty or any(_text(r, c.key) for r in rows)]
    natural = {c.key: natural_width(c, rows) for c in present}
    if width is None:
        return Layout([(c, natural[c.key]) for c in present], [], None)
    chosen = {c.key: natural[c.key] for c in present if c.required}
    hidden: list[Column] = []
    missed_at: int | None = None  # the priority of the first column that did not fit
    for c in sorted((c for c in present if not c.required), key=lambda c: c.priority):
        room = width - line_width(chosen.values()) - (GAP if chosen else 0)
        if missed_at is not None and c.priority > missed_at and not c.shrink_to:
            hidden.append(c)  # never a less important column in the place of a more important one
        elif natural[c.key] <= room:
            chosen[c.key] = natural[c.key]
        elif c.shrink_to and room >= min(c.shrink_to, natural[c.key]):
            chosen[c.key] = room
        else:
            hidden.append(c)
            missed_at = c.priority if missed_at is None else missed_at
    shown = [(c, chosen[c.key]) for c in present if c.key in chosen]
    return Layout(shown, [c for c in present if c in hidden], width)


def column_blocks(fixed: Column, columns: Sequence[Column], rows: Sequence[dict[str, Cell]],
                  width: int | None) -> list[list[Column]]:
    """`columns` split, in order, into blocks that each fit `width` beside `fixed` at their natural widths (a
    table too wide for the terminal printed as several, one under the other, each with the `fixed` column);
    a column too wide even alone is a block of its own (`fit` then cuts it). `width=None`: one block."""
    if width is None or not columns:
        return [list(columns)]
    blocks: list[list[Column]] = [[]]
    used = natural_width(fixed, rows)
    for c in columns:
        w = natural_width(c, rows)
        if blocks[-1] and used + GAP + w > width:
            blocks.append([])
            used = natural_width(fixed, rows)
        blocks[-1].append(c)
        used += GAP + w
    return blocks


def _cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS if width > 0 else ""


def _pad(text: str, width: int, align: str) -> str:
    text = _cut(text, width)
    return text.rjust(width) if align == "right" else text.ljust(width)


def _line_cells(layout: Layout, row: dict[str, Cell] | None) -> list[tuple[str, str]]:
    """(padded text, style) per shown column; `row=None` gives the header."""
    out = []
    for c, w in layout.columns:
        if row is None:
            out.append((_pad(c.header, w, c.align), "bold"))
        else:
            cell = row.get(c.key) or Cell("")
            out.append((_pad(cell.text, w, c.align), cell.style))
    return out


def render_plain(layout: Layout, rows: Iterable[dict[str, Cell]]) -> list[str]:
    """Header, a rule, one line per row; no styles (pipes, files, logs)."""
    lines = [(" " * GAP).join(t for t, _ in _line_cells(layout, None)).rstrip()]
    lines.append((" " * GAP).join("-" * w for _, w in layout.columns))
    lines += [(" " * GAP).join(t for t, _ in _line_cells(layout, r)).rstrip() for r in rows]
    return lines


def render_rich(layout: Layout, rows: Iterable[dict[str, Cell]]) -> "Text":
    """The same lines as rich Text with the cells' styles (a terminal). Never re-wrapped by rich: the layout chose
    the widths (a line rich folded would put half a cell on a row of its own)."""
    from rich.text import Text

    out = Text(no_wrap=True, overflow="ignore")
    lines = [_line_cells(layout, None), [("\u2500" * w, "dim") for _, w in layout.columns]]
    lines += [_line_cells(layout, r) for r in rows]
    for i, cells in enumerate(lines):
        if i:
            out.append("\n")
        for j, (text, style) in enumerate(cells):
            if j:
                out.append(" " * GAP)
            out.append(text.rstrip() if j == len(cells) - 1 else text, style=style or None)
    return out


def hidden_note(layout: Layout) -> str:
    """'hidden at 80 columns: tok/s, job (--wide or --columns to show)' or ''."""
    if not layout.hidden:
        return ""
    names = ", ".join(c.header for c in layout.hidden)
    return f"hidden at {layout.width} columns: {names} (--wide or --columns to show)"


# ------------------------------------------------------------------------------------------- the axes' columns

def distinguishing(keys: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The keys, in order, that each tell some rows apart that the keys before them do not: together they tell
    apart every two rows that all the keys tell apart (an axis moving with an earlier one adds nothing)."""
    chosen: list[str] = []
    distinct = 1 if rows else 0
    for k in keys:
        n = len({tuple(_value(r.get(c)) for c in [*chosen, k]) for r in rows})
        if n > distinct:
            chosen.append(k)
            distinct = n
    return chosen


AXIS_PRIORITY, OTHER_PRIORITY, REPEAT_PRIORITY = 2, 3, 9


def axis_priorities(keys: Sequence[str], rows: Sequence[dict[str, Any]], grid_axes: Sequence[str] = ()) -> dict[str, int]:
    """The priority of each varying key's column in a table fitted to the terminal (lower: kept longer): the grid's
    axes that tell runs apart first (AXIS_PRIORITY), then other keys that do (a seed, a dim a size sets), and last a
    key that only repeats others (REPEAT_PRIORITY: a [[zip]] partner such as kq_diagonal beside attention, which
    says nothing the attention column does not)."""
    grid = [k for k in grid_axes if k in keys and k != "train.seed"]
    ordered = grid + [k for k in keys if k not in grid]
    telling = set(distinguishing(ordered, list(rows)))
    return {k: AXIS_PRIORITY if k in telling and k in grid else OTHER_PRIORITY if k in telling else REPEAT_PRIORITY
            for k in keys}


def _suffixes(name: str) -> list[str]:
    """'attn_precond_rank' -> ['precond_rank', 'rank']: the shorter names that still end with the key's last words."""
    parts = name.split("_")
    return ["_".join(parts[i:]) for i in range(1, len(parts))]


def _key_names() -> list[tuple[str, str]]:
    """(key, its last part) of every config key a grid may set (`cem_core.keydoc`): the names a header must not take."""
    from cem_core.keydoc import documented_keys

    return [(k, k.split(".")[-1]) for k in documented_keys()]


def axis_headers(names: dict[str, str], widest: dict[str, int], room: int | None) -> dict[str, str]:
    """The axes' column headers for `room` characters (None: no limit): their short names; where those do not fit,
    the longest ones first give way to their last words (attn_precond_rank -> precond_rank -> rank, never a name
    another axis also ends with), and only then are cut with '…' (never narrower than their widest value)."""
    if room is None:
        return dict(names)
    room -= GAP * max(0, len(names) - 1)
    label = dict(names)

    def width(k: str) -> int:
        return max(len(label[k]), widest[k])

    taken = _key_names()

    def unique(k: str, s: str) -> bool:  # never another axis's name or ending, nor any other key's name ('size')
        return not any(o != k and (names[o] == s or names[o].endswith("_" + s) or label[o] == s) for o in names) \
            and not any(t == s and full != k for full, t in taken)

    while sum(width(k) for k in names) > room:  # last words first: 'rank' names the key, 'att…' does not
        shorter = {k: next((s for s in _suffixes(label[k]) if unique(k, s)), None) for k in names}
        shorter = {k: s for k, s in shorter.items() if s is not None and len(label[k]) > widest[k]}
        if not shorter:
            break
        k = max(shorter, key=width)
        label[k] = shorter[k]  # type: ignore[assignment]
    cut = {k: width(k) for k in names}
    while sum(cut.values()) > room:
        cuttable = [k for k in names if cut[k] > max(3, widest[k])]
        if not cuttable:
            break
        longest = max(cuttable, key=lambda k: cut[k])
        cut[longest] -= 1
    return {k: n if len(n) <= cut[k] else n[:cut[k] - 1] + "\u2026" for k, n in label.items()}


def _value(v: Any) -> str:
    from cemctl.records.formats import value

    return value(v)
