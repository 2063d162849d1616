"""Results anyone can re-derive: `cemctl archive EXPERIMENT... [--scale S] -o FILE.tar.gz` and `cemctl import FILE`.

    archive_experiments(url, runs_root, ["fig2a", "fig3a"], scale="cpu", out="cpu.tar.gz")
    import_archive(url, runs_root, "cpu.tar.gz")       # into any database (an empty one included)

An archive holds, for each experiment, its grid file's text and its plans at the scale
(the runs each plan linked, with their axes and [[mark]] labels), and for each run the
files its results come from: config.json, result.json, metrics.jsonl, events.jsonl,
evals.json and tags.json (no checkpoints, no logs), the plugin sources the configs name,
and what `<runs>/.claims/` holds of the experiments (`claims/registry.jsonl`: the claims'
pre-registration; `claims/sequential/*.json`: the looks of `launch --until-decided`; merged on
import, never replacing a different entry here). `manifest.json` lists every file
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

RUN_FILES = (runfiles.CONFIG_FILE, runfiles.RESULT_FILE, runfiles.METRICS_FILE, runfiles.EVENTS_FILE,
             runfiles.EVALS_FILE, "tags.json", ENVIRONMENT_FILE)
MAX_MEMBER_BYTES = 256 << 20  # an append-only log (metrics.jsonl, events.jsonl): streamed, never read whole
MAX_MANIFEST_BYTES = 64 << 20
MAX_SOURCE_BYTES = 16 << 20  # a plugin's source file


def member_cap(name: str) -> int:
    """The most bytes a run file of this name may have in an archive: a JSON file's is the cap of its one reader
    (it is read whole: config.json, result.json, tags.json, evals.json, environment.json), a log's
    `MAX_MEMBER_BYTES` (streamed)."""
    from cem_core.runfiles.environment import MAX_ENVIRONMENT_BYTES
    from cem_core.runfiles.tags import MAX_TAGS_BYTES, TAGS_FILE

    if name in (runfiles.METRICS_FILE, runfiles.EVENTS_FILE):
        return MAX_MEMBER_BYTES
    return {TAGS_FILE: MAX_TAGS_BYTES, ENVIRONMENT_FILE: MAX_ENVIRONMENT_BYTES}.get(name, runfiles.MAX_JSON_BYTES)


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
    trained_here: list[str] = field(default_factory=list)  # run ids finished here too: ours kept, the archive's not
    untrusted: dict[str, Path] = field(default_factory=dict)  # plugin -> where its inert sources wait for `trust`


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def grid_file_name(grid_path: str | None, name: str) -> str:
    """The grid's file name an archive records: the file's name, or for an experiment imported from an archive
    the member's (`archived_grid_member`), so archiving an import again does not nest archive names."""
    from cemctl.db.runs import archived_grid_member

    if not grid_path:
        return f"{name}.toml"
    return archived_grid_member(grid_path) or Path(grid_path).name


