"""The GP study: data generation (reproducible, documented covariance, kernels) and the GPRegressor."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from cem_core.config import GPConfig, RunConfig, resolve
from cem_core.errors import ConfigError
from cem_core.gp.counts import gp_flops_per_example, gp_param_counts
from cem_core.gp.data import KERNELS, cache_path, gibbs_lengthscale, kernel_matrix, make_gp_dataset, sample_targets
from cem_core.gp.model import GPRegressor, build_gp_model

SMALL = dict(n_train=120, n_test=40)


# ---------------------------------------------------------------- data: reproducibility and cache


def test_kernel_registry_resolves_every_name_and_rejects_unknown():
    assert all(callable(KERNELS.get(name)) for name in KERNELS.names())
    with pytest.raises(ConfigError, match="gp.kernel.*allowed: rbf, gibbs"):
        kernel_matrix("matern", np.zeros((2, 3)), np.zeros((2, 3)), GPConfig())


@pytest.mark.parametrize("kernel", KERNELS.names())
def test_same_seed_same_data_other_seed_other_data(kernel):
    cfg = GPConfig(kernel=kernel, **SMALL)
    a = make_gp_dataset(cfg, use_cache=False)
    b = make_gp_dataset(cfg, use_cache=False)
    for name in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.x_train.shape == (120, 10) and a.y_train.shape == (120,)
    assert a.x_val.shape == (40, 10) and a.y_val.shape == (40,)  # n_val = n_test
    assert a.x_test.shape == (40, 10) and a.y_test.shape == (40,)
    assert a.x_train.dtype == np.float32 and a.y_test.dtype == np.float32
    assert a.split("val")[0] is a.x_val
    c = make_gp_dataset(GPConfig(kernel=kernel, data_seed=1, **SMALL), use_cache=False)
    assert not np.allclose(a.x_train, c.x_train) and not np.allclose(a.y_train, c.y_train)
    # the splits are disjoint draws
    firsts = [a.x_train[:, 0], a.x_val[:, 0], a.x_test[:, 0]]
    assert len(np.unique(np.concatenate(firsts))) == 200


def test_kernels_share_inputs_but_not_targets():
    rbf = make_gp_dataset(GPConfig(kernel="rbf", **SMALL), use_cache=False)
    gibbs = make_gp_dataset(GPConfig(kernel="gibbs", **SMALL), use_cache=False)
    assert np.array_equal(rbf.x_train, gibbs.x_train)
    assert not np.allclose(rbf.y_train, gibbs.y_train)


def test_cache_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "env-cache"))
    cfg = GPConfig(kernel="gibbs", **SMALL)
    path = cache_path(cfg)
    assert str(path).startswith(str(tmp_path / "env-cache"))
    assert not path.exists()
    first = make_gp_dataset(cfg)
    assert path.exists()
    mtime = path.stat().st_mtime_ns
    second = make_gp_dataset(cfg)
    assert path.stat().st_mtime_ns == mtime  # read, not regenerated
    for name in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test"):
        assert np.array_equal(getattr(first, name), getattr(second, name)), name
    assert second.bayes_rmse == first.bayes_rmse and second.jitter == first.jitter
    # another config -> another file; an explicit cache_dir wins over the environment
    assert cache_path(GPConfig(kernel="gibbs", noise_std=0.1, **SMALL)) != path
    assert cache_path(cfg, tmp_path / "explicit").parent == tmp_path / "explicit" / "gp"
    # a corrupt cache file is regenerated, not trusted
    path.write_bytes(b"not an npz")
    third = make_gp_dataset(cfg)
    assert np.array_equal(first.y_train, third.y_train)


def test_concurrent_first_use_generates_once(tmp_path, monkeypatch):
    import threading
    import time

    from cem_core.gp import data as gp_data

    calls = []
    real = gp_data.generate

    def slow_generate(cfg):
        calls.append(cfg)
        time.sleep(0.3)  # both threads are waiting on the lock or the file meanwhile
        return real(cfg)

    monkeypatch.setattr(gp_data, "generate", slow_generate)
    cfg = GPConfig(kernel="rbf", **SMALL)
    out = []
    threads = [threading.Thread(target=lambda: out.append(make_gp_dataset(cfg, cache_dir=tmp_path))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(out) == 3
    assert all(np.array_equal(o.y_train, out[0].y_train) for o in out)


# ---------------------------------------------------------------- data: the documented covariance

# Five fixed inputs on a line through the input space (x_1 from -2 to 2), where the
# kernels take values across (0, 1).
POINTS = np.zeros((5, 10))
POINTS[:, 0] = np.linspace(-2.0, 2.0, 5)
POINTS[:, 1] = POINTS[:, 0] / 2
N_DRAWS = 2000
Z_MAX = 5.0


def _z_scores(y: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z-scores of the empirical second moments and means of zero-mean samples y [n, N].

    With known zero mean, S = Y Y^T / N is unbiased for Sigma and, for Gaussian y,
    Var(S_ij) = (Sigma_ij^2 + Sigma_ii Sigma_jj) / N (Isserlis); Var(mean_i) = Sigma_ii / N.
    S_ij is a mean of N = 2000 i.i.d. products, so its z-score is close to N(0, 1).
    """
    n_draws = y.shape[1]
    s = y @ y.T / n_draws
    sd = np.sqrt((sigma**2 + np.outer(np.diag(sigma), np.diag(sigma))) / n_draws)
    z_cov = (s - sigma) / sd
    z_mean = y.mean(1) / np.sqrt(np.diag(sigma) / n_draws)
    return z_cov, z_mean


