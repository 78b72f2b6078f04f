"""The rules that find protected spans (contract/spans.py), the masking and repair that keep them
(contract/masking.py) and the splitting of long inputs (contract/splitting.py): pure functions, no model."""

from __future__ import annotations

import random

import pytest
from span_cases import SOURCES

from contract.masking import mask, restore
from contract.spans import check, find_spans
from contract.splitting import split


def spans(text: str, numbers: bool = True) -> list[tuple[str, str]]:
    return [(s.kind, s.text) for s in find_spans(text, numbers)]


@pytest.mark.parametrize(
    "text, want",
    [
        # printf: C, positional, Python named, %%, Qt
        ('Deleting %u files from "%s"', [("printf", "%u"), ("printf", "%s")]),
        ("Query took %01.4f seconds, %ld bytes", [("printf", "%01.4f"), ("printf", "%ld")]),
        ("%1$s of %2$d", [("printf", "%1$s"), ("printf", "%2$d")]),
        ("%(action)s the %(translation)s", [("printf", "%(action)s"), ("printf", "%(translation)s")]),
        ("less than 1%% per hour", [("number", "1"), ("printf", "%%")]),
        ("The font file %1 is broken", [("printf", "%1")]),
        # braces and ICU, nested as one span
        ("from {old} to {new}", [("brace", "{old}"), ("brace", "{new}")]),
        ("{} and {0} and {0:.2f}", [("brace", "{}"), ("brace", "{0}"), ("brace", "{0:.2f}")]),
        (
            "You have {count, plural, one {# file} other {# files}} left",
            [("brace", "{count, plural, one {# file} other {# files}}")],
        ),
        # templates
        (
            "Hello ${user.name}, {{ greeting }} {% if x %}",
            [("template", "${user.name}"), ("template", "{{ greeting }}"), ("template", "{% if x %}")],
        ),
        # markup
        (
            '<a href="https://x.org/a?b=1">Link</a> &amp; &#169; &#x2014;',
            [
                ("tag", '<a href="https://x.org/a?b=1">'),
                ("tag", "</a>"),
                ("entity", "&amp;"),
                ("entity", "&#169;"),
                ("entity", "&#x2014;"),
            ],
        ),
        (
            "<br/><!-- note --><img src='a.png' />",
            [("tag", "<br/>"), ("tag", "<!-- note -->"), ("tag", "<img src='a.png' />")],
        ),
        # URLs (no trailing sentence punctuation, no Japanese after them) and e-mail
        ("See http://example.com/poster.jpg.", [("url", "http://example.com/poster.jpg")]),
        (
            "https://en.wikipedia.org/wiki/Foo_(bar)を参照",
            [("url", "https://en.wikipedia.org/wiki/Foo_(bar)")],
        ),
        (
            "Write to help@example.org or www.example.org/x",
            [("email", "help@example.org"), ("url", "www.example.org/x")],
        ),
        # numbers: digits not inside an ASCII word
        (
            "You have 3 new messages, 1,024 bytes, 2.5 s",
            [("number", "3"), ("number", "1,024"), ("number", "2.5")],
        ),
        ("UTF-8 and mp3 files, 3つ", [("number", "3")]),
    ],
)
def test_every_kind(text, want):
    assert spans(text) == want


def test_prose_is_not_a_span():
    assert spans("50% done, a {lone brace and 100 % sure", numbers=False) == []
    assert spans("x < y and z > w; <3", numbers=False) == []


def test_adjacent_nested_and_at_both_ends():
    assert spans("%s%s") == [("printf", "%s"), ("printf", "%s")]
    assert spans("<b>%(quota)s</b>") == [("tag", "<b>"), ("printf", "%(quota)s"), ("tag", "</b>")]
    assert spans("{a}{b} text {c}") == [("brace", "{a}"), ("brace", "{b}"), ("brace", "{c}")]
    assert spans("%dx%d") == [("printf", "%d"), ("printf", "%d")]


def adversarial(m, rng: random.Random) -> list[str]:
    """Outputs a model could write: its placeholders kept, lost, doubled, reversed, misspelt, made up."""
    marks = list(m.marks)
    kept = " ".join(["テキスト"] + marks + ["です。"])
    return [
        "",
        "全部なくなった",
        kept,
        " ".join(marks * 2),
        " ".join(reversed(marks)) + " 逆",
        kept.replace("{0}", "{0").replace("%s", "%d"),
        "%s {9} <i> http://evil.example 7 %(x)s",
        " ".join(rng.sample(marks, len(marks))) + "。",
        m.text,
        m.text.upper(),
    ]


