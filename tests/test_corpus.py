"""The en-ja corpus builder's network-free half: gettext catalogs -> cleaned rows -> TSV.

Catalogs are written by the tests into tmp_path; nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import polib
import pytest

from training import corpus_build as build
from training import corpus_cleaning as cleaning
from training import corpus_en_ja as cli
from training import corpus_licences as licences
from training import corpus_sources as sources

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


# --------------------------------------------------------------------------- many sources: deny-list,
# copyleft split, held-out projects

HG = """
msgid "Commit changes"
msgstr "変更をコミット"

msgid "Save"
msgstr "セーブ"
"""

GPL_APP = """
msgid "Save"
msgstr "保存"

msgid "Quit"
msgstr "終了"

msgid "Undo"
msgstr "元に戻す"
"""

HELD = """
msgid "Quit"
msgstr "やめる"

msgid "Crop image"
msgstr "画像を切り抜く"

msgid "Rotate layer"
msgstr "レイヤーを回転"
"""


@pytest.mark.parametrize(
    "name, reserved",
    [
        ("mercurial-common", True),
        ("tortoisehg", True),
        ("python3-mercurial", True),
        ("hg-git", True),
        ("usr/lib/python3/dist-packages/mercurial/locale/ja/LC_MESSAGES/hg.mo", True),
        ("usr/share/locale/ja/LC_MESSAGES/hg.mo", True),
        ("pretix", True),
        ("pretix-passbook", True),
        ("weblate", True),
        ("Weblate/locale/ja/LC_MESSAGES/django.po", True),
        ("plone.app.dexterity", True),
        ("collective.easyform", True),
        ("Products.CMFPlone", True),
        ("ckan", True),
        ("ckanext-scheming", True),
        ("gimp-data", False),
        ("usr/share/locale/ja/LC_MESSAGES/gimp20.mo", False),
        ("highlight", False),
        ("chg", False),
        ("python3-django", False),
        ("libreoffice-l10n-ja", False),
    ],
)
def test_is_reserved(name, reserved):
    assert sources.is_reserved(name) is reserved


def test_no_source_or_pin_is_reserved():
    assert sources.all_sources(), "no sources"
    for s in sources.all_sources():
        assert not sources.is_reserved(s.name) and not sources.is_reserved(s.package), s
        assert not any(sources.is_reserved(p) for p in s.patterns), s
    if sources.PINS_FILE.exists():
        pins = [
            ln.split("\t")[0]
            for ln in sources.PINS_FILE.read_text(encoding="utf-8").splitlines()
            if ln and not ln.startswith("#")
        ]
        assert pins and not [p for p in pins if sources.is_reserved(p)]
    # the held-out projects are pinned (so the held-out set can be rebuilt) but are not reserved
    assert not [p for p in sources.HELDOUT_PACKAGES if sources.is_reserved(p)]


@pytest.fixture
def projects(tmp_path: Path) -> dict[str, Path]:
    def mo(rel: str, body: str) -> Path:
        po = tmp_path / (rel + ".po")
        po.parent.mkdir(parents=True, exist_ok=True)
        _po(po, body)
        out = tmp_path / rel
        polib.pofile(str(po)).save_as_mofile(str(out))
        return out

    return {
        "bsd": mo("bsd/usr/share/locale/ja/LC_MESSAGES/bsdapp.mo", OTHER),  # Open/Save/Close
        "gpl": mo("gpl/usr/share/locale/ja/LC_MESSAGES/gplapp.mo", GPL_APP),
        "hg": mo("hgpkg/usr/lib/python3/dist-packages/mercurial/locale/ja/LC_MESSAGES/hg.mo", HG),
        "held": mo("held/usr/share/locale/ja/LC_MESSAGES/imgedit.mo", HELD),
    }


def _corpus(projects, order=None, cap=sources.HELDOUT_CAP):
    cats = [
        ("bsdapp", projects["bsd"]),
        ("gplapp", projects["gpl"]),
        ("vcs", projects["hg"]),
        ("imgedit", projects["held"]),
    ]
    if order:
        cats = [cats[i] for i in order]
    return build.build_corpus(
        cats,
        groups={"bsdapp": "permissive", "gplapp": "copyleft", "vcs": "permissive"},
        heldout=["imgedit"],
        cap=cap,
    )


def test_build_drops_reserved_catalogs(projects):
    corpus = _corpus(projects)
    every = [r for rows in corpus.files.values() for r in rows]
    assert "Commit changes" not in {en for en, _ in every}
    assert ("Save", "セーブ") not in every
    assert len(corpus.train.reserved) == 1 and "hg.mo" in corpus.train.reserved[0]
    assert "vcs" not in corpus.train.stats
    # a reserved source name is dropped too, whatever its catalog is called
    res = build.build_rows([("mercurial-common", projects["gpl"]), ("ok", projects["bsd"])])
    assert {en for en, _ in res.rows} == {"Open", "Save", "Close"}


def test_copyleft_split_is_by_pair_and_global(projects):
    corpus = _corpus(projects)
    perm, copy_ = corpus.files["permissive"], corpus.files["copyleft"]
    assert dict(perm)["Open"] == "オープン" and dict(perm)["Close"] == "閉じる"
    assert ("Quit", "終了") in copy_ and ("Undo", "元に戻す") in copy_
    # "Save": 保存 (gpl) and 保存する (bsd) tie 1-1; 保存 wins (smaller) and only a copyleft source has it
    assert ("Save", "保存") in copy_ and "Save" not in dict(perm)
    en_perm, en_copy = {en for en, _ in perm}, {en for en, _ in copy_}
    assert not en_perm & en_copy
    assert en_perm | en_copy == {en for en, _ in corpus.train.rows}


def test_heldout_excludes_training_strings_and_feeds_no_training_file(projects):
    corpus = _corpus(projects)
    train_en = {en for g in sources.GROUPS for en, _ in corpus.files[g]}
    held = corpus.files["heldout"]
    assert held == [
        ("Crop image", "画像を切り抜く"),
        ("Rotate layer", "レイヤーを回転"),
    ]  # "Quit" is in training
    assert not {en for en, _ in held} & train_en
    assert ("Quit", "やめる") not in corpus.train.rows and "imgedit" not in corpus.train.stats
    capped = _corpus(projects, cap=1).files["heldout"]
    assert len(capped) == 1 and capped[0] in held
    # the cap keeps the smallest sha256 of the English, not the alphabetical head
    assert capped[0][0] == min(
        ("Crop image", "Rotate layer"), key=lambda e: hashlib.sha256(e.encode()).hexdigest()
    )


def test_build_corpus_is_deterministic(projects, tmp_path):
    a, b = _corpus(projects), _corpus(projects, order=[3, 2, 1, 0])
    for k in a.files:
        assert build.tsv_bytes(a.files[k]) == build.tsv_bytes(b.files[k])
    assert build.write_tsv(a.files["copyleft"], tmp_path / "x.tsv") == build.write_tsv(
        b.files["copyleft"], tmp_path / "y.tsv"
    )


@pytest.mark.parametrize(
    "deb, spdx, group",
    [
        ("GPL-2+", "GPL-2.0-or-later", "copyleft"),
        ("LGPL-2.1", "LGPL-2.1-only", "copyleft"),
        ("Expat", "MIT", "permissive"),
        ("BSD-3-clause", "BSD-3-Clause", "permissive"),
        ("MPL-2.0", "MPL-2.0", "permissive"),
        ("GPL-2+ or Expat", "GPL-2.0-or-later OR MIT", "permissive"),
        ("GPL-3+ with OpenSSL exception", "GPL-3.0-or-later", "copyleft"),
        ("Apache-2.0 and GPL-2+", "Apache-2.0 AND GPL-2.0-or-later", "copyleft"),
        ("Frobnicate", "LicenseRef-Frobnicate", "copyleft"),
    ],
)
def test_deb_licences(deb, spdx, group):
    assert licences.deb_license_to_spdx(deb) == spdx
    assert sources.license_group(spdx) == group


def test_debian_license_reads_files_star_stanza_or_text(tmp_path):
    doc = tmp_path / "a/usr/share/doc/foo"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\n"
        "Files: *\nCopyright: 2020 Foo Authors\nLicense: LGPL-2+\n\nFiles: debian/*\nLicense: GPL-2+\n"
    )
    assert licences.debian_license(tmp_path / "a", "foo")[0] == "LGPL-2.0-or-later"
    doc = tmp_path / "b/usr/share/doc/bar"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(
        "Copyright (C) 2001 Bar\n\nThis program is free software; you can redistribute it under the terms of the\n"
        "GNU General Public License as published by the Free Software Foundation; either version 2 of the\n"
        "License, or (at your option) any later version.\n"
    )
    assert licences.debian_license(tmp_path / "b", "bar")[0] == "GPL-2.0-or-later"
    assert licences.debian_license(tmp_path / "c", "baz")[0] == "LicenseRef-unknown"
