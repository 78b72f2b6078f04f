"""The playground page at / in a real headless Chromium (Debian's chromium + chromium-driver, `make system-deps`),
against a real server: the outputs it shows are the server's, errors show the server's message, auth works."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import ServerThread, server_config
from playground_page import Page, chromium, needs_chromium

PAGE_DIR = Path(__file__).resolve().parents[1] / "server" / "doors" / "playground"
JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")  # Hiragana, Katakana, CJK ideographs


@pytest.fixture(scope="module")
def driver():
    yield from chromium()


def _get(url: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


# ---- without a browser: what is served -------------------------------------------------------------------------
def test_assets_served_and_self_contained(server):
    base = f"http://127.0.0.1:{server.running.web.port}"
    for path, ctype in (
        ("/", "text/html"),
        ("/playground.js", "text/javascript"),
        ("/playground.css", "text/css"),
    ):
        status, headers, body = _get(base + path)
        assert status == 200, path
        assert headers["Content-Type"].startswith(ctype), (path, headers["Content-Type"])
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        text = body.decode()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text), f"{path} refers to another origin"
    for name in ("index.html", "playground.js", "playground.css"):
        assert (PAGE_DIR / name).is_file()


def test_page_open_with_auth_api_not():
    srv = ServerThread(server_config(auth_token="s3cret"))
    try:
        base = f"http://127.0.0.1:{srv.running.web.port}"
        assert _get(base + "/")[0] == 200
        assert _get(base + "/playground.js")[0] == 200
        status, _, body = _get(base + "/v2/models/addition/config")
        assert status == 401 and "bearer token" in json.loads(body)["error"]
        assert _get(base + "/v2/models/addition/config", {"Authorization": "Bearer s3cret"})[0] == 200
    finally:
        srv.stop()


# ---- in Chromium -------------------------------------------------------------------------------------------------
@needs_chromium
def test_translate_matches_grpc(server, driver):
    from s2s.seq2seq_client import Seq2SeqClient

    texts = ["Save changes", "Open the file"]
    page = Page(driver, server.running.web.port)
    page.pick("translate-en-ja")
    page.wait(lambda: page.find("#run").text == "Translate", "the button to say Translate")
    page.set("#input", "\n".join(texts))
    assert page.run() == "done", page.error()
    shown = page.outputs()
    assert len(shown) == 2 and all(JAPANESE.search(s) for s in shown), shown
    with Seq2SeqClient(server.address) as client:
        assert shown == client.generate("translate-en-ja", texts)
    metas = driver.execute_script(
        "return Array.from(document.querySelectorAll('#outputs .meta')).map(e => e.textContent)"
    )
    assert all(
        re.fullmatch(r"\d+ tokens in → \d+ tokens out · \d+ chars in → \d+ chars out", m) for m in metas
    ), metas
    assert page.error() == ""
    # The option bounds come from the model's config.
    assert page.find("#beam").get_attribute("max") == "8"


@needs_chromium
def test_addition_with_ctrl_enter(server, driver):
    page = Page(driver, server.running.web.port)
    page.pick("addition")
    page.set("#input", "12+30\n\n999+1")  # the blank line is skipped
    assert page.run(ctrl_enter=True) == "done", page.error()
    assert page.outputs() == ["42", "1000"]
    assert not page.find("#languages").is_displayed()  # a model without languages: no pickers


@needs_chromium
def test_language_pickers_ask_a_multilingual_model_for_a_language(multilingual_server, driver):
    from selenium.webdriver.support.ui import Select

    from s2s.seq2seq_client import Seq2SeqClient

    texts = ["dog runs", "the red house"]
    page = Page(driver, multilingual_server.running.web.port)
    page.pick("translate-en-ja")
    page.wait(lambda: page.find("#languages").is_displayed(), "the language pickers")
    assert (
        page.find("#source-lang").get_attribute("value"),
        page.find("#target-lang").get_attribute("value"),
    ) == (
        "en",
        "ja",
    )
    page.pick("m2m")
    page.wait(lambda: len(Select(page.find("#target-lang")).options) == 100, "the 100 languages of m2m")
    assert Select(page.find("#source-lang")).first_selected_option.text == "English (en)"
    Select(page.find("#target-lang")).select_by_value("de")
    page.set("#input", "\n".join(texts))
    assert page.run() == "done", page.error()
    with Seq2SeqClient(multilingual_server.address) as client:
        assert page.outputs() == client.generate("m2m", texts, source_language="en", target_language="de")
        assert page.outputs() != client.generate("m2m", texts, source_language="en", target_language="ja")
    assert driver.execute_script("return document.querySelector('#outputs .out').lang") == "de"


@needs_chromium
def test_errors_show_the_servers_message(server, driver):
    page = Page(driver, server.running.web.port)
    page.pick("translate-en-ja")
    page.wait(lambda: page.find("#beam").get_attribute("max") == "8", "beam bounds from the config")
    page.set("#input", "Save changes")
    page.set("#beam", "9")
    assert page.find("#beam").get_attribute("aria-invalid") == "true"
    assert page.run() == "error"
    assert "HTTP 400" in page.error() and "beam_width=9 is out of range" in page.error(), page.error()
    page.set("#beam", "1")
    _, _, body = _get(f"http://127.0.0.1:{server.running.web.port}/v2/models/translate-en-ja/config")
    max_chars = int(json.loads(body)["parameters"]["max_input_chars"]["string_value"])
    page.paste("#input", "Save changes\n" + "a" * (max_chars + 1))
    assert page.run() == "error"
    assert "HTTP 400" in page.error() and str(max_chars) in page.error(), page.error()
    page.set("#input", "Save changes")
    assert page.run() == "done" and page.error() == ""  # the box goes once a run succeeds


@needs_chromium
def test_auth_token(driver):
    srv = ServerThread(server_config(auth_token="s3cret"))
    try:
        page = Page(driver, srv.running.web.port)
        page.wait(page.error, "the error box")
        assert "HTTP 401" in page.error() and "bearer token" in page.error(), page.error()
        page.set("#input", "12+30")
        assert page.run() == "error" and "HTTP 401" in page.error()
        page.set("#token", "s3cret")
        page.find("#input").click()  # the token field's change event lists the models with it
        page.pick("addition")
        assert page.run() == "done", page.error()
        assert page.outputs() == ["42"] and page.error() == ""
        # Kept for this tab: a reload still has it.
        page = Page(driver, srv.running.web.port)
        page.pick("addition")
        assert page.find("#token").get_attribute("value") == "s3cret"
        driver.execute_script("sessionStorage.clear()")
    finally:
        srv.stop()
