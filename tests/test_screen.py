"""greedy_screen (engine/screen.py): greedy rows' tokens from an int8 screen of the output projection, each proven
to be the argmax or computed in full, give the outputs of the whole projection."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from conftest import CHECKPOINTS, MODEL_REPO

import engine
from engine.screen import AUTO_MIN_MACS, Top1Screen, choose, mode_of


def test_a_settled_row_holds_its_argmax_and_near_ties_are_left_to_the_full_logits():
    """Against float64 logits over the allowed tokens: every settled row's token is their argmax; rows whose two
    best tokens tie, or nearly (closer than float32 rounding), are not settled; a suppressed or banned token on
    top is never returned."""
    rng = np.random.default_rng(0)
    v, d, eos = 700, 64, 0
    w = (0.05 * rng.standard_normal((v, d))).astype(np.float32)
    w[11] = w[10]  # two tokens with the same weights: exact ties
    w[21] = w[20] * (1 + 2e-7)  # and a near one
    b = (0.1 * rng.standard_normal(v)).astype(np.float32)
    b[11], b[21] = b[10], b[20]
    h = rng.standard_normal((40, d)).astype(np.float32)
    h[:10] = 30 * w[10]  # rows that point at the tied pair
    h[10:20] = 30 * w[20]
    h[20:25] = 30 * w[3]  # token 3 is suppressed
    h[25:30] = 30 * w[eos]  # EOS on top, banned for rows 25..27
    screen = Top1Screen(w, b, suppressed=(3,))
    banned = np.zeros(len(h), bool)
    banned[25:28] = True
    tokens, settled = screen.top1(h, [(eos, banned)])
    exact = h.astype(np.float64) @ w.T.astype(np.float64) + b
    exact[:, 3] = -np.inf
    exact[banned, eos] = -np.inf
    assert (tokens[settled] == exact[settled].argmax(1)).all()
    assert not settled[:20].any()  # ties and near-ties: the full logits decide
    assert settled[20:].mean() > 0.9 and 3 not in tokens[settled] and eos not in tokens[25:28][settled[25:28]]
    assert (tokens[28:30] == eos).all() and settled[28:30].all()  # rows where EOS is not banned take it


def _counted(translator):
    """Wrap the screen's top1 to count rows seen and settled."""
    screen, seen = translator.runner.screen, {"rows": 0, "settled": 0}
    top1 = screen.top1

    def counting(h, banned=()):
        tokens, settled = top1(h, banned)
        seen["rows"] += len(settled)
        seen["settled"] += int(settled.sum())
        return tokens, settled

    screen.top1 = counting
    return seen


@pytest.mark.parametrize("name", ["translate-en-ja", "addition"])
def test_screened_greedy_outputs_equal_the_full_projections(name: str):
    """Held-out inputs through a trained model, eight rows at a time (finished rows taken over by newcomers): greedy,
    greedy with a minimum length and <unk> disabled (tokens banned per row), and beams (full logits, as before) give
    the same outputs with and without the screen; the screen settled nearly every greedy row itself."""
    folder = MODEL_REPO / name / "1"
    plain, screened = engine.load(folder, device="cpu"), engine.load(folder, device="cpu", greedy_screen=True)
    assert screened.runner.screen is not None and plain.runner.screen is None
    seen = _counted(screened)
    lines = (CHECKPOINTS / name / "test.tsv").read_text(encoding="utf-8").splitlines()[:96]
    texts = [line.split("\t")[0] for line in lines]
    for options in (
        dict(beam_size=1),
        dict(beam_size=1, min_new_tokens=4, disable_unk=True),
        dict(beam_size=4),
    ):
        want = [r.tokens for r in plain.generate(texts, max_batch_size=8, **options)]
        assert [r.tokens for r in screened.generate(texts, max_batch_size=8, **options)] == want, options
    assert seen["rows"] > len(texts) and seen["settled"] > 0.9 * seen["rows"]
    # a row with an option beyond bans (scores here) takes the full logits: nothing more reaches the screen
    rows = seen["rows"]
    want = [r.tokens for r in plain.generate(texts[:16], beam_size=1, return_scores=True)]
    assert [r.tokens for r in screened.generate(texts[:16], beam_size=1, return_scores=True)] == want
    assert seen["rows"] == rows


def test_the_screen_stays_off_where_it_cannot_run(tmp_path, caplog):
    """An int8 bundle has no float32 projection to screen: it loads and decodes as without the option, saying why."""
    from export.quantize import convert_bundle

    convert_bundle(MODEL_REPO / "addition" / "1", tmp_path / "int8", "int8")
    with caplog.at_level(logging.WARNING, logger="s2s.engine"):
        t = engine.load(tmp_path / "int8", device="cpu", greedy_screen=True)
    assert t.runner.screen is None and "greedy_screen off: the bundle is int8-dynamic" in caplog.text
    plain = engine.load(tmp_path / "int8", device="cpu")
    assert [r.tokens for r in t.generate(["1+2"], beam_size=1)] == [
        r.tokens for r in plain.generate(["1+2"], beam_size=1)
    ]


def test_auto_screens_a_float32_projection_large_enough_to_pay():
    """auto: on for a float32 bundle on the CPU from AUTO_MIN_MACS multiply-adds per row (OPUS-MT's 512 x 58k), off
    for translate-en-ja's 256 x 8k; on forces it where it can run; off, another device or int8: never. The reason
    names the sizes."""
    assert choose("auto", "none", 512, 58101, True)[0] and not choose("auto", "none", 256, 8000, True)[0]
    assert 256 * 8000 < AUTO_MIN_MACS <= 512 * 8000
    on, why = choose("on", "none", 256, 8000, True)
    assert on and "256 x 8000" in why
    assert (
        not choose("auto", "none", 512, 58101, False)[0]
        and not choose("on", "int8-dynamic", 512, 58101, True)[0]
    )
    assert not choose("off", "none", 512, 58101, True)[0]
    # a decoder whose weights are external data (past protobuf's limit: NLLB-600M's): auto leaves it unsplit, as
    # the split would hold those weights in memory again; on still forces it
    off, why = choose("auto", "none", 1024, 256206, True, external_data=True)
    assert not off and "external data" in why
    assert choose("on", "none", 1024, 256206, True, external_data=True)[0]
    assert (mode_of(True), mode_of(False), mode_of("auto")) == ("on", "off", "auto")
    with pytest.raises(ValueError, match="auto, on or off"):
        mode_of("yes")
