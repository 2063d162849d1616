"""The field catalogue: every fact about a run a user can show, filter, sort, group, export or read from the API.

    field("test")                    -> Field(name="test_loss", ...)    # by name, short name or alias
    resolve("attn_steps")            -> "model.attn_steps"               # a config key by its unique last part
    resolve("tag.phase")             -> "tag.phase"
    resolve("test_los")              -> ConfigError: unknown field 'test_los' (did you mean test_loss?) ...
    catalogue()                      -> [Field, ...]: the run fields, then every config key

A field has one name (what `--where`, `--columns`, `--sort`, export, the API and the
dashboard call it), a short name (a table header), a type, a unit, the source it is read
from (the run's link to its experiment, its state, its progress, its result, its arm, its
tags and notes, its code fingerprint, its config) and a one-line meaning. `cemctl.records.load`
builds the records whose keys are these names; nothing else names a fact about a run.
Torch-free and pandas-free (status imports it on every call).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from cem_core.errors import ConfigError

TAG_PREFIX = "tag."
TAG_FIELD = re.compile(r"^tag\.[A-Za-z][A-Za-z0-9_.-]{0,63}$")

# Where a field's value comes from (what the loader must read to have it).
SOURCES = ("link", "state", "progress", "result", "extras", "arm", "notes", "tags", "code", "environment", "history",
           "config")


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # str | int | float | bool | time (unix s) | duration (s) | count | loss | ppl | rate | progress
    source: str  # one of SOURCES
    help: str
    unit: str = ""
    short: str = ""  # a table header (default: the name)
    aliases: tuple[str, ...] = ()

    @property
    def header(self) -> str:
        return self.short or self.name

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float", "time", "duration", "count", "loss", "ppl", "rate", "progress")


def _f(name: str, kind: str, source: str, help: str, unit: str = "", short: str = "",
       aliases: Sequence[str] = ()) -> Field:
    return Field(name, kind, source, help, unit, short, tuple(aliases))


# A loss's unit depends on the run: nats per token, nats per byte with the byte tokenizer, squared error for the
# GP task (`loss_unit`, `unit_of`); the catalogue says so once.
LOSS_UNIT = "nats/token (nats/byte with the byte tokenizer; squared error for the GP task)"

# The run fields, in the order `cemctl keys` lists them.
RUN_FIELDS: tuple[Field, ...] = (
    _f("run_id", "str", "link", "the run's id: the hash of its resolved configuration", short="run",
       aliases=("run", "id")),
    _f("experiment", "str", "link", "the experiments that plan the run (comma-separated)"),
    _f("scale", "str", "link", "the scale the run was planned at (tiny, cpu, gpu, paper)"),
    _f("position", "int", "link", "the run's place in its grid file's order"),
    _f("in_grid", "bool", "link", "false for a run an edited grid file no longer holds (kept with its result)"),
    _f("marks", "str", "link", "the labels of the grid's [[mark]] rules the run matches ('; '-joined)"),
    _f("arm", "str", "arm", "the run's arm: a hash of every config value but the nuisance keys (the seed)",
       aliases=("arm_id",)),
    _f("arm_label", "str", "arm", "the arm named by the keys that vary among its experiment's arms", short="arm"),
    _f("state", "str", "state", "planned, queued, running, done, diverged, failed, stale, cancelled or damaged"),
    _f("reason", "str", "state", "why a run failed, went stale, diverged, was cancelled or is damaged: the last "
                                 "line of its error, else the reason recorded with the state; a run an edited grid "
                                 "no longer holds says so", aliases=("why",)),
    _f("error", "str", "state", "the run's whole error text (failed and diverged runs)"),
    _f("attempts", "int", "state", "how many times the run was started", short="att", aliases=("att",)),
    _f("executor", "str", "state", "the executor that ran it last (local, slurm)"),
    _f("job_id", "str", "state", "the executor's job id"),
    _f("job", "str", "state", "executor:job id", short="job"),
    _f("host", "str", "state", "the machine that ran it last"),
    _f("run_dir", "str", "state", "the run's folder: <runs root>/<run id>"),
    _f("step", "int", "progress", "optimizer steps done (a finished run: the steps it trained)", aliases=("steps",)),
    _f("total_steps", "int", "progress", "optimizer steps planned"),
    _f("progress", "progress", "progress", "fraction of the planned steps done (1 once finished)"),
    _f("tokens", "count", "progress", "tokens trained on (so far while running; the total once finished)",
       unit="tokens"),
    _f("train_loss", "loss", "progress", "the last training loss reported", unit=LOSS_UNIT, short="train"),
    _f("val_loss", "loss", "progress", "validation loss: the final one once finished, else the last evaluated",
       unit=LOSS_UNIT, short="val"),
    _f("tokens_per_s", "rate", "progress", "current training speed: the rate a running run's trainer last reported",
       unit="tokens/s", short="tok/s now", aliases=("tok/s_now",)),
    _f("avg_tokens_per_s", "rate", "progress", "average training speed: tokens / wall_time_s once finished, "
                                               "tokens / elapsed_s while running", unit="tokens/s", short="tok/s",
       aliases=("tok/s", "tok_s")),
    _f("started_at", "time", "state", "when the run (its last attempt) started", unit="unix s"),
    _f("finished_at", "time", "state", "when it ended", unit="unix s"),
    _f("heartbeat_at", "time", "state", "the trainer's last heartbeat", unit="unix s"),
    _f("last_event_at", "time", "state", "the last event of its events.jsonl, for a run neither running nor ended",
       unit="unix s"),
    _f("elapsed_s", "duration", "state", "how long it has taken: once it has a result, its training wall time "
                                         "(wall_time_s); while it runs, the time since it started; else until it "
                                         "was last seen (its last heartbeat or event)", unit="s", short="elapsed",
       aliases=("elapsed",)),
    _f("eta_s", "duration", "progress", "time left at the pace of its steps so far (running runs)", unit="s", short="ETA",
       aliases=("eta",)),
    _f("test_loss", "loss", "result", "loss on the fixed held-out test tokens", unit=LOSS_UNIT, short="test",
       aliases=("test",)),
    _f("test_ppl", "ppl", "result", "test perplexity: exp(test_loss)", short="test ppl", aliases=("ppl",)),
    _f("val_ppl", "ppl", "result", "validation perplexity: exp(val_loss)", short="val ppl"),
    _f("test_rmse", "float", "extras", "test root-mean-square error (the GP regression task)"),
    _f("val_rmse", "float", "extras", "validation root-mean-square error (the GP regression task)"),
    _f("bayes_rmse", "float", "extras", "the Bayes-optimal test RMSE of the GP sample (the GP regression task)"),
    _f("params_total", "count", "result", "parameters, embeddings included", unit="parameters", short="params",
       aliases=("params",)),
    _f("params_non_embedding", "count", "result", "parameters without the embedding and output head",
       unit="parameters"),
    _f("flops_per_token", "count", "result", "forward FLOPs per token", unit="FLOP/token"),
    _f("train_flops", "count", "result", "training FLOPs: 3 x forward FLOPs per token x tokens", unit="FLOP",
       short="train FLOPs", aliases=("flops",)),
    _f("wall_time_s", "duration", "result", "training wall time recorded in result.json (resumed attempts "
                                            "summed)", unit="s", short="wall time", aliases=("wall_time",)),
    _f("diverged_step", "int", "result", "the step at which the loss became non-finite (diverged runs)"),
    _f("code_fingerprint", "str", "code", "the fingerprint of the model code that trained the run"),
    _f("outdated", "bool", "code", "true when the run was trained by older model code than this installation's"),
    _f("history", "str", "history", "the run's earlier results (set aside by --rerun-outdated or --redo-damaged): "
                                   "'when: state, test loss (code fingerprint)', oldest first, '; '-joined"),
    _f("previous_test_loss", "loss", "history", "the test loss of the run's latest earlier result (before a rerun)",
       unit=LOSS_UNIT, short="previous test"),
    _f("previous_code_fingerprint", "str", "history", "the code that trained the run's latest earlier result"),
    _f("cpu_model", "str", "environment", "the CPU the run trained on (its environment.json)"),
    _f("gpu_model", "str", "environment", "the GPU the run trained on (empty on a CPU)", short="GPU"),
    _f("device", "str", "environment", "the torch device it trained on (cpu, cuda:0)"),
    _f("torch_version", "str", "environment", "the torch version it trained with", short="torch"),
    _f("python_version", "str", "environment", "the Python version it trained with", short="python"),
    _f("cemctl_version", "str", "environment", "the cemctl version it trained with", short="cemctl"),
    _f("cuda_version", "str", "environment", "the CUDA version torch was built with (GPU runs)", short="CUDA"),
    _f("code_snapshot", "str", "environment", "the code snapshot the launch ran it from (job.json's snapshot)"),
    _f("peak_host_rss_bytes", "count", "environment", "peak resident memory of the training process", unit="bytes",
       short="peak RSS"),
    _f("peak_gpu_allocated_bytes", "count", "environment", "peak GPU memory allocated by torch", unit="bytes",
       short="peak GPU mem"),
    _f("note", "str", "notes", "the run's notes (`cemctl note`), joined with ' | '", aliases=("notes",)),
)
TAG_HELP = "a tag set with `cemctl tag RUN NAME=VALUE` (letters, digits, _ . -)"


@lru_cache(maxsize=1)
def _by_name() -> dict[str, Field]:
    return {f.name: f for f in RUN_FIELDS}


@lru_cache(maxsize=1)
def _aliases() -> dict[str, str]:
    out: dict[str, str] = {}
    for f in RUN_FIELDS:
        for a in (f.short, *f.aliases):
            if a and a != f.name:
                out.setdefault(a, f.name)
    return out


@lru_cache(maxsize=1)
def config_fields() -> tuple[Field, ...]:
    """One field per config key `cem_core` accepts (its type and meaning from `cem_core.keydoc`)."""
    from cem_core.keydoc import key_docs

    return tuple(Field(d.key, d.kind, "config", d.help, d.unit) for d in key_docs())


def config_keys() -> list[str]:
    return [f.name for f in config_fields()]


def catalogue() -> list[Field]:
    """Every field: the run fields, then every config key (tags are `tag.NAME`, any name)."""
    return [*RUN_FIELDS, *config_fields()]


def is_tag(name: str) -> bool:
    return name.startswith(TAG_PREFIX)


def field(name: str) -> Field:
    """The field a canonical name (from `resolve`) stands for."""
    if name in _by_name():
        return _by_name()[name]
    if is_tag(name):
        return Field(name, "str", "tags", TAG_HELP)
    for f in config_fields():
        if f.name == name:
            return f
    return Field(name, "str", "config", "a config key of a plugin")


def source_of(name: str) -> str:
    return field(name).source


def allowed_names() -> list[str]:
    """What an error lists as allowed (the closest names come first, in the message itself)."""
    return ["a run field (state, test_loss, note, arm_label, ...)", "tag.NAME",
            "a config key (model.*, train.*, data.*, gp.*, task, plugins) or its last part; `cemctl keys` lists them all"]


def resolve(name: str, known: Iterable[str] = (), *, what: str = "--where") -> str:
    """The canonical field name of `name`: a run field by its name, short name or alias; `tag.NAME`; a config key
    by its dotted name or its unique last part (`known`: extra keys, e.g. a plugin's). Unknown or ambiguous: a
    ConfigError naming `what` and the closest names."""
    text = (name or "").strip()
    if text in _by_name():
        return text
    if text in _aliases():
        return _aliases()[text]
    if is_tag(text):
        if not TAG_FIELD.match(text):
            raise ConfigError(what, f"bad tag name in {text!r}", allowed=["tag.NAME (a letter, then letters, digits, _ . -)"])
        return text
    keys = list(dict.fromkeys([*config_keys(), *known]))
    if text in keys:
        return text
    tails = [k for k in keys if k.split(".")[-1] == text]
    if len(tails) == 1:
        return tails[0]
    if tails:
        raise ConfigError(what, f"ambiguous key {text!r}", allowed=tails)
    raise ConfigError(what, f"unknown field {text!r}" + _suggest(text, keys), allowed=allowed_names())


def _suggest(text: str, keys: Sequence[str]) -> str:
    """' (did you mean a or b?)': the closest run fields and config keys, a run field first when one is close."""
    import difflib

    runs = [f.name for f in RUN_FIELDS] + list(_aliases())
    by_tail = {k.split(".")[-1]: k for k in keys}
    close_runs = difflib.get_close_matches(text, runs, n=2, cutoff=0.75)
    close_keys = difflib.get_close_matches(text, [*keys, *by_tail], n=3, cutoff=0.75)
    names = list(dict.fromkeys([_aliases().get(c, c) for c in close_runs] + [by_tail.get(c, c) for c in close_keys]))
    return f" (did you mean {' or '.join(names[:3])}?)" if names else ""


def resolve_all(names: Iterable[str], known: Iterable[str] = (), *, what: str) -> list[str]:
    """Each name resolved; every unknown one is named in one error (not only the first)."""
    out, bad = [], []
    known = list(known)
    for n in names:
        try:
            out.append(resolve(n, known, what=what))
        except ConfigError as e:
            bad.append(e)
    if len(bad) == 1:
        raise bad[0]
    if bad:
        raise ConfigError(what, "; ".join(e.message for e in bad), allowed=allowed_names())
    return out


def sources(names: Iterable[str]) -> set[str]:
    """What the loader must read to have these fields."""
    return {source_of(n) for n in names}


def unit_of(name: str, tokenizers: Iterable[str] = (), task: str | None = "lm") -> str:
    """The unit of a field as it is for these runs: a loss by their tokenizer and task (`loss_unit`), any other
    field its catalogue unit."""
    f = field(name)
    return loss_unit(tokenizers, task) if f.kind == "loss" else f.unit


def loss_unit(tokenizers: Iterable[str], task: str | None = "lm") -> str:
    """The unit of a loss as it is: nats per byte with the byte tokenizer, nats per token otherwise (mixed: token)."""
    kinds = {str(t) for t in tokenizers if t is not None}
    if task == "gp":
        return "squared error"
    return "nats/byte" if kinds == {"byte"} else "nats/token"
