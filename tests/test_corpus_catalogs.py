"""The en-ja corpus builder's network-free half, end to end: gettext catalogs (.po and compiled .mo) ->
cleaned rows -> TSV, with one catalog entry per cleaning rule and the rows expected of them.

Catalogs are written by the tests into tmp_path; nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import polib
import pytest
from po_catalogs import OTHER, _po

from training import corpus_build as build

# One entry per cleaning rule; the comment above each says what must happen to it.
SAMPLE = """
# kept as is
msgid "Save"
msgstr "保存"

# kept; duplicate English: "保存" (here and in other.po) beats "保存する" (other.po)
msgid "Open"
msgstr "開く"

# whitespace normalised on both sides (ideographic space too)
msgid "  Hello   world "
msgstr "こんにちは\u3000\u3000世界"

# fuzzy: skipped
#, fuzzy
msgid "Print"
msgstr "印刷"

# obsolete: skipped
#~ msgid "Old feature"
#~ msgstr "古い機能"

# plural: skipped
msgid "%(count)s file"
msgid_plural "%(count)s files"
msgstr[0] "%(count)s 個のファイル"

# context in a .po file: skipped
msgctxt "abbrev. month"
msgid "May"
msgstr "5月"

# markup: tag, entity, newline, tab, URL, backticks
msgid "<b>Bold</b> text"
msgstr "<b>太字</b>のテキスト"

msgid "Less &lt; more"
msgstr "少ない &lt; 多い"

msgid "First line\\nSecond line"
msgstr "一行目\\n二行目"

msgid "Name\\tValue"
msgstr "名前\\t値"

msgid "See https://example.org for help"
msgstr "ヘルプは https://example.org を参照"

msgid "Run `make` first"
msgstr "最初に `make` を実行"

# too long (> 100 characters on the English side): skipped
msgid "This sentence is deliberately far too long to be a user interface string, so the corpus builder drops it."
msgstr "長すぎる文"

# placeholder-only: skipped
msgid "%s"
msgstr "%s。"

msgid "{0}: {1}"
msgstr "{0}：{1}"

msgid "%(name)s"
msgstr "「%(name)s」"

msgid "$1"
msgstr "$1 件"

# placeholders differ between the sides: skipped
msgid "Delete %(name)s"
msgstr "%(title)s を削除"

# placeholders kept when they agree, also when reordered
msgid "%(count)s of %(total)s"
msgstr "%(total)s 件中 %(count)s 件"

# mnemonics: "(&F)" / "(_E)" suffixes in Japanese and the matching marker in English
msgid "&File"
msgstr "ファイル(&F)"

msgid "_Edit..."
msgstr "編集(_E)..."

# unchanged or empty translation: skipped
msgid "URL"
msgstr "URL"

msgid "Not yet translated"
msgstr ""

# the translation has no Japanese at all: skipped
msgid "Javascript"
msgstr "JavaScript"
"""

THIRD = """
msgid "Save"
msgstr "保存"

msgid "Close"
msgstr "クローズ"
"""

# LibreOffice-style: "~" accelerators (declared in the header) and a msgctxt on every entry;
# compiled to .mo by the test, where context entries are kept when the msgid is a plain UI string.
LIBREOFFICE = """
msgctxt "STR_INSERT_TABLE"
msgid "~Insert Table"
msgstr "表の挿入(~I)"

msgctxt "editsectiondialog|withpassword"
msgid "Wit_h password"
msgstr "パスワードを使用(_H)"

msgctxt "optinet|httpft"
msgid "HT_TP proxy:"
msgstr "HT_TPプロキシ:"

msgctxt "autocorrect|underline"
msgid "Automatic _underline_"
msgstr "自動_下線_"

msgctxt "RID_STR_ACC_COLUMN_NUM"
msgid "Column %COLUMNNUMBER"
msgstr "列 %COLUMNNUMBER"

msgctxt "STR_PRODUCT_DOC"
msgid "%PRODUCTNAME Document"
msgstr "%PRODUCTNAMEドキュメント"

msgctxt "RID_ERR"
msgid "$(ARG1) is not a valid file."
msgstr "$(ARG1) は有効なファイルではありません。"

msgctxt "RID_ATTRIBUTE_NAMES_MAP"
msgid "Char Underline Has Color"
msgstr "Char Underline Has Color"

