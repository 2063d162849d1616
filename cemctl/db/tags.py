"""Tags and notes in the results database (`cemctl tag`, `cemctl note`, `cemctl sync`, `status --columns tag.x`).

    store_tags(engine, run_id, record, file_mtime)     # after writing the run's tags.json

The run directory's tags.json is the ground truth (`cem_core.runfiles.tags`); the
`run_tags` table mirrors it so status, export and the API read tags with the runs.
`cemctl sync` (the ingest: `cemctl.db.ingest_files._ingest_tags`) mirrors a tags.json
whose file changed; one that cannot be read keeps the mirrored tags and is named.
"""

from __future__ import annotations

import json
import time

from sqlalchemy.engine import Engine

from cem_core.runfiles.tags import TagsRecord
from cemctl.db.engine import retry_locked, write_session
from cemctl.db.models import RunTags


def store_tags(engine: Engine, run_id: str, record: TagsRecord, file_mtime: float | None) -> None:
    def write() -> None:
        with write_session(engine) as s:
            row = s.get(RunTags, run_id)
            if row is None:
                row = RunTags(run_id=run_id)
                s.add(row)
            row.tags_json = json.dumps(record.to_dict()["tags"], sort_keys=True)
            row.notes_json = json.dumps(record.notes)
            row.file_mtime = file_mtime
            row.recorded_at = time.time()

    retry_locked(write)

