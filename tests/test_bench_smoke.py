"""The benchmarks' machinery, without asserting any timing: the CTranslate2 conversion their CTranslate2 columns
rest on (CTranslate2 greedy equals PyTorch greedy on the same weights, and the check notices a wrong positional
layout), quick runs of the decode and serving benchmarks whose results JSON holds sane figures, and
docs/BENCHMARKS.md being what docs/bench/ renders to."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import CHECKPOINTS, MODEL_REPO, ROOT

ADDITION = CHECKPOINTS / "addition"
needs_addition = pytest.mark.skipif(
    not (ADDITION / "test.tsv").is_file(),
    reason=f"no addition checkpoint with test.tsv at {ADDITION} (run `make models`)",
)


def ct2_module():
    return pytest.importorskip(
        "ctranslate2", reason="ctranslate2 is the bench extra: pip install -e '.[bench]'"
    )


def rows(results: dict, table: str) -> list[dict]:
    """The rows of one named table of a results file."""
    found = [b for b in results["blocks"] if b.get("table") == table]
    assert found, f"no table {table!r} in {results['name']}: {[b.get('table') for b in results['blocks']]}"
    return found[0]["rows"]


def run_bench(module: str, *args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ct2_module()
    if not (ADDITION / "test.tsv").is_file():
        pytest.skip(f"no addition checkpoint with test.tsv at {ADDITION} (run `make models`)")
    import torch

    from export.ctranslate2 import CT2Translator, convert, vocabulary
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
    from export.ctranslate2 import verify

    ck, _, translator, sources, budget = setup
    report = verify(ck.model, ck.codec, translator, sources, budget)
    assert report["n"] == len(sources) == 20
    assert report["identical"] == report["n"], report["first_mismatch"]
    assert report["max_abs_logprob_diff"] < 1e-3, report


def test_ct2_forced_length(setup):
    """min = max decoding length forces exactly N tokens, as the forced-length grid times."""
    ck, _, translator, sources, budget = setup
    out = translator.greedy([ck.codec.source_ids(s) for s in sources[:4]], budget, force=True)
    assert [len(r) for r in out] == [budget] * 4


def test_check_detects_wrong_positional_layout(setup, tmp_path):
    """Negative control: CTranslate2's built-in sinusoids (concatenated sin|cos) instead of the
    model's interleaved table must change the log-probabilities, else the check above proves nothing."""
    from ctranslate2.specs import model_spec

    from export.ctranslate2 import CT2Translator, build_spec, save, verify

    ck, tokens, _, sources, budget = setup
    spec = build_spec(ck.model, tokens)
    spec.encoder.position_encodings.encodings = model_spec.OPTIONAL
    spec.decoder.position_encodings.encodings = model_spec.OPTIONAL
    wrong = CT2Translator(save(spec, tmp_path / "builtin-pe"), tokens, "float32", 1)
    report = verify(ck.model, ck.codec, wrong, sources, budget)
    assert report["max_abs_logprob_diff"] > 1e-2, report


def test_benchmarks_md_is_what_the_results_render_to():
    """docs/BENCHMARKS.md is written by bench.render from docs/bench/, never edited by hand."""
    from bench import render

    assert (ROOT / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8") == render.render(), (
        "docs/BENCHMARKS.md is stale: run `python -m bench.render` (edit docs/bench/, not the rendered file)"
    )


def test_committed_results_hold_their_figures():
    """Every results file parses back into the same tables, with numbers where its columns are numeric."""
    from bench.common.report import RESULTS, Report

    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        assert Report.from_json(data).to_json() == data, path.name
    grid = rows(json.loads((RESULTS / "decode-grid.json").read_text()), "grid")
    assert grid and all(r["tokens_s"] > 0 and 0 < r["x_ct2"] < 100 for r in grid)


def test_a_new_results_file_is_rendered(tmp_path):
    from bench import render
    from bench.common.report import Report

    r = Report("made-up")
    r.heading("A made-up benchmark")
    t = r.table("t", "engine", ("seq/s", "{:.1f}"), ("share", "{:.0%}"))
    t.row("ort", 12.345, 0.5)
    r.save(tmp_path)
    text = render.render(tmp_path)
    assert (
        "## A made-up benchmark\n\n| engine | seq/s | share |\n|---|---:|---:|\n| ort | 12.3 | 50% |" in text
    )


