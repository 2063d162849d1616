"""The manifest of a results archive (`cemctl archive`, `cemctl import`): one strict reader, one shape.

    parsed = read_archive_manifest(data, "import: cpu.tar.gz: manifest.json")   # ManifestError, one line
    parsed.files        -> {"runs/<run id>/config.json": FileEntry(size, sha256), ...}
    parsed.doc          -> {"experiments": [...], "runs": {run id: {"files": {name: {"size", "sha256"}}}}, ...}
    archive_manifest_bytes(experiments, files, created=time.time())          # the shape to write

The archive's manifest.json is a "cemctl wrote these bytes" record like every other
(`cem_core.runfiles.manifest`: `written_by`, `version`, `what = "archive"`, `files` with
sizes and sha256), plus the experiments it holds (name, grid text, plans, links). The
manifest of version 1 (`format = "cemctl-archive"`, files listed per run) reads the same.
Every shape is checked before anything is used: a list where a table belongs, a link to a
run the archive does not hold, a run file outside `runs/<id>/` are one line naming the
archive and the key, never an internal error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cem_core.names import is_run_id
from cem_core.runfiles.manifest import FileEntry, ManifestError, manifest_bytes, parse_manifest_bytes

WHAT = "archive"
PLUGINS = "plugins"  # members plugins/<path>.py: the plugin sources the archived runs' configs name
MANIFEST_NAME = "manifest.json"


@dataclass
class ArchiveManifest:
    doc: dict[str, Any]  # what import reads: "experiments" (checked) and "runs" (built from `files`)
    files: dict[str, FileEntry]  # "runs/<run id>/<file>" -> size and sha256


def archive_manifest_bytes(experiments: list[dict[str, Any]], files: dict[str, FileEntry], *,
                           created: float) -> bytes:
    """manifest.json of an archive in the one shape (`cem_core.runfiles.manifest.manifest_doc`)."""
    return manifest_bytes(WHAT, files, {"experiments": experiments, "created": created})


def read_archive_manifest(data: bytes | None, source: str) -> ArchiveManifest:
    """The archive's manifest, every shape checked; `ManifestError` (one line naming `source`) otherwise."""
    if data is None:
        raise ManifestError(f"{source}: missing (not a cemctl archive)")
    manifest = parse_manifest_bytes(data, source, what=WHAT, name=MANIFEST_NAME)
    runs: dict[str, dict[str, Any]] = {}
    plugins: dict[str, dict[str, Any]] = {}
    for rel, entry in manifest.files.items():
        parts = rel.split("/")
        if parts[0] == PLUGINS and len(parts) >= 2 and parts[-1].endswith(".py"):
            plugins["/".join(parts[1:])] = {"size": entry.size, "sha256": entry.sha256}  # a plugin's source
            continue
        if len(parts) != 3 or parts[0] != "runs" or not is_run_id(parts[1]):
            raise ManifestError(f"{source}: {rel[:80]!r} is not a run file (runs/<run id>/<file>) or a plugin "
                                "source (plugins/<path>.py)")
        runs.setdefault(parts[1], {"files": {}})["files"][parts[2]] = {"size": entry.size, "sha256": entry.sha256}
    experiments = manifest.extra.get("experiments", [])
    _check(isinstance(experiments, list), source, "experiments", "a list")
    for i, exp in enumerate(experiments):
        _experiment(exp, f"experiments[{i}]", source, runs)
    created = manifest.extra.get("created", 0)
    _check(isinstance(created, (int, float)) and not isinstance(created, bool), source, "created", "a number")
    return ArchiveManifest({**manifest.extra, "experiments": experiments, "runs": runs, "plugins": plugins},
                           manifest.files)


def _check(ok: bool, source: str, key: str, what: str) -> None:
    if not ok:
        raise ManifestError(f"{source}: {key} must be {what}")


def _experiment(exp: Any, key: str, source: str, runs: dict[str, Any]) -> None:
    _check(isinstance(exp, dict), source, key, "a table")
    _check(isinstance(exp.get("name"), str) and bool(exp["name"]), source, f"{key}.name", "a name")
    for name in ("description", "figure", "grid_file", "grid_text", "grid_sha256"):
        _check(isinstance(exp.get(name, ""), str), source, f"{key}.{name}", "a string")
    plans = exp.get("plans", [])
    _check(isinstance(plans, list), source, f"{key}.plans", "a list")
    for j, plan in enumerate(plans):
        where = f"{key}.plans[{j}]"
        _check(isinstance(plan, dict), source, where, "a table")
        _check(isinstance(plan.get("scale"), str) and bool(plan["scale"]), source, f"{where}.scale", "a scale name")
        overrides = plan.get("overrides_json") or "{}"
        try:
            ok = isinstance(overrides, str) and isinstance(json.loads(overrides), dict)
        except (ValueError, RecursionError):
            ok = False
        _check(ok, source, f"{where}.overrides_json", "the JSON text of a table")
        links = plan.get("links")
        _check(isinstance(links, list), source, f"{where}.links", "a list")
        for k, link in enumerate(links):
            at = f"{where}.links[{k}]"
            _check(isinstance(link, dict), source, at, "a table")
            _check(link.get("run_id") in runs, source, f"{at}.run_id", "a run the archive holds")
            _check(isinstance(link.get("axes", {}), dict), source, f"{at}.axes", "a table")
            position = link.get("position", 0)
            _check(isinstance(position, int) and not isinstance(position, bool), source, f"{at}.position",
                   "an integer")
            marks = link.get("marks", [])
            _check(isinstance(marks, list) and all(isinstance(m, str) for m in marks), source, f"{at}.marks",
                   "a list of strings")
