"""Planning an input (server/models/text_plan.py: its spans found, masked, split into pieces, tokenized) takes work
linear in the input, whatever the input: counted as operations, never timed. What is counted:

- characters read by the regular expressions of contract/ and the plan (each call's from its position to where
  its match ends, or to the end of what it was allowed to read when it finds none; an iterator's whole window);
- characters handed to the tokenizer;
- lines of Python run in contract/ and the plan.

Each is held to a constant times the input's length, for the inputs a request may have (up to the advertised
4,096 characters), the families that made a plan quadratic before among them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from conftest import MODEL_REPO, served_version
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract import bundle, masking, span_scan, spans, splitting
from contract.text import TextCodec
from server.models import text_plan
from server.models.text_plan import MAX_TEXT_CHARS, TextOptions, plan

pytestmark = pytest.mark.skipif(
    not (MODEL_REPO / "translate-en-ja").is_dir(), reason="no translate-en-ja model"
)

MODULES = (span_scan, spans, masking, splitting, text_plan)
FILES = {str(Path(m.__file__).resolve()) for m in MODULES}
# Work per character of input, at most (the costliest inputs found use about half of each).
REGEX_CHARS, TOKENIZED_CHARS, LINES = 80, 30, 160


class Meter:
    def __init__(self):
        self.regex = self.tokenized = self.lines = 0


class CountedPattern:
    """A compiled pattern that counts the characters each call may read."""

    def __init__(self, rx: re.Pattern, meter: Meter):
        self.rx, self.meter = rx, meter

    def __getattr__(self, name):
        return getattr(self.rx, name)

    def _count(self, s: str, pos: int, endpos: int, m) -> None:
        self.meter.regex += 1 + (m.end() if m is not None else min(endpos, len(s))) - pos

    def search(self, s, pos=0, endpos=sys.maxsize):
        m = self.rx.search(s, pos, endpos)
        self._count(s, pos, endpos, m)
        return m

    def match(self, s, pos=0, endpos=sys.maxsize):
        m = self.rx.match(s, pos, endpos)
        self._count(s, pos, endpos, m)
        return m

    def fullmatch(self, s, pos=0, endpos=sys.maxsize):
        m = self.rx.fullmatch(s, pos, endpos)
        self._count(s, pos, endpos, m)
        return m

    def finditer(self, s, pos=0, endpos=sys.maxsize):
        self._count(s, pos, endpos, None)
        return self.rx.finditer(s, pos, endpos)

    def findall(self, s, pos=0, endpos=sys.maxsize):
        self._count(s, pos, endpos, None)
        return self.rx.findall(s, pos, endpos)

    def sub(self, repl, s, count=0):
        self._count(s, 0, len(s), None)
        return self.rx.sub(repl, s, count)


class CountedCodec:
    def __init__(self, codec: TextCodec, meter: Meter):
        self.codec, self.meter = codec, meter

    def __getattr__(self, name):
        return getattr(self.codec, name)

    def source_ids(self, text: str) -> list[int]:
        self.meter.tokenized += len(text)
        return self.codec.source_ids(text)


@pytest.fixture(scope="module")
def codec():
    folder = served_version("translate-en-ja")
    b = bundle.read_bundle(folder, verify_hashes=False)
    return TextCodec.from_file(folder / bundle.TOKENIZER_FILE, b.task, b.model.special), b.model.max_len


@pytest.fixture(scope="module")
def counted():
    """Every compiled pattern of the planning modules, counting into one meter (and nothing else changed)."""
    meter = Meter()
    patch = pytest.MonkeyPatch()
    for module in MODULES:
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern):
                patch.setattr(module, name, CountedPattern(value, meter))
            elif isinstance(value, dict) and value and all(isinstance(v, re.Pattern) for v in value.values()):
                patch.setattr(module, name, {k: CountedPattern(v, meter) for k, v in value.items()})
    yield meter
    patch.undo()


def work(
    counted: Meter, codec, text: str, opts: TextOptions = TextOptions(), refusable: bool = False
) -> Meter:
    """The work of planning ``text`` as one input (where ``refusable``, a refusal is planning too: a span kept as
    the model reads it, such as a number of 4,000 digits, may be longer than the model reads)."""
    tokenizer, max_len = codec
    counted.regex = counted.tokenized = counted.lines = 0

    def trace(frame, event, arg):
        if frame.f_code.co_filename not in FILES:
            return None
        counted.lines += event == "line"
        return trace

    sys.settrace(trace)
    try:
        plan("m", CountedCodec(tokenizer, counted), [text], None, opts, max_len)
    except text_plan.InvalidInput:
        if not refusable:
            raise
    finally:
        sys.settrace(None)
    return counted


def assert_linear(m: Meter, text: str) -> None:
    n = max(len(text), 64)
    assert m.regex <= REGEX_CHARS * n, ("regular expressions", m.regex, n, text[:40])
    assert m.tokenized <= TOKENIZED_CHARS * n, ("tokenized", m.tokenized, n, text[:40])
    assert m.lines <= LINES * n, ("lines", m.lines, n, text[:40])


def fill(unit: str, n: int = MAX_TEXT_CHARS) -> str:
    return (unit * (n // len(unit) + 1))[:n]


FAMILIES = [
    "{",
    "{{",
    "{%",
    "<!--",
    "${",
    "[X1",
    "%0",
    "%(",
    "<a ",
    "a@",
    "{a:",
    "{0} a ",
    "<b> a ",
    "</b>x",
    "1 ",
    "1:",
    "a. ",
    "a\n",
    "x - ",
    "http://x.org/) ",
    "Save the file %(name)s to {folder} now. ",
]


@pytest.mark.parametrize("unit", FAMILIES)
def test_a_repeated_opener_plans_in_linear_work(counted, codec, unit):
    text = fill(unit)
    assert_linear(work(counted, codec, text), text)


@pytest.mark.parametrize(
    "head, run", [("<a", " "), ("{", " "), ("%", "0"), ("a", "a"), ("http://x.org/", ")")]
)
def test_one_opener_before_a_long_run_plans_in_linear_work(counted, codec, head, run):
    text = head + run * (MAX_TEXT_CHARS - len(head) - 1) + "%"
    assert_linear(work(counted, codec, text), text)


PIECES = [
    *(
        "{",
        "}",
        "{{",
        "}}",
        "{%",
        "%}",
        "<!--",
        "-->",
        "<",
        ">",
        "</",
        "/>",
        "<b>",
        "</b>",
        "<p>",
        "&",
        "&amp;",
    ),
    *(
        "$",
        "${",
        "[X",
        "X]",
        "%",
        "%s",
        "%(",
        ")s",
        "%0",
        "@",
        "a@b.cd",
        "http://",
        "www.",
        "0",
        "1,0",
        "a",
        ".",
    ),
    *(
        " ",
        "  ",
        "\n",
        "\r\n",
        "\t",
        "-",
        " - ",
        ",",
        "word",
        "Save",
        "ファイル",
        "{0}",
        "{count, plural, one {#}}",
    ),
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=12),
    st.integers(min_value=1, max_value=MAX_TEXT_CHARS),
    st.booleans(),
)
def test_any_input_within_the_limit_plans_in_linear_work(counted, codec, units, length, protect):
    """A run of a few pieces repeated up to a length within the limit: every family above is one of these."""
    text = fill("".join(units), length)
    assert_linear(work(counted, codec, text, TextOptions(protect_spans=protect), refusable=True), text)
