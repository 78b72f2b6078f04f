"""`s2s check-po` and `s2s translate` against a real server on loopback, on small catalogs of each format written
here: per-entry refusals named by line and the file carried on, malformed catalogs refused by line, plurals,
contexts, fuzzy marks, translations kept or overwritten, spans checked, and nothing written but --out (or FILE
with --in-place). Each output is read back by another parser than translate-toolkit (polib, ElementTree, json,
Java's escapes) and compared with what the server answers for the same strings."""

from __future__ import annotations

import codecs
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import polib
import pytest
from conftest import MODEL_REPO

from s2s.cli import main
from s2s.seq2seq_client import Seq2SeqClient

pytestmark = pytest.mark.skipif(
    not (MODEL_REPO / "translate-en-ja").is_dir(), reason="no translate-en-ja model"
)

EN_JA = "translate-en-ja"
LONG = "word " * 1000  # 5,000 characters: over the server's max_input_chars

HEADER = """msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Plural-Forms: nplurals={n}; plural={rule};\\n"
"""

PO = (
    HEADER.format(n=2, rule="(n != 1)")
    + f"""
#: src/files.c:10
msgid "Open file"
msgstr ""

msgid "{LONG}"
msgstr ""

msgid "   "
msgstr ""

msgctxt "menu"
msgid "Save"
msgstr "保存"

msgctxt "button"
msgid "Save"
msgstr ""

msgid "Deleting %u files from \\"%s\\""
msgstr ""

msgid "You have %d new message"
msgid_plural "You have %d new messages"
msgstr[0] ""
msgstr[1] ""

#~ msgid "Old"
#~ msgstr "古い"
"""
)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def answers(srv, texts: list[str], model: str = EN_JA) -> dict[str, str]:
    with Seq2SeqClient(srv.address, timeout=120) as c:
        return dict(zip(texts, c.generate(model, texts)))


def translate(srv, *argv: str, model: str = EN_JA) -> int:
    return main(["translate", *argv, "--server", srv.address, "--model", model, "--no-progress"])


def test_check_po_reports_each_refused_string_by_line_and_goes_on(server, tmp_path: Path, capsys):
    po = tmp_path / "ja.po"
    po.write_text(PO, encoding="utf-8")
    assert main(["check-po", str(po), "--server", server.address, "--model", EN_JA]) == 1
    out = capsys.readouterr()
    long_line = line_of(PO, "word word")
    assert f"{po}:{long_line}: refused by the server: the input has 5000 characters" in out.out
    assert f"{po}:{long_line + 3}: refused by the server: the input is empty" in out.out
    assert "input 0" not in out.out + out.err
    # Every other string was still translated and checked: 8 strings (the plural's two), 2 of them refused.
    assert "0 of 6 strings do not keep their spans; 2 refused by the server" in out.err


def test_malformed_catalogs_are_refused_by_line(server, tmp_path: Path, capsys):
    po = tmp_path / "bad.po"
    po.write_text(HEADER.format(n=1, rule=0) + '\nmsgid "Hello\nmsgstr ""\n', encoding="utf-8")
    for command in (
        ["check-po", str(po), "--existing"],
        ["translate", str(po), "--out", str(tmp_path / "o.po")],
    ):
        assert main([*command, "--model", EN_JA, "--server", server.address]) == 2
        err = capsys.readouterr().err
        assert str(po) in err and "line 6" in err and "Traceback" not in err
    missing_ca = ["--model", EN_JA, "--server", server.address, "--tls-ca", str(tmp_path / "no-ca.pem")]
    po.write_text(HEADER.format(n=1, rule=0), encoding="utf-8")
    assert main(["check-po", str(po), *missing_ca]) == 2
    assert "no-ca.pem: No such file" in capsys.readouterr().err
    xlf = tmp_path / "bad.xlf"
    xlf.write_text("<xliff><file><body><trans-unit>", encoding="utf-8")
    assert translate(server, str(xlf), "--out", str(tmp_path / "o.xlf")) == 2
    assert "line 1" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.po", "bad.xlf"]  # nothing written


