"""Why a run failed, in one line the user can act on (the trainer writes it, the executors and `status` show it).

    failure_line(exc, previous_error="...")
      -> 'SyntaxError: invalid syntax (my_layer/layers.py:34); fix it, then `cemctl launch my_grid --retry-failed`'

The line is the exception's type and message with the file:line of the user's code where there is one
(`cem_core.errors.describe_exception`). A failure that will repeat (a syntax, import or configuration error,
or the same error as the previous attempt) ends with what to do: fix it, then `cemctl launch EXPERIMENT
--retry-failed`, never "launch again". The experiment is the one the launch named (`EXPERIMENT_ENV` in the
job's environment). Torch-free.
"""

from __future__ import annotations

import os

from cem_core.errors import ConfigError, describe_exception

EXPERIMENT_ENV = "CEMCTL_EXPERIMENT"  # set by `cemctl launch` in every job's environment: the experiment it launched
REPEATING = (SyntaxError, ImportError, NameError, ConfigError)  # the same code fails the same way every time
ADVICE = "; fix "  # where the advice starts in a failure line


def retry_command(experiment: str | None = None) -> str:
    """'`cemctl launch fig2a --retry-failed`' (the experiment of this job's launch, else a placeholder)."""
    name = experiment or os.environ.get(EXPERIMENT_ENV, "") or "EXPERIMENT"
    return f"`cemctl launch {name} --retry-failed`"


def repeat_advice(experiment: str | None = None) -> str:
    """'; fix it, then `cemctl launch EXPERIMENT --retry-failed`'."""
    return f"{ADVICE}it, then {retry_command(experiment)}"


def repeated_line(line: str, what: str, attempt: int | None, experiment: str | None = None) -> str:
    """'<line>; <what> as attempt 2: fix it, then `cemctl launch EXPERIMENT --retry-failed`' (a failure that repeats
    an earlier attempt's)."""
    again = f" {attempt}" if attempt else ""
    return f"{line}; {what} as attempt{again}: fix it, then {retry_command(experiment)}"


def without_advice(line: str) -> str:
    """A failure line without its advice (to compare two attempts' errors)."""
    return line.split(ADVICE, 1)[0].split("; the same error as attempt", 1)[0].strip()


def last_line(text: str | None) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def failure_line(exc: BaseException, previous_error: str | None = None, previous_attempt: int | None = None,
                 experiment: str | None = None) -> str:
    """The one line that says why this attempt failed and, for a failure that will repeat, what to do.
    `previous_error` is the previous attempt's recorded error (its last line is compared with this one)."""
    line = describe_exception(exc, limit=400)
    if isinstance(exc, REPEATING):
        return line + repeat_advice(experiment)
    if previous_error and without_advice(last_line(previous_error)) == line:
        return repeated_line(line, "the same error", previous_attempt, experiment)
    return line
