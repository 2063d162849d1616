"""A model variant is one spec: what config validation, counts, labels, recursion eval, plan and report read.

    from cem_core.spec import AttentionSpec, register

    register(AttentionSpec(
        name="gated_cem", module="my_layer:GatedCEMAttention",         # the nn.Module, built as cls(model_cfg)
        description="CEM attention with a learned gate on each step",
        label="gated CEM attention", family="cem", recurses=True,       # how reports name and group it
        params=my_params, flops=my_flops,                               # torch-free counts (ModelConfig -> int)
        uses=("attn_steps", "attn_step_size", "kq_diagonal"),           # the model.* keys it reads
        requires={},                                                    # other keys it needs at given values
    ))

Specs:
- `AttentionSpec` / `MlpSpec`: a sublayer kind of `model.attention` / `model.mlp`. `params(m)` is
  the parameters of one sublayer, `flops(m, seq_len)` its forward matmul FLOPs per token and the
  weight-side FLOPs per forward (a pair), `family` how the paper's figures group it (`baseline`,
  `cem`, `reuse`, or anything else: shown by name), `recurses` whether T steps happen inside it
  (test-time recursion applies), `steps_key` the config key of its T, `requires` the values other
  config keys must have when it is chosen (one rule table, checked by `cem_core.config.validate`).
- `PreconditionerSpec`: a kind of `model.attn_precond` / `model.mlp_precond`: its parameters
  for `n` matrices of a width and rank, and the extra FLOPs of applying it.
- `TaskSpec`: a `task`: its counts, what a "token" is, the metric that decides, its rules,
  whether it trains on the corpus of `data.*` and whether test-time recursion applies.

`register(spec)` adds a spec to the registry of its kind (a name already taken raises a
`ConfigError` naming both); plugins (`[experiment] plugins`, the `cemctl.plugins` entry
points) call it and nothing else. The four variant registries live here (`ATTENTION`,
`MLPS`, `PRECONDITIONERS`, `TASKS`; cemctl's own entries are declared in
`cem_core.variants`, which is imported before a registry is first read), so registering
never reaches above this module. Torch-free: the module is imported only when a model is built.

A `TaskSpec`'s `counts` may be a function or a lazy "module:function" target (cemctl's own
tasks name `cem_core.counts:lm_task_counts`, so the counts can build on the specs); call
`spec.count(cfg)` either way.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from cem_core.errors import ConfigError
from cem_core.plugin_context import current_plugin
from cem_core.registry import Registry
from cem_core.schema import ModelConfig, RunConfig

FAMILIES = ("baseline", "cem", "reuse")  # what the paper's figures know; other families are shown by name


@dataclass(frozen=True)
class SublayerSpec:
    name: str
    module: str  # "package.module:Class": built as Class(model_cfg)
    description: str
    label: str  # how reports name it: "Llama", "CEM attention", "CEM MLP, param-matched"
    params: Callable[["ModelConfig"], int]  # parameters of one sublayer
    flops: Callable[["ModelConfig", int], tuple[int, int]]  # (forward FLOPs per token, weight-side FLOPs per forward)
    family: str = "cem"
    recurses: bool = False  # T steps inside the sublayer (a CEM sublayer): test-time recursion applies
    reuses: bool = False  # the sublayer applied T times (plain reuse)
    uses: tuple[str, ...] = ()  # model.* keys it reads besides the dims
    requires: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # key -> the values it allows
    width: Callable[["ModelConfig"], int] | None = None  # the hidden width it builds (MLPs), for counts and reports
    plugin: str = ""  # the plugin that registered it ("" for cemctl's own)
    kind: str = ""  # set by the subclasses: "attention" | "mlp"

    @property
    def steps_key(self) -> str:
        return "model.attn_steps" if self.kind == "attention" else "model.mlp_steps"


@dataclass(frozen=True)
class AttentionSpec(SublayerSpec):
    kind: str = "attention"


@dataclass(frozen=True)
class MlpSpec(SublayerSpec):
    kind: str = "mlp"


@dataclass(frozen=True)
class PreconditionerSpec:
    name: str
    module: str  # built as Class(n, width, rank)
    description: str
    label: str  # "diag", "diag+low-rank"
    params: Callable[[int, int, int], int]  # (n matrices, width, rank) -> parameters
    # extra FLOPs per recursion step: attention (model cfg) -> (per token, weight-side per forward); MLP -> per token
    attention_flops: Callable[["ModelConfig"], tuple[int, int]] = lambda m: (0, 0)
    mlp_flops: Callable[["ModelConfig"], int] = lambda m: 0
    plugin: str = ""
    kind: str = "preconditioner"
    reads_rank: bool = True  # whether its sublayer's *_precond_rank shapes it (False: two ranks build one model)


@dataclass(frozen=True)
class TaskSpec:
    name: str
    module: str  # the training engine's Task class
    description: str
    # (RunConfig -> (param counts, forward FLOPs per unit)), or its "module:function" (imported when counted)
    counts: Callable[["RunConfig"], tuple[dict[str, int], int]] | str
    unit: str = "tokens"  # what a "token" is: tokens, examples
    metric: str = "test_loss"  # what decides (reports, claims)
    token_budget: bool = True  # Chinchilla budgets apply (else train.max_steps must be set)
    uses_corpus: bool = True  # trains on the text corpus of cfg.data (`cemctl data prepare` builds its cache)
    recursion_eval: bool = True  # test-time recursion (`cemctl eval`) applies to its CEM sublayers
    requires: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    plugin: str = ""
    kind: str = "task"

    def count(self, cfg: "RunConfig") -> tuple[dict[str, int], int]:
        """(param counts, forward FLOPs per unit) of a resolved config: the `counts` function, or its target."""
        fn = self.counts
        if isinstance(fn, str):
            module, _, attr = fn.partition(":")
            fn = getattr(importlib.import_module(module), attr)
        return fn(cfg)


Spec = SublayerSpec | PreconditionerSpec | TaskSpec

_BUILTINS = "cem_core.variants"  # declares cemctl's own entries of the four registries
ATTENTION: Registry = Registry("attention", "model.attention", builtins=_BUILTINS)
MLPS: Registry = Registry("MLP", "model.mlp", builtins=_BUILTINS)
PRECONDITIONERS: Registry = Registry("preconditioner", "model.attn_precond", builtins=_BUILTINS)
TASKS: Registry = Registry("task", "task", builtins=_BUILTINS)


def registry_of(spec: Spec) -> Registry:
    return {"attention": ATTENTION, "mlp": MLPS, "preconditioner": PRECONDITIONERS, "task": TASKS}[spec.kind]


def register(spec: Spec) -> Spec:
    """Add a variant to its registry; the one way plugins declare variants."""
    if not isinstance(spec, (SublayerSpec, PreconditionerSpec, TaskSpec)):
        raise ConfigError("plugin", f"register() takes an AttentionSpec, MlpSpec, PreconditionerSpec or TaskSpec, got "
                          f"{type(spec).__name__}")
    if not isinstance(spec.name, str) or not spec.name.isidentifier():
        raise ConfigError("plugin", f"a variant name must be an identifier, got {spec.name!r}")
    if ":" not in spec.module:
        raise ConfigError("plugin", f"{spec.kind} {spec.name!r}: module must be 'package.module:Class', got {spec.module!r}")
    if isinstance(spec, TaskSpec) and isinstance(spec.counts, str) and ":" not in spec.counts:
        raise ConfigError("plugin", f"task {spec.name!r}: counts must be a function or 'package.module:function', "
                          f"got {spec.counts!r}")
    if isinstance(spec, SublayerSpec) and spec.kind not in ("attention", "mlp"):
        raise ConfigError("plugin", f"{spec.name!r}: use AttentionSpec or MlpSpec")
    if not spec.plugin and current_plugin():  # registered while a plugin module is imported: it is that plugin's
        spec = dataclasses.replace(spec, plugin=current_plugin())
    registry = registry_of(spec)
    if spec.name in registry:
        other = registry.spec(spec.name)
        who = f"plugin {other.plugin!r}" if other.plugin else "cemctl itself"
        raise ConfigError("plugin", f"{spec.kind} {spec.name!r}"
                          + (f" of plugin {spec.plugin!r}" if spec.plugin else "")
                          + f" is already registered by {who}; give it another name")
    registry.register_spec(spec)
    return spec


def check_rules(spec: Any, values: Mapping[str, Any], what: str) -> None:
    """The config keys `spec.requires` constrains must hold allowed values (ConfigError naming them)."""
    for key, allowed in getattr(spec, "requires", {}).items():
        have = values.get(key)
        if have not in allowed:
            raise ConfigError(key, f"{have!r} does not go with {what}", value=have, allowed=allowed)
