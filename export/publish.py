"""Where `s2s export` and `s2s import` write a bundle, and how it appears there: whole, or not at all.

``destination`` checks ``--name`` and ``--version`` by the repository's rule (``contract/repository.py``, the
server's own) before any work, and refuses a model folder that a symlink takes outside ``--repo``: nothing is
removed or written anywhere else. ``publish`` copies a finished bundle into a staging folder beside the
version's folder and renames it into place, so a reader (the server starting, a poll) sees the version whole or
not at all, and an export killed half-way leaves only a staging folder that no reader takes for a version.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from contract.repository import NAME_RULE, is_version, name_problem, staging_name, version_problem


class PublishRefused(Exception):
    """A destination outside the repository or not a model name / version; the message names the option."""


def destination(repo: Path, name: str, version: int | None) -> Path:
    """``repo/name``, checked: a model name (not a path), a version the server reads, inside ``repo``."""
    if why := name_problem(name):
        raise PublishRefused(f"--name {name!r} is not a model name: {why} ({NAME_RULE})")
    if version is not None and (why := version_problem(version)):
        raise PublishRefused(f"--version {version}: {why}")
    model_dir = Path(repo) / name
    if os.path.lexists(model_dir):
        root, real = Path(repo).resolve(), model_dir.resolve()
        if real.parent != root:  # a symlink: the bundle would land wherever it points
            raise PublishRefused(
                f"{model_dir}: resolves to {real}, outside --repo {repo}; the export writes only inside the "
                "repository (remove the link, or point --repo at the folder it names)"
            )
        if not model_dir.is_dir():
            raise PublishRefused(f"{model_dir}: exists and is not a folder")
    return model_dir


def next_version(model_dir: Path) -> int:
    """One past the highest version folder, complete or not: a version number names one bundle, never reused."""
    try:
        names = [p.name for p in model_dir.iterdir() if p.is_dir()]
    except FileNotFoundError:
        return 1
    return max((int(n) for n in names if is_version(n)), default=0) + 1


def publish(built: Path, final: Path, replace: bool) -> None:
    """``built``'s files as the folder ``final``, which appears whole: copied to a staging sibling, then renamed.
    ``replace`` (``--version`` named): an existing ``final`` is renamed aside first and removed after; otherwise a
    ``final`` that appeared meanwhile (another export took the number) is left alone and the export refused."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / staging_name(int(final.name), secrets.token_hex(4))
    try:
        shutil.copytree(built, staging)
        staging.chmod(0o755)  # mkdtemp made it 0700; the server may run as another user (container)
        _sync(staging)
        old = None
        if replace and os.path.lexists(final):
            old = final.parent / staging_name(int(final.name), "replaced-" + secrets.token_hex(4))
            final.rename(old)
        try:
            staging.rename(final)  # atomic on one file system: the version appears whole
        except OSError as e:  # a version folder of that number with files in it: not ours to replace
            raise PublishRefused(
                f"{final}: appeared while this export ran ({e.strerror}); export again"
            ) from None
        if old is not None:  # a link (or a file) is removed, never what a link points to
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _sync(folder: Path) -> None:
    """The files on disk before the rename names them: a crash after it leaves no empty file in a version."""
    for p in folder.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())