@pytest.mark.parametrize("kernel", KERNELS.names())
def test_samples_have_the_documented_covariance(kernel):
    """Tolerance: every one of the 15 distinct covariance entries and 5 means within 5 standard errors.

    Under the documented model each z-score is ~N(0, 1), so a correct generator fails with
    probability < 20 * 5.7e-7 ~ 1e-5 (Bonferroni); the draws are seeded, so the test is
    deterministic anyway. The check has power: the same samples are rejected when compared
    with the kernel at a 50% longer lengthscale (RBF: z up to ~12, Gibbs: ~5.8 at this seed)
    or with the other kernel.
    """
    cfg = GPConfig(kernel=kernel, noise_std=0.05)
    rng = np.random.Generator(np.random.PCG64(123))
    f, y, jitter = sample_targets(POINTS, cfg, rng, n_draws=N_DRAWS)
    k = kernel_matrix(kernel, POINTS, POINTS, cfg)
    sigma_y = k + (jitter + cfg.noise_std**2) * np.eye(5)
    z_cov, z_mean = _z_scores(y, sigma_y)
    assert np.abs(z_cov).max() < Z_MAX, np.round(z_cov, 2)
    assert np.abs(z_mean).max() < Z_MAX, np.round(z_mean, 2)
    z_f, _ = _z_scores(f, k + jitter * np.eye(5))
    assert np.abs(z_f).max() < Z_MAX
    # power: a wrong lengthscale or the other kernel is detected by the same check
    longer = kernel_matrix(kernel, POINTS, POINTS, GPConfig(kernel=kernel, lengthscale=cfg.lengthscale * 1.5))
    assert np.abs(_z_scores(y, longer + cfg.noise_std**2 * np.eye(5))[0]).max() > Z_MAX
    other = "gibbs" if kernel == "rbf" else "rbf"
    assert np.abs(_z_scores(y, kernel_matrix(other, POINTS, POINTS, cfg) + cfg.noise_std**2 * np.eye(5))[0]).max() > Z_MAX


def test_rbf_formula_and_unit_variance():
    cfg = GPConfig(lengthscale=1.5)
    x = np.array([[0.0, 0.0], [1.0, 2.0]])
    k = kernel_matrix("rbf", x, x, cfg)
    assert k[0, 1] == pytest.approx(np.exp(-5.0 / (2 * 1.5**2)))
    for kind in KERNELS.names():
        xs = np.random.default_rng(0).standard_normal((30, 10))
        assert np.allclose(np.diag(kernel_matrix(kind, xs, xs, cfg)), 1.0)


def test_gibbs_is_nonstationary_and_positive_definite():
    cfg = GPConfig()
    delta = np.zeros(10)
    delta[3] = 0.7  # the same displacement, applied at different places
    base = np.zeros((5, 10))
    base[:, 0] = np.linspace(-2, 2, 5)  # x_1 moves the Gibbs lengthscale
    gibbs = np.array([kernel_matrix("gibbs", b[None], (b + delta)[None], cfg)[0, 0] for b in base])
    rbf = np.array([kernel_matrix("rbf", b[None], (b + delta)[None], cfg)[0, 0] for b in base])
    assert np.ptp(rbf) < 1e-12  # stationary
    assert np.all(np.diff(gibbs) > 0.01)  # longer lengthscale at larger x_1 -> higher correlation
    assert np.all(np.diff(gibbs_lengthscale(base, cfg)) > 0)
    # the same |x - x'| along the same direction, different covariances
    x = np.random.default_rng(1).standard_normal((300, 10)) * 1.5
    k = kernel_matrix("gibbs", x, x, cfg)
    assert np.allclose(k, k.T)
    assert np.linalg.eigvalsh(k).min() > -1e-9
    # equals RBF where the lengthscale is constant (x_1 = 0 for all points)
    x0 = x.copy()
    x0[:, 0] = 0.0
    assert np.allclose(kernel_matrix("gibbs", x0, x0, cfg), kernel_matrix("rbf", x0, x0, cfg))


def test_bayes_rmse_is_a_sensible_reference():
    data = make_gp_dataset(GPConfig(kernel="rbf", n_train=400, n_test=100), use_cache=False)
    assert 0.05 <= data.bayes_rmse < float(np.std(data.y_test))
    assert data.jitter == 1e-6 and data.generation_s > 0


# ---------------------------------------------------------------- the regressor


def gp_run_cfg(**model):
    base = {"task": "gp", "model.size": "nano", "data.tokenizer": "byte", "train.max_steps": 10, "model.mlp": "cem"}
    base.update({f"model.{k}": v for k, v in model.items()})
    return resolve(RunConfig.from_dict(base))


