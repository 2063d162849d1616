"""The synthetic Gaussian-process regression study (task = "gp"; `cemctl launch` of experiments/gp.toml).

- `cem_core.gp.data`:   `make_gp_dataset(gp_cfg) -> GPData`, `kernel_matrix`, kernels `rbf`, `gibbs`.
- `cem_core.gp.model`:  `GPRegressor(model_cfg, gp_cfg)`: stacked MLP sublayers (CEM with T steps).
- `cem_core.gp.counts`: torch-free parameter and FLOP counts of a GPRegressor.

This package file imports nothing, so `cem_core.gp.counts` stays torch-free.
"""
