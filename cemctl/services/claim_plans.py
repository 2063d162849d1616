"""The analysis declared before the data: claim registrations and until-decided designs, kept in the runs folder.

    register_claims(engine, "fig2a", runs_root)              # at launch: each part's declaration, hashed
    labels = declared_labels(runs_root, claims)             # (experiment, claim, part) -> confirmatory | exploratory
    design = load_design(runs_root, "fig2a", "cpu")         # an until-decided design and its looks
    save_design(runs_root, design, ...)

Both live under `<runs root>/.claims/` beside the runs they describe (ground truth in files, as the runs are;
`cemctl sync` never needs them, a copied runs folder carries them):

- `registry.jsonl`: one line per launch that found a claim declaration not registered before: the time, the
  experiment and scale, the grid file's text as planned (its [[claim]] tables as written, with their comments:
  what a reviewer reads) and its sha256, the claims (canonical JSON of every [[claim]] of the grid) and their
  sha256, and per part its declaration's sha256 and how many of its arms' runs had finished then.
  A part is `confirmatory` when its current declaration was first registered before any of its runs had
  finished; `exploratory` when the declaration changed (or was first made) after results existed, or differs
  from every registered one; `not registered` when no launch recorded it (runs imported from an archive).
- `sequential/<experiment>@<scale>.json`: the until-decided design (alpha, spending, the seed cap, its parts)
  and its looks (the finished runs at each), and why it stopped.

`cemctl archive` carries both for the experiments it archives (`claims_state`: members `claims/...`) and
`cemctl import` merges them (`check_claims_merge` before anything moves, `apply_claims_merge` after): a line or a
design already here is skipped, a different one under the same key is refused. The one exception is a later snapshot
of the same design (`continues`: the same settings, and the looks, rounds and added rates here are the first ones of
the archive's): it takes the place of the one here, which loses nothing; an earlier snapshot is skipped.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from cem_core.errors import CemError
from cem_core.runfiles import append_jsonl, atomic_write_bytes, atomic_write_json

FOLDER = ".claims"
REGISTRY = "registry.jsonl"
SEQUENTIAL = "sequential"


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def finished_runs(engine: Any, scale: str | None) -> Any:
    """The finished runs at a scale with their arms, from the run record (`cemctl.records`): the one read of runs
    the registrations and the until-decided loop make."""
    from cemctl.records import load_records
    from cemctl.report.aggregate import finished

    frame = load_records(engine, None, scale=scale, per_scale=True).frame()
    if frame.empty:
        return frame
    return finished(frame, "test_loss")


def part_run_ids(part: Any, runs: Any) -> list[str]:
    """The finished runs any of the part's arms could use (its selectors; without train.lr for an lr profile; a
    confirmation part: each arm at its registered rate, on seeds that did not choose it)."""
    from cemctl.grid.claims import LR, SWEEP_STATISTICS, selector_matches
    from cemctl.report.arms import config_of

    if runs is None or len(runs) == 0:
        return []
    free = part.tuned or part.statistic in SWEEP_STATISTICS
    selectors = [{k: v for k, v in sel.items() if not (free and k == LR)} for sel in part.arms]
    stage1 = set(part.confirm.stage1_seeds) if part.confirm is not None else set()
    out = []
    for row in runs.to_dict("records"):
        cfg = config_of(row)
        if part.rates is not None:
            if int(cfg.get("train.seed") or 0) in stage1:
                continue
            selectors = part.selectors_at(str(cfg.get("model.size"))) or []
        if any(selector_matches(cfg, sel) for sel in selectors):
            out.append(str(row["run_id"]))
    return out


def check_confirm_grid(engine: Any, grid: Path | str, runs_root: Path | str, scale: str | None) -> None:
    """Before a launch plans anything: a confirmation grid file changed after one of its runs finished is refused
    (ConfigError, one line naming the file); any other grid passes."""
    from cem_core.errors import ConfigError
    from cemctl.grid.spec import parse_grid

    try:
        spec = parse_grid(grid, scale or "tiny") if scale else None
    except ConfigError:
        return  # the launch's own planning says what is wrong
    if spec is None or spec.confirm is None or engine is None:
        return
    why = confirm_change(engine, spec.name, spec.text, spec.sha256, runs_root, scale)
    if why:
        raise ConfigError("confirm", why, source=str(grid))


def confirm_change(engine: Any, experiment: str, grid_text: str, grid_sha256: str, runs_root: Path | str,
                   scale: str | None) -> str:
    """Why a confirmation grid ([confirm]) may not be launched as it is now: its text differs from every one
    registered for the experiment and some of its runs have finished ('' when it may: not a confirmation grid,
    registered as it is, or nothing finished yet, in which case the launch registers it anew)."""
    from cemctl.grid.claims import recorded_claims

    claims = recorded_claims(grid_text, experiment)
    parts = [p for c in claims for p in c.parts if p.confirm is not None]
    if not parts:
        return ""
    mine = [r for r in read_registry(runs_root) if r.get("experiment") == experiment]
    if not mine or any(r.get("grid_sha256") == grid_sha256 for r in mine):
        return ""
    if Path(runs_root).is_dir():  # what finished is what the run folders say, not what was last synced
        from cemctl.db.ingest import sync_runs

        sync_runs(engine, runs_root)
    runs = finished_runs(engine, scale)
    done = sorted({rid for p in parts for rid in part_run_ids(p, runs)})
    if not done:
        return ""
    return (f"the confirmation design {experiment!r} changed after {len(done)} of its runs finished (registered "
            f"{_date(float(mine[-1]['time']))}); a registered design is not edited: make a new one with `cemctl "
            f"confirm {parts[0].confirm.of} -o OTHER.toml`, or put the registered file back")  # type: ignore[union-attr]


def register_claims(engine: Any, experiment: str, runs_root: Path | str, *, scale: str | None = None,
                    now: float | None = None) -> int:
    """Record the experiment's claim declarations not registered before (at launch); returns how many parts
    were new or changed. Nothing is written for an experiment without claims."""
    from cemctl.db.runs import get_experiment
    from cemctl.grid.claims import recorded_claims

    exp = get_experiment(engine, experiment)
    if exp is None or not exp.grid_text:
        return 0
    claims = recorded_claims(exp.grid_text, exp.grid_path or experiment)
    if not claims:
        return 0
    scale = scale or exp.scale or ""
    why = confirm_change(engine, experiment, exp.grid_text, exp.grid_sha256, runs_root, scale)
    if why:
        from cem_core.errors import ConfigError

        raise ConfigError("confirm", why, source=exp.grid_path or None)
    records = read_registry(runs_root)
    known = {(r["experiment"], p["claim"], p["part"], p["sha256"]) for r in records for p in r.get("parts", [])}
    declared = [{"id": c.id, "statement": c.statement, "parts": [p.declaration() for p in c.parts]} for c in claims]
    new = [(c, p) for c in claims for p in c.parts if (experiment, c.id, p.name, _sha(p.declaration())) not in known]
    confirm = any(p.confirm is not None for c in claims for p in c.parts)
    if confirm and not any(r.get("experiment") == experiment and r.get("grid_sha256") == exp.grid_sha256
                           for r in records):  # a confirmation design is its whole file: seeds and cells too
        new = [(c, p) for c in claims for p in c.parts]
    if not new:
        return 0
    runs = finished_runs(engine, scale)
    line = {
        "time": time.time() if now is None else now, "experiment": experiment, "scale": scale,
        "grid_sha256": exp.grid_sha256, "grid_text": exp.grid_text, "claims_sha256": _sha(declared),
        "claims": declared,
        "parts": [{"claim": c.id, "part": p.name, "sha256": _sha(p.declaration()),
                   "finished": len(part_run_ids(p, runs))} for c in claims for p in c.parts],
    }
    path = Path(runs_root) / FOLDER / REGISTRY
    path.parent.mkdir(parents=True, exist_ok=True)
    append_jsonl(path, line, sort_keys=True, durable=True)  # one write: appends from two launches never interleave
    return len(new)


def read_registry(runs_root: Path | str | None) -> list[dict[str, Any]]:
    if runs_root is None:
        return []
    path = Path(runs_root) / FOLDER / REGISTRY
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if isinstance(rec, dict) and isinstance(rec.get("parts"), list):
            out.append(rec)
    return sorted(out, key=lambda r: float(r.get("time") or 0))


def _date(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d")


def declared_label(records: Sequence[Mapping[str, Any]], experiment: str, claim: str, part: Any) -> str:
    """confirmatory / exploratory / not registered, with the date and why (see the module docstring)."""
    current = _sha(part.declaration())
    seen = [(float(r["time"]), p) for r in records if r.get("experiment") == experiment
            for p in r["parts"] if p.get("claim") == claim and p.get("part") == part.name]
    if not seen:
        return "not registered"
    mine = [(t, p) for t, p in seen if p.get("sha256") == current]
    if not mine:
        return "exploratory: the declaration differs from every registered one"
    t, p = mine[0]
    if int(p.get("finished", 0)) == 0:
        return f"confirmatory (declared {_date(t)}, before its runs finished)"
    earlier = [q for u, q in seen if u < t and q.get("sha256") != current]
    what = "changed" if earlier else "first declared"
    return f"exploratory ({what} {_date(t)}, after {p['finished']} of its runs had finished)"


def declared_labels(runs_root: Path | str | None, claims: Iterable[Any]) -> dict[tuple[str, str, str], str]:
    records = read_registry(runs_root)
    out = {}
    for claim in claims:
        for part in claim.parts:
            for p in (part, part.confirmation):
                if p is not None:
                    source = p.source or claim.source
                    out[(source, claim.id, p.name)] = declared_label(records, source, claim.id, p)
    return out


# ---------------------------------------------------------------------------------------------- designs


def state_token(runs_root: Path | str | None) -> str:
    """Changes whenever the registrations or the until-decided designs may have (the sizes and mtimes of
    `.claims/registry.jsonl` and `.claims/sequential/*.json`): with the database's state, the key of a cached
    claims page (the dashboard), so it can never show a verdict these files have moved on from."""
    if runs_root is None:
        return "-"
    folder = Path(runs_root) / FOLDER
    out = []
    for path in [folder / REGISTRY, *sorted((folder / SEQUENTIAL).glob("*.json"))]:
        try:
            st = path.stat()
        except OSError:
            continue
        out.append(f"{path.name}:{st.st_mtime_ns}:{st.st_size}")
    return hashlib.sha256("|".join(out).encode()).hexdigest()[:16]


def design_path(runs_root: Path | str, experiment: str, scale: str) -> Path:
    return Path(runs_root) / FOLDER / SEQUENTIAL / f"{experiment}@{scale or '-'}.json"


def read_design(runs_root: Path | str, experiment: str, scale: str) -> dict[str, Any] | None:
    path = design_path(runs_root, experiment, scale)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("design"), dict) else None


def write_design(runs_root: Path | str, experiment: str, scale: str, data: Mapping[str, Any]) -> Path:
    path = design_path(runs_root, experiment, scale)
    atomic_write_json(path, dict(data), durable=True, indent=1, make_parents=True)
    return path


def load_designs(runs_root: Path | str | None, scale: str | None = None) -> list[Any]:
    """Every recorded until-decided design (at `scale`), as `cemctl.report.sequential.Design`."""
    from cemctl.report.sequential import Design

    if runs_root is None:
        return []
    folder = Path(runs_root) / FOLDER / SEQUENTIAL
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
            d = data["design"]
            design = Design(str(d["experiment"]), str(d["scale"]), int(d["max_seeds"]),
                            frozenset(tuple(x) for x in d["family"]),
                            [frozenset(look["runs"]) for look in data.get("looks", [])], float(d.get("alpha", 0.05)),
                            tuple(e for e in data.get("extensions", []) if isinstance(e, dict)
                                  and isinstance(e.get("selector"), dict) and isinstance(e.get("lr"), (int, float))))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if scale is None or design.scale == scale:
            out.append(design)
    return out


# ---------------------------------------------------------------------------------------------- archives


def claims_state(runs_root: Path | str, experiments: Mapping[str, Iterable[str]]) -> dict[str, bytes]:
    """What `cemctl archive` carries of `.claims/` for {experiment: its archived scales}: the registry lines of those
    experiments (`registry.jsonl`, as register_claims writes them) and their until-decided designs with their looks
    (`sequential/<experiment>@<scale>.json`, the bytes as they are). Relative paths inside `.claims/`."""
    from cem_core.runfiles import MAX_JSON_BYTES, RunFileError, read_bytes

    out: dict[str, bytes] = {}
    lines = [r for r in read_registry(runs_root) if r.get("experiment") in experiments]
    if lines:
        out[REGISTRY] = "".join(json.dumps(r, sort_keys=True) + "\n" for r in lines).encode()
    for experiment, scales in experiments.items():
        for scale in sorted(set(scales)):
            path = design_path(runs_root, experiment, scale)
            try:
                out[f"{SEQUENTIAL}/{path.name}"] = read_bytes(path, max_bytes=MAX_JSON_BYTES)
            except FileNotFoundError:
                continue
            except (RunFileError, OSError) as e:
                raise CemError(f"archive: {path}: {str(e).split(': ', 1)[-1]}") from None
    return out


def claims_rel_ok(rel: str) -> bool:
    """A path inside `.claims/` an archive may carry: the registry or one design file."""
    parts = rel.split("/")
    return rel == REGISTRY or (len(parts) == 2 and parts[0] == SEQUENTIAL and parts[1].endswith(".json")
                               and parts[1] not in (".json",) and not parts[1].startswith("."))


@dataclass
class ClaimsMerge:
    """What an import adds to `.claims/`: registry lines not here yet, design files not here yet."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    designs: dict[str, bytes] = field(default_factory=dict)  # file name in sequential/ -> bytes
    # file name in sequential/ -> the bytes checked here, for a design the archive's continues (`continues`)
    replaces: dict[str, bytes] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.lines or self.designs)


