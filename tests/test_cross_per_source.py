"""Cross-attention K/V once per input for a beam's rows: a decoder exported so (``cross_per_source``) decodes the same
tokens as the per-row cache of the same weights, while beams of one width run together and after rows of another
width join; older bundles keep the per-row cache."""

from __future__ import annotations

import json

import pytest
from conftest import CHECKPOINTS, served_version

from contract.bundle import read_bundle
from engine import EngineOptions, Runner, Sequence, Translator
from engine.step_loop import StepLoop


@pytest.fixture(scope="module")
def per_source(tmp_path_factory):
    """The addition checkpoint exported now: the committed models/addition/1 is its per-row export."""
    from export.onnx_export import ExportOptions, export

    return export(
        ExportOptions(CHECKPOINTS / "addition", tmp_path_factory.mktemp("repo"), "addition", version=1)
    )


def test_the_export_says_so_keeps_its_format_and_validates_a_beams_rows(per_source):
    cfg, old = read_bundle(per_source), read_bundle(served_version("addition"))
    assert cfg.cross_per_source and not old.cross_per_source
    assert cfg.format_version == old.format_version  # a per-row reader feeds it right too (a group of 1)
    axes = json.loads((per_source / "config.json").read_text())["decoder"]["inputs"]
    assert axes["cross.0.key"]["0"] == axes["src_mask"]["0"] == "sources" and axes["tgt_ids"]["0"] == "batch"
    assert cfg.validation["decoder"]["per_source"]["present_max_abs_diff"] < 1e-4


def _run(runner: Runner, plan: list[list[tuple[list[int], int]]], seen: list | None = None) -> list[list]:
    """Join each plan entry's (ids, beam) sequences after one more step; every result's hypotheses, in plan order.
    ``seen``: the batch's (rows per cross K/V entry, entries, rows) after each join."""
    loop, seqs = StepLoop(runner), []
    for joining in plan:
        new = [Sequence(ids, 12, beam) for ids, beam in joining]
        loop.add(new)
        seqs += new
        if seen is not None:
            seen.append((loop.batch.group, loop.batch.cross[0].shape[0], len(loop.batch)))
        loop.step()
    while len(loop):
        loop.step()
    return [[(h.tokens, round(h.score, 4)) for h in s.hypotheses] for s in seqs]


def test_beams_share_their_inputs_cross_kv_and_unfold_when_another_width_joins(per_source):
    cpu = EngineOptions(device="cpu")
    folded, per_row = Translator(per_source, cpu), Translator(served_version("addition"), cpu)
    ids = [folded.codec.source_ids(t) for t in ("12+345", "9+9", "1000+1", "77+7", "5+56", "400+80")]
    plan = [
        [(ids[0], 4), (ids[1], 4), (ids[2], 4)],  # into an idle batch: one copy per input, 4 rows each
        [(ids[3], 4)],  # the same width joins a running batch: still one per input
        [(ids[4], 1), (ids[5], 2)],  # greedy and a beam of 2: back to one copy per row
    ]
    seen = []
    assert _run(folded.runner, plan, seen) == _run(per_row.runner, plan)
    (g0, n0, rows0), (g1, n1, rows1), (g2, n2, rows2) = seen
    assert (g0, n0) == (4, rows0 // 4) and (g1, n1) == (4, rows1 // 4) and (g2, n2) == (1, rows2), seen
