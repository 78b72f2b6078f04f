"""Heavy request bodies stay off the event loop, and limits name what they limit: a big urlencoded
LibreTranslate body and many html bodies at once are parsed in the front end's one parse lane, a form of
40,000 fields is refused for its fields (not for a size it is under), and a bundle's external-data files
are covered by its sha256 check.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from conftest import MODEL_REPO, ServerThread, server_config

JA = "translate-en-ja"


@pytest.fixture(scope="module")
def srv(model_repo):
    s = ServerThread(server_config(models=(JA,), instances=1, max_message_bytes=8 * 1024 * 1024))
    yield s
    s.stop()


def post(srv, body: bytes, content_type: str) -> tuple[int, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.config.http_port}/translate",
        data=body,
        method="POST",
        headers={"Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()).get("error", "")


class LoopLag:
    """The longest the server's event loop went without running a 5 ms timer, while in the ``with`` block."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.worst, self.stop = loop, 0.0, False

    async def _probe(self) -> None:
        last = time.monotonic()
        while not self.stop:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            self.worst, last = max(self.worst, now - last), now

    def __enter__(self):
        self.task = asyncio.run_coroutine_threadsafe(self._probe(), self.loop)
        return self

    def __exit__(self, *exc) -> None:
        self.stop = True
        self.task.result(10)


def parse_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("parse")]


@pytest.mark.serial
def test_a_big_urlencoded_body_is_parsed_off_the_event_loop(srv):
    body = b"source=en&target=ja&q=" + b"%41" * (2 * 1024 * 1024)  # 6 MiB of percent-escapes
    with LoopLag(srv.loop) as lag:
        status, error = post(srv, body, "application/x-www-form-urlencoded")
    assert status == 400 and "characters" in error  # parsed, then refused by the model's input limit
    assert parse_threads() == ["parse_0"]  # the parse lane did it
    assert lag.worst < 1.0, f"the event loop stalled {lag.worst:.2f} s"  # a generous liveness bound


def test_many_html_bodies_at_once_wait_their_turn_in_one_lane(srv):
    page = json.dumps(
        {"q": "<p>Save</p>" + "<i></i>" * 8000, "source": "en", "target": "ja", "format": "html"}
    ).encode()
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(post(srv, page, "application/json")[0]))
        for _ in range(32)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == [200] * 32
    assert parse_threads() == ["parse_0"]  # one thread parsed them all, one after another


def multipart(fields: list[tuple[str, str]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields]
    return ("".join(parts) + f"--{boundary}--\r\n").encode(), f"multipart/form-data; boundary={boundary}"


def test_a_form_of_many_fields_is_refused_for_its_fields(srv):
    body, ctype = multipart(
        [("source", "en"), ("target", "ja"), ("q", "Save")] + [(f"f{i}", "x") for i in range(40_000)]
    )
    assert 2_000_000 < len(body) < 4 * 1024 * 1024
    status, error = post(srv, body, ctype)
    assert status == 400 and "at most 256" in error, (status, error)
    body, ctype = multipart([("source", "en"), ("target", "ja"), ("q", "Save")])
    status, text = post(srv, body, ctype)
    assert status == 200 and json.loads(text)["translatedText"]


def test_external_data_files_are_covered_by_the_sha256_check(tmp_path):
    import onnx

    from contract.bundle import BundleError, read_bundle, sha256_file

    folder = tmp_path / "1"
    shutil.copytree(MODEL_REPO / "addition" / "1", folder)
    graph = onnx.load(str(folder / "decoder.onnx"))
    onnx.save_model(
        graph,
        str(folder / "decoder.onnx"),
        save_as_external_data=True,
        location="decoder.data",
        size_threshold=0,
    )
    cfg = json.loads((folder / "config.json").read_text())
    cfg["files"]["decoder.onnx"] = sha256_file(folder / "decoder.onnx")  # the graph itself hashed again
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BundleError, match="external data 'decoder.data' has no sha256"):
        read_bundle(folder)
    cfg["files"]["decoder.data"] = sha256_file(folder / "decoder.data")
    (folder / "config.json").write_text(json.dumps(cfg))
    read_bundle(folder)  # listed and matching: a valid bundle
    with open(folder / "decoder.data", "r+b") as f:  # one weight changed after export
        f.seek(100)
        f.write(b"\x7f")
    with pytest.raises(BundleError, match="decoder.data: sha256 .* does not match"):
        read_bundle(folder)


def test_a_load_builds_its_tokenizer_off_the_event_loop(tmp_path, monkeypatch):
    """A model's bundle and tokenizer are read in a worker thread (a vocabulary of a million entries took 2 s to
    build): which thread built the loaded version is asserted, as in tests/test_off_loop.py."""
    from server.models import registry

    repo = tmp_path / "models"
    shutil.copytree(MODEL_REPO / "addition" / "1", repo / "addition" / "1")
    srv = ServerThread(server_config(model_repo=repo, model_control_mode="explicit", instances=1))
    threads: list[threading.Thread] = []
    real = registry.ServedModels.build

    def recorded(self, name, version):
        threads.append(threading.current_thread())
        return real(self, name, version)

    monkeypatch.setattr(registry.ServedModels, "build", recorded)
    try:
        req = urllib.request.Request(
            f"http://127.0.0.1:{srv.config.http_port}/v2/repository/models/addition/load",
            data=b"",
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200
        assert threads and all(t is not srv.thread for t in threads), threads
        assert srv.running.repo.get("addition").ready
    finally:
        srv.stop()
