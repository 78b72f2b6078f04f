"""The decoder whose self-attention cache is written in place (bundle format 9): each row's past from position 0, as
long as its own, in one buffer per layer that the step writes into; the engine's batch (engine/inplace_cache.py)
against the committed appending bundle of the same checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CHECKPOINTS, MODEL_REPO

from contract import bundle
from engine import EngineOptions, Sequence, StepLoop, Translator
from engine.inplace_cache import CHUNK, InplaceBatch


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> tuple[Translator, Translator]:
    """(in place, appending): the addition checkpoint exported with GroupQueryAttention, and its committed bundle."""
    from export.onnx_export import ExportOptions, export

    out = export(
        ExportOptions(CHECKPOINTS / "addition", tmp_path_factory.mktemp("repo"), "addition", 1, gqa=True)
    )
    return Translator(out, EngineOptions(device="cpu")), Translator(MODEL_REPO / "addition" / "1")


def _inputs(e: Translator, n: int) -> list[list[int]]:
    lines = (CHECKPOINTS / "addition" / "test.tsv").read_text(encoding="utf-8").splitlines()[:n]
    return [e.codec.source_ids(line.split("\t")[0]) for line in lines]


def test_format_8_and_its_graph(engines):
    inplace, appending = engines
    cfg = inplace.config
    assert cfg.format_version == bundle.FORMAT_INPLACE_CACHE and cfg.inplace_cache
    assert not appending.config.inplace_cache and not appending.runner.inplace  # older formats: today's graph
    assert "past_lengths" in cfg.decoder_io.inputs and "past_mask" not in cfg.decoder_io.inputs
    assert cfg.validation["greedy_identical"] == "16/16"
    assert isinstance(StepLoop(inplace.runner).batch, InplaceBatch)


def test_rows_hold_their_own_length_and_a_step_writes_the_same_buffers(engines):
    """A row that joins a running batch starts at position 0 (no holes, no padded past axis); a plain step writes
    into the buffers it was given (no copy); the capacity grows by whole chunks; results equal the appending
    bundle's, greedy rows and a beam of 4 decoding side by side."""
    inplace, appending = engines
    ids = _inputs(inplace, 3)
    results = {}
    for name, e in (("inplace", inplace), ("appending", appending)):
        loop = StepLoop(e.runner)
        first = Sequence(ids[0], 40)
        loop.add([first])
        loop.step()
        loop.step()
        joined = [Sequence(ids[1], 40), Sequence(ids[2], 40, 4)]
        loop.add(joined)
        if name == "inplace":
            b = loop.batch
            assert b.lengths.tolist() == [2, 0, 0, 0, 0, 0]
            loop.step()
            assert b.lengths.tolist() == [3, 1, 1, 1, 1, 1] and b.capacity % CHUNK == 0
            before = [a.__array_interface__["data"][0] for a in b.past]
            loop.step()  # a plain step: greedy rows, and the beam's rows keep or take their parents' rows in place
            assert [a.__array_interface__["data"][0] for a in b.past] == before
            assert (b.lengths == b.positions[:, 0]).all()  # each row's own past, from position 0
        while len(loop):
            loop.step()
        results[name] = [first.result] + [s.result for s in joined]
    assert results["inplace"] == results["appending"]


def test_churn_decodes_as_the_appending_bundle(engines):
    """Rows finishing and newcomers taking their rows (3 inputs at a time), beams and greedy: the same tokens as the
    appending bundle."""
    from engine.drive import run

    inplace, appending = engines
    ids = _inputs(inplace, 48)
    for beam in (1, 4):
        got = {}
        for name, e in (("inplace", inplace), ("appending", appending)):
            seqs = [Sequence(s, 20, beam) for s in ids]
            run(e.runner, seqs, 3 * beam)
            got[name] = [s.result for s in seqs]
        assert got["inplace"] == got["appending"]


def test_capacity_grows_by_chunks_keeping_each_rows_past_and_reorder_moves_only_changed_rows():
    rng = np.random.default_rng(0)
    b = InplaceBatch(n_layers=1, n_heads=2, d_head=8)
    cross = [rng.standard_normal((3, 2, 5, 8), np.float32) for _ in range(2)]
    b.add(cross, np.ones((3, 5), np.int64), [1, 1, 1])
    assert b.capacity == CHUNK and b.lengths.tolist() == [0, 0, 0]
    for step in range(CHUNK):
        b.trim()
        for a in b.past:  # what the step would write: position lengths[r] of each row
            a[np.arange(3), :, b.lengths] = step + 10 * np.arange(3)[:, None, None]
        b.advance(b.past, np.array([5, 5, 5]))
    assert b.capacity == CHUNK and b.lengths.tolist() == [CHUNK] * 3
    b.trim()  # the next step has no room: one more chunk, the live positions copied
    assert b.capacity == 2 * CHUNK
    want = np.arange(CHUNK)[None, :] + 10 * np.arange(3)[:, None]  # (rows, positions)
    assert (b.past[0][:, 0, :CHUNK, 0] == want).all()
    b.reorder(np.array([0, 0, 2]))  # row 1 continues row 0; rows 0 and 2 keep their own
    assert (b.past[0][1, 0, :CHUNK, 0] == want[0]).all() and (b.past[0][2, 0, :CHUNK, 0] == want[2]).all()
    b.release([1])
    b.fill(1, [c[0] for c in cross], np.ones(5, np.int64), 1)  # a newcomer: length 0, nothing copied
    assert b.lengths.tolist() == [CHUNK, 0, CHUNK] and b.positions[1, 0] == 0
    b.keep(np.array([2, 0]))
    assert b.lengths.tolist() == [CHUNK, CHUNK] and (b.past[0][0, 0, :CHUNK, 0] == want[2]).all()
