"""A training attempt's failure as the trainer records it (`cem_core.train.attempt`): result.json's `error` is the
traceback's tail and, as its last line, the one line `status` and `launch` show (`cem_core.runfiles.failure`).

A plugin whose source does not parse fails the attempt that fingerprints it with the SyntaxError of the file
and line (the fingerprint alone would say neither), recorded like any other failure, never an exit without a result.
"""

from __future__ import annotations

import traceback
from typing import Any

from cem_core.runfiles.failure import failure_line
from cem_core.runfiles.results import RunResult

ERROR_TAIL_LINES = 15


def error_tail(exc: BaseException, lines: int = ERROR_TAIL_LINES) -> str:
    """The last `lines` lines of `exc`'s traceback."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    return "\n".join(text.splitlines()[-lines:])


def error_text(exc: BaseException, previous: RunResult | None = None, lines: int = ERROR_TAIL_LINES) -> str:
    """The traceback's last `lines` lines, then the failure line when it says more than the last of them
    (the user's file:line, the advice for a failure that will repeat). `previous` is the previous attempt's result."""
    tail = error_tail(exc, lines).splitlines()
    failed = previous if previous is not None and previous.state == "failed" else None
    line = failure_line(exc, (failed.error or "") if failed else "", failed.attempt if failed else None)
    if not tail or tail[-1].strip() != line:
        tail.append(line)
    return "\n".join(tail)


def plugin_syntax_error(plugins: tuple[str, ...]) -> SyntaxError | None:
    """The SyntaxError of the first plugin source file that does not parse, with its file and line (None if all do)."""
    from cem_core.plugins import plugin_sources

    for name in plugins:
        for _, path in plugin_sources(name):
            try:
                compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
            except SyntaxError as e:
                return e
            except (OSError, ValueError):
                continue
    return None


def fingerprint_or_error(cfg: Any) -> tuple[str, BaseException | None]:
    """(the code fingerprint of the model code this attempt runs, None), or ("", the error that stopped it: a
    plugin source that does not parse, a file that cannot be read) for the attempt to fail with."""
    from cem_core.fingerprint import code_fingerprint
    from cem_core.plugins import used_plugins

    plugins = used_plugins(cfg)
    try:
        return code_fingerprint(plugins=plugins), None
    except SyntaxError as e:
        return "", plugin_syntax_error(plugins) or e
    except Exception as e:  # noqa: BLE001 - recorded as this attempt's failure by the caller
        return "", e
