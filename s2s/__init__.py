"""The `s2s` command line: train, eval, export, serve, client."""

from contract.version import __version__

__all__ = ["__version__"]
