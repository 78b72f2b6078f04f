"""Planning on a real server (`s2s serve`, a child process, with a bearer token): an input that costs planning
stalls no one else, an input within the advertised characters is served at the default beam on every door, and
Weblate's placeholder markers come back exactly, replayed the way Weblate sends them on real catalogs."""

from __future__ import annotations

import collections
import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import polib
import pytest
from conftest import MODEL_REPO, Served, english
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

pytestmark = pytest.mark.skipif(
    not (MODEL_REPO / "translate-en-ja").is_dir(), reason="no translate-en-ja model"
)

EN_JA, TOKEN = "translate-en-ja", "planning-token"
CATALOGS = Path(__file__).parent / "data" / "po"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture(scope="module")
def srv(tmp_path_factory, model_repo):
    s = Served(tmp_path_factory.mktemp("planning"), "--auth-token", TOKEN)
    yield s
    s.stop()


def translate(srv, body: dict, timeout: float = 120) -> tuple[int, dict]:
    """POST /translate as JSON, the way Weblate's LibreTranslate service sends it (the key in the body)."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.http_port}/translate",
        json.dumps({"api_key": TOKEN, **body}).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def generate(srv, inputs: list[str], timeout: float = 120, **options) -> pb.GenerateResponse:
    with grpc.insecure_channel(srv.address) as ch:
        return pb_grpc.Seq2SeqStub(ch).Generate(
            pb.GenerateRequest(model=EN_JA, inputs=inputs, options=pb.GenerateOptions(**options)),
            timeout=timeout,
            metadata=AUTH,
        )


# ---- no input stalls the others --------------------------------------------------------------------
# Each 16 KB a request, within every limit; each took seconds to plan, on the event loop, before planning was
# linear in the input and ran in the parse lane.
HEAVY = [["{" * 4096] * 4, ["{{" * 2048] * 4, ["{%" * 2048] * 4, ["<!--" * 1024] * 4]


def test_a_request_that_costs_planning_delays_neither_the_health_probe_nor_another_client(srv):
    """Clients send those requests at once: at beam 1 (answered), and at beam 3 (planned until refused: 196 to
    264 pieces x 3 is past the 512 rows a request may have). While they are in flight, the health probe and
    another client's short request (to the other model, whose engine cores the heavy rows do not queue for) go
    on being answered: counted, and the longest wait for a probe's answer held to a part of that time, never
    to a time of its own (the engine cores' CPU makes any time loose on a busy machine)."""
    with grpc.insecure_channel(srv.address) as ch:
        health, seq2seq = health_pb2_grpc.HealthStub(ch), pb_grpc.Seq2SeqStub(ch)

        def probe():
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=120).status == 1

        def short():
            r = seq2seq.Generate(
                pb.GenerateRequest(model="addition", inputs=["12+30"]), timeout=120, metadata=AUTH
            )
            assert r.outputs[0].text == "42"

        heavy, probes, shorts, errors = [], [], [], []
        done = threading.Event()

        def client(inputs, beam_size):
            try:
                t0 = time.monotonic()
                try:
                    generate(srv, inputs, beam_size=beam_size, max_new_tokens=1)
                    refused = False
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
                    assert "max_rows_per_request" in e.details(), e.details()
                    refused = True
                heavy.append((t0, time.monotonic(), beam_size, refused))
            except Exception as e:  # noqa: BLE001 (reported below, with what the others saw)
                errors.append(e)

        def observe(calls, fn):
            while not done.is_set():
                t0 = time.monotonic()
                try:
                    fn()
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
                    return
                calls.append((t0, time.monotonic()))

        watchers = [threading.Thread(target=observe, args=a) for a in ((probes, probe), (shorts, short))]
        for t in watchers:
            t.start()
        while len(probes) < 3 or len(shorts) < 3:  # both answering before the heavy requests come
            time.sleep(0.01)
        clients = [threading.Thread(target=client, args=(HEAVY[0], 1))]
        clients += [threading.Thread(target=client, args=(inputs, 3)) for inputs in HEAVY]
        for t in clients:
            t.start()
        for t in clients:
            t.join(600)
        done.set()
        for t in watchers:
            t.join(120)

    assert not errors and len(heavy) == 5, errors
    assert sorted(refused for *_, refused in heavy) == [False] + [True] * 4, heavy
    start, end = min(t0 for t0, *_ in heavy), max(t1 for _, t1, *_ in heavy)
    answers = sorted(b for _, b in probes if start < b < end)
    gaps = [b - a for a, b in zip([start, *answers], [*answers, end])]
    # Planned on the event loop, these requests kept every probe waiting for most of their time.
    assert len(answers) >= 10 and max(gaps) <= (end - start) / 4, (len(answers), max(gaps), end - start)
    assert len([1 for a, b in shorts if start < a and b < end]) >= 2, (shorts, start, end)


