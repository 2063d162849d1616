"""Weight decay by role (`cem_core.model.roles`, `cem_core.train.optim`): what a parameter is, not its shape.

Every registered attention x MLP x preconditioner x KQ-diagonal variant is built
and each parameter's group is checked against its role; the shared and per-head
diagonals are treated alike; a parameter without a role is an error.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from cem_core.config import RunConfig, resolve
from cem_core.gp.model import build_gp_model
from cem_core.model import ATTENTION, MLPS, PRECONDITIONERS, build_model
from cem_core.model.roles import CEM_EXTRA_ROLES, UnknownParameterRole, param_roles
from cem_core.train.optim import build_optimizer, decay_split


def _cfg(**model):
    return resolve(RunConfig.from_dict({"model.size": "nano", "data.tokenizer": "byte", "model.context_len": 16,
                                        **{f"model.{k}": v for k, v in model.items()}}))


def _variants():
    """Every attention x MLP pairing, each CEM sublayer with every preconditioner, CEM attention with every diagonal."""
    out = []
    for attn, mlp in itertools.product(ATTENTION.names(), MLPS.names()):
        attn_opts = ([dict(attn_precond=p, kq_diagonal=k) for p in PRECONDITIONERS.names()
                      for k in ("none", "shared", "per_head")] if attn == "cem" else [{}])
        mlp_opts = [dict(mlp_precond=p) for p in PRECONDITIONERS.names()] if mlp.startswith("cem") else [{}]
        for a, m in itertools.product(attn_opts, mlp_opts):
            out.append(dict(attention=attn, mlp=mlp, **a, **m))
    return out


VARIANTS = _variants()


def _expected_role(name: str) -> str:
    """The role a parameter's name says, written independently of the module declarations."""
    last = name.split(".")[-1]
    if name == "embed.weight":
        return "embedding"
    if name == "head.weight":
        return "output_head"
    if ".norm." in f".{name}" and last == "weight":
        return "norm_gain"
    if ".precond." in name and last in ("p", "U", "V"):
        return "preconditioner"
    if last == "diag":
        return "kq_diagonal"
    if last in ("self_bias", "other_bias"):
        return "position_bias"
    if last == "weight":
        return "projection"
    raise AssertionError(f"test does not know {name}")


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
def test_every_parameter_of_every_variant_is_decayed_by_its_role(v):
    model = build_model(_cfg(**v).model)
    roles = param_roles(model)
    assert set(roles) == {n for n, _ in model.named_parameters()}
    for name, role in roles.items():
        assert role == _expected_role(name), name
    decay, no_decay = decay_split(model)
    assert not set(decay) & set(no_decay) and set(decay) | set(no_decay) == set(roles)
    assert set(decay) == {n for n, r in roles.items() if r in ("projection", "output_head")}
    # The switch moves exactly the CEM extras (and nothing else) into the decayed group.
    decay_on, _ = decay_split(model, decay_cem_extras=True)
    assert set(decay_on) - set(decay) == {n for n, r in roles.items() if r in CEM_EXTRA_ROLES}


def test_shared_and_per_head_diagonals_are_treated_alike_and_preconditioners_are_not_decayed():
    for diag in ("shared", "per_head"):
        model = build_model(_cfg(attention="cem", kq_diagonal=diag, attn_precond="diag_lowrank").model)
        _, no_decay = decay_split(model)
        diags = [n for n, _ in model.named_parameters() if n.endswith(".diag")]
        assert diags and all(n in no_decay for n in diags), diag
        # The per-head diagonal [K, d] and the low-rank factors are matrices: rank must not decide.
        precond = [n for n, _ in model.named_parameters() if ".precond." in n]
        assert {n.split(".")[-1] for n in precond} == {"p", "U", "V"} and all(n in no_decay for n in precond)


def test_optimizer_groups_follow_the_config_switch():
    for switch in (False, True):
        cfg = _cfg(attention="cem", mlp="cem", kq_diagonal="per_head", attn_precond="diag", mlp_precond="diag_lowrank")
        cfg = resolve(cfg.override({"train.decay_cem_extras": switch}))
        model = build_model(cfg.model)
        opt = build_optimizer(model, cfg.train, torch.device("cpu"))
        decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
        diag = dict(model.named_parameters())["blocks.0.attn.diag"]
        assert (id(diag) in decayed) is switch
        assert id(model.head.weight) in decayed and id(model.embed.weight) not in decayed
    assert resolve(RunConfig()).to_dict()["train"]["decay_cem_extras"] is False  # recorded, default off


def test_gp_regressor_roles():
    cfg = resolve(RunConfig.from_dict({"task": "gp", "model.size": "nano", "model.mlp": "cem",
                                       "model.mlp_precond": "diag_lowrank", "train.max_steps": 1}))
    model = build_gp_model(cfg.model, cfg.gp)
    roles = param_roles(model)
    assert roles["head.weight"] == "output_head" and roles["inp.weight"] == "projection"
    assert roles["inp.bias"] == roles["head.bias"] == "bias"
    decay, _ = decay_split(model)
    assert "inp.bias" not in decay and "blocks.0.precond.p" not in decay


def test_a_parameter_without_a_role_is_an_error():
    model = build_model(_cfg(attention="cem").model)
    model.blocks[0].attn.mystery = nn.Parameter(torch.zeros(3))  # a new CEM extra nobody declared
    with pytest.raises(UnknownParameterRole, match=r"blocks\.0\.attn\.mystery"):
        decay_split(model)


def test_a_module_declaring_an_unknown_role_is_an_error():
    class Odd(nn.Module):
        param_roles = {"w": "mystery_role"}

        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(2))

    with pytest.raises(UnknownParameterRole, match="mystery_role"):
        param_roles(Odd())