def archive_experiments(url: str, runs_root: Path | str, experiments: Sequence[str], *, out: Path | str,
                        scale: str | None = None, force: bool = False) -> ArchiveResult:
    """Write the archive (gzip'd tar) of the experiments' runs at `scale` (every scale when None)."""
    from sqlalchemy import select

    from cemctl.db.engine import open_readonly_db, read_session
    from cemctl.db.models import Experiment, ExperimentRun
    from cemctl.db.runs import resolve_runs_root
    from cemctl.report.outfile import write_owned_file

    if not experiments:
        raise ConfigError("archive", "name at least one experiment", allowed=["EXPERIMENT ..."])
    engine = open_readonly_db(url)
    root = resolve_runs_root(engine, runs_root)  # unnamed: the runs folder the database recorded
    manifest: dict[str, Any] = {"created": time.time(), "experiments": [], "runs": {}}
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
            for link in s.scalars(q.order_by(ExperimentRun.scale, ExperimentRun.position, ExperimentRun.run_id)):
                links_ = plans.setdefault((link.scale, link.overrides_json), [])
                # the position in the archive is the link's place in its plan's order: a plan recorded in parts
                # (until-decided rounds before positions were the grid's) may hold one position twice
                links_.append({"run_id": link.run_id, "axes": json.loads(link.axes_json or "{}"),
                               "position": len(links_), "marks": json.loads(link.marks_json or "[]")})
            if not plans:
                raise CemError(f"archive: experiment {name!r} has no runs" + (f" at scale {scale!r}" if scale else ""))
            manifest["experiments"].append({
                "name": exp.name, "description": exp.description, "figure": exp.figure,
                "grid_file": grid_file_name(exp.grid_path, exp.name),
                "grid_text": exp.grid_text, "grid_sha256": exp.grid_sha256,
                "plans": [{"scale": sc, "overrides_json": ov, "links": links} for (sc, ov), links in plans.items()]})
            for links in plans.values():
                for link in links:  # type: ignore[assignment]
                    rid = link["run_id"]  # type: ignore[index]
                    if rid in manifest["runs"]:
                        continue
                    files = {}
                    for name_ in RUN_FILES:
                        try:
                            data = runfiles.read_run_file(root / rid, name_, max_bytes=member_cap(name_))
                        except FileNotFoundError:
                            continue
                        except (runfiles.RunFileError, OSError) as e:
                            raise CemError(f"archive: run {rid}: {name_}: {str(e).split(': ', 1)[-1]}") from None
                        blobs[f"runs/{rid}/{name_}"] = data
                        files[name_] = {"size": len(data), "sha256": _sha256(data)}
                    if runfiles.CONFIG_FILE not in files:
                        raise CemError(f"archive: run {rid} has no config.json in {root / rid} (--runs-dir?)")
                    why = run_files_problem(root / rid)
                    if why:
                        raise CemError(f"archive: run {rid}: {why} (an import would refuse it; repair the run or "
                                       "leave its experiment out)")
                    manifest["runs"][rid] = {"files": files}
    _add_plugin_sources(root, manifest, blobs)
    from cemctl.services.claim_plans import claims_state

    scales = {e["name"]: [p["scale"] for p in e["plans"]] for e in manifest["experiments"]}
    blobs.update({f"claims/{rel}": data for rel, data in claims_state(root, scales).items()})
    from cem_core.runfiles.manifest import FileEntry
    from cemctl.services.archive_manifest import archive_manifest_bytes

    files = {name: FileEntry(len(data), _sha256(data)) for name, data in blobs.items()}  # type: ignore[misc]
    manifest_bytes = archive_manifest_bytes(manifest["experiments"], files, created=manifest["created"])  # type: ignore[arg-type]

    def write(tmp: Path) -> None:
        with tarfile.open(tmp, "w:gz", compresslevel=9) as tar:
            for name_, data in [("manifest.json", manifest_bytes), *sorted(blobs.items())]:
                info = tarfile.TarInfo(name_)
                info.size, info.mtime, info.mode = len(data), int(manifest["created"]), 0o644
                tar.addfile(info, io.BytesIO(data))

    path = write_owned_file(Path(out), write, force=force)
    return ArchiveResult(path, list(experiments), len(manifest["runs"]), len(blobs), path.stat().st_size)


MAX_TOTAL_BYTES = 32 << 30  # every member together, unpacked (a decompression bomb stops here, on disk, not in memory)
MAX_MEMBERS = 1_000_000
CHUNK = 1 << 20
STAGING_PREFIX = ".import-"
STAGING_MARK = ".cemctl-import"  # the file that proves a staging folder is an import's own (removed when it is dead)


def run_files_problem(run_dir: Path) -> str:
    """'<file>: why' when a JSON run file (result.json, tags.json, evals.json, environment.json) is not what its one
    reader reads ('' when all are): what archive and import refuse. An archived result.json has no grace period:
    one that is not JSON is damaged, not 'still arriving'."""
    import math

    from cem_core.runfiles.environment import read_environment
    from cem_core.runfiles.evals import read_evals
    from cem_core.runfiles.results import read_result_file
    from cem_core.runfiles.tags import TAGS_FILE, read_tags

    problem = read_result_file(run_dir, now=math.inf).problem
    if problem:
        return problem
    for name, read in ((TAGS_FILE, read_tags), (runfiles.EVALS_FILE, read_evals), (ENVIRONMENT_FILE, read_environment)):
        try:
            read(run_dir)
        except (runfiles.RunFileError, ConfigError) as e:
            why = str(e).replace(str(Path(run_dir) / name), "").lstrip(": ").split("; ")[0]
            return f"{name}: {why}"
    return ""


