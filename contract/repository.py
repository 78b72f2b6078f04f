"""The model repository's names: what a model name and a version folder may be, and where a bundle is written
before it is published.

A model name is one folder name of the repository, nothing more: no path separator, not ``.`` or ``..``,
printable, at most ``MAX_NAME_BYTES`` in UTF-8 (a file name may have 255). The server checks a name a client
sent with this rule before anything builds a path from it, and `s2s export` / `s2s import` check ``--name``
with the same rule before any work, so ``../x``, ``/tmp/x`` and ``""`` never reach the file system. A version
folder is ASCII digits in canonical form (``1``, not ``01`` or ``²``, for which ``str.isdigit()`` holds but
``int()`` fails).

A bundle is written into a staging folder beside its version's folder (``.<version>.staging-<random>``, same
file system) and renamed into place once complete, so a reader never sees a half-written version; a staging
folder left by a killed export is not a version and readers pass over it without a word.
"""

from __future__ import annotations

MAX_NAME_BYTES = 128
MAX_VERSION = 2**63 - 1  # a version is an int64 where a protocol carries it as a number
STAGING_MARK = ".staging-"


def name_problem(name: str) -> str:
    """Why ``name`` is not a model name ("" if it is one)."""
    if not name:
        return "it is empty"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"it is longer than {MAX_NAME_BYTES} bytes"
    if "/" in name or "\\" in name:
        return "it holds a path separator"
    if name in (".", ".."):
        return "it is '.' or '..'"
    if not name.isprintable():
        return "it holds a character that is not printable"
    return ""


NAME_RULE = (
    f"a model name is a folder name of the repository: no '/', not '.' or '..', printable, at most "
    f"{MAX_NAME_BYTES} bytes"
)


def is_version(folder_name: str) -> bool:
    """A version folder: ASCII digits, no leading zero (``0`` itself is one)."""
    return folder_name.isascii() and folder_name.isdigit() and str(int(folder_name)) == folder_name


def version_problem(version: int) -> str:
    """Why ``version`` cannot name a version folder ("" if it can)."""
    if not 0 <= version <= MAX_VERSION:
        return f"it must be 0 to {MAX_VERSION}"
    return ""


def staging_name(version: int, token: str) -> str:
    """The folder a version is written into before it is renamed to ``str(version)``."""
    return f".{version}{STAGING_MARK}{token}"


def is_staging(folder_name: str) -> bool:
    return folder_name.startswith(".") and STAGING_MARK in folder_name
