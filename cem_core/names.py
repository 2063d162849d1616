"""Names that become folder names: experiments (`reports/<name>`) and runs (`runs/<run_id>`).

Used by `cemctl plan` (grid files), the results database and every command
that takes a run or experiment on the command line: a name is a plain file
name, never a path (no '/', '..', spaces or control characters).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from cem_core.errors import ConfigError

EXPERIMENT_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
RUN_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
RUN_ID_RE = re.compile(r"[0-9a-f]{12}")  # cem_core.config.run_id: 12 hex of the config's sha256


def shown(value: Any, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters (for one-line errors)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_experiment_name(name: Any, source: str | None = None) -> str:
    """`name` if it is a safe experiment name (a plain folder name)."""
    if not isinstance(name, str) or not EXPERIMENT_NAME_RE.fullmatch(name):
        raise ConfigError(
            "experiment.name",
            f"must be 1-200 letters, digits, '.', '_', '+' or '-', starting with a letter or digit "
            f"(it names the report folder), got {shown(name)}",
            source=source,
        )
    return name


def is_run_name(text: str) -> bool:
    """Whether `text` can be a run id (or a prefix of one): a plain folder name."""
    return bool(RUN_NAME_RE.fullmatch(text or ""))


def is_run_id(name: str) -> bool:
    """Whether a folder is named by a run id (then it must hold the config that hashes to that id)."""
    return bool(RUN_ID_RE.fullmatch(name or ""))


def printable(text: Any, keep: str = "") -> str:
    """`text` with control and invisible format characters (ESC, NUL, newlines, RTL overrides, zero-width
    spaces) written as escapes (\\x1b, \\u202e): user text shown on a terminal or in Markdown can neither
    drive the terminal nor hide or reorder what is shown. `keep`: characters left as they are (a log's tabs)."""
    out = []
    for ch in str(text):
        if ch not in keep and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def plural(n: int, one: str, many: str | None = None) -> str:
    """'1 run', '2 runs', '0 runs' (`many` for irregular plurals)."""
    return f"{n} {one if n == 1 else many or one + 's'}"
