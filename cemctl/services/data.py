"""Prepared corpora, ahead of the GPUs (`cemctl data prepare|info|clean`, and the data check of `cemctl launch`).

    needs = data_needs(configs)                  # one DataNeed per cache: the largest train budget of its runs
    prepare_needs(needs, workers=2, progress=cb) # tokenize what is missing (parallel, resumable, locked)
    caches = cache_inventory(db_url, runs_root)  # every prepared cache, its size and the experiments using it
    report = clean_caches(db_url, yes=True)     # caches only finished runs of this database used

A run's data is a cache keyed by its corpus, tokenizer and split rule
(`cem_core.data.prepare.cache_key`); runs that share a key share the cache, and a
streamed corpus is prepared once for the largest train budget among them. Torch
is never imported.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from cem_core import runfiles
from cem_core.config import RunConfig
from cem_core.errors import CemError
from cem_core.variants import TASKS
from cemctl.services.targets import looks_like_file

# Runs in these states will not train again: the caches only they use may be cleaned.
FINAL_STATES = ("done", "diverged")


@dataclass
class DataNeed:
    """One cache and the runs that read it."""

    base: Path  # <cache root>/packed/<corpus>-<tokenizer>-<key>
    config: RunConfig  # a run needing the most train tokens (its data section names the cache)
    train_tokens: int  # the largest train budget among the runs (what a streamed corpus must hold)
    streaming: bool
    run_ids: list[str] = field(default_factory=list)
    experiments: set[str] = field(default_factory=set)

    @property
    def label(self) -> str:
        d = self.config.data
        corpus = d.corpus if d.corpus not in ("jsonl", "files") else f"{d.corpus} {d.path}"
        tokenizer = d.tokenizer if not d.tokenizer_path else f"{d.tokenizer} {d.tokenizer_path}"
        return f"{corpus} / {tokenizer}"

    def prepared(self) -> bool:
        from cem_core.data.prepare import find_prepared

        return find_prepared(self.config.data, self.train_tokens) is not None


def data_needs(configs: Iterable[tuple[str, str, RunConfig]]) -> list[DataNeed]:
    """Group (experiment, run_id, resolved config) by cache; language-model runs only, first-seen order."""
    from cem_core.data.prepare import cache_key, train_tokens_needed

    needs: dict[Path, DataNeed] = {}
    keys: dict[str, tuple[Path, bool]] = {}  # data section JSON -> cache base (a files corpus globs once)
    for experiment, run_id, cfg in configs:
        if not TASKS.spec(cfg.task).uses_corpus:  # e.g. the GP study makes its own data
            continue
        data_json = json.dumps(dataclasses.asdict(cfg.data), sort_keys=True)
        if data_json not in keys:
            key, _ = cache_key(cfg.data)
            keys[data_json] = (key.base, key.streaming)
        base, streaming = keys[data_json]
        tokens = train_tokens_needed(cfg)
        need = needs.get(base)
        if need is None:
            need = needs[base] = DataNeed(base, cfg, tokens, streaming)
        elif tokens > need.train_tokens:
            need.config, need.train_tokens = cfg, tokens
        need.run_ids.append(run_id)
        need.experiments.add(experiment)
    return list(needs.values())


def target_configs(target: str, *, scale: str | None, overrides: dict[str, Any], db_url: str,
                   runs_root: Path) -> tuple[str, list[tuple[str, str, RunConfig]]]:
    """The resolved configs a grid file (validated, nothing written) or a recorded experiment names."""
    from cemctl.grid.files import find_grid

    if looks_like_file(target) or find_grid(target) is not None:
        from cemctl.grid import DEFAULT_SCALE, load_grid
        from cemctl.services.plan import grid_path

        plan = load_grid(grid_path(target), scale or DEFAULT_SCALE, overrides)
        return plan.name, [(plan.name, pr.run_id, pr.config) for pr in plan.runs]
    if overrides:
        from cem_core.errors import ConfigError

        raise ConfigError("--set", f"applies to a grid file; {target!r} is a recorded experiment")
    from cemctl.db.engine import open_existing_db
    from cemctl.db.runs import list_runs

    engine = open_existing_db(db_url)
    from cemctl.services.targets import resolve_runs

    resolved = resolve_runs(engine, target, runs_root, scale=scale)
    if resolved.kind != "experiment":
        raise CemError(f"data prepare: {target!r} is a run; give its experiment or grid file")
    rows = list_runs(engine, experiment=resolved.name, scale=scale, in_grid_only=True)
    return resolved.name, [(resolved.name, r.id, runfiles.config_of_record(r.config_json, r.id)) for r in rows]


@dataclass
class Prepared:
    need: DataNeed
    path: Path  # the generation folder
    meta: dict[str, Any]
    built: bool  # False: it was already there


def prepare_needs(needs: list[DataNeed], *, workers: int = 1, workers_option: str = "--workers",
                  progress: Callable[[DataNeed, dict[str, Any]], None] | None = None,
                  on_start: Callable[[DataNeed], None] | None = None) -> list[Prepared]:
    """Prepare every missing cache of `needs` (an existing, large enough one is only opened); `workers` is at most
    4 per CPU core (ConfigError naming --workers otherwise)."""
    from cem_core.data.prepare import DEFAULT_TEST_TOKENS, DEFAULT_VAL_TOKENS, find_prepared, prepare_data

    from cemctl.executors.local.executor import check_workers

    check_workers(workers, workers_option)

    done = []
    for need in needs:
        found = find_prepared(need.config.data, need.train_tokens)
        if found is not None:
            done.append(Prepared(need, found.path, found.meta, False))
            continue
        if on_start is not None:
            on_start(need)
        cb = (lambda info, n=need: progress(n, info)) if progress is not None else None
        packed = prepare_data(need.config.data, min_train_tokens=need.train_tokens, val_tokens=DEFAULT_VAL_TOKENS,
                              test_tokens=DEFAULT_TEST_TOKENS, workers=workers, progress=cb)
        done.append(Prepared(need, packed.path, packed.meta, packed.built_here))  # or another prepare, meanwhile
    return done


class DataMissing(CemError):
    """`cemctl launch` on a cluster found runs whose data is not prepared."""


def check_launch_data(configs: list[tuple[str, str, RunConfig]], *, may_prepare: bool, experiment: str,
                      scale: str | None, workers: int = 1,
                      progress: Callable[[DataNeed, dict[str, Any]], None] | None = None,
                      on_start: Callable[[DataNeed], None] | None = None) -> list[Prepared]:
    """Before any job starts: every run's data is prepared, or is prepared here (`may_prepare`), or the launch
    is refused with one line naming the command that prepares it."""
    needs = data_needs(configs)
    missing = [n for n in needs if not n.prepared()]
    if missing and not may_prepare:
        first = missing[0]
        scale_opt = f" --scale {scale}" if scale else ""
        raise DataMissing(
            f"data not prepared for {len(first.run_ids)} run(s) of {experiment} ({first.label}"
            f"{', and %d more caches' % (len(missing) - 1) if len(missing) > 1 else ''}): run "
            f"`cemctl data prepare {experiment}{scale_opt}` on this node first, or launch with --prepare")
    return (prepare_needs(missing, workers=workers, workers_option="--data-workers", progress=progress,
                          on_start=on_start) if missing else [])


# ---------------------------------------------------------------- info and clean

META_FILE = "meta.json"


@dataclass
class CacheInfo:
    base: Path
    generation: Path | None  # the newest complete generation, None when only leftovers are there
    meta: dict[str, Any]
    size_bytes: int
    experiments: set[str] = field(default_factory=set)
    runs: int = 0
    unfinished_runs: int = 0  # runs that may still train on it (not done / diverged)
    foreign: list[str] = field(default_factory=list)  # entries cemctl did not create (never removed)

    @property
    def tokens(self) -> dict[str, int]:
        return {s: int(v.get("tokens", 0)) for s, v in self.meta.get("splits", {}).items()}


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def _generation(entry: Path) -> bool:
    return entry.name.startswith("g") and entry.name[1:].isdigit() and entry.is_dir() and not entry.is_symlink()


def _provable(entry: Path) -> bool:
    """An entry of a cache folder that a build proves it wrote: a generation with its manifest, or the chunks of
    an interrupted build (their records list their files' hashes). Checked by name here (cheap, for `info`);
    `clean` checks every byte before it deletes."""
    from cem_core.data.prepare import SHARDS
    from cem_core.runfiles.manifest import DEFAULT_NAME

    if _generation(entry):
        return os.path.lexists(entry / DEFAULT_NAME)
    return entry.name == SHARDS and entry.is_dir() and not entry.is_symlink()


def _scan_root(root: Path) -> list[CacheInfo]:
    packed = root / "packed"
    if not packed.is_dir():
        return []
    out = []
    for base in sorted(p for p in packed.iterdir() if p.is_dir() and not p.is_symlink()):
        entries = list(base.iterdir())
        gens = sorted((int(g.name[1:]), g) for g in entries if _generation(g) and (g / META_FILE).is_file())
        meta: dict[str, Any] = {}
        gen = None
        if gens:
            gen = gens[-1][1]
            meta = runfiles.read_json_object(gen / META_FILE) or {}
        if not gens and not any(_provable(p) for p in entries):
            continue  # not a cemctl cache folder at all
        foreign = sorted(p.name for p in entries if not _provable(p))
        out.append(CacheInfo(base, gen, meta, _size(base), foreign=foreign))
    return out


def _roots(extra: Iterable[Path], run_cfgs: Iterable[RunConfig]) -> list[Path]:
    from cem_core.data.tokenizer import default_cache_root
    from cem_core.config import DataConfig

    seen: list[Path] = []
    for root in [default_cache_root(DataConfig()), *extra, *(default_cache_root(c.data) for c in run_cfgs)]:
        root = Path(root).expanduser()
        if root not in seen:
            seen.append(root)
    return seen


def _recorded_runs(db_url: str) -> list[tuple[str, str, str, RunConfig]]:
    """(experiment, run_id, state, config) of every recorded language-model run; none when there is no database
    at all. A database that exists but cannot be read is an error (DatabaseError), never "no runs": `clean`
    decides from these runs what no run needs any more."""
    from cemctl.db.engine import DatabaseError, open_existing_db, read_session

    try:
        engine = open_existing_db(db_url)
    except DatabaseError as e:
        if "no results database" in str(e):
            return []
        raise
    from sqlalchemy import select

    from cemctl.db.models import Experiment, ExperimentRun, Run

    rows = []
    with read_session(engine) as s:
        q = (select(Experiment.name, Run.id, Run.state, Run.config_json)
             .join(ExperimentRun, ExperimentRun.experiment_id == Experiment.id)
             .join(Run, Run.id == ExperimentRun.run_id))
        found = list(s.execute(q))
    for name, rid, state, config_json in found:
        try:
            cfg = runfiles.config_of_record(config_json, rid)
        except CemError:
            continue
        rows.append((name, rid, state, cfg))
    return rows


def cache_inventory(db_url: str, *, cache_dirs: Iterable[Path] = ()) -> list[CacheInfo]:
    """Every prepared cache under the default root, `cache_dirs` and the roots recorded runs use,
    with the experiments (and how many runs, how many still to train) that read it."""
    from cem_core.data.prepare import cache_key

    runs = _recorded_runs(db_url)
    caches = []
    for root in _roots(cache_dirs, (cfg for *_, cfg in runs)):
        caches.extend(_scan_root(root))
    by_base = {c.base.resolve(): c for c in caches}
    keys: dict[str, Path | None] = {}
    for experiment, _rid, state, cfg in runs:
        if not TASKS.spec(cfg.task).uses_corpus:  # e.g. the GP study makes its own data
            continue
        data_json = json.dumps(dataclasses.asdict(cfg.data), sort_keys=True)
        if data_json not in keys:
            try:
                keys[data_json] = cache_key(cfg.data)[0].base.resolve()
            except CemError:  # a files corpus whose files are gone: no cache of it can be used
                keys[data_json] = None
        info = by_base.get(keys[data_json]) if keys[data_json] is not None else None  # type: ignore[arg-type]
        if info is None:
            continue
        info.experiments.add(experiment)
        info.runs += 1
        if state not in FINAL_STATES:
            info.unfinished_runs += 1
    return caches


@dataclass
class CleanReport:
    removed: list[CacheInfo] = field(default_factory=list)
    kept: list[CacheInfo] = field(default_factory=list)  # still needed by a run that may train
    unknown: list[CacheInfo] = field(default_factory=list)  # no run of this database reads it (kept by default)
    refused: list[tuple[CacheInfo, str]] = field(default_factory=list)  # (partly) kept, with the reason
    dry_run: bool = True

    @property
    def freed_bytes(self) -> int:
        return sum(c.size_bytes for c in self.removed)


def _clean_cache(info: CacheInfo) -> list[str]:
    """Remove, by proof, what builds wrote into one cache folder; returns what was kept (relative names).

    A generation goes only through its manifest (each file's size and sha256: a file the user added or
    changed stays); the chunks of an interrupted build through their records; anything else stays.
    """
    from cem_core.data.prepare import SHARDS, remove_generation
    from cem_core.data.build import remove_shards

    kept: list[str] = []
    for entry in sorted(info.base.iterdir()):
        if _generation(entry):
            kept += remove_generation(entry)
        elif entry.name == SHARDS and entry.is_dir() and not entry.is_symlink():
            kept += [f"{SHARDS}/{rel}" for rel in remove_shards(entry)]
        else:
            kept.append(entry.name)
    try:
        info.base.rmdir()
    except OSError:
        pass
    return kept


def clean_caches(db_url: str, *, cache_dirs: Iterable[Path] = (), yes: bool = False,
                 include_unknown: bool = False) -> CleanReport:
    """Remove the caches whose runs in this database are all finished (done or diverged): no run that may
    still train (planned, queued, running, failed, cancelled) needs them.

    A cache no run of this database reads may belong to another project sharing the cache root: it is
    kept unless `include_unknown`. Only what a cemctl build wrote, as its manifest proves (each file's
    size and sha256), is removed; any other file in a cache folder (the user's, an edited one, a cache an
    older cemctl built without a manifest) is kept and reported. A database that cannot be read is an
    error, never "no runs". A cache being built right now (its lock held) is skipped. Without `yes`
    nothing is removed: the report says what would be.
    """
    from cem_core.runfiles.lock import file_lock

    report = CleanReport(dry_run=not yes)
    for info in cache_inventory(db_url, cache_dirs=cache_dirs):
        if info.unfinished_runs:
            report.kept.append(info)
            continue
        if not info.runs and not include_unknown:
            report.unknown.append(info)
            continue
        if not yes:
            if info.foreign:
                report.refused.append((info, f"holds files cemctl did not create ({', '.join(info.foreign[:3])}): "
                                             "they would be kept"))
            report.removed.append(info)
            continue
        lock_path = info.base.with_name(info.base.name + ".lock")
        try:
            with file_lock(lock_path, blocking=False) as held:
                if not held:
                    report.refused.append((info, "a prepare is building it now"))
                    continue
                kept = _clean_cache(info)  # the lock file stays: a prepare waiting on it must keep excluding others
        except runfiles.RunFileError as e:  # a link or a FIFO planted as its lock: nothing is removed
            report.refused.append((info, str(e)))
            continue
        if kept:
            shown = ", ".join(kept[:3]) + (f" and {len(kept) - 3} more" if len(kept) > 3 else "")
            report.refused.append((info, f"holds files cemctl did not create or cannot prove it wrote ({shown}): "
                                         "kept"))
        else:
            report.removed.append(info)
    return report
