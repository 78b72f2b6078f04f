"""`s2s import` refuses what it cannot take, naming the file and the field, and writes nothing; a PyTorch pickle
(read with weights_only=True) imports as well as safetensors, and int8 goes through export's quantization."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bart_models as bm  # noqa: E402
import marian_models as mm  # noqa: E402

from s2s.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A small Marian folder, untrained (these tests read files, they do not compare outputs)."""
    folder = tmp_path_factory.mktemp("marian") / "ok"
    mm.make(folder, steps=0, n_lines=120)
    return folder


def refused(capsys, folder: Path, repo: Path, *needles: str) -> str:
    code = main(["import", str(folder), "--repo", str(repo), "--name", "m"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("s2s import: ") and "Traceback" not in err
    for n in needles:
        assert n in err, err
    assert not repo.exists() or not any(repo.iterdir())  # nothing written to the repository
    return err


def edited(checkpoint: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    shutil.copytree(checkpoint, folder)
    return folder


def edit_json(path: Path, **changes) -> None:
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))


def test_not_a_checkpoint(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    refused(capsys, tmp_path / "empty", tmp_path / "repo", "empty/config.json", "missing")


def test_unsupported_model_type_lists_the_supported(capsys, checkpoint, tmp_path):
    folder = edited(checkpoint, tmp_path)
    edit_json(folder / "config.json", model_type="whisper")
    refused(
        capsys,
        folder,
        tmp_path / "repo",
        "config.json",
        "'model_type' is 'whisper'",
        "supported: marian, m2m_100, bart, mbart, t5, mt5, pegasus",
    )


@pytest.mark.parametrize("name", ["target.spm", "vocab.json"])
def test_missing_tokenizer_file(capsys, checkpoint, tmp_path, name):
    folder = edited(checkpoint, tmp_path)
    (folder / name).unlink()
    refused(capsys, folder, tmp_path / "repo", name, "missing")


def test_corrupt_tokenizer_file(capsys, checkpoint, tmp_path):
    folder = edited(checkpoint, tmp_path)
    (folder / "source.spm").write_bytes(b"\x0a\xffnot a sentencepiece model")
    refused(capsys, folder, tmp_path / "repo", "source.spm", "SentencePiece")


def test_corrupt_weights(capsys, checkpoint, tmp_path):
    folder = edited(checkpoint, tmp_path)
    w = folder / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    refused(capsys, folder, tmp_path / "repo", "model.safetensors", "cannot be read as weights")


def test_no_weights(capsys, checkpoint, tmp_path):
    folder = edited(checkpoint, tmp_path)
    (folder / "model.safetensors").unlink()
    refused(capsys, folder, tmp_path / "repo", "model.safetensors", "pytorch_model.bin")


def test_config_sizes_that_disagree_with_the_weights(capsys, checkpoint, tmp_path):
    folder = edited(checkpoint, tmp_path)
    edit_json(folder / "config.json", encoder_ffn_dim=64, decoder_ffn_dim=64)
    refused(capsys, folder, tmp_path / "repo", "model.safetensors", "fc1", "encoder_ffn_dim")
    edit_json(folder / "config.json", encoder_ffn_dim=16, decoder_ffn_dim=16, encoder_layers=3)
    refused(capsys, folder, tmp_path / "repo", "model.safetensors", "model.encoder.layers.2", "config.json")
    edit_json(folder / "config.json", encoder_layers=1)
    refused(
        capsys, folder, tmp_path / "repo", "model.safetensors", "encoder layer 1", "'encoder_layers' is 1"
    )
    edit_json(folder / "config.json", encoder_layers=2, vocab_size=50, decoder_vocab_size=50)
    refused(capsys, folder, tmp_path / "repo", "vocab.json", "'vocab_size' is 50")
    edit_json(
        folder / "config.json",
        vocab_size=json.loads((checkpoint / "config.json").read_text())["vocab_size"],
        activation_function="gelu_new",
    )
    refused(capsys, folder, tmp_path / "repo", "config.json", "'activation_function' is 'gelu_new'", "swish")


def test_pytorch_pickle_and_int8(capsys, checkpoint, tmp_path):
    """pytorch_model.bin (weights_only=True) instead of safetensors, exported int8: a bundle that records its origin."""
    from safetensors.torch import load_file

    import engine
    from contract import bundle

    folder = edited(checkpoint, tmp_path)
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    repo = tmp_path / "repo"
    assert main(["import", str(folder), "--repo", str(repo), "--name", "m", "--quantize", "int8"]) == 0
    cfg = bundle.read_bundle(repo / "m" / "1")
    assert cfg.quantization.startswith("int8") and cfg.format_version == bundle.FORMAT_IMPORTED
    assert cfg.origin["model_type"] == "marian" and cfg.origin["weights_file"] == "pytorch_model.bin"
    assert cfg.origin["weights_sha256"] == bundle.sha256_file(folder / "pytorch_model.bin")
    assert cfg.task.suppressed_ids == (cfg.model.special.pad,) and cfg.task.beam_size == 4
    out = engine.load(repo / "m" / "1").generate(["the cat", "水"], max_new_tokens=5)
    assert all(len(r.tokens) <= 5 for r in out) and all(cfg.model.special.pad not in r.tokens for r in out)


@pytest.fixture(scope="module")
def family_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Small BART, mBART-50 and NLLB folders, untrained (these tests read files, they do not compare outputs)."""
    root = tmp_path_factory.mktemp("families")
    for family in ("bart", "mbart", "nllb"):
        bm.make(family, root / family, steps=0, n_lines=60)
    return {f: root / f for f in ("bart", "mbart", "nllb")}


@pytest.mark.parametrize("family", ["bart", "mbart", "nllb"])
def test_missing_tokenizer_json(capsys, family_checkpoints, tmp_path, family):
    folder = edited(family_checkpoints[family], tmp_path)
    (folder / "tokenizer.json").unlink()
    refused(capsys, folder, tmp_path / "repo", "tokenizer.json", "missing")


@pytest.mark.parametrize("family", ["bart", "mbart"])
def test_bart_config_that_disagrees_with_its_weights_or_tokenizer(
    capsys, family_checkpoints, tmp_path, family
):
    folder = edited(family_checkpoints[family], tmp_path)
    config = folder / "config.json"
    original = json.loads(config.read_text())
    edit_json(config, encoder_ffn_dim=64, decoder_ffn_dim=64)
    refused(
        capsys, folder, tmp_path / "repo", "model.safetensors", "fc1", "'encoder_ffn_dim / decoder_ffn_dim'"
    )
    edit_json(config, **{**original, "max_position_embeddings": 128})
    refused(
        capsys, folder, tmp_path / "repo", "model.safetensors", "embed_positions", "'max_position_embeddings"
    )
    edit_json(config, **{**original, "decoder_layers": 3})
    refused(capsys, folder, tmp_path / "repo", "model.decoder.layers.2", "'decoder_layers'")
    edit_json(config, **{**original, "vocab_size": 50})
    refused(capsys, folder, tmp_path / "repo", "tokenizer.json", "ids up to", "'vocab_size' is 50")
    edit_json(config, **{**original, "pad_token_id": 0})
    refused(capsys, folder, tmp_path / "repo", "config.json", "'pad_token_id' is 0", "'<pad>' at 1")
    edit_json(config, **{**original, "activation_function": "gelu_new"})
    refused(capsys, folder, tmp_path / "repo", "config.json", "'activation_function' is 'gelu_new'")


def test_a_missing_embedding_norm_is_named(capsys, family_checkpoints, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = edited(family_checkpoints["bart"], tmp_path)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["model.decoder.layernorm_embedding.weight"]
    save_file(weights, str(folder / "model.safetensors"))
    refused(
        capsys,
        folder,
        tmp_path / "repo",
        "model.safetensors",
        "'model.decoder.layernorm_embedding.weight' is missing",
    )


def test_mbart_cc25_and_nllb_legacy_layouts_are_refused_by_name(capsys, family_checkpoints, tmp_path):
    """The source layouts with the language token last (mBART-cc25's MBartTokenizer, NLLB's legacy_behaviour)."""
    folder = edited(family_checkpoints["mbart"], tmp_path)
    edit_json(folder / "tokenizer_config.json", tokenizer_class="MBartTokenizer")
    refused(
        capsys, folder, tmp_path / "repo", "tokenizer_config.json", "'tokenizer_class' is 'MBartTokenizer'"
    )
    edit_json(folder / "tokenizer_config.json", tokenizer_class="MBart50Tokenizer")
    edit_json(folder / "config.json", decoder_start_token_id=250004)
    refused(capsys, folder, tmp_path / "repo", "config.json", "'decoder_start_token_id' is 250004")
    nllb = tmp_path / "nllb"
    shutil.copytree(family_checkpoints["nllb"], nllb)
    edit_json(nllb / "tokenizer_config.json", legacy_behaviour=True)
    refused(capsys, nllb, tmp_path / "repo", "tokenizer_config.json", "'legacy_behaviour' is true")


def test_generation_fields_not_applied_are_named_and_recorded(caplog, checkpoint, tmp_path):
    """repetition_penalty changes generate()'s tokens where the bundle does not follow it: the import says so, what
    differs and what a request can ask instead, and config.json's origin keeps it; min_length and
    forced_eos_token_id are the bundle's own (format 9), applied by the engine (tests/test_generate_end_rules.py)."""
    import logging

    from contract import bundle

    folder = edited(checkpoint, tmp_path)
    edit_json(folder / "generation_config.json", min_length=5, forced_eos_token_id=0, repetition_penalty=1.3)
    repo = tmp_path / "repo"
    with caplog.at_level(logging.WARNING, logger="s2s.import"):
        assert main(["import", str(folder), "--repo", str(repo), "--name", "m"]) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "s2s.import"]
    assert any("repetition_penalty=1.3 is not applied" in m and "a request can ask" in m for m in said), said
    assert not any("min_length" in m or "forced_eos" in m for m in said), said
    cfg = bundle.read_bundle(repo / "m" / "1")
    assert cfg.origin["generation_not_applied"] == {"repetition_penalty": 1.3}
    assert (cfg.task.min_length, cfg.task.forced_eos_id, cfg.format_version) == (
        5,
        0,
        bundle.FORMAT_END_RULES,
    )
