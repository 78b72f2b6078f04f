"""Which model the LibreTranslate API sends a pair to (server/doors/libretranslate_pairs.py), on a real server with
the real libretranslatepy client: an imported OPUS-MT folder that names en -> ja and sorts before translate-en-ja
does not take the pair, ``--pair`` gives it the pair, the log says each pair's model, and `s2s import
--source-lang/--target-lang` records a pair for a folder that names none."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import MODEL_REPO, ServerThread, link_model, server_config
from libretranslatepy import LibreTranslateAPI

from s2s.seq2seq_client import Seq2SeqClient

os.environ["HF_HUB_OFFLINE"] = "1"
TIMEOUT = 60
TEXTS = ["the cat sees a dog", "big red house"]
OPUS = "aaa-opus-en-ja"  # sorts before translate-en-ja


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def pair_log():
    handler, logger = Lines(), logging.getLogger("s2s.libretranslate")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(old)


@pytest.fixture(scope="module")
def repo(tmp_path_factory, model_repo):
    """translate-en-ja (both versions); an OPUS-MT-like Marian folder that names no languages, imported by
    `s2s import --source-lang en --target-lang ja` under a name that sorts first; and its bundle again as fr -> ja
    (the same files, another pair: only routing differs)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import marian_models as mm

    from contract import bundle
    from s2s.cli import main

    root = tmp_path_factory.mktemp("pairs")
    repo = root / "models"
    for version in ("1", "2"):
        link_model(repo, "translate-en-ja", MODEL_REPO / "translate-en-ja" / version)
    mm.make(root / "opus", steps=60)
    tok_cfg = json.loads((root / "opus" / "tokenizer_config.json").read_text())
    assert not (tok_cfg.get("source_lang") or tok_cfg.get("target_lang"))  # a folder that names no pair
    args = ["--name", OPUS, "--source-lang", "en", "--target-lang", "ja"]
    assert main(["import", str(root / "opus"), "--repo", str(repo), *args]) == 0
    src, fr = repo / OPUS / "1", repo / "fr-ja" / "1"
    link_model(repo, "fr-ja", src)
    (fr / "config.json").unlink()
    cfg = bundle.read_bundle(src, verify_hashes=False)
    dataclasses.replace(cfg, name="fr-ja", source_language="fr").write(fr)
    return repo


def config_json(repo, name: str) -> dict:
    return json.loads((repo / name / "1" / "config.json").read_text())


def base(srv) -> str:
    return f"http://127.0.0.1:{srv.running.web.port}/"


def grpc_generate(srv, model: str, texts: list[str]) -> list[str]:
    with Seq2SeqClient(srv.address) as c:
        return c.generate(model, texts)


def libre(srv, source: str, target: str) -> list[str]:
    lt = LibreTranslateAPI(base(srv))
    return [lt.translate(q, source, target, timeout=TIMEOUT) for q in TEXTS]


def test_import_records_the_languages(repo):
    opus = config_json(repo, OPUS)
    assert (opus["source_language"], opus["target_language"]) == ("en", "ja")  # the flags
    assert opus["origin"]["model_type"] == "marian"


def test_import_languages_flags_over_tokenizer_config():
    """The flags win over tokenizer_config.json's source_lang / target_lang, which are taken where they are codes;
    a multilingual model takes as flags only codes of its own languages."""
    from contract.languages import Languages
    from export.hf_import import ImportOptions, ImportRefused, Loaded, _languages

    def langs(tok_cfg, languages=None, **flags):
        opts = ImportOptions(Path("folder"), Path("repo"), "m", **flags)
        return _languages(opts, Loaded(config=None, source_tokenizer=None, languages=languages), tok_cfg)

    opus_mt = {"source_lang": "en", "target_lang": "ja"}
    assert langs(opus_mt) == ["en", "ja"]
    assert langs(opus_mt, target_language="de") == ["en", "de"]
    assert langs({"source_lang": "ROMANCE"}, source_language="fr", target_language="ja") == ["fr", "ja"]
    assert langs({"source_lang": "ROMANCE"}) == [None, None]
    m2m = Languages.of_tokens({"__en__": 5, "__ja__": 6})
    assert langs({}, m2m, target_language="ja") == [None, "ja"]
    with pytest.raises(ImportRefused, match="--target-lang 'de' is not one of the model's languages"):
        langs({}, m2m, target_language="de")


def test_import_language_flag_refused(capsys):
    from s2s.cli import main

    with pytest.raises(SystemExit) as e:
        main(["import", "folder", "--name", "x", "--target-lang", "Japanese"])
    assert e.value.code == 2 and "ISO 639-1" in capsys.readouterr().err