def check_claims_merge(runs_root: Path | str, members: Mapping[str, bytes], experiments: Iterable[str],
                       source: str) -> ClaimsMerge:
    """Check an archive's `.claims/` members against what is here, writing nothing: every registry line a
    registration of one of the archive's experiments (the same line here: skipped; another line of the same
    experiment, scale and time: refused), every design one of theirs (the same file here: skipped; another:
    refused). One line (CemError) naming the member otherwise."""
    names = set(experiments)
    merge = ClaimsMerge()
    here = {_entry_key(r): r for r in read_registry(runs_root)}
    for rel, data in sorted(members.items()):
        where = f"{source}: claims/{rel}"
        if rel == REGISTRY:
            for n, text in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
                if not text.strip():
                    continue
                try:
                    line = json.loads(text)
                except (ValueError, RecursionError):
                    raise CemError(f"{where}: line {n} is not valid JSON") from None
                if not (isinstance(line, dict) and line.get("experiment") in names
                        and isinstance(line.get("time"), (int, float)) and not isinstance(line["time"], bool)
                        and isinstance(line.get("parts"), list) and all(isinstance(p, dict) for p in line["parts"])):
                    raise CemError(f"{where}: line {n} must be a registration of an archived experiment "
                                   "(experiment, time, parts)")
                ours = here.get(_entry_key(line))
                if ours is None:
                    merge.lines.append(line)
                    here[_entry_key(line)] = line
                elif _sha(ours) != _sha(line):
                    raise CemError(f"{where}: line {n} registers {line['experiment']!r} at the time of a different "
                                   f"registration in {Path(runs_root) / FOLDER / REGISTRY}; nothing was imported")
            continue
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            raise CemError(f"{where}: not valid JSON") from None
        design = doc.get("design") if isinstance(doc, dict) else None
        if not (isinstance(design, dict) and design.get("experiment") in names and isinstance(design.get("scale"), str)
                and isinstance(doc.get("looks", []), list)
                and design_path(runs_root, design["experiment"], design["scale"]).name == rel.split("/", 1)[1]):
            raise CemError(f"{where}: must be the until-decided design of an archived experiment, named "
                           "<experiment>@<scale>.json")
        local = design_path(runs_root, design["experiment"], design["scale"])
        try:
            mine = local.read_bytes() if os.path.lexists(local) else None
        except OSError as e:
            raise CemError(f"{where}: {local} cannot be read ({e.strerror or e}); nothing was imported") from None
        if mine is None:
            merge.designs[local.name] = data
        elif mine != data:
            try:
                ours = json.loads(mine)
            except (ValueError, RecursionError):
                ours = None
            if continues(ours, doc):  # a later snapshot of the design here: it takes its place
                merge.designs[local.name] = data
                merge.replaces[local.name] = mine
            elif not continues(doc, ours):  # an earlier snapshot is skipped; anything else is refused
                raise CemError(f"{where}: differs from the design here ({local}: other looks or settings, and "
                               "neither continues the other); nothing was imported (import into another project, "
                               "or move that file aside)")
    return merge