def test_translate_po(server, tmp_path: Path, capsys):
    src, out = tmp_path / "ja.po", tmp_path / "out" / "ja.po"
    src.write_text(PO, encoding="utf-8")
    out.parent.mkdir()
    assert translate(server, str(src), "--out", str(out)) == 1  # two entries refused, the rest written
    report = capsys.readouterr()
    assert (
        f"{src}:{line_of(PO, 'word word')}: not translated, refused by the server: the input has 5000"
        in report.out
    )
    assert "4 of 6 entries translated (2 left as they were), 1 kept their translation" in report.err
    assert src.read_text(encoding="utf-8") == PO  # the input untouched
    assert sorted(p.name for p in out.parent.iterdir()) == ["ja.po"]  # no temporary file left beside it

    by_key = {(e.msgctxt, e.msgid): e for e in polib.pofile(str(out))}
    want = answers(
        server,
        [
            "Open file",
            "Save",
            'Deleting %u files from "%s"',
            "You have %d new message",
            "You have %d new messages",
        ],
    )
    opened = by_key[(None, "Open file")]
    assert (
        opened.msgstr == want["Open file"] and opened.fuzzy and opened.occurrences == [("src/files.c", "10")]
    )
    assert by_key[("menu", "Save")].msgstr == "保存" and not by_key[("menu", "Save")].fuzzy  # kept as it was
    assert by_key[("button", "Save")].msgstr == want["Save"] and by_key[("button", "Save")].fuzzy
    deleting = by_key[(None, 'Deleting %u files from "%s"')]
    assert deleting.msgstr == want['Deleting %u files from "%s"'] and "%u" in deleting.msgstr
    plural = by_key[(None, "You have %d new message")]
    assert plural.fuzzy and plural.msgstr_plural == {
        0: want["You have %d new message"],  # the first form from msgid, the second from msgid_plural
        1: want["You have %d new messages"],
    }
    assert not by_key[(None, LONG)].msgstr and not by_key[(None, "   ")].msgstr
    assert any(e.obsolete and e.msgid == "Old" for e in polib.pofile(str(out)).obsolete_entries())

    # One form for Japanese: it comes from msgid_plural. --overwrite translates the kept entry again.
    src.write_text(PO.replace("nplurals=2; plural=(n != 1)", "nplurals=1; plural=0"), encoding="utf-8")
    assert translate(server, str(src), "--out", str(out), "--overwrite") == 1
    by_key = {(e.msgctxt, e.msgid): e for e in polib.pofile(str(out))}
    assert by_key[(None, "You have %d new message")].msgstr_plural == {0: want["You have %d new messages"]}
    assert by_key[("menu", "Save")].msgstr == want["Save"] and by_key[("menu", "Save")].fuzzy


