"""Synthetic Gaussian-process regression data (task = "gp"; `cemctl launch` runs of experiments/gp.toml).

The arXiv version's GP study, generated locally and deterministically from a `GPConfig`:

- inputs: x ~ N(0, I_D), D = `gp.input_dim` (10), all points drawn at once;
- function: f ~ GP(0, k) sampled jointly at all inputs, f = L z with L the float64 Cholesky
  factor of K + jitter * I (jitter 1e-6, raised x10 up to 1e-3 only if the factorisation
  fails; the one used is recorded in `GPData.jitter`), z ~ N(0, I);
- targets: y = f + `gp.noise_std` * eps, eps ~ N(0, I);
- splits: n_train + n_val + n_test points are drawn jointly (one GP sample); the first
  n_train are train, the next n_val validation (n_val = n_test: the trainer's periodic
  held-out loss, so the test split is only read once, at the end), the last n_test test.
  Inputs are i.i.d., so this is a random split; it is fixed by `gp.data_seed` and shared
  by every model seed.

All draws come from one `numpy.random.Generator(PCG64(gp.data_seed))` in that order
(x, z, eps). Kernels (registry `KERNELS`, selected by `gp.kernel`), l = `gp.lengthscale`:

- rbf:   k(x, x') = exp(-|x - x'|^2 / (2 l^2))                        (stationary)
- gibbs: k(x, x') = prod_d sqrt(2 l(x) l(x') / (l(x)^2 + l(x')^2))
                           * exp(-(x_d - x'_d)^2 / (l(x)^2 + l(x')^2))
         with the input-dependent lengthscale l(x) = l * exp(GIBBS_SLOPE * x_1)
         (x_1 the first input coordinate, GIBBS_SLOPE = 0.5): functions wiggle fast where
         x_1 < 0 and are smooth where x_1 > 0. Gibbs (1997) showed this kernel is positive
         definite for any positive l(x); with l(x) constant it is the RBF kernel. k(x, x) = 1
         for both kernels, so Var f(x) = 1 everywhere.

The dataset also carries `bayes_rmse`: the test RMSE of the exact GP posterior mean given
the training targets (the true kernel and noise known) -- the best a model can do on
average, a reference line for the report. Datasets are cached (generation costs seconds:
two float64 Cholesky factorisations of ~3000 x 3000 at the default sizes) under
`data.cache_dir`, else `$CEMCTL_CACHE`, else `~/.cache/cemctl`, as `gp/<kernel>-<key>.npz`;
the key hashes the GPConfig and `GENERATOR_VERSION`. The first run to need a dataset
generates it under an `fcntl` lock beside the file (concurrent runs wait, then read);
files are written to a temporary name and renamed into place, so readers never see a
partial file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from cem_core.config import GPConfig
from cem_core.runfiles.lock import file_lock
from cem_core.errors import CemError
from cem_core.variants import GP_KERNELS as KERNELS  # names -> the kernel functions below, lazily

GENERATOR_VERSION = 3  # bump when the generation procedure changes (invalidates caches)
GIBBS_SLOPE = 0.5  # l(x) = gp.lengthscale * exp(GIBBS_SLOPE * x_1)
JITTERS = (1e-6, 1e-5, 1e-4, 1e-3)
SPLITS = ("train", "val", "test")

KernelFn = Callable[[np.ndarray, np.ndarray, GPConfig], np.ndarray]


def _sq_dists(x: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """|x_i - x2_j|^2 as an [n, m] float64 matrix (clipped at 0 against rounding)."""
    sq = (x * x).sum(1)
    sq2 = (x2 * x2).sum(1)
    d2 = sq[:, None] + sq2[None, :] - 2.0 * (x @ x2.T)
    return np.maximum(d2, 0.0)


def rbf_kernel(x: np.ndarray, x2: np.ndarray, gp_cfg: GPConfig) -> np.ndarray:
    ls = gp_cfg.lengthscale
    return np.exp(-_sq_dists(x, x2) / (2.0 * ls * ls))


def gibbs_lengthscale(x: np.ndarray, gp_cfg: GPConfig) -> np.ndarray:
    """l(x) = gp.lengthscale * exp(GIBBS_SLOPE * x_1) for x [n, D] -> [n]."""
    return gp_cfg.lengthscale * np.exp(GIBBS_SLOPE * x[:, 0])


def gibbs_kernel(x: np.ndarray, x2: np.ndarray, gp_cfg: GPConfig) -> np.ndarray:
    l1 = gibbs_lengthscale(x, gp_cfg)[:, None]
    l2 = gibbs_lengthscale(x2, gp_cfg)[None, :]
    s = l1 * l1 + l2 * l2  # [n, m]
    dim = x.shape[1]
    # The product over the D coordinates of the 1-D Gibbs kernel (isotropic l(x)).
    return (2.0 * l1 * l2 / s) ** (dim / 2.0) * np.exp(-_sq_dists(x, x2) / s)


def kernel_matrix(kind: str, x: np.ndarray, x2: np.ndarray, gp_cfg: GPConfig) -> np.ndarray:
    """k(x_i, x2_j) as float64 [n, m]; `kind` from `KERNELS` (unknown -> ConfigError on gp.kernel)."""
    fn = KERNELS.get(kind)
    x = np.asarray(x, dtype=np.float64)
    x2 = np.asarray(x2, dtype=np.float64)
    if x.ndim != 2 or x2.ndim != 2 or x.shape[1] != x2.shape[1]:
        raise ValueError(f"kernel_matrix needs x [n, D] and x2 [m, D], got {x.shape} and {x2.shape}")
    return fn(x, x2, gp_cfg)


def _cholesky(k: np.ndarray) -> tuple[np.ndarray, float]:
    """Lower Cholesky factor of k + jitter * I with the smallest jitter in JITTERS that works.

    float64 LAPACK through torch (about 3x faster than scipy's OpenBLAS build here).
    """
    import torch

    eye = np.eye(k.shape[0])
    for jitter in JITTERS:
        chol, info = torch.linalg.cholesky_ex(torch.from_numpy(k + jitter * eye))
        if int(info) == 0:
            return chol.numpy(), jitter
    raise CemError(f"GP kernel matrix is not positive definite even with jitter {JITTERS[-1]}")


def sample_inputs(n: int, gp_cfg: GPConfig, rng: np.random.Generator) -> np.ndarray:
    """The documented input distribution: x ~ N(0, I_D), float64 [n, D]."""
    return rng.standard_normal((n, gp_cfg.input_dim))


def sample_targets(
    x: np.ndarray, gp_cfg: GPConfig, rng: np.random.Generator, n_draws: int = 1
) -> tuple[np.ndarray, np.ndarray, float]:
    """Joint GP draws at inputs x [n, D]: (f [n, n_draws], y [n, n_draws], jitter), float64.

    Cov(f) = K + jitter I, Cov(y) = K + (jitter + noise_std^2) I, zero mean.
    """
    k = kernel_matrix(gp_cfg.kernel, x, x, gp_cfg)
    chol, jitter = _cholesky(k)
    z = rng.standard_normal((x.shape[0], n_draws))
    eps = rng.standard_normal((x.shape[0], n_draws))
    f = chol @ z
    return f, f + gp_cfg.noise_std * eps, jitter


@dataclass(frozen=True)
class GPData:
    """One GP regression dataset; arrays are float32 (x [n, D], y [n])."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    kernel: str
    jitter: float  # added to K's diagonal for the Cholesky factor
    bayes_rmse: float  # test RMSE of the exact GP posterior mean (known kernel and noise)
    generation_s: float  # seconds the generation took (on a cache hit: the original generation's)

    @property
    def input_dim(self) -> int:
        return int(self.x_train.shape[1])

    def split(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of 'train', 'val' or 'test'."""
        if name not in SPLITS:
            raise ValueError(f"unknown GP split {name!r} (allowed: {', '.join(SPLITS)})")
        return getattr(self, f"x_{name}"), getattr(self, f"y_{name}")


def _bayes_rmse(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, gp_cfg: GPConfig) -> float:
    """RMSE on test of E[f(x_test) | y_train] under the generating kernel and noise."""
    k_tt = kernel_matrix(gp_cfg.kernel, x_train, x_train, gp_cfg)
    k_st = kernel_matrix(gp_cfg.kernel, x_test, x_train, gp_cfg)
    import torch

    noise_var = max(gp_cfg.noise_std**2, JITTERS[0])
    chol = torch.linalg.cholesky(torch.from_numpy(k_tt + noise_var * np.eye(len(x_train))))
    alpha = torch.cholesky_solve(torch.from_numpy(y_train[:, None]), chol)[:, 0].numpy()
    mean = k_st @ alpha
    return float(np.sqrt(np.mean((mean - y_test) ** 2)))


def split_sizes(gp_cfg: GPConfig) -> tuple[int, int, int]:
    """(n_train, n_val, n_test); n_val = n_test."""
    return gp_cfg.n_train, gp_cfg.n_test, gp_cfg.n_test


def generate(gp_cfg: GPConfig) -> GPData:
    """Generate the dataset of `gp_cfg` (no cache): deterministic in gp.data_seed."""
    KERNELS.get(gp_cfg.kernel)  # unknown kernel -> ConfigError before any work
    start = time.perf_counter()
    rng = np.random.Generator(np.random.PCG64(gp_cfg.data_seed))
    n_train, n_val, n_test = split_sizes(gp_cfg)
    x = sample_inputs(n_train + n_val + n_test, gp_cfg, rng)
    _, y, jitter = sample_targets(x, gp_cfg, rng, n_draws=1)
    y = y[:, 0]
    bounds = {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, len(x))}
    arrays = {}
    for name, (lo, hi) in bounds.items():
        arrays[f"x_{name}"] = x[lo:hi].astype(np.float32)
        arrays[f"y_{name}"] = y[lo:hi].astype(np.float32)
    lo = bounds["test"][0]
    bayes = _bayes_rmse(x[:n_train], y[:n_train], x[lo:], y[lo:], gp_cfg)
    return GPData(
        **arrays,
        kernel=gp_cfg.kernel,
        jitter=jitter,
        bayes_rmse=bayes,
        generation_s=time.perf_counter() - start,
    )


def cache_key(gp_cfg: GPConfig) -> str:
    ident = {"gp": dataclasses.asdict(gp_cfg), "version": GENERATOR_VERSION}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def cache_path(gp_cfg: GPConfig, cache_dir: str | os.PathLike[str] = "") -> Path:
    root = cache_dir or os.environ.get("CEMCTL_CACHE") or os.path.join("~", ".cache", "cemctl")
    return Path(os.path.expanduser(root)) / "gp" / f"{gp_cfg.kernel}-{cache_key(gp_cfg)}.npz"


def _save(path: Path, data: GPData) -> None:
    from cem_core.runfiles.files import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"{v}_{s}": getattr(data, f"{v}_{s}") for s in SPLITS for v in ("x", "y")}
    meta = np.array(json.dumps({"kernel": data.kernel, "jitter": data.jitter, "bayes_rmse": data.bayes_rmse,
                                "generation_s": data.generation_s}))
    atomic_write(path, lambda f: np.savez(f, **arrays, meta=meta), pause=False)


def _load(path: Path) -> GPData | None:
    try:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            arrays = {f"{v}_{s}": z[f"{v}_{s}"] for s in SPLITS for v in ("x", "y")}
            return GPData(**arrays, **meta)
    except (OSError, KeyError, ValueError):
        return None  # missing or unreadable: regenerate


def make_gp_dataset(gp_cfg: GPConfig, *, cache_dir: str | os.PathLike[str] = "", use_cache: bool = True) -> GPData:
    """The dataset of `gp_cfg`, from the cache when present (generated and cached otherwise)."""
    if not use_cache:
        return generate(gp_cfg)
    path = cache_path(gp_cfg, cache_dir)
    data = _load(path) if path.exists() else None
    if data is not None:
        return data
    with file_lock(path.with_name(path.name + ".lock"), make_parents=True):  # one generator at a time; others then read
        data = _load(path) if path.exists() else None
        if data is None:
            data = generate(gp_cfg)
            _save(path, data)
    return data