def _add_plugin_sources(root: Path, manifest: dict[str, Any], blobs: dict[str, bytes]) -> None:
    """The sources of the plugins the archived runs' configs name (`plugins`), from the runs root's copy of them
    (`cem_core.plugins`), as members `plugins/<path>.py`: an archive of a plugin experiment imports anywhere."""
    from cem_core.plugins import PLUGINS_DIR, plugin_sources, untrusted_plugins
    from cem_core.plugin_context import parse_names

    tops: set[str] = set()
    for rid in manifest["runs"]:
        try:  # the bytes archived, parsed by the one reader of config.json (import parses them so too)
            cfg = runfiles.parse_config(blobs[f"runs/{rid}/{runfiles.CONFIG_FILE}"],
                                        str(root / rid / runfiles.CONFIG_FILE)).config
        except ConfigError as e:
            raise CemError(f"archive: run {rid}: {e}") from None
        if cfg.plugins:
            tops.update(n.split(".")[0] for n in parse_names(cfg.plugins))
    waiting = {u.name: u.folder for u in untrusted_plugins(root)}  # an archive's, not trusted: passed on as data
    for top in sorted(tops):
        found = (plugin_sources(top, root / PLUGINS_DIR) or plugin_sources(top)
                 or (plugin_sources(top, waiting[top]) if top in waiting else []))
        if not found:
            raise CemError(f"archive: the runs use the plugin {top!r}, and its source is neither in {root / PLUGINS_DIR} "
                           "nor importable here (plan the grid again, or install the plugin)")
        for rel, path in found:
            blobs[f"plugins/{rel}"] = path.read_bytes()


