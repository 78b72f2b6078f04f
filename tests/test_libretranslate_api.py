"""The LibreTranslate API (server/doors/libretranslate.py) against a real server: the real libretranslatepy
client, plain JSON and form posts, alternatives, format=html, source=auto, /detect, the errors and the request
counts.
"""

from __future__ import annotations

import json
import urllib.request

import grpc
import pytest
from conftest import MODEL_REPO, ServerThread, server_config
from libretranslate_calls import JAPANESE, TIMEOUT, call, url
from libretranslatepy import LibreTranslateAPI

from s2s.seq2seq_client import Seq2SeqClient

pytestmark = pytest.mark.skipif(
    not (MODEL_REPO / "translate-en-ja").is_dir(), reason="no translate-en-ja model"
)

SAMPLES = ["Save", "Open File", "Settings", "Cancel", "Delete"]  # from data/en-ja/ui-strings.tsv


@pytest.fixture(scope="module")
def srv(model_repo):
    s = ServerThread(server_config(instances=1))
    yield s
    s.stop()


def grpc_generate(srv, texts: list[str]) -> list[str]:
    with Seq2SeqClient(srv.address) as c:
        return c.generate("translate-en-ja", texts)


# ---- the real client ------------------------------------------------------------------------------------------
def test_languages_with_libretranslatepy(srv):
    langs = LibreTranslateAPI(url(srv)).languages(timeout=TIMEOUT)
    assert langs == [
        {"code": "en", "name": "English", "targets": ["ja"]},
        {"code": "ja", "name": "Japanese", "targets": []},
    ]
    assert "addition" not in json.dumps(langs)  # a model that declares no languages is not offered


def test_translate_with_libretranslatepy_matches_grpc(srv):
    lt = LibreTranslateAPI(url(srv))
    got = [lt.translate(q, "en", "ja", timeout=TIMEOUT) for q in SAMPLES]
    assert got == grpc_generate(srv, SAMPLES)
    assert all(JAPANESE.search(t) for t in got), got


def test_detect_with_libretranslatepy(srv):
    assert LibreTranslateAPI(url(srv)).detect("Open File", timeout=TIMEOUT) == [
        {"confidence": 100.0, "language": "en"}
    ]


# ---- JSON bodies, lists, options ------------------------------------------------------------------------------
def test_list_q_as_json(srv):
    status, body = call(srv, "translate", {"q": SAMPLES, "source": "en", "target": "ja"})
    assert status == 200
    assert body == {"translatedText": grpc_generate(srv, SAMPLES)}


def test_string_q_as_json_and_form_agree(srv):
    _, j = call(srv, "translate", {"q": "Settings", "source": "en", "target": "ja", "format": "text"})
    _, f = call(srv, "translate", {"q": "Settings", "source": "en", "target": "ja"}, form=True)
    assert j == f == {"translatedText": grpc_generate(srv, ["Settings"])[0]}


def nbest(srv, texts: list[str], n: int, **options) -> list[list[str]]:
    with Seq2SeqClient(srv.address) as c:
        out = c.generate_full("translate-en-ja", texts, num_hypotheses=n, **options).outputs
    return [[h.text for h in o.hypotheses] for o in out]


def test_alternatives_are_the_next_best_distinct_texts(srv):
    """alternatives=N: the n-best N+1 of distinct texts through the same model API as seq2seq.v1's
    distinct_hypotheses (same texts, same order)."""
    _, one = call(srv, "translate", {"q": "Save", "source": "en", "target": "ja", "alternatives": 3})
    [want] = nbest(srv, ["Save"], 4, distinct_hypotheses=True)
    assert [one["translatedText"], *one["alternatives"]] == want and len(set(want)) == 4
    _, many = call(
        srv, "translate", {"q": ["Save", "Cancel"], "source": "en", "target": "ja", "alternatives": "2"}
    )
    assert [[t, *alts] for t, alts in zip(many["translatedText"], many["alternatives"])] == nbest(
        srv, ["Save", "Cancel"], 3, distinct_hypotheses=True
    )
    _, none = call(srv, "translate", {"q": "Save", "source": "en", "target": "ja"})
    assert "alternatives" not in none and none["translatedText"] == grpc_generate(srv, ["Save"])[0]
    status, body = call(srv, "translate", {"q": "Save", "source": "en", "target": "ja", "alternatives": 99})
    assert status == 400 and "alternatives=99 is out of range" in body["error"]


