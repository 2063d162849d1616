"""The status table (`cemctl status`): collect rows from the database, render them with rich or as JSON.

    refresh(engine, runs_root, experiment=None, heartbeat_timeout_s=None)  # sync run dirs, reconcile queued jobs
    collect_status(engine, experiment=None) -> [ExperimentStatus]
    render_status(statuses, limit=200) -> rich renderable; status_json(statuses) -> dict
"""

from cemctl.services.status.collect import ExperimentStatus, RunRow, collect_status, refresh
from cemctl.services.status.render import render_status, status_json

__all__ = ["ExperimentStatus", "RunRow", "collect_status", "refresh", "render_status", "status_json"]