@pytest.mark.parametrize("steps", [1, 2, 4, 8])
def test_forward_backward_every_parameter_gets_a_gradient(steps):
    cfg = gp_run_cfg(mlp_steps=steps)
    torch.manual_seed(0)
    model = build_gp_model(cfg.model, cfg.gp)
    assert all(block.steps == steps for block in model.blocks)
    x = torch.randn(16, cfg.gp.input_dim)
    y = torch.randn(16)
    pred, loss = model(x, y)
    assert pred.shape == (16,) and torch.isfinite(pred).all()
    assert loss is not None and torch.isfinite(loss)
    assert torch.allclose(loss, ((pred - y) ** 2).mean())
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    pred_only, no_loss = model(x)
    assert no_loss is None and torch.allclose(pred_only, pred)


def test_more_steps_change_the_function():
    outs = []
    for steps in (1, 2):
        cfg = gp_run_cfg(mlp_steps=steps)
        torch.manual_seed(0)
        outs.append(build_gp_model(cfg.model, cfg.gp)(torch.ones(3, 10))[0])
    assert not torch.allclose(outs[0], outs[1])


GP_VARIANTS = [
    dict(mlp="cem", mlp_steps=1),
    dict(mlp="cem", mlp_steps=4),
    dict(mlp="cem", mlp_steps=8, mlp_precond="diag"),
    dict(mlp="cem", mlp_steps=2, mlp_precond="diag_lowrank"),
    dict(mlp="cem_param_matched", mlp_steps=2),
    dict(mlp="llama"),
    dict(mlp="reuse", mlp_steps=2),
]


@pytest.mark.parametrize("variant", GP_VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
def test_counts_match_the_module_and_flop_counter(variant):
    cfg = gp_run_cfg(**variant)
    model = GPRegressor(cfg.model, cfg.gp)
    counts = gp_param_counts(cfg.model, cfg.gp)
    assert model.num_params() == counts["total"]
    assert model.num_params(non_embedding=True) == counts["non_embedding"]
    assert sum(p.numel() for b in model.blocks for n, p in b.named_parameters() if not n.startswith("norm")) == counts["mlp"]
    batch = 7
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(batch, cfg.gp.input_dim))
    assert counter.get_total_flops() == batch * gp_flops_per_example(cfg.model, cfg.gp)


def test_flops_grow_with_recursion_params_do_not():
    one, eight = gp_run_cfg(mlp_steps=1), gp_run_cfg(mlp_steps=8)
    assert gp_param_counts(one.model, one.gp) == gp_param_counts(eight.model, eight.gp)
    assert gp_flops_per_example(eight.model, eight.gp) > 4 * gp_flops_per_example(one.model, one.gp)


def test_rejects_wrong_input_width():
    cfg = gp_run_cfg()
    with pytest.raises(ValueError, match=r"\[N, 10\]"):
        GPRegressor(cfg.model, cfg.gp)(torch.randn(4, 3))


def test_counts_module_is_torch_free():
    code = "import sys, cem_core.gp.counts, cem_core.gp; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- the engine's GP task


def test_task_batches_and_evaluation_cover_the_fixed_splits():
    from cem_core.gp.task import GPTask, gp_result_fields

    cfg = gp_run_cfg(mlp_steps=2).override({"gp.n_train": 50, "gp.n_test": 23})
    data = make_gp_dataset(cfg.gp, use_cache=False)
    task = GPTask(cfg, "cpu", data=data)
    assert task.num_train == 50
    x, y = task.batch("train", np.array([3, 0, 3]))
    assert torch.equal(x[1], torch.from_numpy(data.x_train[0])) and torch.equal(x[0], x[2])
    assert torch.equal(y, torch.from_numpy(data.y_train[[3, 0, 3]]))
    torch.manual_seed(0)
    model = task.build_model()
    model.train()
    with torch.no_grad():
        pred, _ = model(torch.from_numpy(data.x_test))
    direct = float(((pred.double() - torch.from_numpy(data.y_test).double()) ** 2).mean())
    for micro in (1, 7, 100):  # the micro batch does not change the result
        res = task.evaluate(model, "test", micro_batch=micro)
        assert res.tokens == 23 and res.loss == pytest.approx(direct, rel=1e-6)  # float32 sums differ by batch shape
    assert model.training  # evaluation restores the mode
    assert res.rmse == pytest.approx(direct**0.5) and res.ppl is None
    assert task.evaluate(model, "val", micro_batch=4).tokens == 23  # n_val = n_test

    fields = gp_result_fields(cfg, examples=640, val_loss=0.25, test_loss=0.16, bayes_rmse=data.bayes_rmse)
    assert fields["test_rmse"] == pytest.approx(0.4) and fields["val_rmse"] == pytest.approx(0.5)
    assert fields["test_ppl"] is None and fields["params_total"] == model.num_params()
    assert fields["train_flops"] == 3 * 640 * gp_flops_per_example(cfg.model, cfg.gp)
    assert fields["bayes_rmse"] == data.bayes_rmse
    assert gp_result_fields(cfg, examples=0, val_loss=None, test_loss=None)["test_rmse"] is None
