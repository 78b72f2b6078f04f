"""The `s2s` command line: train, eval, export, serve, client."""

__version__ = "0.1.0"
