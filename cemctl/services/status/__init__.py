"""The rows of `cemctl status`, as data (the command renders them: `cemctl/commands/views/status.py`).

    engine, can_sync = open_status_db(url)
    statuses = status_snapshot(engine, runs_root, experiment=None, sync=can_sync, limit=50)  # refresh + collect
    refresh(engine, runs_root, experiment=None, heartbeat_timeout_s=None)  # sync run dirs, reconcile queued jobs
    collect_status(engine, experiment=None) -> [ExperimentStatus]  # .runs: run records (cemctl.records); status_json(statuses) -> dict
"""

from cemctl.services.status.collect import ExperimentStatus, collect_status, refresh, sort_by, sort_records
from cemctl.services.status.query import open_status_db, parse_sort, parse_states, status_json, status_snapshot

__all__ = ["ExperimentStatus", "collect_status", "open_status_db", "parse_sort", "parse_states", "refresh",
           "sort_by", "sort_records", "status_json", "status_snapshot"]
