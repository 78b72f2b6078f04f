"""`s2s check-po` against a real server on loopback, on a small catalog written here: each string the server refuses
named by its line and the rest checked on, and a malformed catalog refused by its line."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MODEL_REPO

from s2s.cli import main

pytest.importorskip("translate.storage")
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


def test_malformed_catalogs_are_refused_by_line(tmp_path: Path, capsys):
    po = tmp_path / "bad.po"
    po.write_text(HEADER.format(n=1, rule=0) + '\nmsgid "Hello\nmsgstr ""\n', encoding="utf-8")
    assert main(["check-po", str(po), "--existing"]) == 2
    err = capsys.readouterr().err
    assert str(po) in err and "line 6" in err and "Traceback" not in err