@pytest.mark.parametrize("source", SOURCES)
def test_every_span_comes_back_exactly_whatever_the_model_writes(source):
    m = mask(source)
    rng = random.Random(source)
    for out in adversarial(m, rng):
        got = restore(m, out)
        assert check(source, got).ok, (source, out, got, check(source, got))


def test_masking_keeps_the_placeholders_the_model_copies_and_masks_the_rest():
    m = mask("<b>Warning:</b> the file %(name)s, %s, {0} and 3 at http://example.com/x")
    assert m.text == "{1}Warning:{2} the file {3}, %s, {0} and 3 at {4}"
    assert restore(m, m.text) == m.source  # copied faithfully: the source's spans in their places


def test_tags_around_everything_stay_around_the_translation():
    m = mask("<b>Save</b>")
    assert m.text == "Save" and restore(m, "保存") == "<b>保存</b>"
    m = mask("  <p><i>Open</i></p>\n")
    assert m.text == "Open" and restore(m, "開く") == "  <p><i>開く</i></p>\n"


def test_a_tag_pair_turned_round_is_turned_back():
    m = mask("Click <b>here</b> now")
    assert restore(m, "{1}ここ{0}をクリック") == "<b>ここ</b>をクリック"


def test_lost_spans_go_back_where_they_were():
    m = mask("%s files")
    assert restore(m, "ファイル") == "%sファイル"  # it started the source: at the start
    m = mask("You have 3 new messages.")
    assert (
        restore(m, "新しいメッセージがあります。") == "新しいメッセージがあります3。"
    )  # before the last stop


def test_a_source_of_only_spans_is_answered_as_it_came():
    for source in ("%s", "%s: %d (%%)", "<br/>", "{0} - {1}", "<b>%(x)s</b>", "http://example.com"):
        m = mask(source)
        assert m.text == "" and restore(m, "何か") == source


def test_numbers_off_leaves_digits_to_the_model():
    m = mask("You have 3 new messages.", numbers=False)
    assert not m.changed and restore(m, "新しいメッセージ") == "新しいメッセージ"


def fits_words(n: int):
    return lambda piece: len(piece.split()) <= n


def test_split_pieces_fit_and_join_back_the_source():
    text = "First sentence here. Second one, with a clause; and more words.\n\n  Third line %(name)s stays.  "
    pieces = split(text, fits_words(4), find_spans(text))
    assert all(len(p.split()) <= 4 for p in pieces.pieces)
    assert pieces.join(pieces.pieces) == text  # the glue is the source's own whitespace and line breaks
    assert "Third line %(name)s stays." in pieces.pieces or all(
        "%(name" not in p or "%(name)s" in p for p in pieces.pieces
    )


def test_split_cuts_sentences_first_and_never_inside_a_span():
    text = 'One two three. Four five six. Seven <a href="https://x.org/very/long/path">link</a> nine.'
    pieces = split(text, fits_words(3), find_spans(text))
    assert pieces.pieces[:2] == ["One two three.", "Four five six."]
    assert any('<a href="https://x.org/very/long/path">' in p for p in pieces.pieces)
    assert pieces.join(pieces.pieces) == text


def test_split_between_block_tags():
    text = "<p>First paragraph text.</p><p>Second paragraph text.</p>"
    pieces = split(text, fits_words(3), find_spans(text))
    assert pieces.pieces == ["First paragraph text.", "Second paragraph text."]
    assert pieces.join(["一", "二"]) == "<p>一</p><p>二</p>"


def test_a_text_that_fits_on_one_line_is_one_piece():
    assert split("Save changes", fits_words(5)).pieces == ["Save changes"]
    assert split("a b c d e f g h", fits_words(3)).pieces == ["a b c", "d e f", "g h"]


def test_a_line_break_inside_a_span_is_not_a_cut():
    text = 'Open <a\nhref="https://x.org">the page</a>\nand read it.'
    pieces = split(text, fits_words(50), find_spans(text))
    assert pieces.pieces == ['Open <a\nhref="https://x.org">the page</a>', "and read it."]


def test_spans_the_model_made_up_are_dropped():
    assert restore(mask("Save changes"), "変更を保存 %s <b>") == "変更を保存"
    assert (
        restore(mask("Save changes"), "変更を 2 回保存") == "変更を 2 回保存"
    )  # a number may be the model's own


def test_a_text_read_as_sent_is_answered_as_the_model_wrote_it():
    from contract.masking import Masked

    assert restore(Masked("%s files", "%s files", as_sent=True), "ファイル <b>") == "ファイル <b>"
