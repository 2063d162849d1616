"""The run record: one typed object per run, the one home of a run's facts on every surface.

    rec = RunRecord(run_id="3fa2c1d0e5b7", state="done", test_loss=1.4, config={"model.attn_steps": 2})
    rec.test_loss, rec["test_loss"], rec["model.attn_steps"], rec["tag.phase"]   # by attribute or by field name
    RUN_FIELDS                                  # the catalogue: each field's kind, source, unit, short name, meaning

A record's fields are the catalogue: each attribute of `RunRecord` carries its field's metadata
(`Field`: kind, source, meaning, unit, short name, aliases), read by `cemctl keys`, `--where`,
`--columns`, `--sort`, export and the API (`cemctl.records.fields`); the order of the attributes is
the order `cemctl keys` lists them and export writes them. Besides its fields a record holds its
run's resolved config (dotted keys), its tags (`tag.NAME`), the grid's varied keys (`axes`) and the
experiment it is listed under (`group`). As a read-only mapping, a record answers every name a user
writes (a field, a config key, `tag.NAME`), so `--where`, `--columns` and the tables read it by name.

Built by `cemctl.records.load.load_records` from the database and brought up to a folder's evidence
by `cemctl.records.live`; the values a result gives (`apply_result`) are set the same way from either.
Torch-free, pandas-free.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from cem_core.runfiles.files import number

if TYPE_CHECKING:  # pragma: no cover
    from cem_core.runfiles import RunResult

# A loss's unit depends on the run: nats per token, nats per byte with the byte tokenizer, squared error for the
# GP task (`cemctl.records.fields.loss_unit`, `unit_of`); the catalogue says so once.
LOSS_UNIT = "nats/token (nats/byte with the byte tokenizer; squared error for the GP task)"

# Where a field's value comes from.
SOURCES = ("link", "state", "progress", "result", "extras", "arm", "notes", "tags", "code", "environment", "history",
           "config")
NUMERIC_KINDS = ("int", "float", "time", "duration", "count", "loss", "ppl", "rate", "progress")


@dataclass(frozen=True)
class Field:
    """A field of the catalogue: one name everywhere, a short name for table headers, a kind, a unit, its source."""

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
        return self.kind in NUMERIC_KINDS


def _f(default: Any, kind: str, source: str, help: str, unit: str = "", short: str = "",
       aliases: Sequence[str] = ()) -> Any:
    """A record attribute that is a field of the catalogue."""
    return field(default=default, metadata={"field": (kind, source, help, unit, short, tuple(aliases))})


@dataclass(eq=False, slots=True)
class RunRecord(Mapping[str, Any]):
    """One run as every surface shows it (see the module docstring). Attributes in catalogue order."""

    run_id: str = _f("", "str", "link",
        "the run's id: the hash of its resolved configuration", short="run", aliases=("run", "id"))
    experiment: str = _f("", "str", "link", "the experiments that plan the run (comma-separated)")
    scale: str = _f("", "str", "link", "the scale the run was planned at (tiny, cpu, gpu, paper)")
    position: int = _f(0, "int", "link", "the run's place in its grid file's order")
    in_grid: bool = _f(True, "bool", "link",
        "false for a run an edited grid file no longer holds (kept with its result)")
    marks: str = _f("", "str", "link", "the labels of the grid's [[mark]] rules the run matches ('; '-joined)")
    arm: str | None = _f(None, "str", "arm",
        "the run's arm: a hash of every config value but the nuisance keys (the seed)", aliases=("arm_id",))
    arm_label: str | None = _f(None, "str", "arm",
        "the arm named by the keys that vary among its experiment's arms", short="arm")
    state: str = _f("planned", "str", "state",
        "planned, queued, running, done, diverged, failed, stale, cancelled or damaged")
    reason: str = _f("", "str", "state",
        "why a run failed, went stale, diverged, was cancelled or is damaged: the last line of its error, else the "
        "reason recorded with the state; a run an edited grid no longer holds says so", aliases=("why",))
    error: str | None = _f(None, "str", "state", "the run's whole error text (failed and diverged runs)")
    attempts: int = _f(0, "int", "state", "how many times the run was started", short="att", aliases=("att",))
    executor: str | None = _f(None, "str", "state", "the executor that ran it last (local, slurm)")
    job_id: str | None = _f(None, "str", "state", "the executor's job id")
    job: str | None = _f(None, "str", "state", "executor:job id", short="job")
    host: str | None = _f(None, "str", "state", "the machine that ran it last")
    run_dir: str | None = _f(None, "str", "state", "the run's folder: <runs root>/<run id>")
    step: int | None = _f(None, "int", "progress",
        "optimizer steps done (a finished run: the steps it trained)", aliases=("steps",))
    total_steps: int | None = _f(None, "int", "progress", "optimizer steps planned")
    progress: float | None = _f(None, "progress", "progress", "fraction of the planned steps done (1 once finished)")
    tokens: int | None = _f(None, "count", "progress",
        "tokens trained on (so far while running; the total once finished)", unit="tokens")
    train_loss: float | None = _f(None, "loss", "progress",
        "the last training loss reported", unit=LOSS_UNIT, short="train")
    val_loss: float | None = _f(None, "loss", "progress",
        "validation loss: the final one once finished, else the last evaluated", unit=LOSS_UNIT, short="val")
    tokens_per_s: float | None = _f(None, "rate", "progress",
        "current training speed: the rate a running run's trainer last reported",
        unit="tokens/s", short="tok/s now", aliases=("tok/s_now",))
    avg_tokens_per_s: float | None = _f(None, "rate", "progress",
        "average training speed: tokens / wall_time_s, once finished (a running run: tokens_per_s)",
        unit="tokens/s", short="tok/s", aliases=("tok/s", "tok_s"))
    started_at: float | None = _f(None, "time", "state", "when the run (its last attempt) started", unit="unix s")
    finished_at: float | None = _f(None, "time", "state", "when it ended", unit="unix s")
    heartbeat_at: float | None = _f(None, "time", "state", "the trainer's last heartbeat", unit="unix s")
    last_event_at: float | None = _f(None, "time", "state",
        "the last event of its events.jsonl, for a run neither running nor ended", unit="unix s")
    elapsed_s: float | None = _f(None, "duration", "state",
        "how long it has taken: once it has a result, its training wall time (wall_time_s); while it runs, the time "
        "since it started; else until it was last seen (its last heartbeat or event)", unit="s", short="elapsed",
        aliases=("elapsed",))
    eta_s: float | None = _f(None, "duration", "progress",
        "time left at the pace of its steps so far (running runs)", unit="s", short="ETA", aliases=("eta",))
    test_loss: float | None = _f(None, "loss", "result",
        "loss on the fixed held-out test tokens", unit=LOSS_UNIT, short="test", aliases=("test",))
    test_ppl: float | None = _f(None, "ppl", "result",
        "test perplexity: exp(test_loss)", short="test ppl", aliases=("ppl",))
    val_ppl: float | None = _f(None, "ppl", "result", "validation perplexity: exp(val_loss)", short="val ppl")
    test_rmse: float | None = _f(None, "float", "extras", "test root-mean-square error (the GP regression task)")
    val_rmse: float | None = _f(None, "float", "extras", "validation root-mean-square error (the GP regression task)")
    bayes_rmse: float | None = _f(None, "float", "extras",
        "the Bayes-optimal test RMSE of the GP sample (the GP regression task)")
    params_total: int | None = _f(None, "count", "result",
        "parameters, embeddings included", unit="parameters", short="params", aliases=("params",))
    params_non_embedding: int | None = _f(None, "count", "result",
        "parameters without the embedding and output head", unit="parameters")
    flops_per_token: int | None = _f(None, "count", "result", "forward FLOPs per token", unit="FLOP/token")
    train_flops: float | None = _f(None, "count", "result",
        "training FLOPs: 3 x forward FLOPs per token x tokens", unit="FLOP", short="train FLOPs", aliases=("flops",))
    wall_time_s: float | None = _f(None, "duration", "result",
        "training wall time recorded in result.json (resumed attempts summed)",
        unit="s", short="wall time", aliases=("wall_time",))
    diverged_step: int | None = _f(None, "int", "result",
        "the step at which the loss became non-finite (diverged runs)")
    code_fingerprint: str | None = _f(None, "str", "code", "the fingerprint of the model code that trained the run")
    outdated: bool = _f(False, "bool", "code",
        "true when the run was trained by older model code than this installation's")
    history: str = _f("", "str", "history",
        "the run's earlier results (set aside by --rerun-outdated or --redo-damaged): 'when: state, test loss (code "
        "fingerprint)', oldest first, '; '-joined")
    previous_test_loss: float | None = _f(None, "loss", "history",
        "the test loss of the run's latest earlier result (before a rerun)", unit=LOSS_UNIT, short="previous test")
    previous_code_fingerprint: str | None = _f(None, "str", "history",
        "the code that trained the run's latest earlier result")
    cpu_model: str | None = _f(None, "str", "environment", "the CPU the run trained on (its environment.json)")
    gpu_model: str | None = _f(None, "str", "environment", "the GPU the run trained on (empty on a CPU)", short="GPU")
    device: str | None = _f(None, "str", "environment", "the torch device it trained on (cpu, cuda:0)")
    torch_version: str | None = _f(None, "str", "environment", "the torch version it trained with", short="torch")
    python_version: str | None = _f(None, "str", "environment", "the Python version it trained with", short="python")
    cemctl_version: str | None = _f(None, "str", "environment", "the cemctl version it trained with", short="cemctl")
    cuda_version: str | None = _f(None, "str", "environment",
        "the CUDA version torch was built with (GPU runs)", short="CUDA")
    code_snapshot: str | None = _f(None, "str", "environment",
        "the code snapshot the launch ran it from (job.json's snapshot)")
    peak_host_rss_bytes: int | None = _f(None, "count", "environment",
        "peak resident memory of the training process", unit="bytes", short="peak RSS")
    peak_gpu_allocated_bytes: int | None = _f(None, "count", "environment",
        "peak GPU memory allocated by torch", unit="bytes", short="peak GPU mem")
    note: str = _f("", "str", "notes", "the run's notes (`cemctl note`), joined with ' | '", aliases=("notes",))

    # Not fields of the catalogue: what else a record carries.
    config: dict[str, Any] = field(default_factory=dict)  # the resolved config, flattened (dotted keys, task, plugins)
    tags: dict[str, str] = field(default_factory=dict)  # tag name -> text (`tag.NAME` by field name)
    axes: dict[str, Any] = field(default_factory=dict)  # the grid's varied keys of the run, as planned
    group: str = ""  # the experiment the record is listed under (a table per experiment; NO_EXPERIMENT)

    # -- a read-only mapping by field name (a field, a config key, tag.NAME)
    def __getitem__(self, key: str) -> Any:
        if key in FIELD_NAMES:
            return getattr(self, key)
        if key.startswith("tag."):
            return self.tags[key[4:]]
        return self.config[key]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        return key in FIELD_NAMES or (key[4:] in self.tags if key.startswith("tag.") else key in self.config)

    def __iter__(self) -> Iterator[str]:
        yield from FIELD_ORDER
        yield from self.config
        yield from (f"tag.{k}" for k in self.tags)

    def __len__(self) -> int:
        return len(FIELD_NAMES) + len(self.config) + len(self.tags)

    def __setitem__(self, key: str, value: Any) -> None:
        """Set a field (or a config key, a tag) by name: what `--where` reads is what was set."""
        if key in FIELD_NAMES:
            setattr(self, key, value)
        elif key.startswith("tag."):
            self.tags[key[4:]] = value
        else:
            self.config[key] = value

    def as_dict(self) -> dict[str, Any]:
        """Every name and its value (fields in catalogue order, then config keys, then tags)."""
        out = dict(zip(FIELD_ORDER, _FIELD_VALUES(self)))
        out.update(self.config)  # (no config key is a field's name: config keys are dotted, or task and plugins)
        out.update({f"tag.{k}": v for k, v in self.tags.items()})
        return out

    def copy(self) -> "RunRecord":
        return dataclasses.replace(self, config=dict(self.config), tags=dict(self.tags), axes=dict(self.axes))

    def apply_result(self, res: "RunResult") -> None:
        """The fields a result gives (a `cem_core.runfiles.RunResult` from result.json, or what the database kept of
        one: the same attributes): the one rule for both."""
        for name in RESULT_VALUES:
            setattr(self, name, getattr(res, name))
        if res.val_loss is not None:
            self.val_loss = res.val_loss
        for name, value in (("step", res.steps), ("tokens", res.tokens), ("params_total", res.params_total),
                            ("params_non_embedding", res.params_non_embedding),
                            ("flops_per_token", res.flops_per_token)):
            if value is not None:
                setattr(self, name, value)
        for name in EXTRA_VALUES:
            setattr(self, name, number(res.extras.get(name)))
        self.error = res.error


RUN_FIELDS: tuple[Field, ...] = tuple(Field(f.name, *f.metadata["field"]) for f in dataclasses.fields(RunRecord)
                                      if "field" in f.metadata)
FIELD_ORDER: tuple[str, ...] = tuple(f.name for f in RUN_FIELDS)
FIELD_NAMES: frozenset[str] = frozenset(FIELD_ORDER)
_FIELD_VALUES = operator.attrgetter(*FIELD_ORDER)
RESULT_VALUES = ("test_loss", "test_ppl", "val_ppl", "train_flops", "wall_time_s", "diverged_step", "code_fingerprint")
EXTRA_VALUES = tuple(f.name for f in RUN_FIELDS if f.source == "extras")
