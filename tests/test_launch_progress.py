"""The local executor's live progress view renders the runs' heartbeats and metrics."""

from __future__ import annotations

import json
import os
import time

from rich.console import Console

from cemctl.executors.base import Job
from cemctl.executors.local import JobStatus
from cemctl.services.launch.progress import ProgressView


def test_progress_view_shows_step_loss_and_speed(tmp_path):
    run = tmp_path / "abc"
    run.mkdir()
    (run / "heartbeat.json").write_text(json.dumps({"time": time.time(), "step": 7, "total_steps": 20}))
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 7, "train_loss": 2.71828, "tokens_per_s": 12345.0}) + "\n")
    other = tmp_path / "def"
    other.mkdir()
    statuses = [
        JobStatus(job=Job("abc", run), state="running", slot="gpu1", started_time=time.time() - 65),
        JobStatus(job=Job("def", other), state="failed", slot="gpu0", reason="Traceback\nRuntimeError: boom"),
        JobStatus(job=Job("ghi", tmp_path / "ghi"), state="queued"),
    ]
    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(ProgressView(console).render(statuses))
    text = console.export_text()
    assert "3 runs: 1 failed, 1 queued, 1 running" in text
    row = next(line for line in text.splitlines() if "abc" in line)
    assert "gpu1" in row and "7/20" in row and "2.7183" in row and "12.3k" in row and "1m05s" in row
    assert "RuntimeError: boom" in text