msgctxt "additionsdialog|searchEntry"
msgid "searchEntry"
msgstr "検索項目"
"""

EXPECTED_SAMPLE = [
    ("%(count)s of %(total)s", "%(total)s 件中 %(count)s 件"),
    ("Edit...", "編集..."),
    ("File", "ファイル"),
    ("Hello world", "こんにちは 世界"),
    ("Open", "開く"),
    ("Save", "保存"),
]

EXPECTED_ALL = [
    ("$(ARG1) is not a valid file.", "$(ARG1) は有効なファイルではありません。"),
    ("%(count)s of %(total)s", "%(total)s 件中 %(count)s 件"),
    ("%PRODUCTNAME Document", "%PRODUCTNAMEドキュメント"),
    ("Automatic _underline_", "自動_下線_"),
    ("Close", "クローズ"),  # 1 vote each: the lexicographically smallest wins
    ("Column %COLUMNNUMBER", "列 %COLUMNNUMBER"),
    ("Edit...", "編集..."),
    ("File", "ファイル"),
    ("HTTP proxy:", "HTTPプロキシ:"),
    ("Hello world", "こんにちは 世界"),
    ("Insert Table", "表の挿入"),
    ("Open", "オープン"),  # tie 1-1: "オープン" (U+30AA) < "開く" (U+958B)
    ("Save", "保存"),  # 2 votes against 1
    ("With password", "パスワードを使用"),
]


@pytest.fixture
def catalogs(tmp_path: Path) -> dict[str, Path]:
    sample = _po(tmp_path / "ja_sample.po", SAMPLE)
    other = _po(tmp_path / "other.po", OTHER)
    third = _po(tmp_path / "third.po", THIRD)
    lo_po = _po(tmp_path / "lo.po", LIBREOFFICE, extra_header='"X-Accelerator-Marker: ~\\n"')
    lo_mo = tmp_path / "lo.mo"
    polib.pofile(str(lo_po)).save_as_mofile(str(lo_mo))
    return {"sample": sample, "other": other, "third": third, "lo_po": lo_po, "lo_mo": lo_mo}


def test_sample_rows_exact(catalogs):
    result = build.build_rows([catalogs["sample"]])
    assert result.rows == EXPECTED_SAMPLE
    rejected = result.stats["local"].rejected
    assert rejected["fuzzy"] == 1
    assert rejected["obsolete"] == 1
    assert rejected["plural"] == 1
    assert rejected["msgctxt"] == 1
    assert rejected["markup"] == 6
    assert rejected["too_long"] == 1
    assert rejected["placeholder_only"] == 4
    assert rejected["placeholders_differ"] == 1
    assert rejected["untranslated"] == 2
    assert rejected["no_japanese"] == 1


def test_all_catalogs_rows_exact_and_per_source_stats(catalogs):
    result = build.build_rows(
        [
            ("pos", catalogs["sample"]),
            ("pos", catalogs["other"]),
            ("pos", catalogs["third"]),
            ("lo", catalogs["lo_mo"]),
        ]
    )
    assert result.rows == EXPECTED_ALL
    assert result.stats["lo"].rejected == {"untranslated": 1, "identifier": 1}
    assert result.stats["lo"].final == 7
    assert result.stats["pos"].final == len(EXPECTED_ALL) - 7
    assert sum(s.final for s in result.stats.values()) == len(result.rows)


def test_msgctxt_is_skipped_in_po_but_kept_in_mo(catalogs):
    assert build.build_rows([catalogs["lo_po"]]).rows == []
    assert len(build.build_rows([catalogs["lo_mo"]]).rows) == 7


def test_catalogs_to_tsv_is_deterministic(catalogs, tmp_path):
    paths = [catalogs[k] for k in ("sample", "other", "third", "lo_mo")]
    out1, out2, out3 = tmp_path / "a.tsv", tmp_path / "b.tsv", tmp_path / "c.tsv"
    build.catalogs_to_tsv(paths, out1)
    build.catalogs_to_tsv(paths, out2)
    build.catalogs_to_tsv(list(reversed(paths)), out3)  # input order does not matter either
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (out1, out2, out3)}
    assert len(digests) == 1
    text = out1.read_text(encoding="utf-8")
    assert text == "".join(f"{en}\t{ja}\n" for en, ja in EXPECTED_ALL)
    assert "\r" not in text and not text.startswith("\ufeff")