SNAPSHOT_LISTS = ("looks", "rounds", "extensions")  # what an until-decided design appends to as it goes


def continues(earlier: Any, later: Any) -> bool:
    """Whether design document `later` is `earlier` carried on: the same settings, and each of its looks, rounds and
    added rates begins with `earlier`'s (why it stopped may differ: a loop stopped at its cap and reopened by a
    profile extension). Then `later` holds everything `earlier` does."""
    if not (isinstance(earlier, dict) and isinstance(later, dict)) or earlier.get("design") != later.get("design"):
        return False
    if set(earlier) - {"design", "stopped", *SNAPSHOT_LISTS}:
        return False  # a key this reader does not know: never judged a prefix
    for key in SNAPSHOT_LISTS:
        mine, theirs = earlier.get(key, []), later.get(key, [])
        if not (isinstance(mine, list) and isinstance(theirs, list)) or theirs[:len(mine)] != mine:
            return False
    return True


def apply_claims_merge(runs_root: Path | str, merge: ClaimsMerge) -> None:
    """Append the new registry lines (one write each, as register_claims) and put the new design files in place
    without replacing one that appeared meanwhile (a link of a finished file: it fails if the name is taken); a
    design the archive's continues is replaced only while it still holds what was checked."""
    folder = Path(runs_root) / FOLDER
    if merge.lines:
        folder.mkdir(parents=True, exist_ok=True)
        for line in sorted(merge.lines, key=lambda r: float(r["time"])):
            append_jsonl(folder / REGISTRY, line, sort_keys=True, durable=True)
    for name, data in merge.designs.items():
        target = folder / SEQUENTIAL / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if name in merge.replaces:  # the later snapshot of the design checked here, unless it changed since
            atomic_write_bytes(target, data, before_replace=_still(target, merge.replaces[name]))
            continue
        try:
            atomic_write_bytes(target, data, exclusive=True)
        except FileExistsError:
            if target.read_bytes() != data:
                raise CemError(f"{target}: written meanwhile by another command; the archive's design was not "
                               "placed (import again to compare)") from None


def _still(target: Path, was: bytes) -> Callable[[Path], None]:
    """A last check before the archive's later snapshot replaces `target`: it still holds what was checked."""
    def check(_tmp: Path) -> None:
        try:
            now = target.read_bytes()
        except OSError:
            now = None
        if now != was:
            raise CemError(f"{target}: written meanwhile by another command; the archive's later snapshot of it was "
                           "not placed (import again to compare)")
    return check


def _entry_key(line: Mapping[str, Any]) -> tuple[str, str, float]:
    return (str(line.get("experiment")), str(line.get("scale", "")), float(line.get("time") or 0))
