"""Results anyone can re-derive: `cemctl archive EXPERIMENT... [--scale S] -o FILE.tar.gz` and `cemctl import FILE`.

    archive_experiments(url, runs_root, ["fig2a", "fig3a"], scale="cpu", out="cpu.tar.gz")
    import_archive(url, runs_root, "cpu.tar.gz")       # into any database (an empty one included)

An archive holds, for each experiment, its grid file's text and its plans at the scale
(the runs each plan linked, with their axes and [[mark]] labels), and for each run the
files its results come from: config.json, result.json, metrics.jsonl, events.jsonl,
evals.json and tags.json (no checkpoints, no logs). `manifest.json` lists every file
with its size and sha256. Import checks everything before it writes anything: every
member a plain file at its listed path, every hash, every config.json hashing to its
run id; a run id already present with other content is refused (nothing is replaced);
present with the same content, it is skipped, so importing twice changes nothing. Then
the run folders are written (each built aside and renamed into place), the plans
recorded and the runs ingested, so `cemctl claims` and `cemctl report` read them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from cem_core import runfiles
from cem_core.runfiles.files import ENVIRONMENT_FILE
from cem_core.errors import CemError, ConfigError
from cem_core.runfiles.manifest import ManifestError
from cemctl.services.archive_manifest import read_archive_manifest

FORMAT = "cemctl-archive"
VERSION = 1
RUN_FILES = (runfiles.CONFIG_FILE, runfiles.RESULT_FILE, runfiles.METRICS_FILE, runfiles.EVENTS_FILE,
             runfiles.EVALS_FILE, "tags.json", ENVIRONMENT_FILE)
MAX_MEMBER_BYTES = 256 << 20
MAX_MANIFEST_BYTES = 64 << 20


class ArchiveError(CemError):
    """The archive is not one cemctl wrote, or does not match its manifest, or conflicts with what is here."""


@dataclass
class ArchiveResult:
    path: Path
    experiments: list[str]
    runs: int
    files: int
    bytes: int


@dataclass
class ImportResult:
    path: Path
    experiments: list[str]
    imported: list[str] = field(default_factory=list)  # run ids written
    present: list[str] = field(default_factory=list)  # run ids already here with the same content


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def archive_experiments(url: str, runs_root: Path | str, experiments: Sequence[str], *, out: Path | str,
                        scale: str | None = None, force: bool = False) -> ArchiveResult:
    """Write the archive (gzip'd tar) of the experiments' runs at `scale` (every scale when None)."""
    from sqlalchemy import select

    from cemctl.db.engine import open_readonly_db, read_session
    from cemctl.db.models import Experiment, ExperimentRun
    from cemctl.report.outfile import write_owned_file

    if not experiments:
        raise ConfigError("archive", "name at least one experiment", allowed=["EXPERIMENT ..."])
    engine = open_readonly_db(url)
    root = Path(runs_root)
    manifest: dict[str, Any] = {"format": FORMAT, "version": VERSION, "created": time.time(), "experiments": [],
                                "runs": {}}
    blobs: dict[str, bytes] = {}
    with read_session(engine) as s:
        for name in experiments:
            exp = s.scalars(select(Experiment).where(Experiment.name == name)).one_or_none()
            if exp is None:
                known = ", ".join(s.scalars(select(Experiment.name).order_by(Experiment.name))) or "none"
                raise CemError(f"archive: unknown experiment {name!r} (known: {known})")
            q = select(ExperimentRun).where(ExperimentRun.experiment_id == exp.id)
            if scale is not None:
                q = q.where(ExperimentRun.scale == scale)
            plans: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for link in s.scalars(q.order_by(ExperimentRun.scale, ExperimentRun.position)):
                plans.setdefault((link.scale, link.overrides_json), []).append(
                    {"run_id": link.run_id, "axes": json.loads(link.axes_json or "{}"), "position": link.position,
                     "marks": json.loads(link.marks_json or "[]")})
            if not plans:
                raise CemError(f"archive: experiment {name!r} has no runs" + (f" at scale {scale!r}" if scale else ""))
            manifest["experiments"].append({
                "name": exp.name, "description": exp.description, "figure": exp.figure,
                "grid_file": Path(exp.grid_path).name if exp.grid_path else f"{exp.name}.toml",
                "grid_text": exp.grid_text, "grid_sha256": exp.grid_sha256,
                "plans": [{"scale": sc, "overrides_json": ov, "links": links} for (sc, ov), links in plans.items()]})
            for links in plans.values():
                for link in links:
                    rid = link["run_id"]
                    if rid in manifest["runs"]:
                        continue
                    files = {}
                    for name_ in RUN_FILES:
                        try:
                            data = runfiles.read_run_file(root / rid, name_, max_bytes=MAX_MEMBER_BYTES)
                        except FileNotFoundError:
                            continue
                        except (runfiles.RunFileError, OSError) as e:
                            raise CemError(f"archive: run {rid}: {name_}: {str(e).split(': ', 1)[-1]}") from None
                        blobs[f"runs/{rid}/{name_}"] = data
                        files[name_] = {"size": len(data), "sha256": _sha256(data)}
                    if runfiles.CONFIG_FILE not in files:
                        raise CemError(f"archive: run {rid} has no config.json in {root / rid} (--runs-dir?)")
                    manifest["runs"][rid] = {"files": files}
    manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode()

    def write(tmp: Path) -> None:
        with tarfile.open(tmp, "w:gz", compresslevel=9) as tar:
            for name_, data in [("manifest.json", manifest_bytes), *sorted(blobs.items())]:
                info = tarfile.TarInfo(name_)
                info.size, info.mtime, info.mode = len(data), int(manifest["created"]), 0o644
                tar.addfile(info, io.BytesIO(data))

    path = write_owned_file(Path(out), write, force=force)
    return ArchiveResult(path, list(experiments), len(manifest["runs"]), len(blobs), path.stat().st_size)


def _read_archive(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and every run file, each checked against it (nothing is written)."""
    try:
        tar = tarfile.open(path, "r:*")
    except (OSError, tarfile.TarError) as e:
        raise ArchiveError(f"import: {path}: not a cemctl archive ({e})") from None
    members: dict[str, bytes] = {}
    with tar:
        for m in tar:
            parts = Path(m.name).parts
            if not m.isfile() or m.name.startswith("/") or ".." in parts or len(parts) > 3:
                raise ArchiveError(f"import: {path}: refused member {m.name!r} (only plain files under runs/)")
            if m.size > (MAX_MANIFEST_BYTES if m.name == "manifest.json" else MAX_MEMBER_BYTES):
                raise ArchiveError(f"import: {path}: member {m.name!r} is too large ({m.size} bytes)")
            f = tar.extractfile(m)
            members[m.name] = f.read() if f is not None else b""
    try:  # the one strict reader of "cemctl wrote these bytes" records (every shape checked, old ones read)
        parsed = read_archive_manifest(members.pop("manifest.json", None), f"import: {path}: manifest.json")
    except ManifestError as e:
        raise ArchiveError(str(e)) from None
    manifest = parsed.doc
    listed = {name: {"size": e.size, "sha256": e.sha256} for name, e in parsed.files.items()}
    for name, data in members.items():
        meta = listed.get(name)
        if meta is None:
            raise ArchiveError(f"import: {path}: {name} is not in the manifest")
        if len(data) != meta.get("size") or _sha256(data) != meta.get("sha256"):
            raise ArchiveError(f"import: {path}: {name} does not match its sha256 in the manifest (damaged archive)")
    missing = sorted(set(listed) - set(members))
    if missing:
        raise ArchiveError(f"import: {path}: {missing[0]} is listed in the manifest but missing")
    return manifest, members


def import_archive(url: str, runs_root: Path | str, path: Path | str) -> ImportResult:
    from cem_core.config import RunConfig, run_id
    from cem_core.names import is_run_id
    from cemctl.db import open_db, record_plan, sync_runs

    path, root = Path(path), Path(runs_root)
    manifest, members = _read_archive(path)
    result = ImportResult(path, [e["name"] for e in manifest.get("experiments", [])])
    configs: dict[str, RunConfig] = {}
    for rid, meta in manifest.get("runs", {}).items():
        if not is_run_id(rid):
            raise ArchiveError(f"import: {path}: {rid!r} is not a run id")
        raw = members.get(f"runs/{rid}/{runfiles.CONFIG_FILE}")
        try:  # the one reader of config.json
            cfg = runfiles.parse_config(raw, f"{path}: runs/{rid}/{runfiles.CONFIG_FILE}").config
        except ConfigError as e:
            raise ArchiveError(f"import: {e}") from None
        if run_id(cfg) != rid:
            raise ArchiveError(f"import: {path}: run {rid}: config.json hashes to {run_id(cfg)}, not its run id")
        configs[rid] = cfg
        here = root / rid
        if os.path.lexists(here):
            for name, info in meta["files"].items():
                try:
                    ours = runfiles.read_run_file(here, name, max_bytes=MAX_MEMBER_BYTES)
                except FileNotFoundError:
                    ours = None
                except (runfiles.RunFileError, OSError) as e:
                    raise ArchiveError(f"import: run {rid}: {here / name}: {str(e).split(': ', 1)[-1]}") from None
                if ours is None and name not in (runfiles.CONFIG_FILE, runfiles.RESULT_FILE):
                    continue  # a metrics or events file this copy does not have yet: not a conflict
                if ours is None or _sha256(ours) != info["sha256"]:
                    raise ArchiveError(f"import: run {rid} is already in {root} with a different {name}; "
                                       "nothing was imported (import into another --runs-dir, or remove it yourself)")
            result.present.append(rid)
    engine = open_db(url)
    for rid in manifest.get("runs", {}):
        if rid in result.present:
            continue
        tmp = root / f".{rid}.import-{os.getpid()}"
        tmp.mkdir(parents=True)
        for name in manifest["runs"][rid]["files"]:
            runfiles.atomic_write_bytes(tmp / name, members[f"runs/{rid}/{name}"], durable=False)
        os.rename(tmp, root / rid)
        result.imported.append(rid)
    for exp in manifest.get("experiments", []):
        for plan in exp.get("plans", []):
            record_plan(engine, _ImportedPlan(exp, plan, configs), root)
    sync_runs(engine, root, run_ids=list(manifest.get("runs", {})))
    from cemctl.db.tags import sync_tags

    sync_tags(engine, root, run_ids=list(manifest.get("runs", {})))
    return result


@dataclass
class _ImportedRun:
    run_id: str
    config: Any
    axes: dict[str, Any]
    marks: list[str]


class _ImportedPlan:
    """What `record_plan` needs, from an archive's experiment and one of its plans."""

    def __init__(self, exp: dict[str, Any], plan: dict[str, Any], configs: dict[str, Any]) -> None:
        self.name, self.description, self.figure = exp["name"], exp.get("description", ""), exp.get("figure", "")
        self.path, self.text, self.sha256 = exp.get("grid_file", ""), exp.get("grid_text", ""), exp.get("grid_sha256", "")
        self.scale = plan["scale"]
        self.plan_overrides = json.loads(plan.get("overrides_json") or "{}")
        self.overrides = {k: v for k, v in self.plan_overrides.items() if k != "--seeds"}
        links = sorted(plan["links"], key=lambda link: link.get("position", 0))
        self.runs = [_ImportedRun(link["run_id"], configs[link["run_id"]], link.get("axes", {}), link.get("marks", []))
                     for link in links]
