"""generate()'s rules on where an output ends, as an imported bundle records them and the engine's search follows them:
``forced_eos_token_id`` (every OPUS-MT generation_config.json sets it: an output that reaches max_length ends with
EOS), ``min_length`` and ``early_stopping`` (True, False, "never"), token-identical to transformers' ``generate()``
greedy and beam 4 on a tiny trained Marian whose outputs often reach max_length. A bundle without the fields (every
bundle before them) decodes as before: as generate() without them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import marian_models as mm  # noqa: E402
from conftest import ROOT  # noqa: E402

from contract import bundle  # noqa: E402

MAX_LENGTH = 9  # the start token and 8 more: many of these outputs are longer


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(transformers model read back from the folder, MarianTokenizer, bundle folder, inputs), imported by the CLI."""
    from transformers import MarianMTModel

    root = tmp_path_factory.mktemp("end_rules")
    _, tok, src = mm.make(root / "ckpt", seed=3, heads=2)
    gen_file = root / "ckpt" / "generation_config.json"
    gen = json.loads(gen_file.read_text())
    gen_file.write_text(json.dumps({**gen, "forced_eos_token_id": 0, "max_length": MAX_LENGTH}))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "s2s.cli",
            "import",
            str(root / "ckpt"),
            "--repo",
            str(root / "repo"),
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
    model = MarianMTModel.from_pretrained(str(root / "ckpt")).eval()
    joined = [f"{a} {b}" for a, b in zip(src[::2], src[1::2])]
    return model, tok, root / "repo" / "m" / "1", (src[:60] + joined[:60])


def hf_generate(model, tok, texts: list[str], **kw) -> list[list[int]]:
    """generate()'s outputs (its generation_config.json's, with ``kw`` on top), without start token, EOS, padding."""
    out = []
    for i in range(0, len(texts), 40):
        enc = tok(texts[i : i + 40], return_tensors="pt", padding=True)
        with torch.no_grad():
            rows = model.generate(**enc, **kw)[:, 1:].tolist()
        out += [
            [t for t in (r[: r.index(0)] if 0 in r else r) if t != model.config.pad_token_id] for r in rows
        ]
    return out


def with_task(folder, tmp_path, format_version: int | None = None, **task):
    """The bundle with its task's end rules changed in config.json (the files it hashes are the graphs and
    tokenizers): what a bundle that records other values decodes like."""
    copy = tmp_path / "bundle"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).symlink_to(f)
    (copy / bundle.CONFIG_FILE).unlink()
    cfg = json.loads((folder / bundle.CONFIG_FILE).read_text())
    for k, v in task.items():
        if v is None:
            cfg["task"].pop(k, None)
        else:
            cfg["task"][k] = v
    cfg["format_version"] = format_version or cfg["format_version"]
    (copy / bundle.CONFIG_FILE).write_text(json.dumps(cfg))
    return copy


def same(folder, want: list[list[int]], texts: list[str], beam: int) -> None:
    import engine

    got = [
        r.tokens for r in engine.load(folder, threads=1).generate(texts, beam_size=beam, max_batch_size=32)
    ]
    wrong = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert wrong == [], f"beam {beam}: {len(wrong)}/{len(texts)} differ; first: {wrong[0]}"


@pytest.mark.parametrize("beam", [1, 4])
def test_forced_eos_at_max_length_as_generate(imported, beam):
    model, tok, folder, texts = imported
    cfg = bundle.read_bundle(folder)
    assert cfg.task.forced_eos_id == 0 and cfg.format_version == bundle.FORMAT_END_RULES
    assert cfg.task.max_new_tokens == MAX_LENGTH - 1
    want = hf_generate(model, tok, texts, num_beams=beam)
    at_limit = sum(len(w) == MAX_LENGTH - 2 for w in want)  # the forced EOS took the last place
    assert at_limit > len(texts) // 4, at_limit
    assert want != hf_generate(
        model, tok, texts, num_beams=beam, forced_eos_token_id=None
    )  # the rule matters
    same(folder, want, texts, beam)


@pytest.mark.parametrize("early_stopping", [True, "never"])
def test_early_stopping_as_generate(imported, tmp_path, early_stopping):
    model, tok, folder, texts = imported
    b = with_task(folder, tmp_path, early_stopping=early_stopping, length_penalty=1.5)
    want = hf_generate(model, tok, texts, num_beams=4, early_stopping=early_stopping, length_penalty=1.5)
    assert want != hf_generate(model, tok, texts, num_beams=4, early_stopping=False, length_penalty=1.5)
    same(b, want, texts, 4)


@pytest.mark.parametrize("beam", [1, 4])
def test_min_length_as_generate(imported, tmp_path, beam):
    model, tok, folder, texts = imported
    b = with_task(folder, tmp_path, min_length=6)
    want = hf_generate(model, tok, texts, num_beams=beam, min_length=6)
    assert want != hf_generate(model, tok, texts, num_beams=beam)  # some outputs were shorter
    same(b, want, texts, beam)


def test_a_bundle_without_the_fields_decodes_as_before(imported, tmp_path):
    """No forced_eos_id (as every bundle before it): outputs that reach max_length end without EOS, as generate()
    without forced_eos_token_id."""
    model, tok, folder, texts = imported
    b = with_task(folder, tmp_path, bundle.FORMAT_IMPORTED, forced_eos_id=None)  # a Marian bundle before them
    for beam in (1, 4):
        same(b, hf_generate(model, tok, texts, num_beams=beam, forced_eos_token_id=None), texts, beam)
