"""Every decoding option through every front door: seq2seq.v1, KServe v2 over gRPC and over HTTP (tritonclient).

Each door's answer is compared with the engine in process (``Translator.generate``, the same options), so no
output string is hard-coded; out-of-range values are INVALID_ARGUMENT (HTTP 400) naming the limit; options
in one request mix with other requests' in the server's running batch.
"""

from __future__ import annotations

import concurrent.futures

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
import tritonclient.http as th
from conftest import english, served_version
from tritonclient.utils import InferenceServerException

from contract.bundle import read_bundle
from s2s.seq2seq_client import Seq2SeqClient
from server.models.in_process import served_outputs

JA = "translate-en-ja"
# The vocabulary bounds sampling_topk; read from the bundle, so a retrained model needs no edit here.
JA_VOCAB = read_bundle(served_version(JA), verify_hashes=False).model.tgt_vocab_size
TEXTS = english(6)
PREFIXES = ["", "「", "", "この", "", ""]
# One case per option family; each row's output must equal the engine's in process.
CASES = {
    "model_default": dict(),  # beam_size 0: the bundle's task.beam_size (4)
    "greedy": dict(beam_size=1),
    "nbest": dict(beam_size=4, num_hypotheses=3, return_scores=True),
    "ctranslate2_penalty": dict(
        beam_size=3,
        num_hypotheses=2,
        return_scores=True,
        length_penalty=1.0,
        length_penalty_type="ctranslate2",
    ),
    "no_length_penalty": dict(beam_size=2, length_penalty=0.0),
    "sampling": dict(
        sampling_topk=0, sampling_topp=0.9, sampling_temperature=1.2, seed=7, return_scores=True
    ),
    "topk": dict(sampling_topk=5, seed=11),
    "repetition": dict(repetition_penalty=1.6, no_repeat_ngram_size=2),
    "min_and_max": dict(min_new_tokens=8, max_new_tokens=20, disable_unk=True),
}


@pytest.fixture(scope="module")
def local():
    import engine

    return engine.load(served_version(JA), device="cpu")


def expected(local, options: dict, prefixes=None):
    """What the server answers: the engine in process on what the default text plan reads (spans masked and
    restored, spans the model made up dropped: server.models.in_process)."""
    res = served_outputs(local, TEXTS, prefixes, **options)
    return [[(c.text, c.score) for c in r.hypotheses] for r in res]


def close(got, want) -> bool:
    """Same texts, scores equal as float32 (the wire type)."""
    return all(
        [t for t, _ in g] == [t for t, _ in w]
        and np.allclose([s for _, s in g], [s for _, s in w], atol=1e-5)
        for g, w in zip(got, want)
    ) and len(got) == len(want)


# ---- seq2seq.v1 ---------------------------------------------------------------------------------------------
def v1(server, options: dict, prefixes=None):
    with Seq2SeqClient(server.address) as c:
        outs = c.generate_full(JA, TEXTS, target_prefixes=prefixes, **options).outputs
    assert all(
        o.text == o.hypotheses[0].text and o.output_tokens == o.hypotheses[0].output_tokens for o in outs
    )
    return [[(h.text, h.score) for h in o.hypotheses] for o in outs]


@pytest.mark.parametrize("case", CASES)
def test_seq2seq_v1_options(server, local, case):
    options = CASES[case]
    assert close(v1(server, options), expected(local, options))
    n = options.get("num_hypotheses", 1)
    assert all(len(h) == n for h in v1(server, options))


@pytest.mark.parametrize("beam", [1, 4])
def test_seq2seq_v1_target_prefixes(server, local, beam):
    options = dict(beam_size=beam, num_hypotheses=beam, return_scores=True)
    got = v1(server, options, PREFIXES)
    assert close(got, expected(local, options, PREFIXES))
    assert all(h[0].startswith(p) for hyps, p in zip(got, PREFIXES) for h in hyps)


def test_the_models_default_beam_is_advertised_and_used(server, local):
    """beam_size 0 (absent) is the bundle's task.beam_size: 4 for translate-en-ja (it raised chrF on unseen projects,
    docs/experiments.md), 1 for addition. ListModels and the KServe model config say so, and a request naming no
    beam gets exactly the explicit beam's output."""
    with Seq2SeqClient(server.address) as c:
        defaults = {
            m.name: next(o.default for o in m.option_limits if o.name == "beam_size") for m in c.models()
        }
    assert (defaults[JA], defaults["addition"], local.config.task.beam_size) == (4, 1, 4)
    with triton.InferenceServerClient(server.address) as c:
        assert c.get_model_config(JA).config.parameters["default_beam_width"].string_value == "4"
    assert close(v1(server, {}), expected(local, dict(beam_size=4)))
    assert close(kserve_grpc(server, {}), expected(local, dict(beam_size=4)))


