"""One truth for what a run is: its record, the field catalogue, the `--where` grammar and the labels.

    from cemctl.records import select_records, field, resolve
    recs = select_records(engine, "fig2c", where=["attn_steps>=2", "note~lr"], scale="cpu")
    frame = recs.frame()                      # one row per run: the catalogue's fields, the config keys, tag.NAME

- `cemctl.records.fields`: every field a user can show, filter, sort, group, export or read from the API
  (name, short name, type, unit, source, meaning); `resolve(name)` with the closest names on a typo.
- `cemctl.records.load`: `load_records`, the one reader of runs from the database.
- `cemctl.records.where`: the `--where` grammar over those fields.
- `cemctl.records.labels`: arm ids and labels, the one labelling path.
- `cemctl.records.formats`: one text format per kind of value.

Layer: below `cemctl.report` (report, services, commands, the API and the dashboard read runs
through it), above `cemctl.grid` and `cemctl.db`. Torch-free; pandas only for frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from cemctl.records.fields import catalogue, field, resolve
from cemctl.records.record import Field
from cemctl.records.load import NO_EXPERIMENT, NOT_IN_GRID, ExperimentMeta, RunRecords, load_records, records_frame

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.engine import Engine

    from cemctl.db.read import Reader

__all__ = ["Field", "NO_EXPERIMENT", "NOT_IN_GRID", "ExperimentMeta", "RunRecords", "catalogue", "field",
           "load_records", "records_frame", "resolve", "select_records"]


def select_records(engine: "Engine | Reader | str", experiment: str | None = None, *, where: Sequence[str] | None = None,
                   scale: str | None = None, **kw: Any) -> RunRecords:
    """`load_records` of the runs meeting every `--where` condition (the same fields in every command; what the
    database can test is tested in the query)."""
    from cemctl.records.where import parse_where

    return load_records(engine, experiment, scale=scale, where=parse_where(where), **kw)
