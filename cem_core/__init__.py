"""cem_core: the PyTorch side of cemctl (layers, models, data, training).

Importing this package does not import torch; only `cem_core.model`,
`cem_core.data` loaders and `cem_core.train` do.
"""

__version__ = "0.1.0"
