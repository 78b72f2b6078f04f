"""Where `s2s import` and `s2s export` write, run as a user runs them (the CLI in a child process): ``--name`` is a
model name by the server's own rule, checked before any work, and nothing outside ``--repo`` is removed or written;
a bundle appears whole or not at all (a killed export leaves no version folder), and the next version is one past
the highest on disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CHECKPOINTS, MODEL_REPO, ROOT

from contract import bundle

ADDITION = CHECKPOINTS / "addition"


def s2s(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, "-m", "s2s.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def victim(tmp_path) -> Path:
    """A folder beside the repository holding a user's files, and one at an absolute path."""
    v = tmp_path / "victim"
    (v / "1").mkdir(parents=True)
    (v / "1" / "thesis.txt").write_text("four years of work")
    return v


BAD_NAMES = ["../victim", "", ".", "..", "a/b", "tab\tname", "x" * 200]


@pytest.mark.parametrize("command", ["import", "export"])
def test_a_name_that_is_a_path_is_refused_before_any_work(tmp_path, victim, command):
    repo = tmp_path / "repo"
    repo.mkdir()
    source = str(ADDITION) if command == "export" else str(tmp_path / "no-such-checkpoint")
    before = tree(tmp_path)
    for name in (BAD_NAMES if command == "import" else BAD_NAMES[:2]) + [str(victim)]:
        r = s2s(command, source, "--repo", str(repo), "--name", name, "--version", "1", timeout=120)
        assert r.returncode == 2, (name, r.stderr)
        assert r.stderr.startswith(f"s2s {command}: --name ") and "Traceback" not in r.stderr, r.stderr
        assert "not a model name" in r.stderr and "a model name is a folder name" in r.stderr
        assert tree(tmp_path) == before  # the victim's files untouched, nothing written anywhere
        assert list(repo.iterdir()) == []


def test_a_negative_version_and_a_model_folder_linked_outside_are_refused(tmp_path, victim):
    repo = tmp_path / "repo"
    repo.mkdir()
    r = s2s("export", str(ADDITION), "--repo", str(repo), "--name", "m", "--version", "-1")
    assert r.returncode == 2 and "--version -1" in r.stderr and "Traceback" not in r.stderr
    (repo / "linked").symlink_to(victim)
    before = tree(victim)
    r = s2s("export", str(ADDITION), "--repo", str(repo), "--name", "linked", "--version", "1")
    assert r.returncode == 2 and "outside --repo" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert tree(victim) == before


# The publish step of an export, on a bundle already built (the committed one), made slow enough to be killed
# half-way: the export before it is minutes of graph tracing that this test does not need to watch.
SLOW_PUBLISH = """
import shutil, sys, tempfile, time
from pathlib import Path
from export.publish import destination, next_version, publish
copy = shutil.copyfile
def slow(src, dst, *a, **k):
    out = copy(src, dst, *a, **k)
    if ".staging-" in str(dst):
        print("copied", dst, flush=True)
        time.sleep(30)
    return out
built, repo = Path(sys.argv[1]), Path(sys.argv[2])
model_dir = destination(repo, "m", None)
shutil.copyfile = slow
publish(built, model_dir / str(next_version(model_dir)), replace=False)
"""


def test_an_export_killed_while_publishing_leaves_no_version_and_the_next_one_is_whole(tmp_path):
    """SIGKILL while a built bundle is copied into the repository (the last step of every export and import): no
    version folder, only a staging folder the next export passes over; that export is version 1, complete, whatever
    else the model folder holds."""
    repo = tmp_path / "repo"
    for weird in ("7x", "\u00b2", "01"):  # not versions ("²".isdigit() holds): they count for nothing
        (repo / "m" / weird).mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_PUBLISH, str(MODEL_REPO / "addition" / "1"), str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        line = proc.stdout.readline()  # the first file is in the repository: kill it now
        assert line.startswith("copied") and str(repo / "m") in line, line
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
    left = sorted(p.name for p in (repo / "m").iterdir())
    assert left[0].startswith(".1.staging-") and left[1:] == ["01", "7x", "\u00b2"], left  # no "1"
    r = s2s("export", str(ADDITION), "--repo", str(repo), "--name", "m")
    assert r.returncode == 0 and Path(r.stdout.strip()) == repo / "m" / "1", r.stderr
    assert bundle.read_bundle(repo / "m" / "1").version == 1  # every file there, every hash right
