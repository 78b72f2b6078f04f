"""The en-ja corpus builder's cleaning rules one at a time (placeholders, accelerators, markup, whitespace,
length, identifiers), the choice among translations, the pinned sources and the command line's help.
"""

from __future__ import annotations

import pytest

from training import corpus_build as build
from training import corpus_cleaning as cleaning
from training import corpus_en_ja as cli
from training import corpus_sources as sources


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
    assert cleaning.placeholders(text) == sorted(expected)


@pytest.mark.parametrize(
    "text, only",
    [
        ("%s", True),
        ("{0}: {1}", True),
        ("%(name)s", True),
        ("$1", True),
        ("「%(name)s」", True),
        ("Page %1", False),
        ("%s 件", False),
        ("Éwé", False),
        ("of $1", False),
        ("/ $1", True),
    ],
)
def test_is_placeholder_only(text, only):
    assert cleaning.is_placeholder_only(text) is only


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
        (
            "%FILE_NAME saved",
            "%FILE_NAME を保存しました",
            True,
            ("%FILE_NAME saved", "%FILE_NAME を保存しました"),
        ),
        ("~/.config", "~/.config", False, ("~/.config", "~/.config")),
        (
            "Save %(file_name)s",
            "%(file_name)s を保存(_N)",
            False,
            ("Save %(file_name)s", "%(file_name)s を保存"),
        ),
        ("Save & Close", "保存して閉じる", False, ("Save & Close", "保存して閉じる")),
    ],
)
def test_strip_accelerators(en, ja, tilde, expected):
    assert cleaning.strip_accelerators(en, ja, tilde=tilde) == expected


@pytest.mark.parametrize(
    "text, markup",
    [
        ("<b>x</b>", True),
        ("a &lt; b", True),
        ("a\nb", True),
        ("a\tb", True),
        ("see http://x.org", True),
        ("www.example.com", True),
        ("mail me@example.org", True),
        ("Save & Close", False),
        ("a < b", False),
        ("Use `code`", True),
        ("[1:Wiki] page", True),
        ("50% done", False),
    ],
)
def test_has_markup(text, markup):
    assert cleaning.has_markup(text) is markup


def test_small_rules():
    assert cleaning.normalise_whitespace("  a \u3000 b\u00a0c  ") == "a b c"
    assert (
        cleaning.is_untranslated("Save", "")
        and cleaning.is_untranslated("URL", "URL")
        and not cleaning.is_untranslated("Save", "保存")
    )
    assert (
        cleaning.is_too_long("x" * 101, "y")
        and cleaning.is_too_long("x", "y" * 101)
        and not cleaning.is_too_long("x" * 100, "y" * 100)
    )
    assert cleaning.placeholders_differ("Delete %(name)s", "%(title)s を削除")
    assert not cleaning.placeholders_differ("%1 of %2", "%2 件中 %1")
    assert (
        cleaning.lacks_japanese("JavaScript")
        and not cleaning.lacks_japanese("ｶﾀｶﾅ")
        and not cleaning.lacks_japanese("表")
    )
    assert cleaning.looks_like_identifier("STR_FOO_BAR") and cleaning.looks_like_identifier("searchEntry")
    assert not cleaning.looks_like_identifier("Search entry") and not cleaning.looks_like_identifier("PDF/A")


def test_choose_translations_most_frequent_then_smallest():
    from collections import Counter

    chosen = build.choose_translations({"a": Counter({"y": 2, "x": 1}), "b": Counter({"z": 1, "w": 1})})
    assert chosen == {"a": "y", "b": "w"}


def test_sources_are_pinned():
    names = [s.name for s in sources.all_sources()]
    assert len(set(names)) == len(names)
    for s in sources.all_sources():
        assert s.version and "*" not in s.version and s.license and s.patterns
        assert s.kind in {"wheel", "deb"}


def test_help_exits_cleanly(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    assert "--cache" in capsys.readouterr().out
