"""`python -m bench`, run as a user runs it (no bench code imported): each command's --quick run end to end on the
committed models (tiny runs that check the benchmark works, never a timing), its results JSON holding sane figures;
docs/BENCHMARKS.md being what docs/bench/ renders to, and a new results file being rendered."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import CHECKPOINTS, MODEL_REPO, ROOT

needs_models = pytest.mark.skipif(
    not (CHECKPOINTS / "addition" / "test.tsv").is_file() or not (MODEL_REPO / "translate-en-ja").is_dir(),
    reason="the committed models and checkpoints (run `make models`)",
)


def bench(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def rows(folder, name: str, table: str) -> list[dict]:
    """The rows of one named table of a results file."""
    results = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    found = [b for b in results["blocks"] if b.get("table") == table]
    assert found, f"no table {table!r} in {name}: {[b.get('table') for b in results['blocks']]}"
    return found[0]["rows"]


def ct2():
    pytest.importorskip("ctranslate2", reason="ctranslate2 is the bench extra: pip install -e '.[bench]'")


def test_help_explains_every_command():
    out = bench("--help").stdout
    for command in ("engine", "serve", "peers", "quality", "profile", "render"):
        assert f"\n  {command} " in out, out
    assert "--model-family" in bench("engine", "--help").stdout
    assert "fairness" in bench("serve", "--help").stdout


def test_benchmarks_md_is_what_the_results_render_to():
    """docs/BENCHMARKS.md is written by `python -m bench render` from docs/bench/, never edited by hand; every
    results file parses back into itself and every study it names has its note."""
    bench("render", "--check")


def test_a_new_results_file_is_rendered(tmp_path):
    columns = [
        {"key": "engine", "header": "engine", "align": "l", "fmt": ""},
        {"key": "seq_s", "header": "seq/s", "align": "r", "fmt": "{:.1f}"},
        {"key": "share", "header": "share", "align": "r", "fmt": "{:.0%}"},
    ]
    made_up = {"name": "made-up", "figures": {}, "blocks": [{"heading": "A made-up benchmark", "level": 2},
               {"table": "t", "columns": columns, "rows": [{"engine": "ort", "seq_s": 12.345, "share": 0.5}]}]}  # fmt: skip
    (tmp_path / "made-up.json").write_text(json.dumps(made_up))
    bench("render", "--results", str(tmp_path), "--output", str(tmp_path / "B.md"))
    text = (tmp_path / "B.md").read_text()
    assert (
        '<a id="made-up"></a>\n\n## A made-up benchmark\n\n| engine | seq/s | share |\n|---|---:|---:|\n| ort | 12.3 | 50% |'
        in text
    )


@needs_models
def test_engine_quick(tmp_path):
    """Forced and real inputs on the addition model: the conversion check passes, every system's figures are
    positive, forced outputs agree across the engine, its no-cache path and PyTorch, greedy outputs are CTranslate2's."""
    ct2()
    bench("engine", "--quick", "--model", "addition", "--results", str(tmp_path))
    forced, real = rows(tmp_path, "decode-grid", "grid"), rows(tmp_path, "decode-real", "grid")
    assert {r["system"] for r in forced} == {"engine", "engine no cache", "torch", "ct2"}
    assert {(r["search"], r["batch"]) for r in real} == {(s, b) for s in ("greedy", "beam 4") for b in (1, 4)}
    for r in forced + real:
        assert r["sequences_s"] > 0 and r["tokens_s"] > 0 and 0 < r["x_ct2"] < 100, r
        if r["outputs"] and (r["inputs"] != "real" or r["search"] == "greedy"):
            same, total = (int(x) for x in r["outputs"].split(" of "))
            assert same == total > 0, r
    figures = json.loads((tmp_path / "decode-real.json").read_text())["figures"]
    assert figures["conversion_identical"] == figures["conversion_inputs"] > 0


@needs_models
@pytest.mark.slow
@pytest.mark.parametrize("family", ["marian", "t5"])
def test_engine_model_family_quick(tmp_path, family):
    """An imported Marian or T5 checkpoint (made here, tiny) against CTranslate2's own conversion of it, forced length;
    the greedy screen changes no output."""
    ct2()
    pytest.importorskip("sentencepiece", reason="the import extra")
    # float32 only: the int8 import is the import's own tests' (tests/test_*_import.py); this checks the grid
    bench(
        "engine",
        "--quick",
        "--model-family",
        family,
        "--precisions",
        "float32",
        "--results",
        str(tmp_path),
        timeout=900,
    )
    cells = rows(tmp_path, f"{family}-ct2", "grid")
    assert {(r["system"], r["search"]) for r in cells} >= {
        ("engine", "beam 4"),
        ("ct2", "greedy"),
        ("engine screen off", "greedy"),
    }
    for r in cells:
        assert r["sequences_s"] > 0 and 0 < r["x_ct2"] < 100, r
        if r["system"] == "engine screen off":
            same, total = (int(x) for x in r["outputs"].split(" of "))
            assert same == total > 0, r