def _stage_done(name: str) -> None:
    """Where the tests kill an import (`CEMCTL_TEST_KILL_IMPORT_AT=staged|checked|moved|planned`): SIGKILL, as a
    user's Ctrl-\\ or an OOM killer would, to prove every stage leaves the project as before or finishable."""
    if os.environ.get("CEMCTL_TEST_KILL_IMPORT_AT") == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _open_regular(path: Path) -> Any:
    """`path` opened for reading only if it is a regular file (a FIFO or a device is refused at once, never read)."""
    import stat as st

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ArchiveError(f"import: {path}: no such file") from None
    except OSError as e:
        raise ArchiveError(f"import: {path}: cannot be opened ({e.strerror or e})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not st.S_ISREG(mode):
            what = "a FIFO" if st.S_ISFIFO(mode) else "a device" if st.S_ISCHR(mode) or st.S_ISBLK(mode) else \
                "a folder" if st.S_ISDIR(mode) else "not a regular file"
            raise ArchiveError(f"import: {path}: refused: {what} (an archive is a .tar.gz file)")
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _member_path(name: str, path: Path) -> tuple[str, str] | None:
    """(run id, file name) of `runs/<run id>/<file>`, ("plugins", path) of `plugins/<path>.py`, ("claims", path) of
    `claims/registry.jsonl` and `claims/sequential/<experiment>@<scale>.json`; None for manifest.json; anything else
    is refused."""
    from cem_core.names import is_run_id
    from cem_core.runfiles.manifest import _safe_rel
    from cemctl.services.claim_plans import claims_rel_ok

    if name == "manifest.json":
        return None
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "runs" and is_run_id(parts[1]) and parts[2] in RUN_FILES:
        return parts[1], parts[2]
    if parts[0] == "plugins" and len(parts) >= 2 and _safe_rel(name) and parts[-1].endswith(".py"):
        return "plugins", "/".join(parts[1:])
    if parts[0] == "claims" and _safe_rel(name) and claims_rel_ok("/".join(parts[1:])):
        return "claims", "/".join(parts[1:])
    raise ArchiveError(f"import: {path}: refused member {name!r} (allowed: manifest.json, "
                       f"runs/<run id>/{{{','.join(RUN_FILES)}}}, plugins/<path>.py and claims/...)")


def _stage_archive(path: Path, stage: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Every member streamed into `stage` (hashed on the way, never held whole in memory, each and all of them
    bounded); returns the manifest (checked) and {member name: {"size", "sha256"}} of what was staged."""
    staged: dict[str, dict[str, Any]] = {}
    manifest_bytes: bytes | None = None
    total = 0
    with _open_regular(path) as raw:
        try:
            tar = tarfile.open(fileobj=raw, mode="r:*")
        except (tarfile.TarError, EOFError, OSError) as e:
            raise ArchiveError(f"import: {path}: not a cemctl archive ({e})") from None
        try:
            with tar:
                for n, m in enumerate(tar):
                    if n >= MAX_MEMBERS:
                        raise ArchiveError(f"import: {path}: more than {MAX_MEMBERS} members (not a cemctl archive)")
                    where = _member_path(m.name, path)
                    if not m.isfile():
                        raise ArchiveError(f"import: {path}: refused member {m.name!r} (only plain files)")
                    limit = MAX_MANIFEST_BYTES if where is None else MAX_SOURCE_BYTES if where[0] == "plugins" \
                        else runfiles.MAX_JSON_BYTES if where[0] == "claims" else member_cap(where[1])
                    if m.size > limit:
                        raise ArchiveError(f"import: {path}: member {m.name!r} is too large ({m.size} bytes; at most "
                                           f"{limit} for {m.name.rsplit('/', 1)[-1]}); nothing was imported")
                    if total + m.size > MAX_TOTAL_BYTES:
                        raise ArchiveError(f"import: {path}: the members are too large together (more than "
                                           f"{MAX_TOTAL_BYTES} bytes unpacked); nothing was imported")
                    if m.name in staged or (where is None and manifest_bytes is not None):
                        raise ArchiveError(f"import: {path}: member {m.name!r} appears twice")
                    f = tar.extractfile(m)
                    if where is None:
                        manifest_bytes = f.read(limit + 1) if f is not None else b""
                        continue
                    rid, name = where
                    target = stage / rid / name if rid in ("plugins", "claims") else stage / "runs" / rid / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    digest, size = hashlib.sha256(), 0
                    with open(target, "wb") as out:
                        while f is not None:
                            chunk = f.read(CHUNK)
                            if not chunk:
                                break
                            size += len(chunk)
                            if size > limit:
                                raise ArchiveError(f"import: {path}: member {m.name!r} is larger than it says")
                            digest.update(chunk)
                            out.write(chunk)
                    total += size
                    staged[m.name] = {"size": size, "sha256": digest.hexdigest()}
        except (tarfile.TarError, EOFError, zlib_error()) as e:  # type: ignore[misc]
            raise ArchiveError(f"import: {path}: truncated or damaged archive ({e}); nothing was imported") from None
    if manifest_bytes is None:
        raise ArchiveError(f"import: {path}: no manifest.json (not a cemctl archive)")
    return read_manifest(manifest_bytes, path), staged


def zlib_error() -> type:
    import zlib

    return zlib.error


def read_manifest(data: bytes, path: Path | str) -> dict[str, Any]:
    """The archive manifest through the one strict reader of "cemctl wrote these bytes" records
    (`cemctl.services.archive_manifest`: every shape checked, version 1 read too), then what import needs on top:
    experiment names that can name a folder, run files that are run files. One line (ArchiveError) otherwise."""
    from cem_core.names import check_experiment_name
    where = f"import: {path}: manifest.json"
    try:
        m = read_archive_manifest(data, where).doc
    except ManifestError as e:
        raise ArchiveError(str(e)) from None
    names = set()
    for i, e in enumerate(m["experiments"]):  # type: ignore[misc]
        try:
            check_experiment_name(e.get("name"))
        except ConfigError as err:
            raise ArchiveError(f"{where}: experiments[{i}].name: {err.message}") from None
        if e["name"] in names:
            raise ArchiveError(f"{where}: experiments[{i}].name: {e['name']!r} appears twice")
        names.add(e["name"])
        if e.get("grid_sha256") and e.get("grid_text") and _sha256(e["grid_text"].encode()) != e["grid_sha256"]:
            raise ArchiveError(f"{where}: experiments[{i}].grid_sha256: not the sha256 of its grid_text "
                               "(edited or damaged manifest)")
    for rid, r in m["runs"].items():
        if runfiles.CONFIG_FILE not in r["files"]:
            raise ArchiveError(f"{where}: runs.{rid}: no config.json listed")
        for name in r["files"]:
            if name not in RUN_FILES:
                raise ArchiveError(f"{where}: runs/{rid}/{name[:40]}: not a run file (allowed: {', '.join(RUN_FILES)})")
    return m


def _clean_stale_stagings(root: Path) -> None:
    """Staging folders of imports that were killed (their process is gone): removed; nothing else is touched."""
    import shutil

    if not root.is_dir():
        return
    for entry in os.scandir(root):
        if not entry.name.startswith(STAGING_PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            pid = int((Path(entry.path) / STAGING_MARK).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # not proven to be an import's: left alone
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # still running
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
        except PermissionError:
            continue


def import_archive(url: str, runs_root: Path | str, path: Path | str) -> ImportResult:
    """Import an archive, all or nothing (see the module docstring)."""
    from cem_core.runfiles.lock import one_at_a_time
    from cemctl.db import open_db
    from cemctl.db.engine import is_readonly
    from cemctl.db.runs import refresh_plugin_copy, resolve_runs_root

    path = Path(path)
    _open_regular(path).close()  # no such file, a FIFO, a folder: one line before a database is made
    engine = open_db(url)  # a database that refuses writes is one line now, before anything is read or written
    if is_readonly(engine):
        raise ArchiveError(f"import: {url} is read-only here: nothing was imported")
    root = resolve_runs_root(engine, runs_root)  # the runs folder the project recorded, not a bare ./runs
    refresh_plugin_copy(root)
    made_root = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    with one_at_a_time(root, f"import: another cemctl import into {root} is running; nothing was imported (import "
                       "again when it has ended)"):
        imported = False
        try:
            result = _import(engine, root, path)
            imported = True
            return result
        finally:
            if made_root and not imported:  # a refused import leaves no runs folder it made either
                try:
                    root.rmdir()
                except OSError:
                    pass


def _import(engine: Any, root: Path, path: Path) -> ImportResult:
    import shutil

    from cem_core.config import RunConfig, saved_run_id
    from cem_core.plugins import untrusted_plugins
    from cemctl.db import record_plan, sync_runs

    _clean_stale_stagings(root)
    stage = Path(runfiles_mkdtemp(root))  # inside the runs folder: each run goes into place by one rename
    try:
        (stage / STAGING_MARK).write_text(f"{os.getpid()} {path}\n")
        manifest, staged = _stage_archive(path, stage)
        _stage_done("staged")
        listed = {f"runs/{rid}/{name}": meta for rid, r in manifest["runs"].items() for name, meta in r["files"].items()}
        listed.update({f"plugins/{rel}": meta for rel, meta in manifest.get("plugins", {}).items()})
        listed.update({f"claims/{rel}": meta for rel, meta in manifest.get("claims", {}).items()})
        for name, got in staged.items():
            meta = listed.get(name)
            if meta is None:
                raise ArchiveError(f"import: {path}: {name} is not in the manifest")
            if got != {"size": meta["size"], "sha256": meta["sha256"]}:
                raise ArchiveError(f"import: {path}: {name} does not match its sha256 in the manifest (damaged archive)")
        missing = sorted(set(listed) - set(staged))
        if missing:
            raise ArchiveError(f"import: {path}: {missing[0]} is listed in the manifest but missing")
        result = ImportResult(path, [e["name"] for e in manifest["experiments"]])
        plugin_tops = _check_plugins(stage, manifest, path)  # never importable: an archive is data
        configs: dict[str, RunConfig] = {}
        for rid in manifest["runs"]:
            raw = (stage / "runs" / rid / runfiles.CONFIG_FILE).read_bytes()
            try:  # the one reader of config.json
                cfg = runfiles.parse_config(raw, f"{path}: runs/{rid}/{runfiles.CONFIG_FILE}").config
            except ConfigError as e:
                raise ArchiveError(f"import: {e}") from None
            if saved_run_id(cfg) != rid:  # without importing the plugins it names
                raise ArchiveError(f"import: {path}: run {rid}: config.json hashes to {saved_run_id(cfg)}, "
                                   "not its run id")
            configs[rid] = cfg
        _check_named_plugins(configs, plugin_tops, manifest, path)
        for rid in manifest["runs"]:  # every JSON run file as its one reader reads it: nothing moves otherwise
            why = run_files_problem(stage / "runs" / rid)
            if why:
                raise ArchiveError(f"import: {path}: runs/{rid}/{why}; nothing was imported")
        _check_axes(manifest, configs, path)
        plans = [_ImportedPlan(exp, plan, configs, path.name) for exp in manifest["experiments"]
                 for plan in exp["plans"]]
        _check_experiments(engine, manifest, plans, path)  # what recording the plans would refuse: before any move
        _check_runs_here(engine, manifest, root, stage, result)
        claims = _check_claims(manifest, root, stage, path)
        _stage_done("checked")
        if plugin_tops:  # kept inert until `cemctl trust` (nothing of them is imported or copied for the jobs)
            _place_plugins(stage, root, manifest, plugin_tops, path)
        for rid in manifest["runs"]:  # every check passed: the new runs go into place, each by one rename
            if rid not in result.present and rid not in result.trained_here:
                os.rename(stage / "runs" / rid, root / rid)
                result.imported.append(rid)
                _stage_done("moved")
        for plan in plans:
            record_plan(engine, plan, root)
        if claims:
            from cemctl.services.claim_plans import apply_claims_merge

            apply_claims_merge(root, claims)  # the registrations and until-decided looks of these runs
        _stage_done("planned")
        sync_runs(engine, root, run_ids=list(manifest["runs"]))  # tags and notes too (tags.json)
        tops = {rel.split("/")[0].removesuffix(".py") for rel in manifest.get("plugins", {})}
        result.untrusted = {u.name: u.folder for u in untrusted_plugins(root) if u.name in tops}
        return result
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _check_plugins(stage: Path, manifest: dict[str, Any], path: Path) -> list[str]:
    """The top-level names of the archive's plugin sources that are not here already with the very same files; a
    plugin of the same name here (trusted, or waiting for trust) with other sources is refused (it would be
    replaced, or shadow the archive's). Nothing is imported: `find_spec` of a top-level name runs no code."""
    import filecmp

    from cem_core.plugins import PluginError, _root_of, check_name, plugin_sources, untrusted_plugins

    tops = sorted({rel.split("/")[0].removesuffix(".py") for rel in manifest.get("plugins", {})})
    for top in tops:  # never a name Python would take for another module (the standard library, an installed one)
        try:
            check_name(top, stage / "plugins")
        except PluginError as e:
            raise ArchiveError(f"import: {path}: the archive's plugin {e.message}; nothing was imported") from None
    waiting: dict[str, list[Path]] = {}
    for u in untrusted_plugins(stage.parent):
        waiting.setdefault(u.name, []).append(u.folder)
    new = []
    for top in tops:
        theirs = {rel: stage / "plugins" / rel for rel in manifest["plugins"] if rel.split("/")[0].removesuffix(".py") == top}
        for here in [f for f in (_root_of(top), *waiting.get(top, ())) if f is not None]:
            ours = {rel: p for rel, p in plugin_sources(top, here)}
            if set(ours) != set(theirs) or not all(filecmp.cmp(ours[r], theirs[r], shallow=False) for r in ours):
                raise ArchiveError(f"import: {path}: the archive's plugin {top!r} differs from the one here ({here}); "
                                   "nothing was imported (rename one of them, or import into another project)")
            break
        else:
            new.append(top)
    return new


def _check_named_plugins(configs: dict[str, Any], new_tops: list[str], manifest: dict[str, Any], path: Path) -> None:
    """Every plugin a run's config names is one the archive carries, one of this project's own (a source here), or
    an installed cemctl plugin (an entry point): else a command reading the run would import whatever module of that
    name is installed here (`this`, `numpy`). Refused, naming the run; nothing is imported."""
    from cem_core.plugin_context import parse_names
    from cem_core.plugins import PluginError, _root_of, check_not_taken, installed_plugins

    carried = {rel.split("/")[0].removesuffix(".py") for rel in manifest.get("plugins", {})}
    installed: set[str] | None = None
    for rid, cfg in configs.items():
        for top in sorted({n.split(".")[0] for n in parse_names(cfg.plugins)} if cfg.plugins else ()):
            try:
                check_not_taken(top)
            except PluginError as e:
                raise ArchiveError(f"import: {path}: run {rid}: its config names the plugin {e.message}; nothing was "
                                   "imported") from None
            if top in carried:
                continue
            installed = installed_plugins() if installed is None else installed
            if top in installed or (_root_of(top) is not None and top not in new_tops):
                continue
            raise ArchiveError(f"import: {path}: run {rid}: its config names the plugin {top!r}, which the archive "
                               "does not carry and no plugin here provides; nothing was imported")


def _place_plugins(stage: Path, root: Path, manifest: dict[str, Any], tops: list[str], path: Path) -> None:
    """The archive's plugin sources kept, inert, in the runs root (`.plugins-imported/<digest>/`, content-addressed,
    with a manifest of their sizes and sha256s): nothing imports them and the jobs' copy does not get them until
    `cemctl trust NAME` (`cem_core.plugins.trust_plugin`)."""
    import shutil
    import tempfile

    from cem_core.plugins import IMPORTED_DIR, IMPORTED_WHAT
    from cem_core.runfiles.manifest import write_manifest

    rels = sorted(rel for rel in manifest["plugins"] if rel.split("/")[0].removesuffix(".py") in tops)
    digest = hashlib.sha256()
    for rel in rels:
        digest.update(f"plugins/{rel}".encode() + b"\0" + (stage / "plugins" / rel).read_bytes())
    home = root / IMPORTED_DIR / digest.hexdigest()[:16]
    if not os.path.lexists(home):  # content-addressed: one there already holds these very sources
        home.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{home.name}.", dir=home.parent))  # ours alone
        try:
            for rel in rels:
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(stage / "plugins" / rel, tmp / rel)
            write_manifest(tmp, what=IMPORTED_WHAT, extra={"archive": path.name})  # the files' sha256s, as copied
            runfiles.publish_dir(tmp, home)  # False: another import placed the same sources meanwhile
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _project_runs_root(url: str, runs_root: Path | str) -> Path:
    """The runs folder of the project at `url` (the one its database recorded unless one is named), opened read-only."""
    from cemctl.db.engine import DatabaseError, open_existing_db
    from cemctl.db.runs import resolve_runs_root

    try:
        engine = open_existing_db(url)
    except DatabaseError as e:
        if "no results database" not in str(e):
            raise
        engine = None
    return resolve_runs_root(engine, runs_root)


def plugins_to_trust(url: str, runs_root: Path | str) -> tuple[Path, list[Any]]:
    """(the runs root, the plugin sources archives brought there that nothing imports yet: `Untrusted`s)."""
    from cem_core.plugins import untrusted_plugins

    root = _project_runs_root(url, runs_root)
    return root, untrusted_plugins(root)


def trust(url: str, runs_root: Path | str, name: str) -> Any:
    """Trust the plugin `name` an archive brought (`cem_core.plugins.trust_plugin`): the jobs' copy takes it, and
    commands import it where a config needs it. Returns its `Untrusted` (what was trusted)."""
    from cem_core.plugins import trust_plugin

    return trust_plugin(_project_runs_root(url, runs_root), name)


def runfiles_mkdtemp(root: Path) -> str:
    import tempfile

    return tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=root)


def _check_claims(manifest: dict[str, Any], root: Path, stage: Path, path: Path) -> Any:
    """The archive's `.claims/` state against what is here (`cemctl.services.claim_plans.check_claims_merge`):
    what to add, refused in one line where it differs from an entry here; nothing written."""
    from cemctl.services.claim_plans import check_claims_merge

    members = {rel: (stage / "claims" / rel).read_bytes() for rel in manifest.get("claims", {})}
    if not members:
        return None
    try:
        return check_claims_merge(root, members, [e["name"] for e in manifest["experiments"]], f"import: {path}")
    except CemError as e:
        raise ArchiveError(str(e)) from None


def _check_axes(manifest: dict[str, Any], configs: dict[str, Any], path: Path) -> None:
    """Each link's axes are its run's config values (plan records them so; status, labels and figures read them)."""
    from cem_core.config import flatten

    flat: dict[str, dict[str, Any]] = {}
    for i, exp in enumerate(manifest["experiments"]):
        for j, plan in enumerate(exp["plans"]):
            for k, link in enumerate(plan["links"]):
                rid = link["run_id"]
                values = flat.setdefault(rid, flatten(configs[rid].to_dict()))
                for key, value in link.get("axes", {}).items():
                    if json.dumps(value, sort_keys=True, default=str) != \
                            json.dumps(values.get(key), sort_keys=True, default=str):
                        raise ArchiveError(
                            f"import: {path}: manifest.json: experiments[{i}].plans[{j}].links[{k}].axes: {key} = "
                            f"{str(value)[:40]!r}, but run {rid}'s config.json has {str(values.get(key))[:40]!r} "
                            "(edited or damaged manifest)")


def _check_experiments(engine: Any, manifest: dict[str, Any], plans: list[_ImportedPlan], path: Path) -> None:
    """An experiment of the same name here must be the same grid (the same text): never taken over by another.
    Asked of `cemctl.db.runs.check_plan` (the rule `record_plan` applies), so recording the plans after the run
    folders moved in cannot refuse what this let through."""
    from cemctl.db.runs import ExperimentClash, check_plan, get_experiment
    from cemctl.grid.kinds import FIGURE_KINDS

    for exp in manifest["experiments"]:
        if exp.get("figure"):
            try:
                FIGURE_KINDS.check(exp["figure"])
            except ConfigError as e:
                raise ArchiveError(f"import: {path}: experiment {exp['name']!r}: {e.message}") from None
    for plan in plans:
        try:
            check_plan(engine, plan)  # type: ignore[arg-type]
        except ExperimentClash:
            local = get_experiment(engine, plan.name)
            ours = f", sha256 {local.grid_sha256[:12]}" if local is not None and local.grid_sha256 else ""
            raise ArchiveError(
                f"import: {path}: experiment {plan.name!r} is here already from another grid "
                f"({local.grid_path if local is not None else '?'}{ours}; the archive's: "
                f"{plan.sha256[:12] or 'no sha256'}); nothing was imported "
                "(import into another project, or rename the experiment here)") from None
        except ConfigError as e:
            raise ArchiveError(f"import: {path}: experiment {plan.name!r}: {e.message}") from None


def _check_runs_here(engine: Any, manifest: dict[str, Any], root: Path, stage: Path, result: ImportResult) -> None:
    """A run already here must hold the same files (then it is skipped); a result the database recorded for a run
    id must be the archive's."""
    from sqlalchemy import select

    from cem_core.runfiles.manifest import file_digest
    from cemctl.db.engine import read_session
    from cemctl.db.models import Result

    with read_session(engine) as s:
        recorded = dict(s.execute(select(Result.run_id, Result.result_json)
                                  .where(Result.run_id.in_(list(manifest["runs"])))).all())
    from cem_core.runfiles.results import read_result_file

    for rid, meta in manifest["runs"].items():
        here = root / rid
        if os.path.lexists(here):
            differs = []
            for name, info in meta["files"].items():
                try:  # hashed as it is read (a log may be large): never held whole
                    ours = file_digest(runfiles.confined_path(here, name))
                except FileNotFoundError:
                    ours = None
                except (runfiles.RunFileError, OSError) as e:
                    raise ArchiveError(f"import: run {rid}: {here / name}: {str(e).split(': ', 1)[-1]}") from None
                if ours is None and name not in (runfiles.CONFIG_FILE, runfiles.RESULT_FILE):
                    continue  # a metrics or events file this copy does not have yet: not a conflict
                if ours is None or (ours.size, ours.sha256) != (info["size"], info["sha256"]):
                    differs.append(name)
            # the same run (its config) trained here as well as where the archive was made: ours is kept
            trained_here = (runfiles.CONFIG_FILE not in differs and read_result_file(here).result is not None
                            and read_result_file(stage / "runs" / rid).result is not None)
            if differs and not trained_here:
                raise ArchiveError(f"import: run {rid} is already in {root} with a different {differs[0]}; "
                                   "nothing was imported (import into another --runs-dir, or remove it yourself)")
            (result.trained_here if differs else result.present).append(rid)
        elif rid in recorded and runfiles.RESULT_FILE in meta["files"]:
            ours = json.loads(recorded[rid] or "{}")
            theirs = json.loads((stage / "runs" / rid / runfiles.RESULT_FILE).read_bytes())
            if ours and _typed(ours) != _typed(theirs):
                raise ArchiveError(f"import: run {rid}: the database already records another result for it (its "
                                   f"folder {here} is gone); nothing was imported")


def _typed(result: Any) -> Any:
    """A result as the one rule reads it (`cem_core.runfiles.RunResult`): what the database keeps of it."""
    try:
        return runfiles.RunResult.parse(result).to_json()
    except runfiles.NotAResult:
        return result


@dataclass
class _ImportedRun:
    run_id: str
    config: Any
    axes: dict[str, Any]
    marks: list[str]


class _ImportedPlan:
    """What `record_plan` needs, from an archive's experiment and one of its plans."""

    def __init__(self, exp: dict[str, Any], plan: dict[str, Any], configs: dict[str, Any], archive: str = "") -> None:
        from cemctl.db.runs import archived_grid_path

        self.name, self.description, self.figure = exp["name"], exp.get("description", ""), exp.get("figure", "")
        grid = exp.get("grid_file", "") or f"{exp['name']}.toml"
        # the grid's path as the archive names it: never a file here that happens to share its name
        self.path = archived_grid_path(archive, grid)
        self.text = exp.get("grid_text", "")
        # an archive without the sha names its grid by the text's (checked equal when both are given: read_manifest)
        self.sha256 = exp.get("grid_sha256", "") or (_sha256(self.text.encode()) if self.text else "")
        self.scale = plan["scale"]
        self.plan_overrides = json.loads(plan.get("overrides_json") or "{}")
        self.overrides = {k: v for k, v in self.plan_overrides.items() if k != "--seeds"}
        links = sorted(plan["links"], key=lambda link: link.get("position", 0))
        self.runs = [_ImportedRun(link["run_id"], configs[link["run_id"]], link.get("axes", {}), link.get("marks", []))
                     for link in links]
