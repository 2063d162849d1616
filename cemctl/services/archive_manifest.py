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

from cem_core.config import field_names
from cem_core.errors import ConfigError
from cem_core.names import is_run_id
from cem_core.runfiles.manifest import FileEntry, ManifestError, manifest_bytes, parse_manifest_bytes
from cemctl.grid.fields import check_scalar
from cemctl.grid.kinds import SCALES
from cemctl.services.claim_plans import claims_rel_ok

WHAT = "archive"
PLUGINS = "plugins"  # members plugins/<path>.py: the plugin sources the archived runs' configs name
CLAIMS = "claims"  # members claims/registry.jsonl, claims/sequential/<experiment>@<scale>.json: .claims/ of the runs
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
    claims: dict[str, dict[str, Any]] = {}
    for rel, entry in manifest.files.items():
        parts = rel.split("/")
        if parts[0] == PLUGINS and len(parts) >= 2 and parts[-1].endswith(".py"):
            plugins["/".join(parts[1:])] = {"size": entry.size, "sha256": entry.sha256}  # a plugin's source
            continue
        if parts[0] == CLAIMS and claims_rel_ok("/".join(parts[1:])):
            claims["/".join(parts[1:])] = {"size": entry.size, "sha256": entry.sha256}  # .claims/ of the runs
            continue
        if len(parts) != 3 or parts[0] != "runs" or not is_run_id(parts[1]):
            raise ManifestError(f"{source}: {rel[:80]!r} is not a run file (runs/<run id>/<file>), a plugin "
                                "source (plugins/<path>.py) or claims state (claims/registry.jsonl, "
                                "claims/sequential/<experiment>@<scale>.json)")
        runs.setdefault(parts[1], {"files": {}})["files"][parts[2]] = {"size": entry.size, "sha256": entry.sha256}
    experiments = manifest.extra.get("experiments", [])
    _check(isinstance(experiments, list), source, "experiments", "a list")
    for i, exp in enumerate(experiments):
        _experiment(exp, f"experiments[{i}]", source, runs)
    created = manifest.extra.get("created", 0)
    _check(isinstance(created, (int, float)) and not isinstance(created, bool), source, "created", "a number")
    return ArchiveManifest({**manifest.extra, "experiments": experiments, "runs": runs, "plugins": plugins,
                            "claims": claims}, manifest.files)


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
    keys: set[tuple[str, str]] = set()
    for j, plan in enumerate(plans):
        where = f"{key}.plans[{j}]"
        _check(isinstance(plan, dict), source, where, "a table")
        _check(isinstance(plan.get("scale"), str) and plan["scale"] in SCALES, source, f"{where}.scale",
               f"a scale ({', '.join(SCALES.names())})")
        overrides = plan.get("overrides_json") or "{}"
        try:
            parsed = json.loads(overrides) if isinstance(overrides, str) else None
        except (ValueError, RecursionError):
            parsed = None
        _check(isinstance(parsed, dict), source, f"{where}.overrides_json", "the JSON text of a table")
        _overrides(parsed, f"{where}.overrides_json", source)  # type: ignore[arg-type]
        plan_key = (plan["scale"], json.dumps(parsed, sort_keys=True, default=str))  # record_plan's plan key
        _check(plan_key not in keys, source, where, "a plan of its own (another has the same scale and overrides)")
        keys.add(plan_key)
        links = plan.get("links")
        _check(isinstance(links, list), source, f"{where}.links", "a list")
        linked: set[str] = set()
        positions: set[int] = set()
        for k, link in enumerate(links):
            at = f"{where}.links[{k}]"
            _check(isinstance(link, dict), source, at, "a table")
            _check(link.get("run_id") in runs, source, f"{at}.run_id", "a run the archive holds")
            _check(link["run_id"] not in linked, source, f"{at}.run_id", "linked once per plan (it appears twice)")
            linked.add(link["run_id"])
            axes = link.get("axes", {})
            _check(isinstance(axes, dict), source, f"{at}.axes", "a table")
            for name in axes:
                _check(name in field_names(), source, f"{at}.axes", "a table of config keys (model.*, data.*, train.*)")
            position = link.get("position", 0)
            _check(isinstance(position, int) and not isinstance(position, bool), source, f"{at}.position",
                   "an integer")
            _check(position not in positions, source, f"{at}.position", "a position of its own in the plan "
                   "(it appears twice)")
            positions.add(position)
            marks = link.get("marks", [])
            _check(isinstance(marks, list) and all(isinstance(m, str) for m in marks), source, f"{at}.marks",
                   "a list of strings")


def _overrides(overrides: dict[str, Any], key: str, source: str) -> None:
    """A plan's key as plan writes it: `--set` config keys with single values, `--seeds` (seed numbers) and
    `--axis` (config keys with lists of single values)."""
    for name, value in overrides.items():
        if name == "--seeds":
            _check(isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value),
                   source, f"{key}: --seeds", "a list of seed numbers")
        elif name == "--axis":
            _check(isinstance(value, dict) and all(k in field_names() and isinstance(v, list)
                                                   and all(_single(x) for x in v) for k, v in value.items()),
                   source, f"{key}: --axis", "a table of config keys with lists of single values")
        else:
            _check(name in field_names(), source, f"{key}: {name[:60]!r}", "a config key (model.*, data.*, train.*), "
                   "--seeds or --axis")
            _check(_single(value), source, f"{key}: {name}", "a single value (a string, number or boolean)")


def _single(value: Any) -> bool:
    """One grid value (`cemctl.grid.fields.check_scalar`'s rule)."""
    try:
        check_scalar("value", value, "", "")
    except ConfigError:
        return False
    return True
