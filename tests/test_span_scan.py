"""The linear span scan (contract/span_scan.py) finds exactly what one regular-expression alternation of the rules
finds (the definition the scan replaced, kept here as the oracle: it is quadratic, so only short texts), and
Weblate's placeholder markers and XLIFF's inline tags are spans."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.masking import mask, restore
from contract.spans import check, find_spans

# The rules as one alternation, tried at each position in this order; a brace is a span up to its matching '}'.
_RULES = (
    ("url", r"(?:(?:https?|ftp)://|www\.)[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+"),
    ("email", r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+"),
    ("tag", r"<!--.*?-->|</?[A-Za-z][A-Za-z0-9:._\-]*(?:\s+[^<>]*?)?\s*/?>"),
    ("entity", r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"),
    ("template", r"\{\{.*?\}\}|\{%.*?%\}|\$\{[^{}]*\}"),
    ("brace", r"\{"),
    ("marker", r"\[X[0-9]+X\]"),
    (
        "printf",
        r"%%|%\([A-Za-z_][A-Za-z0-9_.]*\)[-+0#]*[0-9]*(?:\.[0-9]+)?[diouxXeEfFgGcrsa]"
        r"|%[0-9]+\$[-+0#]*[0-9]*(?:\.[0-9]+)?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcsSpn@]"
        r"|%[-+0#]*[0-9]*(?:\.[0-9]+)?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcsSpn@]"
        r"|%L?[1-9][0-9]?",
    ),
    ("number", r"(?<![A-Za-z0-9_.,])(?<![A-Za-z]-)[0-9]+(?:[.,:][0-9]+)*(?![A-Za-z0-9_])"),
)
_ANY = re.compile("|".join(f"(?P<{k}>{rx})" for k, rx in _RULES), re.S)
_NO_NUMBER = re.compile("|".join(f"(?P<{k}>{rx})" for k, rx in _RULES if k != "number"), re.S)
_HEAD = re.compile(r"\{\s*(?:[A-Za-z_0-9][A-Za-z0-9_.\[\]\-]*)?\s*(?:[:,!}])")


def _brace_end(text: str, start: int) -> int:
    if not _HEAD.match(text, start):
        return -1
    depth = 0
    for i in range(start, min(len(text), start + 4096)):
        if text[i] == "{":
            depth += 1
            if depth > 16:
                return -1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def oracle(text: str, numbers: bool) -> list[tuple[int, int, str]]:
    out, pos = [], 0
    while (m := (_ANY if numbers else _NO_NUMBER).search(text, pos)) is not None:
        kind, start, end = m.lastgroup, m.start(), m.end()
        if kind == "brace" and (end := _brace_end(text, start)) < 0:
            pos = start + 1
            continue
        if kind == "url":
            while end > start and text[end - 1] in ".,;:!?)'":
                if text[end - 1] == ")" and text.count("(", start, end) >= text.count(")", start, end):
                    break
                end -= 1
        out.append((start, end, kind))
        pos = end
    return out


# Pieces that start, end or almost make a span of every kind, and what lies around them.
PIECES = [
    *"ab1X0 %{}<>&@$[]/.:;,!?()'-_#=\n\t\u3042hwtpsLz9",
    *("\xa0", "\u2003", "\x1c", "\u0663", "Ａ"),
    *("http://", "https://", "www.", "ftp://", "<!--", "-->", "{{", "}}", "{%", "%}", "${", "[X", "X]"),
    *("&amp;", "&#", "&#x1F;", "<a ", "<b>", "</b>", '<x id="1"/>', "%(", ")s", "@x.org", "a@b", "%1$"),
    *("%05", ".5f", " - ", "1,0", "hh", "lld", "%-+0#5.3lf", "{0:", "{a,", "{ x }", "{# f}", "a-1", "%L"),
]


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=24), st.booleans())
def test_the_scan_finds_what_the_alternation_finds(pieces, numbers):
    text = "".join(pieces)
    assert [(s.start, s.end, s.kind) for s in find_spans(text, numbers)] == oracle(text, numbers)


@pytest.mark.parametrize(
    "text",
    [
        "{" * 300 + "{0}",
        "{{" * 200 + " }}",
        "<!--" * 100 + "-->",
        "{a:" * 15 + "{}" * 40,
        "{a:" * 20 + "}" * 30,
        "x" * 50 + "@" + "a@" * 30 + "b.cd",
        "http://x.org/(a)" + ")" * 20 + ".",
        "{%" * 50 + "{% x %}",
        "${" * 50 + "${x}",
    ],
)
def test_the_scan_finds_what_the_alternation_finds_in_long_runs(text):
    for numbers in (True, False):
        assert [(s.start, s.end, s.kind) for s in find_spans(text, numbers)] == oracle(text, numbers)


def test_weblate_markers_and_xliff_inline_tags_are_spans():
    text = 'Delete [X7X] files from <g id="1">[X33X]</g>?<x id="2"/> "[X68X]"'
    assert [(s.kind, s.text) for s in find_spans(text)] == [
        ("marker", "[X7X]"),
        ("tag", '<g id="1">'),
        ("marker", "[X33X]"),
        ("tag", "</g>"),
        ("tag", '<x id="2"/>'),
        ("marker", "[X68X]"),
    ]
    assert find_spans("[X] [XX] [X1] [x1x] X1X] [X 1X]") == []  # not markers (nor numbers: inside words)


def test_a_weblate_marker_comes_back_exactly_whatever_the_model_writes():
    m = mask('Field must be between [X22X] and [X35X] characters long. "[X68X]"')
    assert "[X" not in m.text  # the model reads {0}, {1}, {2}: placeholders it saw in training
    for out in ("", "{1} と {0} の間 {2}", "[X3X3X] {0}{0} X[68]", "{2}{1}{0}"):
        got = restore(m, out)
        assert check(m.source, got).ok and [got.count(x) for x in ("[X22X]", "[X35X]", "[X68X]")] == [1, 1, 1]
