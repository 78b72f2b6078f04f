"""The product's version, on the ground floor: the server's metadata and the command line both read it here."""

__version__ = "0.1.0"  # the same as pyproject.toml's [project] version
