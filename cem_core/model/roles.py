"""What each parameter of a model *is* (`cemctl launch` trains with it; weight decay is chosen by role).

Every parameter gets exactly one role:

| role            | what                                                     | decayed          |
|-----------------|----------------------------------------------------------|------------------|
| projection      | a weight matrix of a linear map (attention, MLP, GP input)| yes              |
| output_head     | the language model's (or GP regressor's) output head     | yes              |
| embedding       | the token embedding                                      | no               |
| norm_gain       | an RMSNorm gain                                          | no               |
| bias            | an additive bias of a linear map (GP regressor only)     | no               |
| kq_diagonal     | the KQ diagonal D (shared [d] or per head [K, d])        | `train.decay_cem_extras` |
| preconditioner  | a preconditioner's p, U, V                               | `train.decay_cem_extras` |
| position_bias   | CEM attention's learned self / non-self biases           | `train.decay_cem_extras` |

The role comes from the module that owns the parameter: a module class may
declare `param_roles = {"attribute or dotted path below it": role}`; otherwise
the type default applies (`nn.Linear.weight` -> projection, `.bias` -> bias,
`nn.Embedding.weight` -> embedding, `RMSNorm.weight` -> norm_gain). A parameter
that neither names is an error (`UnknownParameterRole`), so a new parameter
cannot silently land in the wrong weight-decay group.
"""

from __future__ import annotations

from torch import nn

from cem_core.model.norm import RMSNorm

DECAYED_ROLES = frozenset({"projection", "output_head"})
CEM_EXTRA_ROLES = frozenset({"kq_diagonal", "preconditioner", "position_bias"})
NEVER_DECAYED_ROLES = frozenset({"embedding", "norm_gain", "bias"})
ROLES = DECAYED_ROLES | CEM_EXTRA_ROLES | NEVER_DECAYED_ROLES

_TYPE_DEFAULTS: tuple[tuple[type[nn.Module], dict[str, str]], ...] = (
    (nn.Linear, {"weight": "projection", "bias": "bias"}),
    (nn.Embedding, {"weight": "embedding"}),
    (RMSNorm, {"weight": "norm_gain"}),
)


class UnknownParameterRole(ValueError):
    """A parameter no module declares a role for."""


def _declared(module: nn.Module) -> dict[str, str]:
    roles = dict(getattr(type(module), "param_roles", {}))
    for klass, defaults in _TYPE_DEFAULTS:
        if isinstance(module, klass):
            roles = {**defaults, **roles}
    return roles


def param_roles(model: nn.Module) -> dict[str, str]:
    """{parameter name: role} for every parameter of `model` (shared parameters once, first name)."""
    declared: dict[str, str] = {}
    # Outer modules are visited first; a declaration of an outer module wins
    # over the owner's type default (e.g. the model names its head).
    for prefix, module in model.named_modules():
        for rel, role in _declared(module).items():
            if role not in ROLES:
                raise UnknownParameterRole(f"{type(module).__name__} declares unknown role {role!r} for {rel!r} "
                                           f"(known: {', '.join(sorted(ROLES))})")
            name = f"{prefix}.{rel}" if prefix else rel
            declared.setdefault(name, role)
    roles: dict[str, str] = {}
    unknown: list[str] = []
    for name, _ in model.named_parameters():  # named_parameters() skips shared duplicates
        if name in declared:
            roles[name] = declared[name]
        else:
            unknown.append(name)
    if unknown:
        raise UnknownParameterRole(
            f"no role for parameter(s) {', '.join(unknown)}: declare them in the owning module's "
            f"`param_roles` (known roles: {', '.join(sorted(ROLES))})")
    return roles


def is_decayed(role: str, *, decay_cem_extras: bool = False) -> bool:
    """Whether a parameter of this role gets weight decay."""
    if role in DECAYED_ROLES:
        return True
    if role in CEM_EXTRA_ROLES:
        return decay_cem_extras
    if role in NEVER_DECAYED_ROLES:
        return False
    raise UnknownParameterRole(f"unknown role {role!r} (known: {', '.join(sorted(ROLES))})")
