"""An example cemctl plugin: a scalar preconditioner, P = softplus(c) I with one learned c per matrix.

Imported by `cemctl plan`, `launch`, `status`, `report` and the trainer because the grid says
`[experiment] plugins = ["scalar_precond"]`. It registers one variant through the public spec API
and imports no torch: the module class lives in `scalar_precond/layers.py`, which is imported only
when a model is built.
"""

from cem_core.spec import PreconditionerSpec, register

register(PreconditionerSpec(
    name="scalar",
    module="scalar_precond.layers:ScalarPreconditioner",  # built as ScalarPreconditioner(n, width, rank)
    description="P = softplus(c) I, one learned scalar per matrix",
    label="scalar",  # how tables and figures name it
    params=lambda n, width, rank: n,  # one scalar per preconditioned matrix
    # applying it scales a vector: no matmul FLOPs, said explicitly (a spec that leaves them out counts 0, and
    # `cemctl plan` says so)
    attention_flops=lambda m: (0, 0),
    mlp_flops=lambda m: 0,
    # it has no rank: two runs that differ only in its sublayer's *_precond_rank are one model (`cemctl plan`
    # names them); a preconditioner whose rank shapes it leaves this at its default, True
    reads_rank=False,
))
