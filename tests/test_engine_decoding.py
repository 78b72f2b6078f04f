"""The torch-free engine decoding each committed default model (one Translator per model, shared by the
module): parity with PyTorch, the cache, ragged batches, beams against greedy, rows joining and leaving a running
batch, the IOBinding path, and what the scheduler's encoder thread does ahead of the step loop.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CHECKPOINTS, MODEL_REPO, decode, decode_no_cache
from engine_models import bundle, sample_inputs

from engine import EngineOptions, Sequence, StepLoop, Translator
from engine.search import Beam


def models_present() -> list[str]:
    return (
        sorted(p.name for p in MODEL_REPO.iterdir() if (p / "1" / "config.json").is_file())
        if MODEL_REPO.is_dir()
        else []
    )


@pytest.fixture(scope="module", params=models_present())
def engine(request) -> Translator:
    return Translator(bundle(request.param), EngineOptions(device="cpu"))


def test_export_parity_with_pytorch(engine: Translator):
    from export.validate import validate_bundle
    from training import checkpoint

    ckpt = checkpoint.load(CHECKPOINTS / engine.config.name)
    assert engine.config.source_checkpoint_sha256 == checkpoint.weights_sha256(
        CHECKPOINTS / engine.config.name
    )
    report = validate_bundle(ckpt.model, engine.runner.folder, atol=1e-4, seed=11)  # raises if off
    assert report["greedy_identical"] == "16/16"


def test_cached_equals_uncached_decoding(engine: Translator):
    texts = sample_inputs(engine, 16)
    assert decode(engine, texts, max_new_tokens=24) == decode_no_cache(engine, texts, max_new_tokens=24)


def test_a_row_decoded_alone_equals_the_row_in_a_ragged_batch(engine: Translator):
    texts = sample_inputs(engine, 6)
    ids = [engine.codec.source_ids(t) for t in texts]
    alone = StepLoop(engine.runner)
    a = Sequence(ids[0], 20)
    alone.add([a])
    while len(alone):
        alone.step()
    gen = StepLoop(engine.runner)
    others = [Sequence(i, 20) for i in ids[1:4]]
    gen.add(others)
    for _ in range(3):  # the batch is 3 steps in when the row joins: its cache has 3 holes
        gen.step()
    late = Sequence(ids[0], 20)
    gen.add([late, Sequence(ids[4], 20)])
    while len(gen):
        gen.step()
    assert late.result == a.result


def test_ragged_encode_equals_each_row_alone(engine: Translator):
    """Rows are encoded in runs of similar length (engine.encoder_groups); each row's cross K/V must equal
    encoding it alone, and its padding columns must be zero."""
    from engine.step_loop import pad_batch

    rows = [engine.codec.source_ids(t) for t in sample_inputs(engine, 12)]
    assert len({len(r) for r in rows}) > 2, "the sample should have ragged lengths"
    ids, mask = pad_batch(rows, engine.runner.special.pad)
    batched = engine.runner.encode(ids, mask)
    for i, r in enumerate(rows):
        alone = engine.runner.encode(np.array([r]), np.ones((1, len(r)), np.int64))
        for got, want in zip(batched, alone):
            np.testing.assert_allclose(got[i, :, : len(r)], want[0], atol=1e-5)
            assert not got[i, :, len(r) :].any()


def test_beam_of_one_equals_greedy(engine: Translator):
    texts = sample_inputs(engine, 8)
    gen = StepLoop(engine.runner)
    greedy = [Sequence(engine.codec.source_ids(t), 20) for t in texts]
    beams = []
    for t in texts:
        s = Sequence(engine.codec.source_ids(t), 20)
        s.search = Beam(engine.runner.special.eos, gen.budget(s), width=1)
        beams.append(s)
    gen.add(greedy + beams)
    while len(gen):
        gen.step()
    assert [s.result for s in greedy] == [s.result for s in beams]


def test_onnx_runtime_top_k_equals_the_numpy_reference(engine: Translator):
    """engine.topk (LogSoftmax + TopK in ONNX Runtime, what beams use) against numpy: the same tokens in the same
    order, ties to the lower id, log-probabilities to float32 rounding."""
    from engine.search import top_sorted

    def top_logprobs(x: np.ndarray, n: int):
        idx, val = top_sorted(x, n)
        m = x.max(-1, keepdims=True)
        return val.astype(np.float64) - (m + np.log(np.exp(x - m).sum(-1, keepdims=True))), idx

    rng = np.random.default_rng(0)
    x = (3 * rng.standard_normal((37, 8000))).astype(np.float32)
    x[5, [7, 700, 7000]] = x[5].max() + 1  # a three-way tie at the top
    x[6] = 0.0  # all tied
    lp, ids = engine.runner.top_logprobs(x, 8)
    ref_lp, ref_ids = top_logprobs(x, 8)
    assert ids.tolist() == ref_ids.tolist()
    assert ids[5, :3].tolist() == [7, 700, 7000] and ids[6].tolist() == list(range(8))
    np.testing.assert_allclose(lp, ref_lp, rtol=0, atol=1e-5)
    assert engine.runner.top_logprobs(x[:2, :5], 8)[1].shape == (2, 5)  # n above the vocabulary: all of it


def _normalised_score(engine: Translator, src: list[int], out: list[int]) -> float:
    """log P(out + EOS | src) / lp(|out| + 1), by one uncached decoder pass over the whole target."""
    from engine.search import log_softmax
    from engine.step_loop import pad_batch

    ids, mask = pad_batch([src], engine.runner.special.pad)
    cross = engine.runner.encode(ids, mask)
    tgt = [engine.runner.special.bos, *out]
    empty = [np.zeros((1, engine.runner.n_heads, 0, engine.runner.d_head), np.float32)] * (
        2 * engine.runner.n_layers
    )
    logits, _ = engine.runner.decode(
        np.array([tgt]), np.arange(len(tgt))[None], np.zeros((1, 0), np.int64), empty, cross, mask
    )
    lp = log_softmax(logits[0].astype(np.float64))
    total = sum(lp[i, t] for i, t in enumerate([*out, engine.runner.special.eos]))
    return total / Beam(engine.runner.special.eos, 1, 1).lp(len(out) + 1)


def test_beam_search_scores_at_least_as_well_as_greedy(engine: Translator):
    """Beam 4's hypothesis has a length-normalised score >= greedy's on every input (when both ended with EOS)."""
    texts = sample_inputs(engine, 12)
    seqs = {w: [Sequence(engine.codec.source_ids(t), 20, w) for t in texts] for w in (1, 4)}
    from engine.drive import run

    for w in seqs:
        run(engine.runner, seqs[w])
    for g, b in zip(seqs[1], seqs[4]):
        if len(g.result) < g.search.budget and len(b.result) < 20:
            assert (
                _normalised_score(engine, b.src_ids, b.result)
                >= _normalised_score(engine, g.src_ids, g.result) - 1e-6
            )


def test_newcomers_reusing_released_rows_decode_as_they_would_alone(engine: Translator):
    """Continuous batching churn: with 4 rows, every finished sequence's row is taken over in place by the
    next one (and longer sources widen the batch); each result must equal decoding that input alone."""
    from engine.drive import run

    texts = sample_inputs(engine, 24)
    alone = [decode(engine, [t], max_new_tokens=20)[0] for t in texts]
    seqs = run(engine.runner, [Sequence(engine.codec.source_ids(t), 20) for t in texts], batch_size=4)
    assert [engine.codec.decode(s.result) for s in seqs] == alone


def test_io_binding_path_decodes_exactly_like_the_numpy_path(engine: Translator):
    """The device-resident cache (IOBinding, the default on CUDA) runs here on CPU OrtValues: same tokens
    for greedy with rows joining, leaving and reusing slots, and for beams (which reorder the cache)."""
    bound = Translator(engine.runner.folder, EngineOptions(device="cpu", io_binding="on"))
    assert bound.runner.io_binding and not engine.runner.io_binding
    texts = sample_inputs(engine, 24)
    assert decode(bound, texts, max_new_tokens=20, batch_size=5) == decode(
        engine, texts, max_new_tokens=20, batch_size=5
    )
    assert decode(bound, texts[:4], max_new_tokens=12, beam=3) == decode(
        engine, texts[:4], max_new_tokens=12, beam=3
    )


def test_io_binding_keeps_the_cache_on_the_device_between_plain_steps(engine: Translator):
    import onnxruntime as ort

    from engine.search import Greedy

    bound = Translator(engine.runner.folder, EngineOptions(device="cpu", io_binding="on"))
    ids = [bound.codec.source_ids(t) for t in sample_inputs(engine, 4)]

    def seq(i: int) -> Sequence:  # never stops at EOS, so only the test changes the batch
        return Sequence(ids[i], 30, search=Greedy(eos=-1, budget=30))

    gen = StepLoop(bound.runner)
    first = [seq(0), seq(1)]
    gen.add(first)
    gen.step()
    gen.step()  # plain steps: the present K/V stay OrtValues and nothing comes back to the host
    assert isinstance(gen.batch.dev_past[0], ort.OrtValue) and gen.batch.host_syncs == 0
    gen.remove([first[0]])  # released: its slot waits for a newcomer
    gen.add([seq(2)])  # takes the released slot in place: masks and cross K/V only, no round trip
    gen.step()
    assert isinstance(gen.batch.dev_past[0], ort.OrtValue) and gen.batch.host_syncs == 0
    gen.add([seq(3)])  # no free slot: appending a row is a row operation, one round trip
    assert gen.batch.host_syncs == 1
    gen.step()
    assert isinstance(gen.batch.dev_past[0], ort.OrtValue) and gen.batch.host_syncs == 1


def test_sequences_encoded_ahead_join_like_the_others(engine: Translator):
    """The scheduler's encoder thread calls ``StepLoop.encode`` before ``add``: greedy rows refilling released
    slots, appended rows and beams must decode exactly as when ``add`` encodes them itself."""
    ids = [engine.codec.source_ids(t) for t in sample_inputs(engine, 6)]

    def decode(pre_encode: bool) -> list[list[int]]:
        gen = StepLoop(engine.runner)
        first = [Sequence(ids[0], 12), Sequence(ids[1], 12, beam=2)]
        later = [Sequence(i, 12) for i in ids[2:]] + [Sequence(ids[0], 12, beam=3)]
        gen.add(first)
        gen.step()
        if pre_encode:
            gen.encode(later)
            assert all(s.encoded is not None for s in later)
        gen.add(later)
        while len(gen):
            gen.step()
        return [s.result for s in first + later]

    assert decode(pre_encode=True) == decode(pre_encode=False)


def test_beams_reusing_a_finished_beams_rows_decode_as_they_would_alone(engine: Translator):
    """Beam churn: with 8 rows two beams of 4 run at once, and each newcomer takes the rows a finished beam
    released, in place (the batch never grows past 8 rows); greedy rows between them are reordered around.
    Each result must equal decoding that input alone."""
    from engine.drive import run

    texts = sample_inputs(engine, 16)
    alone = [run(engine.runner, [Sequence(engine.codec.source_ids(t), 20, 4)])[0].result for t in texts]
    seqs = [Sequence(engine.codec.source_ids(t), 20, 4 if i % 3 else 1) for i, t in enumerate(texts)]
    greedy = [run(engine.runner, [Sequence(engine.codec.source_ids(t), 20, 1)])[0].result for t in texts]
    run(engine.runner, seqs, batch_size=9)
    assert [s.result for s in seqs] == [alone[i] if i % 3 else greedy[i] for i in range(len(texts))]


def test_unresolved_default_beam_is_refused_by_sequence_and_resolved_by_generate(engine: Translator):
    """beam_size 0 means the model's default: Translator.generate resolves it from the bundle (task.beam_size), a bare
    Sequence cannot know the model and says how to resolve it."""
    from contract.decoding import DecodingOptions

    with pytest.raises(ValueError, match="resolved beam_size"):
        Sequence([5, 2], 10, options=DecodingOptions())
    texts = sample_inputs(engine, 6)
    default = engine.config.task.beam_size
    assert [r.tokens for r in engine.generate(texts)] == [
        r.tokens for r in engine.generate(texts, beam_size=default)
    ]


def test_released_rows_wait_for_newcomers_then_compact_and_results_do_not_change(engine: Translator):
    """A server's arrival pattern: newcomers come a step or two after others finish. A released row is computed
    (masked) for up to KEEP_RELEASED_STEPS steps and a newcomer takes it in place, so the batch keeps its rows
    and is not copied; a row nobody takes is compacted away after that. Every result equals decoding alone."""
    from engine.cache import KEEP_RELEASED_STEPS

    texts = sample_inputs(engine, 40)
    alone = {t: decode(engine, [t], max_new_tokens=20)[0] for t in texts}
    gen = StepLoop(engine.runner)
    todo, running, done = list(texts), {}, {}
    width_after_refill, compactions_seen = [], 0
    first = [Sequence(engine.codec.source_ids(t), 20) for t in todo[:6]]
    running.update({id(s): (s, t) for s, t in zip(first, todo[:6])})
    gen.add(first)
    todo = todo[6:]
    late: list[int] = []  # newcomers join two steps after a row is released, as a round trip later
    while len(gen) or todo:
        rows_before = len(gen.batch)
        out = gen.step()
        if len(gen.batch) < rows_before and gen.batch.free == []:
            compactions_seen += 1
        for s in out.finished:
            done[running.pop(id(s))[1]] = engine.codec.decode(s.result)
            late.append(2)
        late = [k - 1 for k in late]
        joining = [todo.pop(0) for k in late if k == 0 and todo]
        late = [k for k in late if k > 0]
        if joining:
            free_before, rows = len(gen.batch.free), len(gen.batch)
            seqs = [Sequence(engine.codec.source_ids(t), 20) for t in joining]
            for s, t in zip(seqs, joining):
                running[id(s)] = (s, t)
            gen.add(seqs)
            if free_before >= len(seqs):  # taken in place: the batch neither grew nor was copied
                width_after_refill.append(len(gen.batch) == rows)
        assert all(gen.batch.steps - gen.batch.released_at[r] <= KEEP_RELEASED_STEPS for r in gen.batch.free)
    assert done == alone
    assert width_after_refill and all(
        width_after_refill
    )  # refills in place happened, and kept the batch's rows
    assert compactions_seen > 0  # and, as the queue ran dry, rows nobody took were compacted away
