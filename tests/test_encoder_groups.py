"""The encoder's grouping of rows by length (engine/encoder_groups.py): the cheapest split, and padding that does not
change a row's result, so the grouping (a measured, machine-dependent choice) never changes an output."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import MODEL_REPO

from engine.encoder_groups import length_groups


def brute_force(lengths: list[int], call: float) -> float:
    """The least cost over every split of the sorted distinct lengths into runs."""
    distinct = sorted(set(lengths))
    count = {d: lengths.count(d) for d in distinct}
    best = float("inf")
    for cuts in itertools.product([False, True], repeat=len(distinct) - 1):
        cost, run = 0.0, []
        for d, cut in zip(distinct, list(cuts) + [True]):
            run.append(d)
            if cut:
                cost += call + sum(count[x] for x in run) * max(run)
                run = []
        best = min(best, cost)
    return best


def cost_of(groups: list[np.ndarray], lengths: np.ndarray, call: float) -> float:
    return sum(call + len(g) * int(lengths[g].max()) for g in groups)


@pytest.mark.parametrize("call", [0.0, 1.0, 4.0, 13.0, 64.0])
def test_the_split_is_the_cheapest_and_covers_every_row_once(call):
    rng = np.random.default_rng(int(call))
    for _ in range(40):
        lengths = rng.integers(1, 30, rng.integers(1, 12))
        groups = length_groups(lengths, call)
        assert sorted(np.concatenate(groups).tolist()) == list(range(len(lengths)))
        # each group is a run of the sorted lengths: no length of one group falls inside another's range
        spans = sorted((int(lengths[g].min()), int(lengths[g].max())) for g in groups)
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
        assert cost_of(groups, lengths, call) == pytest.approx(brute_force(lengths.tolist(), call))


def test_no_fixed_cost_keeps_equal_lengths_apart_and_a_large_one_pads_short_batches():
    lengths = np.array([5, 9, 5, 12, 9])
    assert sorted(sorted(g.tolist()) for g in length_groups(lengths, 0.0)) == [[0, 2], [1, 4], [3]]
    assert [sorted(g.tolist()) for g in length_groups(lengths, 64.0)] == [[0, 1, 2, 3, 4]]


def test_a_thousand_distinct_lengths():
    """NLLB's positions: the search stops a run once its padding outgrows it, so this is linear, not quadratic."""
    lengths = np.arange(1, 1025).repeat(2)
    groups = length_groups(lengths, 64.0)
    assert sorted(np.concatenate(groups).tolist()) == list(range(len(lengths)))
    assert max(int(lengths[g].max()) - int(lengths[g].min()) for g in groups) < 64


def test_a_padded_row_encodes_bit_identically_to_the_row_alone():
    import engine

    for version in ("1", "2"):
        runner = engine.load(MODEL_REPO / "translate-en-ja" / version, device="cpu").runner
        rng = np.random.default_rng(0)
        short, long = rng.integers(5, 4000, (1, 9)), rng.integers(5, 4000, (3, 17))
        alone = runner._encode(short, np.ones_like(short))
        ids, mask = np.zeros((4, 17), np.int64), np.zeros((4, 17), np.int64)
        ids[0, :9], mask[0, :9], ids[1:], mask[1:] = short[0], 1, long, 1
        together = runner._encode(ids, mask)
        assert all(np.array_equal(t[0, :, :9], a[0]) for t, a in zip(together, alone))
        # and the engine's own grouping, whatever it measured, gives what equal-length groups give
        measured = runner.encode(ids, mask)
        runner._call_tokens = 0.0
        apart = runner.encode(ids, mask)
        assert all(np.array_equal(m, a) for m, a in zip(measured, apart))
