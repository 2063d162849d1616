"""`cemctl data prepare FILE|EXPERIMENT`, `cemctl data info`, `cemctl data clean`: corpora tokenized ahead of time.

`prepare` works out, per cache (corpus + tokenizer), the largest train budget
the grid's runs need and builds it once with `--workers` processes (the bytes
do not depend on the number), with a progress bar; an interrupted prepare
resumes from its finished chunks; two prepares of the same cache wait for each
other. Run it on a CPU or login node before `cemctl launch --executor slurm`.
`info` lists the caches; `clean` removes those whose runs in this database are
all finished (`--yes`; without it, only says what it would remove; caches no run
of this database reads are kept unless `--include-unknown`).
Library: `cemctl.services.data`. Never imports torch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, List, Optional

import typer

from cemctl.commands.common import DbOption, RunsDirOption, cli_errors, db_url, runs_dir, scale_option, stdout_console


def _bytes(n: float) -> str:
    for unit, div in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{int(n)} B"


def _count(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{int(n)}"


class _Bar:
    """A rich progress bar per cache: documents, tokens, tokens/s and the ETA (bytes of a finite corpus,
    tokens of a streamed one's budget)."""

    def __init__(self, enabled: bool, quiet: bool = False) -> None:
        self.enabled, self.quiet = enabled, quiet
        self.progress: Any = None
        self.tasks: dict[Path, Any] = {}

    def __enter__(self) -> "_Bar":
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[counts]}"),
                                     TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=stdout_console(),
                                     transient=False)
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def start(self, need: Any) -> None:
        from cem_core.names import printable

        if self.progress is None:
            if not self.quiet:
                stdout_console().print(f"preparing {printable(need.label)} -> {printable(need.base)}", markup=False, soft_wrap=True)
            return
        self.tasks[need.base] = self.progress.add_task(printable(need.label), total=None, counts="starting")

    def update(self, need: Any, info: dict[str, Any]) -> None:
        if self.progress is None:
            return
        if info.get("phase") in ("tokenizer", "merges"):  # the BPE tokenizer learns from the train split first
            what = "reading its train text" if info["phase"] == "tokenizer" else "learning its merges"
            counts = f"BPE tokenizer: {what} ({_count(info['documents'])} docs, {_bytes(info['bytes'])})"
            total = info.get("total_bytes")
            self.progress.update(self.tasks[need.base], total=total, completed=min(info["bytes"], total or info["bytes"]),
                                 counts=counts)
            return
        rate = info["tokens"] / info["elapsed_s"] if info["elapsed_s"] > 0 else 0.0
        counts = f"{_count(info['documents'])} docs  {_count(info['tokens'])} tokens  {_count(rate)} tokens/s"
        if info.get("resumed"):
            counts += f"  ({info['resumed']} chunks kept)"
        if info.get("budget_tokens"):
            total, done = info["budget_tokens"], min(info["tokens"], info["budget_tokens"])
        elif info.get("total_bytes"):
            total, done = info["total_bytes"], min(info["bytes"], info["total_bytes"])
        else:
            total, done = None, info["documents"]
        self.progress.update(self.tasks[need.base], total=total, completed=done, counts=counts)

    def finish(self, need: Any) -> None:
        if self.progress is not None and need.base in self.tasks:
            task = self.tasks[need.base]
            total = self.progress.tasks[task].total
            self.progress.update(task, completed=total if total is not None else 1, total=total or 1)


def _prepared_rows(done: list[Any], elapsed_s: float) -> list[dict[str, Any]]:
    rows = []
    for p in done:
        splits = p.meta.get("splits", {})
        tokens = sum(int(v.get("tokens", 0)) for v in splits.values())
        build_s = float(p.meta.get("build_s") or 0) if p.built else 0.0
        rows.append({
            "cache": str(p.path), "corpus": p.need.label, "built": p.built, "runs": len(p.need.run_ids),
            "train_tokens_needed": p.need.train_tokens,
            "tokens": {s: int(v.get("tokens", 0)) for s, v in splits.items()},
            "size_bytes": sum(f.stat().st_size for f in Path(p.path).iterdir() if f.is_file()),
            "build_s": build_s, "tokens_per_s": tokens / build_s if build_s > 0 else None,
            "workers": p.meta.get("workers"), "resumed": p.meta.get("resumed_chunks"),
        })
    return rows


