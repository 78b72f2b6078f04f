"""The en-ja corpus from many sources: the deny-list of reserved projects, the split of pairs between
permissive and copyleft sources, the held-out projects kept out of training, and the licences read from Debian
packages.

Catalogs are written by the tests into tmp_path; nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import polib
import pytest
from po_catalogs import OTHER, _po

from training import corpus_build as build
from training import corpus_licences as licences
from training import corpus_sources as sources

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
