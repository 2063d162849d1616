"""One format per kind of value, for every table a command, report or page shows (`status`, `plan`, `launch`,
`compare`, `report`, the dashboard). `by_kind(field kind)` is the formatter of a catalogue field.

    loss(1.23456) -> "1.2346"       ppl(61.234) -> "61.23"       count(86_372_352) -> "86.4M"
    rate(7712.3) -> "7.71k"         duration(3725) -> "1h02m"      hours(0.0514) -> "0.051"
    value(1.0) -> "1"  value(0.002) -> "0.002"  value(True) -> "true"  (config values, as grid files write them;
    two different values never print alike: value(0.0012345678) != value(0.0012345679))

Every function returns "" for a missing value, so a table cell is empty rather than "None".
"""

from __future__ import annotations

import math
from typing import Any, Callable

from cem_core.names import printable


def loss(x: float | None) -> str:
    """Losses (nats per token, or per byte with the byte tokenizer), always 4 decimals."""
    if x is None or x != x:  # none, or NaN
        return ""
    return (f"{x:.4f}" if abs(x) < 1e6 else f"{x:.4g}") if math.isfinite(x) else str(x)  # 1e308: '1e+308'


def ppl(x: float | None) -> str:
    """Perplexities, 2 decimals."""
    if x is None or x != x:  # none, or NaN
        return ""
    return (f"{x:.2f}" if abs(x) < 1e8 else f"{x:.4g}") if math.isfinite(x) else str(x)


def count(n: float | None) -> str:
    """Parameters, tokens, FLOPs: 3 significant digits and a unit (k, M, G, T, P, E)."""
    if n is None or n != n:  # none, or NaN
        return ""
    n = float(n)
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale * 0.9995:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def rate(x: float | None) -> str:
    """Tokens per second."""
    return count(x)


def duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:  # none, or NaN
        return ""
    if not math.isfinite(seconds) or abs(seconds) >= 1e9:  # a clock or heartbeat from nowhere: not 'days' of digits
        return "over 30 years" if seconds > 0 else ""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def hours(h: float | None) -> str:
    """GPU- or CPU-hours: 2 significant digits, '<0.01' below a hundredth."""
    if h is None or h != h:  # none, or NaN
        return ""
    if h < 0.01:
        return "<0.01"
    return f"{h:.2g}" if h < 100 else f"{h:,.0f}"


def value(v: Any) -> str:
    """A config value as a grid file writes it: 1.0 -> '1', 0.002 -> '0.002', True -> 'true'."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        from cem_core.arms import format_value

        return format_value(v)  # '%g' unless that would make two values look equal
    return printable(v)


def timestamp(t: float | None) -> str:
    """A unix time as 'YYYY-MM-DD HH:MM' (local time)."""
    if t is None or t != t:  # none, or NaN
        return ""
    import time

    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))
    except (OverflowError, OSError, ValueError):  # 1e308 in a heartbeat: no date, never an error
        return ""


def fraction(x: float | None) -> str:
    """0.5 -> '50%'."""
    if x is None or x != x:  # none, or NaN
        return ""
    return f"{x * 100:.0f}%"


def by_kind(kind: str) -> Callable[[Any], str]:
    """The formatter of a catalogue field's kind (`cemctl.records.fields.Field.kind`)."""
    return {"loss": loss, "ppl": ppl, "count": count, "rate": rate, "duration": duration, "time": timestamp,
            "progress": fraction, "int": integer}.get(kind, value)


def integer(n: Any) -> str:
    """A whole number as digits (steps, attempts), in `count`'s form past a billion: a heartbeat claiming 1e308 steps
    prints '1e+290E', never 309 digits."""
    if n is None or n != n:  # none, or NaN
        return ""
    if isinstance(n, (int, float)) and not isinstance(n, bool) and abs(n) >= 1e9:
        return count(n)
    return value(n)


def progress(step: int | None, total: int | None, done: bool = False) -> str:
    """'450/900 50%' (the step count of a finished run is its total)."""
    if step is None and not done:
        return ""
    shown = step if step is not None else total
    if not total:
        return f"{_steps(shown)}/?"
    pct = min(1.0, (shown or 0) / total) if not done else 1.0
    return f"{_steps(shown)}/{_steps(total)} {pct * 100:.0f}%"


def _steps(n: Any) -> str:
    return integer(n) or str(n)