@needs_addition
@pytest.mark.slow
def test_decode_benchmarks_quick_run(tmp_path):
    """Both decode benchmarks, --quick, end to end on the addition model (about 30 s): the conversion check passes,
    every engine's figures are positive, ratios to CTranslate2 are sane, and the implementations agree."""
    ct2_module()
    bundle = MODEL_REPO / "addition" / "1"
    if not (bundle / "config.json").is_file():
        pytest.skip(f"no addition bundle at {bundle}")
    common = [
        "--quick",
        "--model",
        "addition",
        "--checkpoint",
        str(ADDITION),
        "--bundle",
        str(bundle),
        "--results",
        str(tmp_path),
    ]
    run_bench("bench.engine.decode_grid", *common)
    run_bench("bench.engine.decode_real", *common)
    grid = json.loads((tmp_path / "decode-grid.json").read_text())
    real = json.loads((tmp_path / "decode-real.json").read_text())
    for res in (grid, real):
        f = res["figures"]
        assert f["conversion_identical"] == f["conversion_inputs"] > 0, f
    cells = rows(grid, "grid")
    assert {r["engine"] for r in cells} == {"ort+kv", "ort-nocache", "torch+kv", "ct2"}
    for r in cells:
        assert r["sequences_s"] > 0 and r["tokens_s"] > 0 and 0 < r["x_ct2"] < 100, r
    for pair, (same, total) in grid["figures"]["identical_outputs"].items():
        assert same == total > 0, pair  # forced outputs equal across the engine, no-cache and PyTorch
    real_rows = rows(real, "real")
    assert {(r["search"], r["batch"]) for r in real_rows} == {
        (s, b) for s in ("greedy", "beam 4") for b in (1, 4)
    }
    for r in real_rows:
        assert r["engine_seq_s"] > 0 and r["ct2_seq_s"] > 0 and 0 < r["engine_ct2"] < 100, r
    for key, (same, total) in real["figures"]["identical_outputs"].items():
        if "beam1/" in key:
            assert same == total > 0, key  # greedy: token for token CTranslate2's


@needs_addition
def test_serve_benchmark_quick_run(tmp_path):
    """`bench.serving.serve --quick` end to end on the addition model: three real server processes, interleaved
    windows, the in-process ceilings and the CPU-per-request table, every figure present and sane."""
    run_bench(
        "bench.serving.serve",
        "--quick",
        "--model",
        "addition",
        "--model-repo",
        str(MODEL_REPO),
        "--inputs",
        str(ADDITION / "test.tsv"),
        "--concurrency",
        "1,4",
        "--cost-concurrency",
        "1,4",
        "--write",
        "--results",
        str(tmp_path),
    )
    serve = json.loads((tmp_path / "serve.json").read_text())
    windows = rows(serve, "windows")
    assert {(r["batching"], r["c"]) for r in windows} == {
        (m, c) for m in ("continuous", "request", "none") for c in (1, 4)
    }
    for r in windows:
        assert r["answers"] > 0 and r["req_s"] > 0 and str(r["errors"]) == "0", r
    assert all(r["sequences_s"] > 0 for r in rows(serve, "ceiling_cores"))
    assert any("Where the C=1 latency goes" in b.get("text", "") for b in serve["blocks"])
    cost = json.loads((tmp_path / "serve-cost.json").read_text())
    # Greedy at C=1 and 4 (the search addition is served with), every process's CPU counted, the served outputs
    # the in-process engine's.
    greedy = [r for r in rows(cost, "cost") if r["search"] == "greedy"]
    assert [r["c"] for r in greedy] == [1, 4], greedy
    for r in greedy:
        assert (
            r["served_answers_s"] > 0 and r["front_end_us_request"] > 0 and r["engine_cores_us_request"] > 0
        ), r
        assert 0 < r["cores_engine"] < 100, r  # the cores' CPU per request over the engine's in process
        served, total = (int(x) for x in r["outputs_engine_s"].split(" of "))
        assert total > 0 and served == total, r
    assert rows(cost, "acceptance")