# ---- the advertised characters at the default beam ----------------------------------------------------
def two_hundred_lines() -> str:
    """A 200-line text of about 2,800 characters: short held-out sentences, one a line."""
    lines = [s for s in english(3000) if 8 <= len(s) <= 20][:200]
    assert len(lines) == 200
    return "\n".join(lines)


def test_a_text_of_many_lines_is_served_at_the_default_beam_on_every_door(srv):
    text = two_hundred_lines()
    assert len(text) <= 4096 and text.count("\n") == 199
    # LibreTranslate has no beam: 200 lines x the model's beam 4 = 800 rows, past the 512 a request may have.
    status, r = translate(srv, {"q": text, "source": "en", "target": "ja"})
    assert status == 200, r
    assert r["translatedText"].count("\n") == 199 and all(r["translatedText"].split("\n"))
    reply = generate(srv, [text])  # no beam_size: the model's own, narrowed to fit
    assert reply.outputs[0].pieces == 200 and reply.outputs[0].text.count("\n") == 199
    # A beam the request names is its own: refused, naming the rows and the limit.
    with pytest.raises(grpc.RpcError) as e:
        generate(srv, [text], beam_size=4)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "200 pieces" in e.value.details() and "max_rows_per_request" in e.value.details(), (
        e.value.details()
    )


# ---- Weblate's placeholder markers ---------------------------------------------------------------------
# A python-format placeholder, as Weblate's highlighting finds one (weblate/checks/format.py).
PYTHON_FORMAT = re.compile(r"%(?:\([^)]*\))?[ +#-]*(?:\d+)?(?:\.\d+)?(?:hh|h|ll|l)?[\w%]")


def weblate_strings() -> list[str]:
    """The msgids (and plurals) with a placeholder of two real catalogs (tests/data/po/README.md)."""
    out = []
    for path in sorted(CATALOGS.glob("*.po")):
        for entry in polib.pofile(str(path)):
            out += [s for s in (entry.msgid, entry.msgid_plural) if s and PYTHON_FORMAT.search(s)]
    return out


def cleaned(text: str, replacement) -> tuple[str, dict[str, str]]:
    """Weblate's cleanup_text: each placeholder replaced by a stand-in made from its offset in the source."""
    parts, stand_ins, pos = [], {}, 0
    for m in PYTHON_FORMAT.finditer(text):
        stand_in = replacement(m.start())
        stand_ins[stand_in] = m.group()
        parts += [text[pos : m.start()], stand_in]
        pos = m.end()
    parts.append(text[pos:])
    return "".join(parts), stand_ins


def uncleaned(text: str, stand_ins: dict[str, str]) -> str:
    """Weblate's uncleanup_text: each stand-in found by pattern (a space allowed before its last character)."""
    for stand_in, placeholder in stand_ins.items():
        text = re.sub(re.escape(stand_in[:-1]) + " *" + re.escape(stand_in[-1:]), placeholder, text)
    return text


@pytest.mark.parametrize(
    "replacement",
    [lambda offset: f"[X{offset}X]", lambda offset: f'<x id="{offset}"/>'],
    ids=["weblate-marker", "xliff-inline-tag"],
)
def test_weblate_requests_get_every_marker_back_exactly_once(srv, replacement):
    strings = weblate_strings()
    assert len(strings) >= 35
    sent = [cleaned(s, replacement) for s in strings]
    answers = []
    for k in range(0, len(sent), 20):  # Weblate's batch: 20 strings a request, q a list, no format
        status, r = translate(
            srv, {"q": [text for text, _ in sent[k : k + 20]], "source": "en", "target": "ja"}
        )
        assert status == 200, r
        answers += r["translatedText"]
    for (text, stand_ins), answer, source in zip(sent, answers, strings):
        counts = collections.Counter(answer.count(s) for s in stand_ins)
        assert counts == {1: len(stand_ins)}, (text, answer)
        restored = uncleaned(answer, stand_ins)
        want = collections.Counter(m.group() for m in PYTHON_FORMAT.finditer(source))
        assert collections.Counter(m.group() for m in PYTHON_FORMAT.finditer(restored)) == want, restored


def test_xliff_pairs_come_back_around_their_text(srv):
    text = 'Click <g id="1">Save</g> to keep <x id="2"/> files.'
    status, r = translate(srv, {"q": [text], "source": "en", "target": "ja"})
    assert status == 200
    out = r["translatedText"][0]
    assert [out.count(t) for t in ('<g id="1">', "</g>", '<x id="2"/>')] == [1, 1, 1], out
    assert out.index('<g id="1">') < out.index("</g>"), out
