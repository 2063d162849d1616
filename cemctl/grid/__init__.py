"""Grid files -> runs (`cemctl plan`, `cemctl launch FILE`): the stable API.

    plan = load_grid(path, scale="tiny", overrides=parse_overrides(["train.lr=0.004"]))
    plan.runs -> [PlannedRun(run_id, config (resolved RunConfig), axes {key: value})]
    run_cost(cfg, gpu_tflops=312, mfu=0.4) -> RunCost(params_total, ..., tokens, train_flops, gpu_hours)

Bad grids raise `ConfigError` naming the file, the key and the allowed values
(`cemctl.grid.spec` for the file format). `FIGURE_KINDS` and `SCALES` are the registries of figure kinds and scales.
"""

from cemctl.grid.estimate import DEFAULT_GPU_TFLOPS, DEFAULT_MFU, RunCost, run_cost
from cemctl.grid.expand import Plan, PlannedRun, expand, load_grid
from cemctl.grid.kinds import DEFAULT_SCALE, FIGURE_KINDS, MAX_RUNS, SCALES
from cemctl.grid.overrides import parse_overrides
from cemctl.grid.spec import GridSpec, parse_grid

__all__ = [
    "DEFAULT_GPU_TFLOPS", "DEFAULT_MFU", "DEFAULT_SCALE", "GridSpec", "MAX_RUNS", "Plan",
    "PlannedRun", "FIGURE_KINDS", "RunCost", "SCALES", "expand", "load_grid", "parse_grid",
    "parse_overrides", "run_cost",
]