def test_alternatives_differ_from_the_translation_and_each_other(srv):
    """The sentence a new user tried: its plain 4-best holds two token sequences of one text; alternatives=3
    are still 3 texts, none equal to translatedText or to another."""
    text = "Account removal deletes all your private data."
    [plain] = nbest(srv, [text], 4)
    status, body = call(srv, "translate", {"q": text, "source": "en", "target": "ja", "alternatives": 3})
    assert status == 200, body
    texts = [body["translatedText"], *body["alternatives"]]
    assert len(body["alternatives"]) == 3 and len(set(texts)) == 4, texts
    assert body["translatedText"] == plain[0]  # the best is the best, distinct or not
    if len(set(plain)) < 4:  # the case the issue reported: the beam had to be widened to find a 4th text
        assert set(texts) - set(plain)


def test_distinct_hypotheses_on_seq2seq_and_kserve(srv):
    """seq2seq.v1's GenerateOptions.distinct_hypotheses and KServe's request parameter of the same name give
    the same n-best of distinct texts."""
    text = "Account removal deletes all your private data."
    [grpc_texts] = nbest(srv, [text], 4, distinct_hypotheses=True)
    assert len(set(grpc_texts)) == 4
    status, body = call(
        srv,
        "v2/models/translate-en-ja/infer",
        {
            "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [text]}],
            "outputs": [{"name": "hypotheses"}],
            "parameters": {"num_hypotheses": 4, "distinct_hypotheses": True},
        },
    )
    assert status == 200, body
    assert next(o["data"] for o in body["outputs"] if o["name"] == "hypotheses") == grpc_texts
    with Seq2SeqClient(srv.address) as c:
        [last] = [
            m
            for m in c.stream("translate-en-ja", [text], num_hypotheses=4, distinct_hypotheses=True)
            if m.finished
        ]
    assert [h.text for h in last.output.hypotheses] == grpc_texts and last.text_delta == grpc_texts[0]
    with Seq2SeqClient(srv.address) as c:  # sampling draws each output alone: nothing to widen
        with pytest.raises(grpc.RpcError) as e:
            c.generate("translate-en-ja", [text], num_hypotheses=2, sampling_topk=5, distinct_hypotheses=True)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "distinct_hypotheses" in e.value.details()


def test_source_auto_takes_the_one_source(srv):
    status, body = call(srv, "translate", {"q": "Delete", "source": "auto", "target": "ja"})
    assert status == 200
    assert body == {
        "translatedText": grpc_generate(srv, ["Delete"])[0],
        "detectedLanguage": {"confidence": 100.0, "language": "en"},
    }
    _, many = call(srv, "translate", {"q": ["Save", "Delete"], "source": "auto", "target": "ja"})
    assert many["detectedLanguage"] == [{"confidence": 100.0, "language": "en"}] * 2


def test_html_keeps_tags_and_translates_text_nodes(srv):
    q = '<p class="ui">Open File</p>\n  <ul><li><b>Save</b> </li><li>Cancel</li></ul><!-- note --><script>x="<i>Delete</i>"</script>'
    status, body = call(srv, "translate", {"q": q, "source": "en", "target": "ja", "format": "html"})
    assert status == 200
    a, b, c = grpc_generate(srv, ["Open File", "Save", "Cancel"])
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731
    assert body["translatedText"] == (
        f'<p class="ui">{esc(a)}</p>\n  <ul><li><b>{esc(b)}</b> </li><li>{esc(c)}</li>'
        '</ul><!-- note --><script>x="<i>Delete</i>"</script>'
    )
    # A list of documents, entities decoded before translation; markup with no text comes back as it was.
    _, many = call(
        srv,
        "translate",
        {"q": ["<i>Save</i>", "<br/>", "Tom &amp; Jerry"], "source": "en", "target": "ja", "format": "html"},
        form=False,
    )
    x, y = grpc_generate(srv, ["Save", "Tom & Jerry"])
    assert many["translatedText"] == [f"<i>{esc(x)}</i>", "<br/>", esc(y)]


# ---- errors ---------------------------------------------------------------------------------------------------
LONG = "word " * 1000  # past max_input_chars (4096): longer than the model reads is split, this is refused

