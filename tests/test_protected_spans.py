"""Protected spans and long inputs split, through a real server on loopback: every door's switches, the spans
each answer names, inputs of 4,096 characters, the limit still refused, s2s client's flags, s2s check-po, and a
model of this test's own (the addition bundle declared a translation model: another tokenizer, and outputs that
never hold the source's spans, so every span must be put back by the repair)."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import grpc
import pytest
from conftest import MODEL_REPO, ServerThread, english, served_version, server_config
from span_cases import SOURCES

from contract import bundle
from contract.spans import check, find_spans
from contract.text import TextCodec
from s2s.cli import main
from s2s.seq2seq_client import Seq2SeqClient
from server.models.text_plan import MAX_TEXT_CHARS, TextOptions, plan

pytestmark = pytest.mark.skipif(
    not (MODEL_REPO / "translate-en-ja").is_dir(), reason="no translate-en-ja model"
)

EN_JA, OWN = "translate-en-ja", "own-xx"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    for name in (EN_JA, "addition"):
        (repo / name).symlink_to(MODEL_REPO / name)
    own = repo / OWN / "1"
    shutil.copytree(MODEL_REPO / "addition" / "1", own)
    cfg = json.loads((own / "config.json").read_text())
    cfg["task"].update(name="translation", reverse_source=False, unknown="unk")
    cfg.update(name=OWN, source_language="xx", target_language="yy")
    (own / "config.json").write_text(json.dumps(cfg))
    s = ServerThread(
        server_config(model_repo=repo, instances=1, model_repo_links="any")
    )  # the models link outside it
    yield s
    s.stop()


def generate(srv, model: str, texts: list[str], **kw):
    with Seq2SeqClient(srv.address, timeout=120) as c:
        return c.generate_full(model, texts, **kw).outputs


def http(srv, path: str, body: dict, form: bool = False) -> tuple[int, dict]:
    data = urllib.parse.urlencode(body).encode() if form else json.dumps(body).encode()
    kind = "application/x-www-form-urlencoded" if form else "application/json"
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.running.web.port}/{path}", data=data, headers={"Content-Type": kind}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def long_text(chars: int) -> str:
    """Held-out English sentences, in paragraphs, up to ``chars`` characters."""
    out, n = [], 0
    for i, s in enumerate(english(400)):
        piece = s + ("\n\n" if i % 7 == 6 else " ")
        if n + len(piece) > chars:
            break
        out.append(piece)
        n += len(piece)
    return "".join(out).rstrip()


def test_seq2seq_keeps_every_span_and_names_them(srv):
    outs = generate(srv, EN_JA, SOURCES)
    for source, o in zip(SOURCES, outs):
        assert check(source, o.text).ok, (source, o.text)
        assert [(s.kind, s.text, s.start, s.end) for s in o.protected_spans] == [
            (s.kind, s.text, s.start, s.end) for s in find_spans(source)
        ]
        assert o.pieces == 1


def test_the_in_process_reference_is_what_the_server_answers(srv):
    """server/models/in_process.py, the in-process engine the benchmarks and evaluations compare answers with, reads
    what the server's text plan reads: equal to the served answers where the bare engine's differ."""
    import engine
    from server.models.in_process import served_texts

    eng = engine.load(served_version(EN_JA), threads=1, device="cpu")
    texts = [*SOURCES, "line one\nline two", "Save changes"]
    for search in (dict(beam_size=1), dict(beam_size=4)):
        served = [o.text for o in generate(srv, EN_JA, texts, **search)]
        assert served_texts(eng, texts, 64, **search) == served, search
    bare = [r.text for r in eng.generate(texts, beam_size=1)]
    assert bare != [o.text for o in generate(srv, EN_JA, texts, beam_size=1)]  # the plan changes some


def test_turned_off_the_model_reads_the_input_as_sent(srv):
    texts = ["Save changes", "You have 3 new messages."]
    on = generate(srv, EN_JA, texts)
    off = generate(srv, EN_JA, texts, protect_spans=False, split_long=False)
    assert on[0].text == off[0].text  # nothing to protect: the same request to the model
    assert [s.text for s in on[1].protected_spans] == ["3"] and "3" in on[1].text
    assert not off[1].protected_spans
    numbers_off = generate(srv, EN_JA, texts[1:], keep_numbers=False)[0]
    assert not numbers_off.protected_spans


def test_kserve_parameters_and_outputs(srv):
    body = {
        "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [2], "data": SOURCES[:2]}],
        "outputs": [{"name": "text_output"}, {"name": "protected_spans"}, {"name": "pieces"}],
    }
    status, r = http(srv, f"v2/models/{EN_JA}/infer", body)
    assert status == 200, r
    out = {o["name"]: o for o in r["outputs"]}
    for source, text, spans in zip(SOURCES, out["text_output"]["data"], out["protected_spans"]["data"]):
        assert check(source, text).ok
        assert [s["text"] for s in json.loads(spans)] == [s.text for s in find_spans(source)]
    assert out["pieces"]["data"] == [1, 1]
    body["parameters"] = {"protect_spans": False}
    status, r = http(srv, f"v2/models/{EN_JA}/infer", body)
    assert status == 200 and {o["name"]: o for o in r["outputs"]}["protected_spans"]["data"] == ["[]", "[]"]
    body["parameters"] = {"protect_spans": "no"}
    status, r = http(srv, f"v2/models/{EN_JA}/infer", body)
    assert status == 400 and "protect_spans" in r["error"]


def test_libretranslate_fields(srv):
    status, r = http(srv, "translate", {"q": SOURCES[:3], "source": "en", "target": "ja"})
    assert status == 200
    assert all(check(s, t).ok for s, t in zip(SOURCES, r["translatedText"]))
    status, off = http(
        srv,
        "translate",
        {"q": "You have 3 new messages.", "source": "en", "target": "ja", "protect_spans": "false"},
        form=True,
    )
    assert status == 200
    assert (
        off["translatedText"]
        == generate(srv, EN_JA, ["You have 3 new messages."], protect_spans=False)[0].text
    )
    status, html = http(
        srv,
        "translate",
        {"q": "<p>Delete %s files from {folder}?</p>", "source": "en", "target": "ja", "format": "html"},
    )
    assert status == 200 and check("<p>Delete %s files from {folder}?</p>", html["translatedText"]).ok
    status, bad = http(srv, "translate", {"q": "x", "source": "en", "target": "ja", "split_long": "maybe"})
    assert status == 400 and "split_long must be true or false" in bad["error"]


def test_long_inputs_are_split_and_each_piece_is_what_it_is_alone(srv):
    text = long_text(MAX_TEXT_CHARS)
    assert len(text) > 3000 and "\n\n" in text
    whole = generate(srv, EN_JA, [text])[0]
    assert whole.pieces > 1 and whole.text.count("\n\n") == text.count("\n\n")
    b = bundle.read_bundle(served_version(EN_JA), verify_hashes=False)
    codec = TextCodec.from_file(served_version(EN_JA) / bundle.TOKENIZER_FILE, b.task, b.model.special)
    ip = plan(EN_JA, codec, [text], None, TextOptions(), b.model.max_len).inputs[0]
    assert len(ip.masks) == whole.pieces
    alone = [o.text for o in generate(srv, EN_JA, [m.source for m in ip.masks])]
    assert ip.pieces.join(alone) == whole.text


def test_the_limit_still_refused_is_named(srv):
    with pytest.raises(grpc.RpcError) as e:
        generate(srv, EN_JA, ["word " * (MAX_TEXT_CHARS // 5 + 1)])
    assert (
        e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        and f"at most {MAX_TEXT_CHARS}" in e.value.details()
    )
    assert "max_input_chars" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        generate(srv, EN_JA, [long_text(1500)], split_long=False)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "split_long" in e.value.details()
    status, r = http(
        srv, "translate", {"q": "word " * (MAX_TEXT_CHARS // 5 + 1), "source": "en", "target": "ja"}
    )
    assert status == 400 and "max_input_chars" in r["error"]


def test_stream_answers_the_restored_text(srv):
    texts = ["<b>Warning:</b> %(name)s is at http://example.com/x", long_text(600)]
    with Seq2SeqClient(srv.address, timeout=120) as c:
        final = {ev.index: ev.output.text for ev in c.stream(EN_JA, texts, beam_size=1) if ev.finished}
    assert [final[0], final[1]] == [o.text for o in generate(srv, EN_JA, texts, beam_size=1)]


def test_other_tasks_read_their_inputs_as_sent(srv):
    o = generate(srv, "addition", ["12+30"])[0]
    assert o.text == "42" and not o.protected_spans and o.pieces == 1


def test_a_model_of_our_own_keeps_every_span_and_splits(srv):
    """Another tokenizer (characters; English is <unk> to it) and a model that never writes a placeholder."""
    outs = generate(srv, OWN, SOURCES + [long_text(800)])
    for source, o in zip(SOURCES, outs):
        assert check(source, o.text).ok, (source, o.text)
    assert outs[-1].pieces > 10  # 16 tokens at a time


def test_client_flags(srv, capsys):
    text = "You have 3 new messages."
    assert main(["client", "--server", srv.address, "--model", EN_JA, "--no-protect-spans", text]) == 0
    assert capsys.readouterr().out.strip() == generate(srv, EN_JA, [text], protect_spans=False)[0].text
    assert main(["client", "--server", srv.address, "--model", EN_JA, text]) == 0
    assert "3" in capsys.readouterr().out


PO = """msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"

msgid "Deleting %u files from \\"%s\\""
msgstr "%u 個のファイルを削除しています"

msgid "<b>Warning:</b> see http://example.com/help"
msgstr "<b>警告:</b> http://example.com/help を参照"

msgid "You have %d new message"
msgid_plural "You have %d new messages"
msgstr[0] "新しいメッセージが %d 件あります"
"""


def test_check_po(srv, tmp_path: Path, capsys):
    po = tmp_path / "ja.po"
    po.write_text(PO, encoding="utf-8")
    assert main(["check-po", str(po), "--existing"]) == 1  # the translator lost a %s
    out = capsys.readouterr()
    assert "missing %s" in out.out and "1 of 4 strings" in out.err
    assert main(["check-po", str(po), "--server", srv.address, "--model", EN_JA]) == 0  # protected: none lost
    assert "0 of 4 strings" in capsys.readouterr().err
    assert main(["check-po", str(tmp_path / "missing.po"), "--existing"]) == 2