def test_where_it_writes(server, tmp_path: Path, capsys):
    po = tmp_path / "ja.po"
    po.write_text(HEADER.format(n=1, rule=0) + '\nmsgid "Open file"\nmsgstr ""\n', encoding="utf-8")
    before = po.read_text(encoding="utf-8")
    refusals = {
        (): "--out FILE",
        ("--out", str(po)): "--in-place",
        ("--out", str(tmp_path)): "a folder",
        ("--out", str(tmp_path / "no" / "ja.po")): "no folder",
        ("--out", str(tmp_path / "x.po"), "--in-place"): "name one",
        ("--out", str(tmp_path / "x.po"), "--concurrency", "0"): "--concurrency must be >= 1",
        ("--out", str(tmp_path / "x.po"), "--tls-ca", str(tmp_path / "no-ca.pem")): "no-ca.pem: No such file",
    }
    for args, message in refusals.items():
        assert translate(server, str(po), *args) == 2, args
        assert message in capsys.readouterr().err
    assert po.read_text(encoding="utf-8") == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "ja.po"
    ]

    # A server that cannot be reached: nothing written.
    assert main(["translate", str(po), "--out", str(tmp_path / "x.po"), "--model", EN_JA, "--server",
                 "127.0.0.1:1", "--timeout", "5", "--no-progress"]) == 1  # fmt: skip
    assert "nothing written" in capsys.readouterr().err and not (tmp_path / "x.po").exists()

    assert translate(server, str(po), "--in-place") == 0
    assert polib.pofile(str(po)).find("Open file").msgstr == answers(server, ["Open file"])["Open file"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ja.po"]


def test_lost_spans_are_reported_and_left_untranslated(server, tmp_path: Path, capsys):
    """The addition model answers 12+30 with 42: its output keeps neither number of the source."""
    po = tmp_path / "sums.po"
    po.write_text(HEADER.format(n=1, rule=0) + '\nmsgid "12+30"\nmsgstr ""\n', encoding="utf-8")
    assert translate(server, str(po), "--out", str(tmp_path / "out.po"), model="addition") == 1
    assert (
        f"{po}:6: not translated, the output lost spans (missing numbers 12 30): 42"
        in capsys.readouterr().out
    )
    assert polib.pofile(str(tmp_path / "out.po")).find("12+30").msgstr == ""


XLIFF = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file original="app" source-language="en" target-language="ja" datatype="plaintext">
    <body>
      <trans-unit id="open"><source>Open file</source></trans-unit>
      <trans-unit id="saved"><source>Saved %s</source><target state="translated">%s を保存しました</target></trans-unit>
      <trans-unit id="long"><source>{long}</source></trans-unit>
    </body>
  </file>
</xliff>
"""

TS = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="ja">
<context>
    <name>MainWindow</name>
    <message>
        <source>Open file</source>
        <translation type="unfinished"></translation>
    </message>
    <message numerus="yes">
        <source>%n file(s) deleted</source>
        <translation type="unfinished"><numerusform></numerusform></translation>
    </message>
    <message>
        <source>Quit</source>
        <translation>終了</translation>
    </message>
</context>
</TS>
"""


def test_translate_xliff_and_ts(server, tmp_path: Path, capsys):
    want = answers(server, ["Open file", "%n file(s) deleted"])
    xlf = tmp_path / "app.xlf"
    xlf.write_text(XLIFF.format(long=LONG), encoding="utf-8")
    assert translate(server, str(xlf), "--out", str(tmp_path / "ja.xlf")) == 1
    assert f"{xlf}:7: not translated, refused by the server" in capsys.readouterr().out
    ns = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
    units = {u.get("id"): u for u in ET.parse(tmp_path / "ja.xlf").getroot().iterfind(".//x:trans-unit", ns)}
    assert (
        units["open"].find("x:target", ns).text == want["Open file"] and units["open"].get("approved") == "no"
    )
    assert units["saved"].find("x:target", ns).text == "%s を保存しました"
    assert units["long"].find("x:target", ns) is None

    ts = tmp_path / "app_ja.ts"
    ts.write_text(TS, encoding="utf-8")
    assert translate(server, str(ts), "--in-place") == 0
    messages = {m.findtext("source"): m.find("translation") for m in ET.parse(ts).getroot().iter("message")}
    assert (
        messages["Open file"].text == want["Open file"] and messages["Open file"].get("type") == "unfinished"
    )
    forms = [f.text for f in messages["%n file(s) deleted"].iter("numerusform")]
    assert forms == [want["%n file(s) deleted"]]  # Japanese: one form
    assert messages["Quit"].text == "終了" and messages["Quit"].get("type") is None


def test_translate_monolingual_formats(server, tmp_path: Path, capsys):
    want = answers(server, ["Open file", "Saved {0}", "Quit", "{{count}} file", "{{count}} files"])
    props = tmp_path / "messages.properties"
    props.write_text("open=Open file\nsaved=Saved {0}\n# a comment\nquit = Quit\n", encoding="utf-8")
    out = tmp_path / "messages_ja.properties"
    out.write_text("quit=\\u9589\\u3058\\u308b\nremoved=Gone\n", encoding="ascii")  # an earlier translation
    assert translate(server, str(props), "--out", str(out)) == 0
    text = out.read_text(encoding="ascii")  # Java's escapes: ASCII only
    values = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    decoded = {k.strip(): codecs.decode(v.strip(), "unicode_escape") for k, v in values.items()}
    assert decoded == {"open": want["Open file"], "saved": want["Saved {0}"], "quit": "閉じる"}
    assert "# a comment" in text
    assert translate(server, str(props), "--in-place") == 2  # its values are the sources
    assert "monolingual" in capsys.readouterr().err

    source = {"menu": {"open": "Open file", "quit": "Quit"}, "files_one": "{{count}} file", "files_other": "{{count}} files", "count": 3}  # fmt: skip
    en = tmp_path / "en.json"
    en.write_text(json.dumps(source), encoding="utf-8")
    assert translate(server, str(en), "--out", str(tmp_path / "ja.json")) == 0
    got = json.loads((tmp_path / "ja.json").read_text(encoding="utf-8"))
    assert got == {
        "menu": {"open": want["Open file"], "quit": want["Quit"]},
        "files_one": want["{{count}} file"],
        "files_other": want["{{count}} files"],
        "count": 3,
    }
    # As i18next v4 with the target named: Japanese has one plural form, key_other, made from the plural.
    i18n = tmp_path / "i18n-ja.json"
    args = ("--format", "i18next", "--target-lang", "ja", "--out", str(i18n))
    assert translate(server, str(en), *args) == 0
    got = json.loads(i18n.read_text(encoding="utf-8"))
    assert got["files_other"] == want["{{count}} files"] and "files_one" not in got
    assert got["menu"] == {"open": want["Open file"], "quit": want["Quit"]}
