"""The en-ja corpus builder's network-free half: gettext catalogs -> cleaned rows -> TSV.

Catalogs are written by the tests into tmp_path; nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import polib
import pytest

from training import corpus_en_ja as c

HEADER = """\
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Language: ja\\n"
{extra}
"""

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

OTHER = """
msgid "Open"
msgstr "オープン"

msgid "Save"
msgstr "保存する"

msgid "Close"
msgstr "閉じる"
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


def _po(path: Path, body: str, extra_header: str = "") -> Path:
    path.write_text(HEADER.format(extra=extra_header) + textwrap.dedent(body), encoding="utf-8")
    return path


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
    result = c.build_rows([catalogs["sample"]])
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
    result = c.build_rows([
        ("pos", catalogs["sample"]), ("pos", catalogs["other"]), ("pos", catalogs["third"]),
        ("lo", catalogs["lo_mo"]),
    ])
    assert result.rows == EXPECTED_ALL
    assert result.stats["lo"].rejected == {"untranslated": 1, "identifier": 1}
    assert result.stats["lo"].final == 7
    assert result.stats["pos"].final == len(EXPECTED_ALL) - 7
    assert sum(s.final for s in result.stats.values()) == len(result.rows)


def test_msgctxt_is_skipped_in_po_but_kept_in_mo(catalogs):
    assert c.build_rows([catalogs["lo_po"]]).rows == []
    assert len(c.build_rows([catalogs["lo_mo"]]).rows) == 7


def test_catalogs_to_tsv_is_deterministic(catalogs, tmp_path):
    paths = [catalogs[k] for k in ("sample", "other", "third", "lo_mo")]
    out1, out2, out3 = tmp_path / "a.tsv", tmp_path / "b.tsv", tmp_path / "c.tsv"
    c.catalogs_to_tsv(paths, out1)
    c.catalogs_to_tsv(paths, out2)
    c.catalogs_to_tsv(list(reversed(paths)), out3)  # input order does not matter either
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (out1, out2, out3)}
    assert len(digests) == 1
    text = out1.read_text(encoding="utf-8")
    assert text == "".join(f"{en}\t{ja}\n" for en, ja in EXPECTED_ALL)
    assert "\r" not in text and not text.startswith("\ufeff")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Delete %(name)s and %s", ["%(name)s", "%s"]),
        ("{0} of {total}", ["{0}", "{total}"]),
        ("%PRODUCTNAMEを終了", ["%PRODUCTNAME"]),
        ("Row %1, $(ARG1), $2", ["$(ARG1)", "$2", "%1"]),
        ("100% zoom", []),
        ("%.2f%%", ["%%", "%.2f"]),
    ],
)
def test_placeholders(text, expected):
    assert c.placeholders(text) == sorted(expected)


@pytest.mark.parametrize(
    "text, only",
    [("%s", True), ("{0}: {1}", True), ("%(name)s", True), ("$1", True), ("「%(name)s」", True),
     ("Page %1", False), ("%s 件", False), ("Éwé", False), ("of $1", False), ("/ $1", True)],
)
def test_is_placeholder_only(text, only):
    assert c.is_placeholder_only(text) is only


@pytest.mark.parametrize(
    "en, ja, tilde, expected",
    [
        ("&File", "ファイル(&F)", False, ("File", "ファイル")),
        ("_Save As...", "名前を付けて保存(_A)...", False, ("Save As...", "名前を付けて保存...")),
        ("Save _As...", "名前を付けて保存(_A)...", False, ("Save As...", "名前を付けて保存...")),
        ("E~xit", "終了(~X)", True, ("Exit", "終了")),
        ("~Open", "開く(~O)", True, ("Open", "開く")),
        ("Wit_h password", "パスワードを使用(_H)", True, ("With password", "パスワードを使用")),
        ("PDF_/A version:", "PDF_/A バージョン:", True, ("PDF/A version:", "PDF/A バージョン:")),
        ("Automatic _underline_", "自動_下線_", True, ("Automatic _underline_", "自動_下線_")),
        ("%FILE_NAME saved", "%FILE_NAME を保存しました", True, ("%FILE_NAME saved", "%FILE_NAME を保存しました")),
        ("~/.config", "~/.config", False, ("~/.config", "~/.config")),
        ("Save %(file_name)s", "%(file_name)s を保存(_N)", False, ("Save %(file_name)s", "%(file_name)s を保存")),
        ("Save & Close", "保存して閉じる", False, ("Save & Close", "保存して閉じる")),
    ],
)
def test_strip_accelerators(en, ja, tilde, expected):
    assert c.strip_accelerators(en, ja, tilde=tilde) == expected


@pytest.mark.parametrize(
    "text, markup",
    [("<b>x</b>", True), ("a &lt; b", True), ("a\nb", True), ("a\tb", True), ("see http://x.org", True),
     ("www.example.com", True), ("mail me@example.org", True), ("Save & Close", False), ("a < b", False),
     ("Use `code`", True), ("[1:Wiki] page", True), ("50% done", False)],
)
def test_has_markup(text, markup):
    assert c.has_markup(text) is markup


def test_small_rules():
    assert c.normalise_whitespace("  a \u3000 b\u00a0c  ") == "a b c"
    assert c.is_untranslated("Save", "") and c.is_untranslated("URL", "URL") and not c.is_untranslated("Save", "保存")
    assert c.is_too_long("x" * 101, "y") and c.is_too_long("x", "y" * 101) and not c.is_too_long("x" * 100, "y" * 100)
    assert c.placeholders_differ("Delete %(name)s", "%(title)s を削除")
    assert not c.placeholders_differ("%1 of %2", "%2 件中 %1")
    assert c.lacks_japanese("JavaScript") and not c.lacks_japanese("ｶﾀｶﾅ") and not c.lacks_japanese("表")
    assert c.looks_like_identifier("STR_FOO_BAR") and c.looks_like_identifier("searchEntry")
    assert not c.looks_like_identifier("Search entry") and not c.looks_like_identifier("PDF/A")


def test_choose_translations_most_frequent_then_smallest():
    from collections import Counter

    chosen = c.choose_translations({"a": Counter({"y": 2, "x": 1}), "b": Counter({"z": 1, "w": 1})})
    assert chosen == {"a": "y", "b": "w"}


def test_sources_are_pinned():
    names = [s.name for s in c.SOURCES]
    assert len(set(names)) == len(names)
    for s in c.SOURCES:
        assert s.version and "*" not in s.version and s.license and s.patterns
        assert s.kind in {"wheel", "deb"}


def test_help_exits_cleanly(capsys):
    with pytest.raises(SystemExit) as exc:
        c.main(["--help"])
    assert exc.value.code == 0
    assert "--cache" in capsys.readouterr().out