def test_list_models_advertises_option_limits(server):
    with Seq2SeqClient(server.address) as c:
        info = next(m for m in c.models() if m.name == JA)
    limits = {o.name: o for o in info.option_limits}
    assert limits["beam_size"].max == info.max_beam_size == limits["num_hypotheses"].max
    assert limits["sampling_topk"].max == JA_VOCAB and limits["sampling_topk"].default == 1
    assert limits["min_new_tokens"].max == info.max_new_tokens
    assert {
        "length_penalty",
        "repetition_penalty",
        "sampling_topp",
        "sampling_temperature",
        "seed",
        "no_repeat_ngram_size",
        "target_prefix_tokens",
        "max_new_tokens",
    } <= set(limits)


BAD = [  # (options, target prefixes, the limit the message must name)
    (dict(beam_size=2, num_hypotheses=3), None, "num_hypotheses=3 is out of range: 1 to beam_size (2)"),
    # no beam named: sampling resolves it to 1, too narrow for 2 hypotheses
    (dict(sampling_topk=3, num_hypotheses=2), None, "num_hypotheses=2 is out of range: 1 to beam_size (1)"),
    (
        dict(sampling_topk=JA_VOCAB + 1),
        None,
        f"sampling_topk={JA_VOCAB + 1} is out of range: 0 (whole vocabulary) to {JA_VOCAB}",
    ),
    (dict(sampling_topk=0, sampling_topp=1.5), None, "sampling_topp=1.5 is out of range"),
    (dict(repetition_penalty=0.0), None, "repetition_penalty=0.0 is out of range: above 0"),
    (dict(sampling_temperature=50.0), None, "sampling_temperature=50.0 is out of range: 0 (greedy) to 10"),
    (dict(length_penalty=-1.0), None, "length_penalty=-1.0 is out of range: 0 to 10"),
    (
        dict(length_penalty_type="fairseq"),
        None,
        "length_penalty_type='fairseq' is not one of gnmt, ctranslate2",
    ),
    (
        dict(max_new_tokens=10, min_new_tokens=11),
        None,
        "min_new_tokens=11 is out of range: 0 to max_new_tokens (10)",
    ),
    (dict(no_repeat_ngram_size=99), None, "no_repeat_ngram_size=99 is out of range: 0 (off) to 63"),
    (dict(beam_size=4, sampling_topk=10), None, "needs beam_size=1"),
    (dict(), ["a", "b"], "2 target prefixes for 6 inputs"),
    (dict(), ["x" * 70] + [""] * 5, "target prefix 0 has"),
]


@pytest.mark.parametrize("options,prefixes,message", BAD)
def test_seq2seq_v1_bad_options_are_invalid_argument(server, options, prefixes, message):
    with pytest.raises(grpc.RpcError) as e:
        v1(server, options, prefixes)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details(), (
        e.value.details()
    )


def test_streaming_samples_token_by_token_and_beams_only_when_final(server, local):
    sampled = dict(sampling_topk=0, seed=3)
    with Seq2SeqClient(server.address) as c:
        events = list(c.stream(JA, TEXTS[:2], **sampled))
        assert sum(1 for e in events if not e.finished and e.text_delta) > 2  # deltas before the end
        assert [e.output.text for e in events if e.finished] == [
            r.text for r in local.generate(TEXTS[:2], **sampled)
        ]
        beam = list(c.stream(JA, TEXTS[:2], beam_size=4, num_hypotheses=2))
        assert all(e.finished for e in beam)  # nothing before the hypotheses are final
        assert [len(e.output.hypotheses) for e in beam] == [2, 2]


