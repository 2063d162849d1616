"""What users and their scripts read, frozen: `cemctl keys --json`, `status --json` and `export` of the project of
`test_records` (a run in every state, tags, notes, environments, earlier results, an edited grid, two experiments).

No run id, field name, column order or value may change unless it was wrong; a change is made on purpose by
writing the files again (`CEMCTL_WRITE_GOLDEN=1 python -m pytest tests/test_golden_outputs.py`) and showing their
diff. What depends on the clock or the machine is normalised first: the project's folder, times (as seconds
before the fixture's clock, to 100 s), a running run's elapsed time and this installation's code fingerprint."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import cli
from tests.test_records import build_project

GOLDEN = Path(__file__).parent / "data" / "golden"
TIMES = ("started_at", "finished_at", "heartbeat_at", "last_event_at")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return build_project(tmp_path_factory.mktemp("golden"))


def _normal(project: dict, value: Any, key: str = "", row: dict | None = None) -> Any:
    from cem_core.fingerprint import code_fingerprint

    if isinstance(value, dict):
        return {k: _normal(project, v, k, value) for k, v in value.items() if not (k == "time" and row is None)}
    if isinstance(value, list):
        return [_normal(project, v, key, row) for v in value]
    if key in TIMES and value not in (None, ""):
        return f"now-{round((project['now'] - float(value)) / 100) * 100:g}"
    if key == "elapsed_s" and row is not None and row.get("state") == "running" and value not in (None, ""):
        return "<running: grows with the clock>"
    if isinstance(value, str):
        for where in (str(project["where"].resolve()), str(project["where"])):
            value = value.replace(where, "<project>")
        return "<current>" if value == code_fingerprint() else value
    return value


def _csv(text: str) -> dict[str, Any]:
    rows = list(csv.reader(io.StringIO(text)))
    return {"columns": rows[0], "rows": [dict(zip(rows[0], r)) for r in rows[1:]]}


def outputs(project: dict, tmp_path: Path) -> dict[str, Any]:
    """Each command's output, parsed and normalised."""
    where = project["where"]
    out: dict[str, Any] = {}
    res = cli(None, "keys", "--json")
    assert res.returncode == 0, res.output
    out["keys.json"] = json.loads(res.stdout)
    for name, args in (("status.json", ()), ("status-own.json", ("own",))):
        res = cli(where, "status", *args, "--json", "--no-sync")
        assert res.returncode == 0, res.output
        out[name] = _normal(project, json.loads(res.stdout))
    for name, args in (("export-own.json", ("own",)), ("export-all.json", ("--where", "run_id!=x"))):
        path = tmp_path / "x.csv"
        res = cli(where, "export", *args, "--format", "csv", "-o", str(path), "--force", "--no-sync")
        assert res.returncode == 0, res.output
        table = _csv(path.read_text())
        table["rows"] = [_normal(project, r, row=r) for r in table["rows"]]
        out[name] = table
    return out


def test_keys_status_json_and_export_are_what_they_were(project, tmp_path):
    got = outputs(project, tmp_path)
    if os.environ.get("CEMCTL_WRITE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name, value in got.items():
            (GOLDEN / name).write_text(json.dumps(value, indent=1, sort_keys=False) + "\n")
    for name, value in got.items():
        want = json.loads((GOLDEN / name).read_text())
        assert _clock(json.loads(json.dumps(value))) == _clock(want), name


def test_status_json_lists_a_runs_fields_in_catalogue_order(project):
    """The order `cemctl keys` lists (the record's attributes), then the config keys, the tags and the axes: the
    same in every process (it followed the hash order of a set, so it changed with PYTHONHASHSEED)."""
    from cemctl.records.fields import RUN_FIELDS

    res = cli(project["where"], "status", "--json", "--no-sync")
    assert res.returncode == 0, res.output
    for exp in json.loads(res.stdout)["experiments"]:
        for run in exp["runs"]:
            names = list(run)
            assert names[:len(RUN_FIELDS)] == [f.name for f in RUN_FIELDS]
            assert names[-1] == "axes"


def _clock(value: Any) -> Any:
    """A stale run's reason counts the seconds since its heartbeat as the command ran: not what is frozen."""
    import re

    if isinstance(value, dict):
        return {k: _clock(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clock(v) for v in value]
    return re.sub(r"no heartbeat for \d+ s", "no heartbeat for N s", value) if isinstance(value, str) else value


def test_export_writes_the_csv_pandas_would_write(project):
    """`cemctl export` writes CSV without building a frame (`write_records_csv`); it is the frame's CSV, cell for
    cell, for records of every state, kind of value, tags and config keys (the two forms held equal)."""
    import io

    from cemctl.records import load_records
    from cemctl.records.load import records_frame, write_records_csv

    for experiment in ("own", None):
        records = load_records(str(project["where"] / "results.db"), experiment).records
        text = io.StringIO()
        write_records_csv(records, text)
        assert text.getvalue() == records_frame(records).to_csv(index=False)