@needs_models
def test_serve_quick(tmp_path):
    """Three batching modes over real servers, the in-process ceilings, CPU per request by process with the served
    outputs the engine's, and two option families: every window answered, every figure present."""
    ct2()
    bench("serve", "--quick", "--model", "addition", "--results", str(tmp_path))
    windows = rows(tmp_path, "serve", "windows")
    assert {(r["batching"], r["c"]) for r in windows} == {
        (m, c) for m in ("continuous", "request", "none") for c in (1, 4)
    }
    for r in windows:
        assert r["answers"] > 0 and r["req_s"] > 0 and r["errors"] == "0" and r["rows_step"] > 0, r
    assert all(r["sequences_s"] > 0 for r in rows(tmp_path, "serve", "ceiling_cores"))
    for r in rows(tmp_path, "serve-cost", "cost"):
        assert (
            r["served_answers_s"] > 0 and r["front_end_us_request"] > 0 and r["engine_cores_us_request"] > 0
        ), r
        same, total = (int(x) for x in r["outputs_engine_s"].split(" of "))
        assert total > 0 and same == total, r
    options = rows(tmp_path, "options", "options")
    assert [r["family"] for r in options] == ["no option", "beam 4 (the paper's)"]
    assert all(r["answers_s"] > 0 and r["errors"] == "0" and r["rows_step"] > 0 for r in options), options


@needs_models
def test_serve_options_against_a_baseline_commit_quick(tmp_path):
    """The no-option A/B against another commit's server (`--baseline`), the check a change to the serving path
    is held to: both servers answer, with positive throughput and no errors."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout: no commit to run as the baseline")
    bench(
        "serve",
        "--quick",
        "--model",
        "addition",
        "--only",
        "options",
        "--option-families",
        "none",
        "--baseline",
        "HEAD",
        "--results",
        str(tmp_path),
    )
    table = rows(tmp_path, "options-ab", "options")
    assert [r["family"] for r in table] == ["no option", "no option, baseline"]
    assert all(r["answers_s"] > 0 and r["tokens_s"] > 0 and r["errors"] == "0" for r in table), table


@needs_models
def test_serve_fairness_quick(tmp_path):
    """The fairness part (`--only fairness`): a small /translate idle and beside a long-input client, on this tree's
    server and on it again with flags added (--fairness-serve); its table printed and written, one row per server."""
    out = bench(
        "serve",
        "--quick",
        "--only",
        "fairness",
        "--fairness-serve",
        "batch 8=--max-batch-size 8",
        "--results",
        str(tmp_path),
    ).stdout
    assert "| server | idle p50 ms | loaded p50 ms |" in out, out
    table = rows(tmp_path, "fairness", "fairness")
    assert [r["server"] for r in table] == ["this tree", "batch 8"], table
    for r in table:
        assert min(r["idle_p50_ms"], r["loaded_p50_ms"], r["loaded_idle_p50"], r["long_chars_s"]) > 0, r


@needs_models
def test_peers_quick(tmp_path):
    """`s2s serve` (and another commit's, --tree) beside the two grpc.aio CTranslate2 peers on the same weights:
    every side's answers the engine's, its CPU split by process, every figure present."""
    ct2()
    bench(
        "peers",
        "--quick",
        "--model",
        "addition",
        "--peers",
        "per-request,batcher",
        "--tree",
        "head=HEAD",
        "--results",
        str(tmp_path),
    )
    table = rows(tmp_path, "serve-peers", "greedy-c4")
    assert [r["server"].split(" ")[0] for r in table] == ["s2s", "s2s", "CTranslate2", "CTranslate2"], table
    assert table[1]["server"] == "s2s serve @head", table
    for r in table:
        assert r["answers_s"] > 0 and r["server_cpu_ms_request"] > 0 and r["answer_bytes"] > 0, r
        assert ("CT2" in r["by_process_ms_request"]) == r["server"].startswith("CTranslate2"), r
        same, total = (int(x) for x in r["outputs_engine_s"].split(" of "))
        assert total > 0 and same == total, r
    assert rows(tmp_path, "serve-peers", "acceptance") and rows(tmp_path, "serve-peers", "tails-c4")


@needs_models
def test_quality_quick(tmp_path):
    """Protected spans through the server: every span kept when protected, the long input refused when not split;
    the first 2,000 addition problems all right."""
    bench("quality", "--quick", "--results", str(tmp_path))
    served = rows(tmp_path, "protected-spans", "served")
    protected = [r for r in served if r["protection"] == "on (default)"]
    assert protected and all(r["kept"] == r["strings"] and r["refused"] == 0 for r in protected)
    assert any(r["refused"] for r in served if r["protection"] == "off")
    assert len(rows(tmp_path, "protected-spans", "reads")) == 4
    [pairs] = rows(tmp_path, "addition-exhaustive", "pairs")
    assert pairs["greedy"] == "2,000 / 2,000" and pairs["first_wrong_answers"] == "none", pairs


@needs_models
def test_profile_quick(tmp_path):
    """The decoder step per operator (shares that add up), per node and by cached length."""
    bench("profile", "--quick", "--results", str(tmp_path))
    ops = rows(tmp_path, "profile-step", "operators")
    assert (
        ops[0]["operator"] == "MatMul" and 0.5 < sum(r["share_of_kernel_time"] for r in ops) <= 1.0 + 1e-9
    ), ops
    assert rows(tmp_path, "profile-step", "nodes")[0]["us_per_step"] > 0
    by_past = rows(tmp_path, "profile-step", "by-past")
    assert [r["cached_positions"] for r in by_past] == [4, 32] and all(0 < r["concat"] < 1 for r in by_past)
