"""One run, one value on every surface (issue 46): `status --json`, `export`, the API and the dashboard's data show
every field of every run alike, on a project with a run in every state (the project of `test_records`) while a
run in flight keeps writing metrics, validation losses and heartbeats between the reads.

Before the typed record, `status --json` printed `torch_version: null`, no notes, tags, history or arms for runs
that had them, and the dashboard's live view kept a run's validation loss at its first evaluation and never found
a damaged run."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import cli
from tests.test_records import build_project


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return build_project(tmp_path_factory.mktemp("parity"))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return str(a).lower() == str(b).lower()
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (a != a and b != b)
    return a == b


def _clockless(name: str, rec: dict[str, Any]) -> Any:
    """A value as of no particular moment: a running run's elapsed time grows between two reads, and a stale run's
    reason counts the seconds since its heartbeat."""
    value = rec.get(name)
    if name == "elapsed_s" and rec.get("state") == "running":
        return "<grows>"
    return re.sub(r"no heartbeat for \d+ s", "no heartbeat for N s", value) if isinstance(value, str) else value


def _from_csv(path: Path) -> dict[str, dict[str, Any]]:
    """export's CSV read back as the API types its frame (pandas), so that numbers compare as numbers."""
    import pandas as pd

    frame = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype=str)
    return {r["run_id"]: r for r in _rows(frame)}


def _rows(frame: Any) -> list[dict[str, Any]]:
    """A frame's rows with missing values as None (pandas' NaN / <NA>)."""
    import pandas as pd

    return [{k: (None if (not isinstance(v, (list, dict)) and pd.isna(v)) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]


def _number_text(value: Any, text: Any) -> bool:
    """A typed value against its CSV text (the CSV is text: numbers are read as the field's kind; an empty text
    and no value are one cell)."""
    if value is None or value == "" or (isinstance(value, float) and value != value):
        return text is None
    if isinstance(value, bool):
        return str(text) == str(value)
    if isinstance(value, (int, float)):
        try:
            return _same(float(value), float(text))
        except (TypeError, ValueError):
            return False
    return str(value) == str(text)


def _surfaces(project: dict, tmp_path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{surface: {run id: record}} read one after the other: status syncs the folders first (the others read the
    database it wrote, the dashboard the folders of the runs in flight)."""
    import cemctl.api as cem
    from cemctl.services.dashboard.source import open_source
    from cemctl.services.dashboard.tables import live_experiment

    where = project["where"]
    res = cli(where, "status", "own", "--json")
    assert res.returncode == 0, res.output
    status = {r["run_id"]: r for e in json.loads(res.stdout)["experiments"] for r in e["runs"]}
    out = tmp_path / "runs.csv"
    res = cli(where, "export", "own", "--format", "csv", "-o", str(out), "--force", "--no-sync")
    assert res.returncode == 0, res.output
    api = {r["run_id"]: r for r in _rows(cem.runs("own", db=str(where / "results.db")))}
    src = open_source(str(where / "results.db"), where / "runs")
    _, live = live_experiment(src, "own")
    dashboard = {r["run_id"]: dict(r) for r in live}
    return {"status": status, "export": _from_csv(out), "api": api, "dashboard": dashboard}


def _append(run_dir: Path, step: int, *, val: bool) -> None:
    """The trainer of a run in flight: a train line (and a validation line), then its heartbeat."""
    from cem_core.runfiles import atomic_write_json

    lines = [{"kind": "train", "step": step, "tokens": step * 64, "train_loss": 4.0 - step / 100, "lr": 0.002,
              "grad_norm": 1.0, "tokens_per_s": 1000.0, "time_s": step * 0.064}]
    if val:
        lines.append({"kind": "val", "step": step, "tokens": step * 64, "val_loss": 3.9 - step / 100, "time_s": 1.0})
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    atomic_write_json(run_dir / "heartbeat.json", {"time": time.time(), "step": step, "total_steps": 100,
                                                   "tokens": step * 64, "pid": 1, "host": "gpu-node-1", "attempt": 1})


def test_every_field_is_one_value_in_status_export_the_api_and_the_dashboard(project, tmp_path):
    from cemctl.records.fields import RUN_FIELDS, field

    run_dir = project["where"] / "runs" / project["ids"]["R0"]
    seen_val = []
    for round_, step in enumerate((41, 45, 52)):  # the run keeps training between the reads
        _append(run_dir, step, val=round_ > 0)
        got = _surfaces(project, tmp_path)
        status = got["status"]
        assert set(status) == set(project["ids"].values())
        for surface, recs in got.items():
            assert set(recs) == set(status), surface
        names = [f.name for f in RUN_FIELDS] + sorted({k for r in status.values() for k in r
                                                         if "." in k or k in ("task", "plugins")})
        bad = []
        for rid, want in status.items():
            for surface in ("api", "dashboard", "export"):
                have = got[surface][rid]
                for name in names:
                    if name not in have and not (name.startswith("tag.") and want.get(name) is None):
                        bad.append((surface, rid, name, "missing"))
                        continue
                    a, b = _clockless(name, want), _clockless(name, have)
                    ok = _number_text(a, b) if surface == "export" and a != "<grows>" else _same(a, b)
                    if not ok:
                        bad.append((surface, rid, name, a, b))
        assert not bad, bad[:10]
        r0 = status[project["ids"]["R0"]]
        assert r0["step"] == step and r0["state"] == "running"  # the surfaces followed the run, not its first lines
        seen_val.append(r0["val_loss"])
    assert seen_val[1] != seen_val[0] and seen_val[2] == pytest.approx(3.9 - 0.52)  # the newest evaluation
    assert field("torch_version").source == "environment"
    damaged = project["ids"]["X"]
    assert got["dashboard"][damaged]["state"] == "damaged" and got["status"][damaged]["reason"]


def test_the_dashboard_finds_a_run_damaged_in_its_folder_as_ingest_does(project, tmp_path):
    """The live view judged only the state of a run in flight: one whose config.json was replaced by another run's
    kept showing as running in the dashboard while `cemctl status` said damaged."""
    from cemctl.records.live import live_record
    from cemctl.records.record import RunRecord

    run_dir = tmp_path / "3fa2c1d0e5b7"
    run_dir.mkdir()
    (run_dir / "config.json").write_text((project["where"] / "runs" / project["ids"]["R0"] / "config.json")
                                         .read_text())  # another run's config under this id
    (run_dir / "events.jsonl").write_text(json.dumps({"time": time.time(), "state": "running", "reason": ""}) + "\n")
    rec = RunRecord(run_id=run_dir.name, state="running", run_dir=str(run_dir))
    assert live_record(rec, timeout_s=120)
    assert rec.state == "damaged" and "hashes to run id" in rec.reason
