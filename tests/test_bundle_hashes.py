"""A bundle's files are hashed once: the stamps (size, modification time, inode) of a check let a later load (an
engine core of s2s serve) skip the files unchanged since; a file changed since is hashed again, and refused when
its sha256 is not config.json's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import MODEL_REPO, server_config

from contract import bundle
from contract.bundle import BundleError
from engine import EngineOptions, Translator

WRONG = r"decoder\.onnx: sha256 .* does not match"


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "addition" / "1"
    shutil.copytree(MODEL_REPO / "addition" / "1", dst)
    return dst


def _flip_a_byte_keeping_the_stamp(path: Path) -> None:
    """Changed content with the same size, modification time and inode: what a stamp cannot tell apart."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert bundle.stamp(path) == (st.st_size, st.st_mtime_ns, st.st_ino)


def test_stamped_files_are_not_hashed_again_and_changed_ones_are(tmp_path):
    b = _copy(tmp_path)
    cfg, stamps = bundle.verified(b)
    assert set(stamps) == set(cfg.files)  # every file config.json lists got its stamp
    _flip_a_byte_keeping_the_stamp(b / "decoder.onnx")
    bundle.read_bundle(b, hashed=stamps)  # its stamp is the checked one: not read again
    with pytest.raises(BundleError, match=WRONG):  # without the stamps it is read, and refused
        bundle.read_bundle(b)
    st = (b / "decoder.onnx").stat()
    os.utime(b / "decoder.onnx", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # written again
    with pytest.raises(BundleError, match=WRONG):
        bundle.read_bundle(b, hashed=stamps)
    with pytest.raises(BundleError, match=WRONG):  # an engine given the stamps refuses it as it loads
        Translator(b, EngineOptions(device="cpu", hashed=tuple(stamps.items())))


def test_the_front_end_hashes_a_bundle_once_for_all_its_cores(tmp_path):
    """ServedVersion (the front end's model) checks every file and hands each core the stamps, so that a core
    (or a restarted one, test_core_restart) hashes again only what changed; a wrong file is refused before any
    core starts, naming it."""
    from server.models.served_version import ServedVersion
    from server.telemetry.metrics import Metrics
    from server.telemetry.model_telemetry import Telemetry

    b = _copy(tmp_path)
    config, telemetry = server_config(model_repo=tmp_path), Telemetry(Metrics())
    api = ServedVersion("addition", "1", b, config, telemetry, n_cores=2)
    _, stamps = bundle.verified(b)
    assert [dict(c.spec.engine.hashed) for c in api.cores] == [stamps, stamps]
    (b / "decoder.onnx").write_bytes(b"not the file its hash names")
    with pytest.raises(BundleError, match=WRONG):
        ServedVersion("addition", "1", b, config, telemetry, n_cores=2)
