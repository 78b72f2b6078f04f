"""Graphs past ONNX's 2 GB protobuf limit (NLLB-600M's hold 1.76 GB of weights each) keep their weights in
``<graph>.data`` beside them, which config.json hashes like the graphs, the float32 export and the int8 conversion
alike. Shown on the addition model with both thresholds at 0, so that its few kB take the way a big model's
gigabytes take (docs/studies/nllb-600m.md measured the real size)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CHECKPOINTS, MODEL_REPO, decode

from contract.bundle import read_bundle, sha256_file

pytest.importorskip("torch")
ADDITION = CHECKPOINTS / "addition"
pytestmark = pytest.mark.skipif(
    not (ADDITION / "test.tsv").is_file(), reason=f"no addition checkpoint at {ADDITION} (run `make models`)"
)


def sources(n: int = 64) -> list[str]:
    return [line.split("\t")[0] for line in (ADDITION / "test.tsv").read_text().splitlines()[:n]]


@pytest.mark.slow
def test_large_graphs_keep_hashed_external_data_and_decode_as_inline_ones(tmp_path: Path, monkeypatch):
    from engine import Translator
    from export import quantize
    from export.onnx_export import ExportOptions, export

    inline = MODEL_REPO / "addition" / "1"
    int8_inline = tmp_path / "int8-inline"
    quantize.convert_bundle(inline, int8_inline, "int8")  # before the threshold moves: graphs whole
    assert quantize.graph_data_files(int8_inline) == []

    monkeypatch.setattr("torch.onnx._internal.exporter._onnx_program._LARGE_MODEL_THRESHOLD", 0)
    monkeypatch.setattr(quantize, "LARGE_GRAPH_BYTES", 0)
    out = export(ExportOptions(ADDITION, tmp_path / "repo", "addition", 1))
    cfg = read_bundle(out)  # every file's sha256 checked, the graphs' external data among them
    assert quantize.graph_data_files(out) == ["encoder.onnx.data", "decoder.onnx.data"]
    for f in quantize.graph_data_files(out):
        assert cfg.files[f] == sha256_file(out / f)
    assert decode(Translator(out), sources()) == decode(Translator(inline), sources())

    int8 = tmp_path / "int8"
    quantize.convert_bundle(out, int8, "int8")
    got = read_bundle(int8)
    # the float graphs' data replaced by the int8 graphs' own, nothing of the scratch work left, all readable
    assert sorted(p.name for p in int8.iterdir()) == sorted(
        [
            "config.json",
            "tokenizer.json",
            "encoder.onnx",
            "decoder.onnx",
            "encoder.onnx.data",
            "decoder.onnx.data",
        ]
    )
    assert set(got.files) == {p.name for p in int8.iterdir()} - {"config.json"}
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in int8.iterdir())
    assert (int8 / "decoder.onnx.data").stat().st_size < (out / "decoder.onnx.data").stat().st_size
    assert decode(Translator(int8), sources()) == decode(Translator(int8_inline), sources())
