"""`s2s import` (the CLI in a child process) on folders whose few bytes are wrong: sizes larger than the weights hold
are refused before anything is built by them (no table of a billion ids, no ten million layers), and every field that
is not what generate() takes (an id "abc", 1.5 or -1, a vocab.json that is not JSON, num_beams "many" or 1e9) is a
refusal with rc 2 naming the file and the field, never a traceback; a max_length past the model's positions imports,
said in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("torch")
pytest.importorskip("transformers")

import m2m100_models as m2m  # noqa: E402
import marian_models as mm  # noqa: E402
from conftest import ROOT  # noqa: E402


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Untrained tiny Marian and M2M100 folders (these tests read files, they do not compare outputs)."""
    root = tmp_path_factory.mktemp("limits")
    mm.make(root / "marian", steps=0, n_lines=120)
    m2m.make(root / "m2m100", steps=0, n_lines=60)
    return {"marian": root / "marian", "m2m100": root / "m2m100"}


def s2s_import(folder: Path, repo: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, "-m", "s2s.cli", "import", str(folder), "--repo", str(repo), "--name", "m"],
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: today's refusals come in seconds
        env=env,
        cwd=ROOT,
    )


def edited(src: Path, tmp_path: Path, file: str, **changes) -> Path:
    folder = tmp_path / f"ckpt-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(src, folder)
    d = json.loads((folder / file).read_text())
    d.update(changes)
    (folder / file).write_text(json.dumps(d))
    return folder


def refused(folder: Path, repo: Path, *needles: str) -> None:
    r = s2s_import(folder, repo)
    assert r.returncode == 2 and r.stderr.startswith("s2s import: "), r.stderr[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    for n in needles:
        assert n in r.stderr, (n, r.stderr[-2000:])
    assert not repo.exists() or not any(repo.iterdir())


def in_process(capsys):
    """``refused`` through ``s2s.cli.main`` in this process: the same code, without a child's start-up."""
    from s2s.cli import main

    def check(folder: Path, repo: Path, *needles: str) -> None:
        code = main(["import", str(folder), "--repo", str(repo), "--name", "m"])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("s2s import: ") and "Traceback" not in err, err[-2000:]
        for n in needles:
            assert n in err, (n, err[-2000:])
        assert not repo.exists() or not any(repo.iterdir())

    return check


def test_sizes_past_what_the_weights_hold_are_refused_before_anything_is_built(checkpoints, tmp_path):
    marian, repo = checkpoints["marian"], tmp_path / "repo"
    vocab = json.loads((marian / "vocab.json").read_text())
    big = edited(marian, tmp_path, "config.json", vocab_size=1_000_000_000)
    (big / "vocab.json").write_text(json.dumps({**vocab, "far": 999_999_999}))
    refused(big, repo, "config.json", "'vocab_size' is 1000000000", "model.safetensors", "rows")
    long = edited(marian, tmp_path, "config.json", max_position_embeddings=1e9)
    refused(long, repo, "config.json", "'max_position_embeddings' is 1000000000", "at most 65536")
    deep = edited(marian, tmp_path, "config.json", encoder_layers=10_000_000)
    refused(deep, repo, "config.json", "'encoder_layers' is 10000000", "holds 2 encoder layers")


def test_a_vocabulary_id_that_is_not_an_id_is_named(checkpoints, tmp_path, capsys):
    """A string, a fraction, a negative id (which indexed the last piece) or a boolean, in vocab.json: the child
    process for the first two, the same CLI in this process for the others."""
    for i, bad in enumerate(["abc", -1, 1.5, True]):
        folder = edited(checkpoints["marian"], tmp_path, "vocab.json", cat=bad)
        needles = ("vocab.json", "entry 'cat'", f"has id {bad!r}", "'vocab_size'")
        (refused if i < 2 else in_process(capsys))(folder, tmp_path / "repo", *needles)


def test_an_m2m100_vocab_json_that_is_not_json_is_named(checkpoints, tmp_path):
    folder = tmp_path / "m2m100"
    shutil.copytree(checkpoints["m2m100"], folder)
    (folder / "vocab.json").write_text('{"<s>": 0, "<pad>": 1,')
    refused(folder, tmp_path / "repo", "vocab.json", "not valid JSON")


@pytest.mark.parametrize(
    "field, value, needles",
    [
        ("num_beams", "many", ("'num_beams' is 'many'", "a whole number from 1 to 1024")),
        ("num_beams", 1e9, ("'num_beams' is 1000000000.0", "from 1 to 1024")),
        ("num_beams", 0, ("'num_beams' is 0",)),
        ("max_length", "long", ("'max_length' is 'long'",)),
        ("length_penalty", "x", ("'length_penalty' is 'x'", "a number from 0 to 10")),
        ("no_repeat_ngram_size", -3, ("'no_repeat_ngram_size' is -3",)),
        ("bad_words_ids", [["<pad>"]], ("'bad_words_ids' is '<pad>'",)),
        ("suppress_tokens", 7, ("'suppress_tokens' is 7", "a list of token ids")),
    ],
)
def test_a_generation_field_generate_would_not_take_is_named(
    checkpoints, tmp_path, capsys, field, value, needles
):
    """The child process for num_beams "many" and 1e9; the same CLI in this process for the rest."""
    folder = edited(checkpoints["marian"], tmp_path, "generation_config.json", **{field: value})
    check = refused if field == "num_beams" and value != 0 else in_process(capsys)
    check(folder, tmp_path / "repo", "generation_config.json", *needles)


def test_config_fields_of_the_wrong_type_are_named(checkpoints, tmp_path, capsys):
    for field, value in (("d_model", "sixteen"), ("scale_embedding", "false"), ("eos_token_id", 10**6)):
        folder = edited(checkpoints["marian"], tmp_path, "config.json", **{field: value})
        in_process(capsys)(folder, tmp_path / "repo", "config.json", f"'{field}' is {value!r}")


def test_a_max_length_past_the_positions_imports_at_the_positions(checkpoints, tmp_path):
    from contract import bundle

    folder = edited(checkpoints["marian"], tmp_path, "generation_config.json", max_length=1e12)
    r = s2s_import(folder, tmp_path / "repo")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "max_length=1000000000000 is past the model's 64 positions" in r.stderr
    cfg = bundle.read_bundle(tmp_path / "repo" / "m" / "1")
    assert cfg.task.max_new_tokens == 63 and cfg.model.max_len == 64
