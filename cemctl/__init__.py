"""cemctl: plan, launch, watch and report CEM experiments (`cemctl --help`)."""

__version__ = "0.1.0"
