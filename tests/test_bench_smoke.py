"""bench/decode.py's CTranslate2 converter: CTranslate2 greedy equals PyTorch greedy on the same weights.

No timing is asserted; this proves the conversion (bench/ct2_convert.py) that the benchmark's
CTranslate2 column rests on, and that the check is sensitive to the positional-encoding layout.
"""

from __future__ import annotations

import pytest

from conftest import CHECKPOINTS

ct2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is the bench extra: pip install -e '.[bench]'")

ADDITION = CHECKPOINTS / "addition"
pytestmark = pytest.mark.skipif(not (ADDITION / "test.tsv").is_file(),
                                reason=f"no addition checkpoint with test.tsv at {ADDITION} (run `make models`)")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import torch

    from bench.common.ct2 import CT2Translator, convert, vocabulary
    from training import checkpoint
    from training.tasks import read_tsv

    torch.set_num_threads(1)
    out = convert(ADDITION, tmp_path_factory.mktemp("ct2") / "addition", force=True)
    ck = checkpoint.load(ADDITION)
    tokens = vocabulary(ck.codec.tokenizer)
    sources = [s for s, _ in read_tsv(ADDITION / "test.tsv")[:20]]
    budget = min(ck.task.max_new_tokens, ck.config.max_len - 1)
    return ck, tokens, CT2Translator(out, tokens, "float32", 1), sources, budget


def test_ct2_greedy_equals_pytorch_greedy(setup):
    from bench.common.ct2 import verify

    ck, _, translator, sources, budget = setup
    report = verify(ck.model, ck.codec, translator, sources, budget)
    assert report["n"] == len(sources) == 20
    assert report["identical"] == report["n"], report["first_mismatch"]
    assert report["max_abs_logprob_diff"] < 1e-3, report


def test_ct2_forced_length(setup):
    """min = max decoding length forces exactly N tokens, as the benchmark times."""
    ck, _, translator, sources, budget = setup
    rows = translator.greedy([ck.codec.source_ids(s) for s in sources[:4]], budget, force=True)
    assert [len(r) for r in rows] == [budget] * 4


def test_check_detects_wrong_positional_layout(setup, tmp_path):
    """Negative control: CTranslate2's built-in sinusoids (concatenated sin|cos) instead of the
    model's interleaved table must change the log-probabilities, else the check above proves nothing."""
    from ctranslate2.specs import model_spec

    from bench.common.ct2 import CT2Translator, build_spec, save, verify

    ck, tokens, _, sources, budget = setup
    spec = build_spec(ck.model, tokens)
    spec.encoder.position_encodings.encodings = model_spec.OPTIONAL
    spec.decoder.position_encodings.encodings = model_spec.OPTIONAL
    wrong = CT2Translator(save(spec, tmp_path / "builtin-pe"), tokens, "float32", 1)
    report = verify(ck.model, ck.codec, wrong, sources, budget)
    assert report["max_abs_logprob_diff"] > 1e-2, report


@pytest.mark.slow
def test_bench_decode_quick_runs(tmp_path):
    """`bench/decode.py --quick` end to end on the addition model (about 15 s): report written, conversion verified."""
    import subprocess
    import sys

    from conftest import MODEL_REPO, ROOT

    versions = sorted((int(v.name) for v in (MODEL_REPO / "addition").glob("*") if v.name.isdigit()), reverse=True)
    if not versions:
        pytest.skip(f"no addition bundle under {MODEL_REPO / 'addition'}")
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\n<!-- bench-serve:begin -->\nkept\n<!-- bench-serve:end -->\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "decode.py"), "--quick", "--model", "addition", "--checkpoint", str(ADDITION),
         "--bundle", str(MODEL_REPO / "addition" / str(versions[0])), "--output", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "<!-- bench-serve:begin -->\nkept\n<!-- bench-serve:end -->" in text
    assert text.count("<!-- bench-decode:begin -->") == 1 and "(100.0%)" in text
    for engine in ("ort+kv", "ort-nocache", "torch+kv", "ct2"):
        assert f"| {engine} |" in text


def test_bench_serve_quick_runs(tmp_path):
    """`bench/serve.py --quick` end to end on the addition model: three real server processes, interleaved
    windows, the in-process ceilings, and a report whose table has every mode with answers and no errors."""
    import subprocess
    import sys

    from conftest import MODEL_REPO, ROOT

    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\n<!-- bench-decode:begin -->\nkept\n<!-- bench-decode:end -->\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "serve.py"), "--quick", "--model", "addition", "--model-repo", str(MODEL_REPO),
         "--inputs", str(ADDITION / "test.tsv"), "--concurrency", "1,4", "--cost-concurrency", "1,4", "--write",
         "--output", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "<!-- bench-decode:begin -->\nkept\n<!-- bench-decode:end -->" in text
    rows = [line.split("|") for line in text.splitlines() if line.startswith(("| continuous |", "| request |", "| none |"))]
    assert {(r[1].strip(), r[2].strip()) for r in rows} == {(m, c) for m in ("continuous", "request", "none") for c in ("1", "4")}
    for r in rows:
        assert int(r[3]) > 0 and r[-2].strip() == "0", r  # answers, no errors
    assert "scheduler in process" in text and "Where the C=1 latency goes" in text
    # The CPU-per-request table: greedy at C=1 and 4 (the search addition is served with), every process's CPU
    # counted, the served outputs the in-process engine's.
    cost = [line.split("|") for line in text.splitlines() if line.startswith("| greedy |")]
    assert [r[2].strip() for r in cost] == ["1", "4"], cost
    for r in cost:
        assert float(r[3]) > 0 and float(r[5]) > 0 and float(r[6]) > 0, r  # answers/s, front end and cores µs
        served, total = (int(x) for x in r[-2].split(" of "))
        assert total > 0 and served == total, r
    assert "### Acceptance (issue 25)" in text