def test_default_keeps_its_pair_and_the_log_says_each_pairs_model(repo, pair_log):
    srv = ServerThread(server_config(model_repo=repo, instances=1))
    try:
        assert libre(srv, "en", "ja") == grpc_generate(srv, "translate-en-ja", TEXTS)
        assert libre(srv, "en", "ja") != grpc_generate(srv, OPUS, TEXTS)  # the two models differ
        assert libre(srv, "fr", "ja") == grpc_generate(srv, "fr-ja", TEXTS)  # its own pair
        assert LibreTranslateAPI(base(srv)).languages(timeout=TIMEOUT) == [
            {"code": "en", "name": "English", "targets": ["ja"]},
            {"code": "fr", "name": "French", "targets": ["ja"]},
            {"code": "ja", "name": "Japanese", "targets": []},
        ]
    finally:
        srv.stop()
    said = [line for line in pair_log if line.startswith("LibreTranslate")]
    assert said == [
        f"LibreTranslate en→ja: translate-en-ja v2 (chosen over {OPUS} v1 by the rule of "
        "server/doors/libretranslate_pairs.py)",
        "LibreTranslate fr→ja: fr-ja v1",
    ], said


def test_pair_flag_picks_the_model(repo, pair_log):
    from server.config import from_args

    parser = argparse.ArgumentParser()
    from server.config import add_arguments

    add_arguments(parser)
    picks = from_args(parser.parse_args(["--pair", f"en-ja={OPUS}"]), {}).pair
    srv = ServerThread(server_config(model_repo=repo, instances=1, pair=picks))
    try:
        assert libre(srv, "en", "ja") == grpc_generate(srv, OPUS, TEXTS)
        assert libre(srv, "fr", "ja") == grpc_generate(srv, "fr-ja", TEXTS)
    finally:
        srv.stop()
    assert f"LibreTranslate en→ja: {OPUS} v1 (--pair en-ja={OPUS})" in pair_log, pair_log


def _post(srv, path: str, body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(
        base(srv) + path,
        data=json.dumps(body or {}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_picked_model_unloaded_is_503_then_serves_again(repo, pair_log):
    """Explicit model control: the picked model unloaded, its pair answers 503 naming the --pair (never another
    model's translation); loaded again, it has the pair back, and the log says both changes."""
    from server.models.languages import PairPick

    srv = ServerThread(
        server_config(
            model_repo=repo,
            instances=1,
            model_control_mode="explicit",
            load_model=("translate-en-ja", OPUS),
            pair=(PairPick("en", "ja", OPUS),),
        )
    )
    try:
        ask = {"q": "the cat", "source": "en", "target": "ja"}
        assert _post(srv, "translate", ask) == (
            200,
            {"translatedText": grpc_generate(srv, OPUS, ["the cat"])[0]},
        )
        assert _post(srv, f"v2/repository/models/{OPUS}/unload")[0] == 200
        status, body = _post(srv, "translate", ask)
        assert status == 503 and f"--pair en-ja={OPUS}" in body["error"] and "not loaded" in body["error"], (
            body
        )
        assert _post(srv, f"v2/repository/models/{OPUS}/load")[0] == 200
        assert _post(srv, "translate", ask)[0] == 200
    finally:
        srv.stop()
    said = [line for line in pair_log if line.startswith("LibreTranslate en→ja")]
    assert said[0] == said[-1] == f"LibreTranslate en→ja: {OPUS} v1 (--pair en-ja={OPUS})", said
    assert any(line.startswith("LibreTranslate en→ja: not served (") for line in said), said


def test_pair_naming_no_served_model_fails_the_start(repo):
    from server.app import start
    from server.errors import ModelNotFound
    from server.models.languages import PairPick

    for pick, why in (
        (PairPick("en", "ja", "nope"), "which is not loaded"),
        (PairPick("en", "ja", "fr-ja"), "does not translate that pair"),
    ):
        config = server_config(model_repo=repo, instances=1, models=("fr-ja",), pair=(pick,))
        with pytest.raises(ModelNotFound) as e:
            asyncio.run(start(config))
        assert f"--pair {pick}" in str(e.value) and why in str(e.value), e.value


@pytest.mark.parametrize(
    "items, message",
    [
        (["en-ja"], "expected SOURCE-TARGET=MODEL"),
        (["english-ja=m"], "is not SOURCE-TARGET of two language codes"),
        (["pt-br-en=m"], "write it SOURCE:TARGET"),
        (["en-en=m"], "the same"),
        (["en-ja=a", "en-ja=b"], "already given to 'a'"),
    ],
)
def test_pair_flag_refused(items, message):
    from server.config import add_arguments, from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([a for item in items for a in ("--pair", item)])
    with pytest.raises(SystemExit, match=message):
        from_args(args, {})


def test_pair_flag_forms():
    from server.config import add_arguments, from_args
    from server.models.languages import PairPick

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--pair", "en-ja=a", "--pair", "zh-Hant-en=b,pt-br:en=c"])
    assert from_args(args, {}).pair == (
        PairPick("en", "ja", "a"),
        PairPick("zh-Hant", "en", "b"),
        PairPick("pt-br", "en", "c"),
    )
    assert from_args(parser.parse_args([]), {"S2S_PAIR": "en-ja=a, fr-ja=b"}).pair == (
        PairPick("en", "ja", "a"),
        PairPick("fr", "ja", "b"),
    )