def prepare_cmd(
    target: str = typer.Argument(..., help="Grid file or recorded experiment whose runs' data to prepare."),
    scale: Optional[str] = scale_option(None, "tiny for a grid file, an experiment's planned scale"),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a config key for every run: key=value."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Tokenizer processes [default: the CPU count]."),
    as_json: bool = typer.Option(False, "--json", help="Print what was prepared as JSON."),
    db: Optional[str] = DbOption,
    runs: Optional[str] = RunsDirOption,
) -> None:
    """Tokenize and pack the data a grid needs, once, in parallel (before any GPU job starts)."""
    with cli_errors():
        from cemctl.services.data import data_needs, prepare_needs, target_configs

        overrides = {}
        if set_:
            from cemctl.grid import parse_overrides

            overrides = parse_overrides(list(set_))
        name, configs = target_configs(target, scale=scale, overrides=overrides, db_url=db_url(db),
                                       runs_root=runs_dir(runs))
        needs = data_needs(configs)
        n_workers = workers or max(1, os.cpu_count() or 1)
        t0 = time.perf_counter()
        with _Bar(enabled=stdout_console().is_terminal and not as_json, quiet=as_json) as bar:
            def progress(need: Any, info: dict[str, Any]) -> None:
                bar.update(need, info)

            def on_start(need: Any) -> None:
                bar.start(need)

            done = prepare_needs(needs, workers=n_workers, progress=progress, on_start=on_start)
            for p in done:
                bar.finish(p.need)
        rows = _prepared_rows(done, time.perf_counter() - t0)
        if as_json:
            print(json.dumps({"experiment": name, "caches": rows}))
            return
        if not rows:
            stdout_console().print(f"{name}: no run reads a corpus (nothing to prepare)", markup=False)
            return
        for r in rows:
            tok = r["tokens"]
            what = (f"built in {r['build_s']:.1f} s ({_count(r['tokens_per_s'] or 0)} tokens/s, {r['workers']} workers)"
                    if r["built"] else "already prepared")
            stdout_console().print(f"{r['corpus']}: train {_count(tok.get('train', 0))} / val {_count(tok.get('val', 0))} / "
                          f"test {_count(tok.get('test', 0))} tokens, {_bytes(r['size_bytes'])}, {what}; "
                          f"{r['runs']} runs -> {r['cache']}", markup=False, highlight=False, soft_wrap=True)


CacheDirOption = typer.Option(None, "--cache-dir", help="Also look in this cache root (repeatable; default roots: "
                              "$CEMCTL_CACHE or ~/.cache/cemctl, and every data.cache_dir the recorded runs use).")


def info_cmd(
    cache_dir: Optional[List[str]] = CacheDirOption,
    as_json: bool = typer.Option(False, "--json", help="Print the caches as JSON."),
    db: Optional[str] = DbOption,
) -> None:
    """List prepared caches: corpus, tokenizer, tokens per split, size on disk, experiments using them."""
    with cli_errors():
        from cem_core.names import printable
        from cemctl.services.data import cache_inventory

        caches = cache_inventory(db_url(db), cache_dirs=[Path(d) for d in cache_dir or []])
        if as_json:
            print(json.dumps([{
                "cache": str(c.base), "generation": str(c.generation) if c.generation else None,
                "corpus": c.meta.get("corpus"), "tokenizer": c.meta.get("tokenizer"), "tokens": c.tokens,
                "complete": c.meta.get("complete"), "size_bytes": c.size_bytes, "experiments": sorted(c.experiments),
                "runs": c.runs, "unfinished_runs": c.unfinished_runs, "foreign": c.foreign,
            } for c in caches]))
            return
        if not caches:
            stdout_console().print("no prepared data caches", markup=False)
            return
        from rich.table import Table

        table = Table(title="prepared data", title_justify="left")
        for col in ("cache", "corpus", "tokenizer", "train", "val", "test", "size", "experiments", "runs to train"):
            table.add_column(col, justify="right" if col in ("train", "val", "test", "size", "runs to train") else "left")
        for c in caches:
            t = c.tokens
            table.add_row(printable(c.base.name), printable(c.meta.get("corpus", "?")),
                          printable(c.meta.get("tokenizer", "?")),
                          *(_count(t[s]) if s in t else "-" for s in ("train", "val", "test")),
                          _bytes(c.size_bytes), printable(", ".join(sorted(c.experiments))) or "-",
                          str(c.unfinished_runs))
        stdout_console().print(table)


def clean_cmd(
    yes: bool = typer.Option(False, "--yes", help="Remove them (without it, only list what would be removed)."),
    include_unknown: bool = typer.Option(False, "--include-unknown", help="Also caches no run of this database "
                                         "reads (they may belong to another project sharing the cache folder)."),
    cache_dir: Optional[List[str]] = CacheDirOption,
    db: Optional[str] = DbOption,
) -> None:
    """Remove prepared caches whose runs are all finished (only what cemctl built; --yes to act)."""
    with cli_errors():
        from cem_core.names import printable
        from cemctl.services.data import clean_caches

        report = clean_caches(db_url(db), cache_dirs=[Path(d) for d in cache_dir or []], yes=yes,
                              include_unknown=include_unknown)
        verb = "would remove" if report.dry_run else "removed"
        for c in report.removed:
            stdout_console().print(f"{verb} {printable(c.base)} ({_bytes(c.size_bytes)}; used by {', '.join(sorted(c.experiments)) or 'no recorded run'})",
                          markup=False, highlight=False, soft_wrap=True)
        for c, why in report.refused:
            stdout_console().print(f"kept {printable(c.base)}: {printable(why)}", markup=False, highlight=False, soft_wrap=True)
        summary = (f"{verb} {len(report.removed)} caches ({_bytes(report.freed_bytes)}); "
                   f"{len(report.kept)} kept for runs still to train")
        if report.unknown:
            summary += (f"; {len(report.unknown)} not read by any run of this database kept "
                        "(--include-unknown to remove them too)")
        if report.dry_run and report.removed:
            summary += "; run again with --yes to remove them"
        stdout_console().print(summary, markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    data = typer.Typer(name="data", help="Prepare, list and clean tokenized corpora (before launching on GPUs).",
                       no_args_is_help=True, add_completion=False, rich_markup_mode=None)
    data.command("prepare")(prepare_cmd)
    data.command("info")(info_cmd)
    data.command("clean")(clean_cmd)
    app.add_typer(data, name="data")