@needs_addition
def test_option_table_against_a_baseline_commit_quick_run(tmp_path):
    """The no-option A/B against another commit's server (`--options-only --baseline`), the check a change to the
    serving path is held to: both servers answer every window, with positive throughput and no errors."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout: no commit to run as the baseline")
    run_bench(
        "bench.serving.serve",
        "--quick",
        "--model",
        "addition",
        "--model-repo",
        str(MODEL_REPO),
        "--inputs",
        str(ADDITION / "test.tsv"),
        "--options-only",
        "--option-families",
        "none",
        "--baseline",
        "HEAD",
        "--rounds",
        "2",
        "--option-concurrency",
        "2",
        "--write",
        "--results",
        str(tmp_path),
    )
    table = rows(json.loads((tmp_path / "options-ab.json").read_text()), "options")
    assert [r["family"] for r in table] == ["no option", "no option, baseline"]
    for r in table:
        assert (
            r["answers_s"] > 0
            and r["tokens_s"] > 0
            and 0 < r["x_no_option"] < 100
            and str(r["errors"]) == "0"
        ), r


@needs_addition
def test_peers_benchmark_quick_run(tmp_path):
    """`bench.serving.peers_bench --quick` on the addition model: `s2s serve` (and the server of another commit,
    ``--tree``) beside the two grpc.aio CTranslate2 peers (per request, micro-batched) on the same weights, one
    window each, every side's answers the in-process engine's and every figure present."""
    ct2_module()
    run_bench(
        "bench.serving.peers_bench",
        "--quick",
        "--model",
        "addition",
        "--model-repo",
        str(MODEL_REPO),
        "--checkpoint",
        str(ADDITION),
        "--inputs",
        str(ADDITION / "test.tsv"),
        "--peers",
        "per-request,batcher",
        "--tree",
        "head=HEAD",
        "--results",
        str(tmp_path),
    )
    peers = json.loads((tmp_path / "serve-peers.json").read_text())
    table = rows(peers, "greedy-c8")
    assert [r["server"].split(" ")[0] for r in table] == ["s2s", "s2s", "CTranslate2", "CTranslate2"], table
    assert table[1]["server"] == "s2s serve @head", table
    for r in table:
        assert r["answers_s"] > 0 and r["server_cpu_ms_request"] > 0 and r["answer_bytes"] > 0, r
        served, total = (int(x) for x in r["outputs_engine_s"].split(" of "))
        assert total > 0 and served == total, r
    assert rows(peers, "acceptance")


@needs_addition
def test_grpc_floor_quick_run(tmp_path):
    """`bench.serving.grpc_floor --quick`: the bare grpc.aio KServe server with no model, each answer kind paced
    and unpaced; every side answered, its CPU split into the main thread and the rest, and a paced side never
    faster than its pace (the pacer's credit is capped by what waits)."""
    run_bench(
        "bench.serving.grpc_floor",
        "--quick",
        "--model",
        "addition",
        "--model-repo",
        str(MODEL_REPO),
        "--inputs",
        str(ADDITION / "test.tsv"),
        "--rates",
        "greedy=300,beam=150",
        "--results",
        str(tmp_path),
    )
    table = rows(json.loads((tmp_path / "grpc-floor.json").read_text()), "floor-c8")
    assert len(table) == 6, table
    assert {r["answer"] for r in table} == {"fixed string", "tokenized + detokenized"}
    for r in table:
        assert r["answers_s"] > 0 and r["cpu_ms_request"] > 0 and r["main_thread"] > 0, r
        assert r["cpu_ms_request"] >= r["main_thread"] * (1 - 1e-9), (
            r
        )  # equal when only the main thread ran (rounding)
        if r["paced_to"].startswith("s2s serve's greedy"):
            assert r["answers_s"] <= 300 * 1.1, r
        elif r["paced_to"].startswith("s2s serve's beam"):
            assert r["answers_s"] <= 150 * 1.1, r


@needs_addition
def test_step_cost_quick_run(tmp_path):
    """bench.engine.step_cost on the addition model at toy sizes: a step row per cached length, the step dearer
    with a longer past, and each search's time split into shares that add up to the whole."""
    run_bench(
        "bench.engine.step_cost",
        "--model",
        "addition",
        "--model-repo",
        str(MODEL_REPO),
        "--data",
        str(ADDITION / "test.tsv"),
        *("--rows", "16", "--pasts", "2,12", "--src", "6", "--steps", "20", "--inputs", "24", "--batch", "4"),
        "--results",
        str(tmp_path),
    )
    results = json.loads((tmp_path / "step-cost.json").read_text())
    steps = rows(results, "step-by-past")
    assert [r["cached_positions"] for r in steps] == [2, 12]
    assert all(r["step_ms"] > 0 and 0 < r["concat"] < 1 for r in steps), steps
    split = rows(results, "generate-split")
    assert [r["search"] for r in split] == ["greedy", "beam 4"]
    for r in split:
        assert r["decoder"] + r["encoder"] + r["rest"] == pytest.approx(1.0), r
        assert r["steps"] > 0 and r["past"] >= r["live_age"] > 0, r


@pytest.mark.slow
def test_model_versions_quick_run(tmp_path):
    """bench.serving.model_versions --quick on translate-en-ja's oldest and newest versions: a server per version,
    the engine in process, every figure positive, the cost of the old version 1.00x of itself."""
    from server.models.disk import versions_on_disk

    versions = versions_on_disk(MODEL_REPO / "translate-en-ja")
    pair = f"{versions[0]},{versions[-1]}"
    run_bench("bench.serving.model_versions", "--quick", "--versions", pair, "--results", str(tmp_path))
    data = json.loads((tmp_path / "model-versions.json").read_text())
    assert [r["version"] for r in rows(data, "versions")] == pair.split(",")
    for table in ("cost-1", "cost-4"):
        got = rows(data, table)
        assert got[0]["vs_v" + str(versions[0])] == 1.0
        assert all(
            r["engine_cpu_ms_sentence"] > 0 and r["c_1_answers_s"] > 0 and r["c_8_p99_ms"] > 0 for r in got
        )
