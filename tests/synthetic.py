"""Synthetic results in the shape of the results database, for the report and claims tests (never shipped).

`synthetic_frames(kind)` returns (runs, curves) frames with the columns of
`cemctl.report.frame`, for the variants an experiment of figure kind `kind`
plans, built from real resolved `RunConfig`s (real parameter and FLOP counts).
The perplexities are made up (a smooth function of parameters and variant, plus
seed noise); they are not results. `synthetic_gp_frame()` is the GP table input.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from cem_core.config import RunConfig, resolve, run_id
from cem_core.counts import flops_per_token, param_counts

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

LRS = (0.0005, 0.001, 0.002, 0.004, 0.008)


def _variants(kind: str) -> list[dict[str, Any]]:
    llama: dict[str, Any] = {}
    att = {"model.attention": "cem"}
    mlp = {"model.mlp": "cem"}
    mlp_pm = {"model.mlp": "cem_param_matched"}
    if kind in ("components", "curves"):
        return [llama, att, mlp, mlp_pm]
    if kind == "generic":  # a researcher's own question: two axes the paper's figures never vary
        return [{**att, "model.attn_step_size": eta, "model.attn_steps": t} for eta in (0.5, 1.0) for t in (1, 2)]
    if kind == "recursion":
        out = [llama]
        for t in (1, 2):
            for p in ("diag", "diag_lowrank"):
                out.append({**att, "model.attn_steps": t, "model.attn_precond": p})
                out.append({**mlp, "model.mlp_steps": t, "model.mlp_precond": p})
        return out
    if kind == "lr_sweep":
        full = {"model.attention": "cem", "model.mlp": "cem", "model.attn_steps": 2, "model.mlp_steps": 2,
                "model.attn_precond": "diag_lowrank", "model.mlp_precond": "diag_lowrank"}
        return [{**v, "train.lr": lr} for v in (llama, full) for lr in LRS]
    if kind == "ablation":
        default = {**att, "model.attn_precond": "diag_lowrank", "model.kq_diagonal": "shared"}
        arms = (default, {**default, "model.attn_step_size": 0.5}, {**default, "model.attn_precond": "identity"})
        return [llama] + [{**arm, "model.attn_steps": t} for t in (1, 2) for arm in arms]
    if kind == "kq_diagonal":
        return [llama] + [{**att, "model.attn_precond": "diag", "model.kq_diagonal": k}
                          for k in ("none", "shared", "per_head")]
    if kind == "reuse_vs_recursion":
        out = [llama]
        for t in (1, 2):
            out += [{"model.mlp": "reuse", "model.mlp_steps": t}, {"model.attention": "reuse", "model.attn_steps": t},
                    {**mlp, "model.mlp_steps": t}, {**mlp_pm, "model.mlp_steps": t},
                    {**att, "model.attn_steps": t}]
        return out
    raise ValueError(f"no synthetic variants for figure kind {kind!r}")


def _ppl(cfg: RunConfig, params: int, seed: int, rng: Any) -> float:
    m = cfg.model
    base = 40.0 * (params / 1e6) ** -0.25
    if m.attention == "cem":
        base *= 1.01 - 0.03 * (m.attn_steps - 1) - (0.01 if m.attn_precond == "diag_lowrank" and m.attn_steps > 1 else 0)
        base *= 1.0 + 0.02 * (m.attn_step_size - 1.0) * (m.attn_steps - 1)
        base *= {"none": 1.06, "shared": 1.0, "per_head": 0.99}[m.kq_diagonal] if m.attn_precond == "diag" else 1.0
    if m.mlp.startswith("cem"):
        base *= 1.06 - 0.03 * (m.mlp_steps - 1) - (0.01 if m.mlp_precond == "diag_lowrank" and m.mlp_steps > 1 else 0)
    if m.attention == "reuse" or m.mlp == "reuse":
        base *= 1.0 - 0.003 * (max(m.attn_steps, m.mlp_steps) - 1)
    best_lr = 0.004 if m.attention == "cem" and m.mlp.startswith("cem") else 0.002
    base *= 1.0 + 0.08 * math.log(cfg.train.lr / best_lr) ** 2
    return float(base * (1.0 + 0.004 * rng.standard_normal()))


def synthetic_frames(kind: str, *, sizes: Sequence[str] = ("nano", "micro", "mini"), seeds: Sequence[int] = (0, 1, 2),
                     single_seed_variant: bool = True, failures: bool = True, steps: int = 40,
                     rng_seed: int = 0) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """(runs, curves) frames for figure kind `kind` (see the module docstring).

    With `single_seed_variant`, the first non-Llama variant of the smallest size has
    one seed only; with `failures`, one run fails and one diverges.
    """
    import numpy as np
    import pandas as pd

    from cemctl.report.frame import CURVE_COLUMNS, runs_frame

    rng = np.random.default_rng(rng_seed)
    records, curves = [], []
    for si, size in enumerate(sizes):
        for vi, variant in enumerate(_variants(kind)):
            use_seeds = seeds[:1] if (single_seed_variant and si == 0 and vi == 1) else seeds
            for seed in use_seeds:
                cfg = resolve(RunConfig.from_dict({"model.size": size, "train.seed": seed, "train.max_steps": steps,
                                                   **variant}))
                counts = param_counts(cfg.model)
                ppl = _ppl(cfg, counts["total"], seed, rng)
                rid = run_id(cfg)
                tokens = steps * cfg.train.batch_seqs * cfg.model.context_len
                rec = {"run_id": rid, "state": "done", "config": cfg.to_dict(), "params_total": counts["total"],
                       "params_non_embedding": counts["non_embedding"], "tokens": tokens,
                       "flops_per_token": flops_per_token(cfg.model),
                       "flops": 3 * flops_per_token(cfg.model) * tokens, "test_ppl": ppl,
                       "test_loss": math.log(ppl), "val_ppl": ppl * 1.01, "val_loss": math.log(ppl * 1.01),
                       "error": None, "diverged_step": None}
                records.append(rec)
                final = math.log(ppl)
                for step in range(1, steps + 1):
                    loss = final + (math.log(cfg.model.vocab_size) - final) * math.exp(-step / (steps / 6))
                    curves.append({"run_id": rid, "step": step, "tokens": step * tokens // steps,
                                   "train_loss": loss + 0.05 * rng.standard_normal(),
                                   "val_loss": loss + 0.01 if step % 10 == 0 else float("nan")})
    if failures and records:
        extra = resolve(RunConfig.from_dict({"model.size": sizes[0], "train.seed": 99, "train.max_steps": steps}))
        records.append({"run_id": run_id(extra), "state": "failed", "config": extra.to_dict(),
                        "error": "RuntimeError: out of memory"})
        extra2 = resolve(RunConfig.from_dict({"model.size": sizes[0], "train.seed": 98, "train.max_steps": steps}))
        records.append({"run_id": run_id(extra2), "state": "diverged", "config": extra2.to_dict(),
                        "error": "non-finite loss nan at step 17", "diverged_step": 17})
    return runs_frame(records), pd.DataFrame(curves, columns=list(CURVE_COLUMNS))


def synthetic_gp_frame(*, kernels: Sequence[str] = ("rbf", "gibbs"), steps: Sequence[int] = (1, 2, 4, 8),
                       seeds: Sequence[int] = (0, 1, 2, 3, 4), rng_seed: int = 0) -> "pd.DataFrame":
    """Columns kernel, T, seed, test_rmse, params, flops (made-up RMSEs, best T=4 for rbf, T=8 otherwise)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(rng_seed)
    rows = []
    for kernel in kernels:
        best = 4 if kernel == "rbf" else 8
        for t in steps:
            for seed in seeds:
                rmse = 0.3 + 0.02 * abs(math.log2(t) - math.log2(best)) + 0.005 * rng.standard_normal()
                rows.append({"kernel": kernel, "T": t, "seed": seed, "test_rmse": rmse, "params": 20_000,
                             "flops": 40_000 * t})
    return pd.DataFrame(rows)