ERRORS = [
    ("missing q", {"source": "en", "target": "ja"}, 400, "missing q"),
    ("empty q", {"q": "", "source": "en", "target": "ja"}, 400, "missing q"),
    ("q not text", {"q": 5, "source": "en", "target": "ja"}, 400, "q must be a string"),
    ("q list of non-strings", {"q": ["a", 1], "source": "en", "target": "ja"}, 400, "q[1] must be a string"),
    ("q empty list", {"q": [], "source": "en", "target": "ja"}, 400, "empty list"),
    ("q blank", {"q": "   ", "source": "en", "target": "ja"}, 400, "empty"),
    ("missing source", {"q": "Save", "target": "ja"}, 400, "missing source"),
    ("missing target", {"q": "Save", "source": "en"}, 400, "missing target"),
    (
        "unknown pair",
        {"q": "Save", "source": "en", "target": "fr"},
        400,
        "'en' -> 'fr' is not served; served: en -> ja",
    ),
    ("reverse pair", {"q": "Save", "source": "ja", "target": "en"}, 400, "served: en -> ja"),
    (
        "auto to unknown",
        {"q": "Save", "source": "auto", "target": "de"},
        400,
        "no served model translates to 'de'",
    ),
    (
        "bad format",
        {"q": "Save", "source": "en", "target": "ja", "format": "markdown"},
        400,
        "format must be",
    ),
    (
        "negative alternatives",
        {"q": "Save", "source": "en", "target": "ja", "alternatives": -1},
        400,
        "alternatives",
    ),
    (
        "bad alternatives",
        {"q": "Save", "source": "en", "target": "ja", "alternatives": "many"},
        400,
        "alternatives",
    ),
    ("too long", {"q": LONG, "source": "en", "target": "ja"}, 400, "accepts at most"),
    (
        "too long html node",
        {"q": f"<b>{LONG}</b>", "source": "en", "target": "ja", "format": "html"},
        400,
        "each text node is one input",
    ),
    ("too many inputs", {"q": ["Save"] * 10_000, "source": "en", "target": "ja"}, 400, "the limit is"),
    (
        "too many html nodes",
        {"q": "<b>Save</b>" * 1_000, "source": "en", "target": "ja", "format": "html"},
        400,
        "text nodes",
    ),
]


@pytest.mark.parametrize("body,status,message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_translate_errors(srv, body, status, message):
    got, answer = call(srv, "translate", body)
    assert got == status, answer
    assert set(answer) == {"error"} and message in answer["error"], answer


def test_malformed_bodies(srv):
    status, answer = call(srv, "translate", raw=b"{not json", headers={"Content-Type": "application/json"})
    assert status == 400 and "not valid JSON" in answer["error"]
    status, answer = call(srv, "translate", raw=b"[1, 2]", headers={"Content-Type": "application/json"})
    assert status == 400 and "JSON object" in answer["error"]
    status, answer = call(srv, "detect", {})
    assert status == 400 and "missing q" in answer["error"]
    status, answer = call(srv, "translate", method="GET")
    assert status == 405 and "error" in answer


def test_deadline_is_504(srv):
    status, answer = call(
        srv,
        "translate",
        {"q": SAMPLES, "source": "en", "target": "ja"},
        headers={"X-Timeout-Seconds": "0.000001"},
    )
    assert status == 504 and "error" in answer, answer


def _translate_counts(srv) -> dict[tuple[str, str], float]:
    """s2s_requests_total of the Translate method over HTTP, by (code, model)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{srv.config.metrics_port}/metrics", timeout=TIMEOUT)
        .read()
        .decode()
    )
    return {
        (s.labels["code"], s.labels["model"]): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "s2s_requests_total"
        and s.labels.get("method") == "Translate"
        and s.labels.get("protocol") == "http"
    }


def test_requests_are_counted(srv):
    """Exactly the calls made are counted, each once, under its outcome (whatever earlier tests counted)."""
    before = _translate_counts(srv)
    call(srv, "translate", {"q": "Save", "source": "en", "target": "ja"})
    call(srv, "translate", {"q": "Save", "source": "en", "target": "xx"})
    call(srv, "translate", {"q": "Open", "source": "en", "target": "ja"})
    after = _translate_counts(srv)
    delta = {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}
    assert delta == {("OK", "translate-en-ja"): 2.0, ("INVALID_ARGUMENT", ""): 1.0}, delta
