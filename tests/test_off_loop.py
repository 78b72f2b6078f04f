"""Heavy request work runs off the event loop that every door and the health checks share: which thread ran
it is asserted, not how long a concurrent call took (a wall-clock bound fails on a busy machine and passes
when the work merely happens to be fast)."""

from __future__ import annotations

import http.client
import json
import threading

import pytest
from conftest import ServerThread, server_config

from server.doors import libretranslate
from server.models import prepare, served_version
from server.transport import http_body


@pytest.fixture(scope="module")
def srv(model_repo):
    s = ServerThread(server_config())
    yield s
    s.stop()


def _spy(monkeypatch, module, name: str) -> list[threading.Thread]:
    """Record the thread each call of ``module.name`` runs in; the real function does the work."""
    threads: list[threading.Thread] = []
    real = getattr(module, name)

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return threads


def _post(srv, body: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.config.http_port, timeout=120)
    try:
        conn.request("POST", "/translate", body.encode(), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_a_big_json_body_is_checked_in_a_worker_thread(srv, monkeypatch):
    threads = _spy(monkeypatch, http_body, "parse_json")
    many = json.dumps({"q": ["Hi"] * 650_000 + ["\ud800"], "source": "en", "target": "ja"})  # ~4 MB
    status, answer = _post(srv, many)
    assert status == 400 and "q[650000] holds a lone UTF-16 surrogate" in answer["error"], answer
    assert threads and all(t is not srv.thread for t in threads), threads


def test_a_small_json_body_is_checked_on_the_loop(srv, monkeypatch):
    """Below the threshold a thread hand-off would cost more than the parse."""
    threads = _spy(monkeypatch, http_body, "parse_json")
    status, answer = _post(srv, json.dumps({"q": "Good morning.", "source": "en", "target": "ja"}))
    assert status == 200 and answer["translatedText"], answer
    assert threads == [srv.thread]


def test_html_is_parsed_in_a_worker_thread(srv, monkeypatch):
    threads = _spy(monkeypatch, libretranslate, "parse_all")
    within = json.dumps(
        {
            "q": "<i></i>" * 8000 + '<p title="' + "&amp;" * 30_000 + '">Hello.</p>',
            "source": "en",
            "target": "ja",
            "format": "html",
        }
    )
    status, answer = _post(srv, within)
    assert status == 200 and "<p title=" in answer["translatedText"], str(answer)[:200]
    assert threads and all(t is not srv.thread for t in threads), threads


def test_html_over_the_limits_is_refused_before_any_parse(srv, monkeypatch):
    threads = _spy(monkeypatch, libretranslate, "parse_all")
    huge = json.dumps({"q": "<b>" * 1_300_000, "source": "en", "target": "ja", "format": "html"})  # ~4 MB
    status, answer = _post(srv, huge)
    assert status == 400 and "at most 262144 are parsed" in answer["error"], answer
    assert threads == []


def test_a_long_request_is_planned_in_a_worker_thread_and_a_short_one_on_the_loop(srv, monkeypatch):
    """Planning a text (its spans, its pieces, their tokens) takes milliseconds per 4,096 characters: a request
    longer than INLINE_CHARS is prepared in the parse lane, the usual short one where the hand-off would cost more."""
    threads = _spy(monkeypatch, served_version, "prepare")
    long_text = " ".join(["Save the file %s to {folder} now."] * 120)[: prepare.INLINE_CHARS + 1]
    status, answer = _post(srv, json.dumps({"q": long_text, "source": "en", "target": "ja"}))
    assert status == 200 and answer["translatedText"], answer
    assert threads and all(t is not srv.thread for t in threads), threads
    threads.clear()
    status, answer = _post(srv, json.dumps({"q": "Save the file %s.", "source": "en", "target": "ja"}))
    assert status == 200 and answer["translatedText"], answer
    assert threads == [srv.thread]