def synthetic_from_grid(path: str, scale: str = "tiny", *, steps: int = 8, failures: bool = True,
                        rng_seed: int = 0) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """(runs, curves) with made-up results for every run of a grid file (`cemctl.grid.load_grid`):
    what `cemctl report` would see once the experiment has run. The first run fails when
    `failures` is set. GP runs (task 'gp') get `test_rmse` and `bayes_rmse` instead of perplexities.
    """
    import numpy as np
    import pandas as pd

    from cemctl.grid.expand import load_grid
    from cemctl.report.frame import CURVE_COLUMNS, runs_frame

    plan = load_grid(path, scale)
    rng = np.random.default_rng(rng_seed)
    records, curves = [], []
    for i, pr in enumerate(plan.runs):
        cfg = pr.config
        rec: dict[str, Any] = {"run_id": pr.run_id, "state": "done", "config": cfg.to_dict()}
        if cfg.task == "gp":
            from cem_core.gp.counts import gp_flops_per_example, gp_param_counts

            best = 4 if cfg.gp.kernel == "rbf" else 8
            rmse = 0.3 + 0.02 * abs(math.log2(cfg.model.mlp_steps) - math.log2(best)) + 0.004 * rng.standard_normal()
            rec.update(params_total=gp_param_counts(cfg.model, cfg.gp)["total"],
                       flops=3 * gp_flops_per_example(cfg.model, cfg.gp) * cfg.gp.n_train,
                       extra={"test_rmse": rmse, "bayes_rmse": 0.25})
            final = math.log(rmse)
        else:
            counts = param_counts(cfg.model)
            ppl = _ppl(cfg, counts["total"], cfg.train.seed, rng)
            tokens = steps * cfg.train.batch_seqs * cfg.model.context_len
            rec.update(params_total=counts["total"], params_non_embedding=counts["non_embedding"], tokens=tokens,
                       flops_per_token=flops_per_token(cfg.model), flops=3 * flops_per_token(cfg.model) * tokens,
                       test_ppl=ppl, test_loss=math.log(ppl), val_ppl=ppl, val_loss=math.log(ppl))
            final = math.log(ppl)
        if failures and i == 0:
            rec = {"run_id": pr.run_id, "state": "failed", "config": cfg.to_dict(),
                   "error": "RuntimeError: synthetic failure"}
        records.append(rec)
        for step in range(1, steps + 1):
            loss = final + 2.0 * math.exp(-step / max(1.0, steps / 4))
            curves.append({"run_id": pr.run_id, "step": step, "tokens": step * 1000,
                           "train_loss": loss + 0.03 * rng.standard_normal(),
                           "val_loss": loss if step == steps else float("nan")})
    return runs_frame(records), pd.DataFrame(curves, columns=list(CURVE_COLUMNS))
