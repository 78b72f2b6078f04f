"""What a model name and a version folder may be, and where a model's files may live.

The rule itself is ``contract/repository.py``'s, shared with `s2s export`. Every door checks a name a client
sent with ``check_name`` before anything builds a path from it, so ``../x``, ``/tmp/x``, ``addition/`` and
``./addition`` are refused instead of loading whatever lies there, or loading the same folder again under a
second name (a second set of engine cores).

``inside`` resolves a model's folder (symlinks followed) and refuses one that ends up outside the
repository unless ``--model-repo-links any`` says links may point anywhere.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from contract.repository import NAME_RULE, is_version, name_problem  # noqa: F401  (is_version: re-exported)
from server.errors import InvalidInput, ModelNotFound

log = logging.getLogger("s2s.repository")

ECHO = 32  # characters of a refused name a message shows (escaped)


def shown(value: str) -> str:
    """A short, escaped prefix of what a client sent, with its length: never the whole of a 100 kB name."""
    if len(value) <= ECHO:
        return ascii(value)
    return f"{ascii(value[:ECHO])}... ({len(value)} characters)"


def check_name(name: str) -> str:
    """``name`` if it is a model name, else InvalidInput saying why (the name shown short and escaped)."""
    why = name_problem(name)
    if why:
        raise InvalidInput(f"model name {shown(name)} is not valid: {why} ({NAME_RULE})")
    return name


@functools.lru_cache(maxsize=1024)
def warn_ignored(path: Path, why: str) -> None:
    """One warning per ignored entry of the repository (a poll rescans it every few seconds)."""
    log.warning("%s ignored: %s", ascii(str(path)), why)


def inside(repo: Path, name: str, version: str = "", follow_any: bool = False) -> Path:
    """The model's (or the version's) folder; ModelNotFound if it resolves outside the repository (through a
    symlink) and links are not allowed to point anywhere (``--model-repo-links any``)."""
    folder = repo / check_name(name)
    if version:
        folder = folder / version
    return folder if follow_any else within(repo, folder, f"model {shown(name)}")


def within(repo: Path, folder: Path, what: str) -> Path:
    """``folder``, if it resolves inside ``repo``; ModelNotFound naming ``what`` otherwise."""
    root = repo.resolve()
    try:
        real = folder.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise ModelNotFound(f"{what}: its folder does not resolve ({type(e).__name__})") from None
    if root not in real.parents:
        raise ModelNotFound(
            f"{what}: {folder} links outside the repository {repo} (--model-repo-links any allows that)"
        )
    return folder
