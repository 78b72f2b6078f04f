"""The engine's search on its own and on named models: top-k with suppressed tokens, beams advanced together
against one at a time, beam search keeping addition exact, CTranslate2's translate_batch, a beam's first step in an
idle batch, and addition's exact match on its whole held-out split against PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CHECKPOINTS, decode
from engine_models import bundle, sample_inputs

from engine import EngineOptions, Sequence, Translator
from engine.search import Beam


def test_top_k_leaves_out_suppressed_tokens_after_the_log_softmax():
    """Tokens a model never generates (Marian's <pad>) count in the log-softmax's normaliser but are never among a
    row's n best, also where one of them is a row's top token; with n above what is left, they come last at -inf."""
    from engine.topk import TopLogprobs

    rng = np.random.default_rng(2)
    x = (3 * rng.standard_normal((9, 500))).astype(np.float32)
    sup = (3, 250, 499)
    x[0, 250] = x[0].max() + 5  # a suppressed token on top
    x[1, list(sup)] = x[1].max() + 1  # all of them on top
    m = x.max(-1, keepdims=True)
    ref = x.astype(np.float64) - (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))
    ref[:, list(sup)] = -np.inf
    lp, ids = TopLogprobs(1, sup)(x, 8)
    assert ids.tolist() == np.argsort(-ref, axis=-1, kind="stable")[:, :8].tolist()
    np.testing.assert_allclose(lp, np.take_along_axis(ref, ids, axis=-1), rtol=0, atol=1e-5)
    lp, ids = TopLogprobs(1, sup)(x[:2, :5], 8)  # 5 tokens, one suppressed: it comes last
    assert ids.shape == (2, 5) and ids[:, -1].tolist() == [3, 3] and np.isneginf(lp[:, -1]).all()


@pytest.mark.parametrize("kind,alpha", [("gnmt", 0.6), ("ctranslate2", 0.6), ("ctranslate2", 0.0)])
def test_beams_advanced_together_choose_as_the_loop_does_alone(kind: str, alpha: float):
    """advance_beams (every beam of a width in one vector pass) against Beam.advance_top's loop, one beam at a time:
    the same tokens, parents, scores, finished hypotheses and stopping, over random steps where ends (EOS), ties and
    dead candidates (-inf) are common."""
    from engine.search import advance_beams

    rng = np.random.default_rng(1)
    k, eos, n_beams = 4, 2, 6
    together = [Beam(eos, 12, k, alpha, kind, n_best=2) for _ in range(n_beams)]
    alone = [Beam(eos, 12, k, alpha, kind, n_best=2) for _ in range(n_beams)]
    for _ in range(12):
        live = [i for i, b in enumerate(together) if not b.done]
        if not live:
            break
        logp = np.sort(
            np.round(np.log(rng.dirichlet(np.ones(12), size=(len(live) * k))[:, : 2 * k]), 1), axis=1
        )[:, ::-1]
        logp[rng.random(logp.shape) < 0.05] = -np.inf
        logp = np.sort(logp, axis=1)[:, ::-1].copy()
        toks = np.stack([rng.permutation(np.arange(2, 14))[: 2 * k] for _ in range(len(live) * k)])
        t1, p1 = advance_beams([together[i] for i in live], logp, toks)
        for j, i in enumerate(live):
            t2, p2 = alone[i].advance_top(logp[j * k : (j + 1) * k], toks[j * k : (j + 1) * k])
            assert (
                t1[j * k : (j + 1) * k].tolist() == t2.tolist()
                and p1[j * k : (j + 1) * k].tolist() == p2.tolist()
            )
    for a, b in zip(together, alone):
        assert a.done == b.done and a.hyps == b.hyps and a.finished == b.finished
        np.testing.assert_array_equal(a.scores, b.scores)
        assert a.hypotheses() == b.hypotheses()
    assert sum(len(b.finished) for b in alone) >= n_beams and all(
        b.done for b in alone
    )  # ends happened, all stopped


def test_beam_search_keeps_addition_exact():
    """Beam search must not lose what greedy gets right: the addition model is exact under greedy decoding.
    (A stopping rule that ended at k finished hypotheses answered 864+394 with "258" under beam 4.)"""
    import random

    addition = Translator(bundle("addition"))
    rng = random.Random(0)
    problems = [(rng.randint(0, 999), rng.randint(0, 999)) for _ in range(200)]
    texts = [f"{a}+{b}" for a, b in problems]
    for width in (2, 4, 8):
        wrong = [
            (t, r.text)
            for t, r, (a, b) in zip(texts, addition.generate(texts, beam_size=width), problems)
            if r.text != str(a + b)
        ]
        assert len(wrong) <= 1, (width, wrong[:5])


@pytest.mark.slow
def test_addition_exact_match_on_10000_held_out_problems_matches_pytorch():
    import torch

    from training import checkpoint
    from training.evaluate import generate as torch_generate

    ckpt = checkpoint.load(CHECKPOINTS / "addition")
    pairs = [line.split("\t") for line in (CHECKPOINTS / "addition" / "test.tsv").read_text().splitlines()]
    assert len(pairs) == 10_000
    srcs, refs = [s for s, _ in pairs], [t for _, t in pairs]
    engine = Translator(bundle("addition"), EngineOptions(device="cpu"))
    ours = decode(engine, srcs, batch_size=256)
    torch.set_num_threads(1)
    theirs = torch_generate(ckpt.model, ckpt.codec, srcs, 500, "cpu", ckpt.task.max_new_tokens)
    acc = float(np.mean([o == r for o, r in zip(ours, refs)]))
    assert ours == theirs
    assert acc >= 0.995, acc


def test_free_run_finds_consecutive_released_rows():
    from engine.step_loop import free_run

    assert free_run([7, 2, 3, 5, 4], 3) == 2
    assert free_run([0, 2, 4], 2) is None
    assert free_run([1], 2) is None
    assert free_run([9, 8], 2) == 8


def test_translate_batch_takes_tokens_as_ctranslate2_does_and_equals_generate():
    import engine

    ja = engine.load(bundle("translate-en-ja"), device="cpu")
    texts = sample_inputs(ja, 6)
    res = ja.translate_batch(
        [ja.source_tokens(t) for t in texts], beam_size=4, num_hypotheses=2, return_scores=True
    )
    want = ja.generate(texts, beam_size=4, num_hypotheses=2, return_scores=True)
    tok = ja.codec.tokenizer
    assert [[[tok.token_to_id(x) for x in h] for h in r.hypotheses] for r in res] == [
        [c.tokens for c in w.hypotheses] for w in want
    ]
    assert [r.scores for r in res] == [[c.score for c in w.hypotheses] for w in want]
    with pytest.raises(ValueError, match="not in the vocabulary"):
        ja.translate_batch([["no-such-token-xyz"]])


def test_a_beam_into_an_idle_batch_takes_its_first_step_on_one_row_and_decodes_as_in_a_running_one():
    """Into an idle batch a beam's first step runs on one row, then the beam joins with its width (CTranslate2's
    expansion after the first step); joining a running batch it takes all its rows at once. Same hypotheses either
    way, and a beam that ends at that first step is reported by the next step."""
    from engine.step_loop import StepLoop

    ja = Translator(bundle("translate-en-ja"), EngineOptions(device="cpu"))
    ids = [ja.codec.source_ids(t) for t in sample_inputs(ja, 6)]
    for budget in (20, 1):
        apart = StepLoop(ja.runner)
        s = Sequence(ids[0], budget, 4)
        apart.add([s])
        assert len(apart.batch) == (4 if budget > 1 else 0) and len(apart) == 1
        if budget > 1:
            assert (apart.batch.positions == 1).all() and apart.batch.past_len == 1
        while len(apart):
            apart.step()
        running = StepLoop(ja.runner)
        greedy = Sequence(ids[1], 30)
        running.add([greedy])
        running.step()  # the batch runs: the beam joins with all its rows
        t = Sequence(ids[0], budget, 4)
        running.add([t])
        assert len(running.batch) == 5
        while t.result is None:
            running.step()
        assert [h.tokens for h in s.hypotheses] == [h.tokens for h in t.hypotheses]
        # The running batch's holes move a float32 sum's rounding: scores equal to float32 precision.
        assert np.allclose([h.score for h in s.hypotheses], [h.score for h in t.hypotheses], atol=1e-5)
        assert budget > 1 or len(s.result) <= 1