def _steps_over(server, rows: int) -> int:
    """Decoder steps of the en-ja cores so far with more than ``rows`` rows (the s2s_batch_size histogram)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{server.config.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )
    total = at_most = 0.0
    buckets = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "s2s_batch_size_count" and s.labels["model"] == JA:
                total += s.value
            elif (
                s.name == "s2s_batch_size_bucket"
                and s.labels["model"] == JA
                and float(s.labels["le"]) == rows
            ):
                at_most += s.value
            if s.name == "s2s_batch_size_bucket":
                buckets.add(float(s.labels["le"]))
    assert rows in buckets, f"s2s_batch_size has no bucket at {rows} rows: {sorted(buckets)}"
    return int(total - at_most)


def test_requests_with_different_options_batch_together(local):
    """Every case at once from its own thread, three rounds, on one engine core whose steps may take 256 rows:
    each answer equals the engine alone (seeded sampling included), and the core ran steps with more rows than
    any one request has, so rows of requests with different options (no two requests of a round share options)
    decoded in one step."""
    from conftest import ServerThread, server_config

    from server.config import SchedulerConfig

    want = {case: expected(local, CASES[case]) for case in CASES}
    one_request = len(TEXTS) * max(
        4, *(c.get("beam_size", 0) for c in CASES.values())
    )  # beam 4 is the default
    srv = ServerThread(
        server_config(models=(JA,), instances=1, scheduler=SchedulerConfig(max_batch_size=256))
    )
    try:
        with concurrent.futures.ThreadPoolExecutor(len(CASES)) as pool:
            for _ in range(3):
                jobs = [(case, pool.submit(v1, srv, CASES[case])) for case in CASES]
                for case, job in jobs:
                    assert close(job.result(), want[case]), case
        assert _steps_over(srv, one_request) > 0
    finally:
        srv.stop()


# ---- KServe v2: gRPC and HTTP ------------------------------------------------------------------------------
def _kserve_params(options: dict) -> dict:
    return dict(options)


def kserve_grpc(server, options: dict, prefixes=None):
    with triton.InferenceServerClient(server.address) as c:
        inputs = [triton.InferInput("text_input", [len(TEXTS)], "BYTES")]
        inputs[0].set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=object))
        if prefixes is not None:
            inputs.append(triton.InferInput("target_prefix", [len(TEXTS)], "BYTES"))
            inputs[1].set_data_from_numpy(np.array([p.encode() for p in prefixes], dtype=object))
        outs = [triton.InferRequestedOutput(n) for n in ("text_output", "hypotheses", "scores")]
        r = c.infer(JA, inputs, outputs=outs, parameters=_kserve_params(options))
    return _nbest(r)


def kserve_http(server, options: dict, prefixes=None, binary: bool = True):
    with th.InferenceServerClient(f"127.0.0.1:{server.running.web.port}") as c:
        inputs = [th.InferInput("text_input", [len(TEXTS)], "BYTES")]
        inputs[0].set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=object), binary_data=binary)
        if prefixes is not None:
            inputs.append(th.InferInput("target_prefix", [len(TEXTS)], "BYTES"))
            inputs[1].set_data_from_numpy(
                np.array([p.encode() for p in prefixes], dtype=object), binary_data=binary
            )
        outs = [
            th.InferRequestedOutput(n, binary_data=binary) for n in ("text_output", "hypotheses", "scores")
        ]
        r = c.infer(JA, inputs, outputs=outs, parameters=_kserve_params(options))
    return _nbest(r)


def _nbest(r):
    texts, hyps, scores = r.as_numpy("text_output"), r.as_numpy("hypotheses"), r.as_numpy("scores")
    assert hyps.shape == scores.shape and hyps.shape[0] == len(TEXTS) and scores.dtype == np.float32
    assert [h[0] for h in hyps] == list(texts)
    dec = lambda b: b.decode() if isinstance(b, bytes) else b  # noqa: E731
    return [[(dec(t), float(s)) for t, s in zip(row_t, row_s)] for row_t, row_s in zip(hyps, scores)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("door", ["grpc", "http", "http-json"])
def test_kserve_options(server, local, case, door):
    options = CASES[case]
    call = {
        "grpc": kserve_grpc,
        "http": kserve_http,
        "http-json": lambda s, o: kserve_http(s, o, binary=False),
    }[door]
    assert close(call(server, options), expected(local, options))


@pytest.mark.parametrize("door", ["grpc", "http"])
def test_kserve_target_prefix(server, local, door):
    options = dict(beam_size=4, num_hypotheses=2, return_scores=True)
    call = kserve_grpc if door == "grpc" else kserve_http
    assert close(call(server, options, PREFIXES), expected(local, options, PREFIXES))


@pytest.mark.parametrize("options,prefixes,message", [b for b in BAD if b[1] is None])
def test_kserve_bad_options(server, options, prefixes, message):
    with pytest.raises(InferenceServerException) as e:
        kserve_grpc(server, options)
    assert "INVALID_ARGUMENT" in str(e.value.status()) and message in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        kserve_http(server, options)
    assert e.value.status() == "400" and message in e.value.message()


def test_kserve_wrong_parameter_kinds_are_named(server):
    for options, message in [
        (dict(return_scores="yes"), "parameter 'return_scores' must be a boolean"),
        (dict(length_penalty_type=2), "parameter 'length_penalty_type' must be a string"),
        (dict(beam_size=2, beam_width=2), "'beam_width' and 'beam_size' are the same option"),
    ]:
        with pytest.raises(InferenceServerException) as e:
            kserve_grpc(server, options)
        assert message in e.value.message()
