"""`s2s import` (the CLI in a child process) of M2M100 folders whose ``sentencepiece.bpe.model`` is what its name says,
a SentencePiece BPE model (the real M2M100's), and a unigram one: the bundle's tokenizer (only ``tokenizers``) gives
M2M100Tokenizer's ids (sentencepiece + vocab.json) on a few hundred mixed strings, language tokens included, and
decodes as it does."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_parity as hp  # noqa: E402
import m2m100_models as m2m  # noqa: E402
import marian_models as mm  # noqa: E402
from conftest import ROOT  # noqa: E402

from contract import bundle  # noqa: E402


def mixed(n: int, seed: int) -> list[str]:
    """Lines like the training ones, words glued together, character soup (letters, digits, punctuation, symbols
    no piece holds, runs of spaces) and the awkward cases of the other parity tests."""
    rng = random.Random(seed)
    pool = list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 .,!?'-  ") + list("猫犬家ｶﾀéü☃Ω①ﬁ\u3000")
    soup = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(n // 3)]
    glued = ["".join(rng.choice(mm.WORDS) for _ in range(rng.randint(1, 5))) for _ in range(n // 3)]
    return mm.lines(n // 3, seed, japanese=True) + soup + glued + hp.AWKWARD


def same_ids(tok, folder, texts: list[str]) -> None:
    """The bundle's codec and M2M100Tokenizer agree on every text's ids (per source language) and decodings."""
    from contract.text import TextCodec

    cfg = bundle.read_bundle(folder)
    codec = TextCodec.from_file(folder / bundle.TOKENIZER_FILE, cfg.task, cfg.model.special)
    for source in ("en", "ja"):
        tok.src_lang = source
        wrong = [
            t
            for t in texts
            if tok(t)["input_ids"] != cfg.languages.apply(codec.source_ids(t), source, "de")[0]
        ]
        assert wrong == [], wrong[:5]
    ids = [tok(t)["input_ids"][1:] for t in texts]
    assert [codec.decode(i) for i in ids] == tok.batch_decode(ids, skip_special_tokens=True)


def test_a_bpe_sentencepiece_gives_the_slow_tokenizers_ids(tmp_path):
    _, tok, _ = m2m.make(tmp_path / "ckpt", steps=0, n_lines=120, spm_type="bpe")
    repo = tmp_path / "repo"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "s2s.cli",
            "import",
            str(tmp_path / "ckpt"),
            "--repo",
            str(repo),
            "--name",
            "m",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    same_ids(tok, repo / "m" / "1", mixed(300, 5))


def test_a_unigram_sentencepiece_gives_the_slow_tokenizers_ids(m2m100):
    """The session's M2M100 (tests/conftest.py), whose sentencepiece.bpe.model is a unigram model."""
    _, tok, folder, _ = m2m100
    same_ids(tok, folder, mixed(300, 6))
