"""The text formats of every table (moved to `cemctl.records.formats`, one place for commands, reports and pages)."""

from cemctl.records.formats import count, duration, hours, loss, ppl, progress, rate, value  # noqa: F401
