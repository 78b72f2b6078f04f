"""A multilingual bundle served beside translate-en-ja (tests/conftest.py's ``multilingual_server``: the tiny M2M100
of tests/m2m100_models.py, whose answer depends on the target language): languages per request on every door,
requests of different target languages decoded in one continuous batch, each row token-identical to transformers'
``generate(forced_bos_token_id=...)`` with the forced token left out of the answer; a language a model does not know
refused on every door with the ones it knows; libretranslatepy, unchanged, routed to the right model and language.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
from conftest import MODEL_REPO

pytest.importorskip("torch")
import m2m100_models as mm  # noqa: E402

from s2s.seq2seq_client import Seq2SeqClient  # noqa: E402

M2M, JA = "m2m", "translate-en-ja"
AS_SENT = dict(
    protect_spans=False, split_long=False
)  # the rows hold digits: the model reads them as they are
KNOWS = "it knows af, am, ar"  # the start of the tiny M2M100's list of codes (100 of them)


def expected(m2m100, rows, beam: int) -> list[tuple[str, int]]:
    """(text, output tokens) per row as transformers decodes it, the forced language token left out."""
    model, tok, _, _ = m2m100
    want = mm.hf_generate(model, tok, rows, num_beams=beam)
    return list(zip(tok.batch_decode(want, skip_special_tokens=True), map(len, want)))


def metric(srv, name: str, **labels) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{srv.config.metrics_port}/metrics", timeout=5).read()
    total = 0.0
    for line in text.decode().splitlines():
        if line.startswith(name + "{"):
            head, value = line.rsplit(" ", 1)
            total += float(value) if all(f'{k}="{v}"' in head for k, v in labels.items()) else 0.0
    return total


def post(srv, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.running.web.port}/{path}",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def rest_infer(srv, model: str, texts: list[str], **params) -> tuple[int, dict]:
    body = {
        "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [len(texts)], "data": texts}],
        "outputs": [{"name": "text_output"}, {"name": "output_tokens"}],
        "parameters": params,
    }
    return post(srv, f"v2/models/{model}/infer", body)


# ---- one continuous batch of mixed target languages, as transformers decodes each row ------------------------
@pytest.mark.parametrize("beam", [1, 4])
def test_mixed_target_languages_in_one_continuous_batch(multilingual_server, m2m100, beam):
    rows = m2m100[3][:48]  # three target and two source languages, interleaved
    want = expected(m2m100, rows, beam)
    wide = lambda: metric(multilingual_server, "s2s_batch_size_count", model=M2M) - metric(  # noqa: E731
        multilingual_server, "s2s_batch_size_bucket", model=M2M, le=f"{beam}.0"
    )
    before = wide()
    with Seq2SeqClient(multilingual_server.address) as c:
        # One request per row, all in flight at once: each names its own languages, the core batches them together.
        calls = [
            c.stub.Generate.future(
                c.request(M2M, [t], beam_size=beam, source_language=s, target_language=tl, **AS_SENT),
                timeout=60,
            )
            for s, tl, t in rows
        ]
        got = [call.result().outputs[0] for call in calls]
    assert [(o.text, o.output_tokens) for o in got] == want
    assert wide() > before  # steps that held rows of several requests (and so of several target languages)


def test_streamed_text_has_no_forced_token(multilingual_server, m2m100):
    rows = [("fr", "ja", t) for _, _, t in m2m100[3][:4]]
    with Seq2SeqClient(multilingual_server.address) as c:
        events = list(
            c.stream(
                M2M, [t for *_, t in rows], beam_size=1, source_language="fr", target_language="ja", **AS_SENT
            )
        )
    streamed = ["".join(e.text_delta for e in events if e.index == i) for i in range(len(rows))]
    final = {e.index: (e.output.text, e.output.output_tokens) for e in events if e.finished}
    assert [final[i] for i in range(len(rows))] == expected(m2m100, rows, 1)
    assert streamed == [final[i][0] for i in range(len(rows))]


def test_kserve_grpc_and_rest_take_the_languages(multilingual_server, m2m100):
    import tritonclient.grpc as grpcclient

    rows = [("en", "de", t) for _, _, t in m2m100[3][:5]]
    texts = [t for *_, t in rows]
    want = expected(m2m100, rows, 4)
    client = grpcclient.InferenceServerClient(multilingual_server.address)
    inp = grpcclient.InferInput("text_input", [len(texts)], "BYTES")
    inp.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object))
    outs = [grpcclient.InferRequestedOutput(n) for n in ("text_output", "output_tokens")]
    params = {"source_language": "en", "target_language": "de", **AS_SENT}
    r = client.infer(M2M, [inp], outputs=outs, parameters=params)
    got = [b.decode() for b in r.as_numpy("text_output")]
    assert list(zip(got, r.as_numpy("output_tokens").tolist())) == want
    status, answer = rest_infer(multilingual_server, M2M, texts, **params)
    assert status == 200, answer
    data = {o["name"]: o["data"] for o in answer["outputs"]}
    assert list(zip(data["text_output"], data["output_tokens"])) == want


# ---- what a model knows: listed, and refused otherwise ------------------------------------------------------
def test_models_list_their_languages(multilingual_server):
    with Seq2SeqClient(multilingual_server.address) as c:
        info = {m.name: m for m in c.models()}
    assert len(info[M2M].target_languages) == 100 and {"en", "de", "ja"} <= set(info[M2M].source_languages)
    assert (list(info[JA].source_languages), list(info[JA].target_languages)) == (["en"], ["ja"])
    with urllib.request.urlopen(
        f"http://127.0.0.1:{multilingual_server.running.web.port}/v2/models/m2m/config"
    ) as r:
        params = json.loads(r.read())["parameters"]
    assert params["target_languages"]["string_value"].split(",") == list(info[M2M].target_languages)


def test_an_unknown_language_is_refused_on_every_door(multilingual_server):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    srv = multilingual_server
    with Seq2SeqClient(srv.address) as c:
        for kw, says in (
            (
                dict(source_language="en", target_language="xx"),
                "target language 'xx' is not one this model knows",
            ),
            (
                dict(source_language="xx", target_language="de"),
                "source language 'xx' is not one this model knows",
            ),
            (dict(source_language="en"), "a target language is needed; this model knows af, am"),
        ):
            with pytest.raises(grpc.RpcError) as e:
                c.generate(M2M, ["dog"], **kw)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in e.value.details()
            assert "af, am" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            c.generate(JA, ["Save"], target_language="de")
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "target_language 'de' is not one model 'translate-en-ja' knows" in e.value.details()
        assert "en -> ja" in e.value.details()
    client = grpcclient.InferenceServerClient(srv.address)
    inp = grpcclient.InferInput("text_input", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"dog"], dtype=object))
    with pytest.raises(InferenceServerException) as e:
        client.infer(M2M, [inp], parameters={"source_language": "en", "target_language": "xx"})
    assert "INVALID_ARGUMENT" in str(e.value.status()) and KNOWS in e.value.message()
    status, answer = rest_infer(srv, M2M, ["dog"], source_language="en", target_language="xx")
    assert status == 400 and KNOWS in answer["error"], answer
    status, answer = rest_infer(srv, M2M, ["dog"], source_language="en", target_language=7)
    assert status == 400 and "'target_language' must be a string" in answer["error"], answer
    status, answer = post(srv, "translate", {"q": "dog", "source": "en", "target": "xx"})
    assert status == 400 and "'en' -> 'xx' is not served" in answer["error"], answer
    assert (
        "en -> ja (translate-en-ja)" in answer["error"]
        and "(m2m: af, am, ar" in answer["error"]
        and ", zu)" in answer["error"]
    )


def test_languages_checked_once_by_the_model_api():
    """Without a server: a model of one pair takes its own codes only; a model without languages takes none."""
    from contract import bundle
    from server.errors import InvalidInput
    from server.models.languages import AS_SENT as NONE
    from server.models.languages import ask

    ja = bundle.read_bundle(MODEL_REPO / JA / "1", verify_hashes=False)
    assert ask(JA, ja, "en", "ja") is NONE and ask(JA, ja, "", None) is NONE
    with pytest.raises(InvalidInput, match="source_language 'fr' is not one model 'translate-en-ja' knows"):
        ask(JA, ja, "fr", "ja")
    add = bundle.read_bundle(MODEL_REPO / "addition" / "1", verify_hashes=False)
    with pytest.raises(InvalidInput, match="'addition' .* declares no languages"):
        ask("addition", add, None, "ja")


# ---- LibreTranslate, with its own client ---------------------------------------------------------------------
def test_libretranslatepy_lists_and_routes_both_models(multilingual_server, m2m100):
    from libretranslatepy import LibreTranslateAPI

    srv = multilingual_server
    lt = LibreTranslateAPI(f"http://127.0.0.1:{srv.running.web.port}/")
    langs = {entry["code"]: entry for entry in lt.languages(timeout=60)}
    assert len(langs) == 100 and langs["en"]["name"] == "English"
    assert {"ja", "de", "fr"} <= set(langs["en"]["targets"]) and "en" not in langs["en"]["targets"]
    assert len(langs["ja"]["targets"]) == 99  # the multilingual model's: ja reads into every other
    texts = ["dog runs", "the red house"]  # no digits, no spans: read as sent by default
    with Seq2SeqClient(srv.address) as c:
        ja = c.generate(JA, texts)
    # en -> ja: the model made for the pair; en -> de and fr -> ja: the multilingual one, in those languages
    assert [lt.translate(q, "en", "ja", timeout=60) for q in texts] == ja
    for s, t in (("en", "de"), ("fr", "ja")):
        rows = [(s, t, q) for q in texts]
        assert [lt.translate(q, s, t, timeout=60) for q in texts] == [w for w, _ in expected(m2m100, rows, 4)]
    status, answer = post(srv, "translate", {"q": "dog", "source": "auto", "target": "de"})
    assert status == 400 and "no language detector" in answer["error"]
