"""The LibreTranslate API's access and routing: auth by bearer token or api_key (the real libretranslatepy
client included), two source languages (no auto, no detect), no declared languages; and the bundle's language
fields (contract/bundle.py) that the API routes by, with the export's flags for them.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import urllib.error

import pytest
from conftest import MODEL_REPO, ServerThread, server_config
from libretranslate_calls import JAPANESE, TIMEOUT, call, url
from libretranslatepy import LibreTranslateAPI

from s2s.seq2seq_client import Seq2SeqClient

pytestmark = pytest.mark.skipif(
    not (MODEL_REPO / "translate-en-ja").is_dir(), reason="no translate-en-ja model"
)


# ---- auth -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def auth_srv(model_repo):
    s = ServerThread(server_config(auth_token="s3cret", models=("translate-en-ja",), instances=1))
    yield s
    s.stop()


def test_auth(auth_srv):
    body = {"q": "Save", "source": "en", "target": "ja"}
    for path, b, method in (
        ("translate", body, "POST"),
        ("detect", {"q": "Save"}, "POST"),
        ("languages", None, "GET"),
    ):
        status, answer = call(auth_srv, path, b, method=method)
        assert status == 401 and "bearer token" in answer["error"], (path, answer)
        status, answer = call(auth_srv, path, {**(b or {}), "api_key": "wrong"}, form=True, method=method)
        assert status == 401, (path, answer)
        status, _ = call(auth_srv, path, b, method=method, headers={"Authorization": "Bearer s3cret"})
        assert status == 200, path
        status, _ = call(auth_srv, path, {**(b or {}), "api_key": "s3cret"}, method=method)
        assert status == 200, path
    expected = grpc_with_token(auth_srv, ["Save"])[0]
    lt = LibreTranslateAPI(url(auth_srv), api_key="s3cret")  # form-encoded api_key, on GET /languages too
    assert lt.translate("Save", "en", "ja", timeout=TIMEOUT) == expected
    assert lt.languages(timeout=TIMEOUT)[0]["code"] == "en"
    assert lt.detect("Save", timeout=TIMEOUT) == [{"confidence": 100.0, "language": "en"}]
    with pytest.raises(urllib.error.HTTPError) as e:
        LibreTranslateAPI(url(auth_srv)).translate("Save", "en", "ja", timeout=TIMEOUT)
    assert e.value.code == 401


def grpc_with_token(srv, texts):
    with Seq2SeqClient(srv.address, token="s3cret") as c:
        return c.generate("translate-en-ja", texts)


# ---- two source languages: no auto, no detect -----------------------------------------------------------------
@pytest.fixture(scope="module")
def two_sources(model_repo, tmp_path_factory):
    """The en-ja bundle served twice, once declared as fr -> ja (the files are the same; only routing is tested)."""
    from contract import bundle

    repo = tmp_path_factory.mktemp("repo")
    src = MODEL_REPO / "translate-en-ja" / "1"
    for name, lang in (("translate-en-ja", "en"), ("translate-fr-ja", "fr")):
        d = repo / name / "1"
        d.mkdir(parents=True)
        for f in bundle.PAYLOAD_FILES:
            (d / f).symlink_to(src / f)
        cfg = bundle.read_bundle(src, verify_hashes=False)
        dataclasses.replace(cfg, name=name, source_language=lang).write(d)
    s = ServerThread(server_config(model_repo=repo, instances=1))
    yield s
    s.stop()


def test_two_sources(two_sources):
    assert call(two_sources, "languages", method="GET") == (
        200,
        [
            {"code": "en", "name": "English", "targets": ["ja"]},
            {"code": "fr", "name": "French", "targets": ["ja"]},
            {"code": "ja", "name": "Japanese", "targets": []},
        ],
    )
    status, answer = call(two_sources, "translate", {"q": "Save", "source": "auto", "target": "ja"})
    assert status == 400 and "(en, fr)" in answer["error"] and "send one of them as source" in answer["error"]
    status, answer = call(two_sources, "detect", {"q": "Save"})
    assert status == 400 and answer["error"].startswith("language detection is not available: ")
    assert "en, fr" in answer["error"]
    status, answer = call(two_sources, "translate", {"q": "Save", "source": "fr", "target": "ja"})
    assert status == 200 and JAPANESE.search(answer["translatedText"])


def test_no_declared_languages():
    from server.doors.libretranslate import languages, resolve
    from server.errors import InvalidInput

    assert languages({}) == []
    with pytest.raises(InvalidInput, match="no served model declares its languages"):
        resolve({}, "en", "ja")


# ---- the bundle's language fields -----------------------------------------------------------------------------
def test_bundle_languages_round_trip(tmp_path):
    from contract import bundle

    b = tmp_path / "1"
    shutil.copytree(MODEL_REPO / "translate-en-ja" / "1", b)
    cfg = bundle.read_bundle(b)
    assert (cfg.source_language, cfg.target_language) == ("en", "ja")  # the committed bundle says them
    dataclasses.replace(cfg, source_language="de", target_language="zh-Hant").write(b)
    again = bundle.read_bundle(b)
    assert (again.source_language, again.target_language) == ("de", "zh-Hant")
    assert json.loads((b / "config.json").read_text())["source_language"] == "de"

    # An older bundle (no fields) loads, with None, and is written back without them.
    d = json.loads((b / "config.json").read_text())
    del d["source_language"], d["target_language"]
    (b / "config.json").write_text(json.dumps(d))
    old = bundle.read_bundle(b)
    assert (old.source_language, old.target_language) == (None, None)
    assert "source_language" not in old.to_dict() and "target_language" not in old.to_dict()

    d["source_language"] = "English"
    (b / "config.json").write_text(json.dumps(d))
    with pytest.raises(bundle.BundleError, match="source_language must be an ISO 639-1"):
        bundle.read_bundle(b)


def test_export_flags(capsys):
    from s2s.cli import main

    with pytest.raises(SystemExit) as e:
        main(["export", "ckpt", "--name", "x", "--source-lang", "English"])
    assert e.value.code == 2 and "ISO 639-1" in capsys.readouterr().err
    from export.onnx_export import ExportOptions  # imports torch (a few seconds); runs no export

    opts = ExportOptions(MODEL_REPO, MODEL_REPO, "x", source_language="en", target_language="ja")
    assert (opts.source_language, opts.target_language) == ("en", "ja")
