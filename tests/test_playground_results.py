"""What the playground shows after each request, in a real headless Chromium against a real server: a translation
model first (the page's example input is a translation's), nothing of an earlier request left beside a refusal,
the request's own figures once, and the results brought into view on a narrow screen."""

from __future__ import annotations

import re

import pytest
from playground_page import Page, chromium, needs_chromium

from s2s.seq2seq_client import Seq2SeqClient


@pytest.fixture(scope="module")
def driver():
    yield from chromium()


def shown(page: Page, css: str) -> list[str]:
    return page.d.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent)", css
    )


@needs_chromium
def test_a_translation_model_is_picked_first(server, driver):
    """addition sorts first, but the page opens on translate-en-ja, whose input the example text is; a model of
    another task gets an example of no task."""
    page = Page(driver, server.running.web.port)
    page.wait(lambda: page.find("#run").text == "Translate", "the button to say Translate")
    assert page.find("#model").get_attribute("value") == "translate-en-ja"
    assert page.models() == ["addition", "translate-en-ja"]
    assert page.find("#input").get_attribute("placeholder").startswith("Save changes")
    page.pick("addition")
    page.wait(lambda: page.find("#run").text == "Generate", "the button to say Generate")
    assert page.find("#input").get_attribute("placeholder") == "One input per line"


@needs_chromium
def test_a_refusal_leaves_no_earlier_outputs(server, driver):
    """translate-en-ja's outputs, then addition refusing the same text: the error alone, no outputs and no
    figures of the earlier request under it; a new request answered shows only its own."""
    page = Page(driver, server.running.web.port)
    page.pick("translate-en-ja")
    page.set("#input", "Save changes\nOpen the file")
    assert page.run() == "done", page.error()
    assert len(page.outputs()) == 2 and "translate-en-ja" in page.find("#status").text
    page.pick("addition")
    assert page.run() == "error"  # letters addition's tokenizer does not know
    assert "HTTP 400" in page.error() and "addition" in page.error(), page.error()
    assert page.outputs() == [] and shown(page, "#outputs .meta") == []
    assert page.find("#status").text == "" and not page.find("#request-meta").is_displayed()
    page.set("#input", "12+30")
    assert page.run() == "done" and page.error() == ""
    assert page.outputs() == ["42"] and "addition" in page.find("#status").text


@needs_chromium
def test_the_requests_figures_once(server, driver):
    """Each output its own token and character counts; the request's server time, time to the first token and
    round trip once, above them."""
    texts = ["Save changes", "Open the file", "Delete"]
    page = Page(driver, server.running.web.port)
    page.pick("translate-en-ja")
    page.set("#input", "\n".join(texts))
    assert page.run() == "done", page.error()
    with Seq2SeqClient(server.address) as client:
        assert page.outputs() == client.generate("translate-en-ja", texts)
    metas = shown(page, "#outputs .meta")
    assert len(metas) == 3, metas
    assert all(
        re.fullmatch(r"\d+ tokens in → \d+ tokens out · \d+ chars in → \d+ chars out", m) for m in metas
    )
    request = page.find("#request-meta").text
    assert re.fullmatch(
        r"server \d+ ms \(first token \d+ ms\) · round trip \d+ ms · 3 lines in one request", request
    ), request
    assert "round trip" not in " ".join(shown(page, "#outputs li"))


def _top_in_view(page: Page, css: str) -> bool:
    return page.d.execute_script(
        "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
        "return r.top >= 0 && r.top < window.innerHeight * 0.6",
        css,
    )


@needs_chromium
def test_narrow_screen_brings_the_results_into_view(server, driver):
    """A phone-sized window: the results sit below the form, out of sight; a run scrolls them (or the error)
    into view."""
    size = driver.get_window_size()
    driver.set_window_size(390, 700)
    try:
        page = Page(driver, server.running.web.port)
        page.pick("translate-en-ja")
        page.set("#input", "Save changes")
        assert not _top_in_view(page, "#results")  # below the fold before the run
        page.find("#run").click()
        page.wait(lambda: page.state() == "done", "the outputs")
        page.wait(lambda: _top_in_view(page, "#results"), "the results scrolled into view")
        assert page.find("#outputs .out").is_displayed()
        page.d.execute_script("window.scrollTo(0, 0)")
        page.set("#beam", "9")
        page.find("#run").click()
        page.wait(lambda: page.state() == "error", "the error")
        page.wait(lambda: _top_in_view(page, "#error"), "the error scrolled into view")
        assert "beam_width=9" in page.error()
    finally:
        driver.set_window_size(size["width"], size["height"])
