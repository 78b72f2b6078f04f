"""bench/engine/nllb_ct2.py's figures (costs.json) as its results file: the cost tables, then the speed table."""

from __future__ import annotations

from bench.common.report import Report
from bench.engine.nllb_setup import Shape

NAME = "nllb-ct2"
NAN = float("nan")


def _mb(files: dict, *names: str) -> float:
    return sum(v for k, v in files.items() if k in names) if names else files.get("total", NAN)


def render(shape: Shape, costs: dict, info: dict, n: int) -> Report:
    report = Report(NAME)
    # by name, for a reader of the JSON: what one engine core and one bundle cost
    for key, field, name in (
        ("serve-float32", "core_rss_mb", "core_rss_mb_float32"),
        ("serve-int8", "core_rss_mb", "core_rss_mb_int8"),
        ("serve-float32", "ready_s", "ready_s_float32"),
        ("serve-int8", "ready_s", "ready_s_int8"),
        ("import-none", "peak_rss_mb", "import_peak_rss_mb_float32"),
        ("import-int8", "peak_rss_mb", "import_peak_rss_mb_int8"),
    ):
        if key in costs:
            report.figures[name] = round(costs[key][field], 1)
    for key, name in (("import-none", "bundle_mb_float32"), ("import-int8", "bundle_mb_int8")):
        if key in costs:
            report.figures[name] = round(costs[key]["files_mb"]["total"], 1)
    report.heading(
        "An NLLB-600M-shaped model: cost, and speed against CTranslate2 (bench/engine/nllb_ct2.py)"
    )
    ck = costs.get("checkpoint", {})
    report.text(
        f"A random M2M100 checkpoint of NLLB-200-distilled-600M's shape (d {shape.d_model}, {shape.layers}+"
        f"{shape.layers} layers, {shape.heads} heads, d_ff {shape.d_ff}, vocabulary {shape.vocab:,}, ReLU, pre-norm, "
        "one table for both embeddings and the output projection) and an NLLB tokenizer.json (BPE, the 202 FLORES-200 "
        "codes as added tokens), saved with `save_pretrained` "
        f"({_mb(ck.get('files_mb', {}), 'model.safetensors'):,.0f} MB of safetensors, tokenizer.json "
        f"{_mb(ck.get('files_mb', {}), 'tokenizer.json'):.1f} MB). "
        f"Machine: {info['nproc']} × {info['cpu']}, 24 GB; every figure under cpu-bench (nothing else running). "
        "Peak RSS: ru_maxrss of the process (and its children); MB are 10^6 bytes."
    )
    t = report.table(
        "build",
        "step",
        ("wall s", "{:.0f}"),
        ("peak RSS MB", "{:,.0f}"),
        ("on disk MB", "{:,.0f}"),
        "files",
    )
    for key, label in (
        ("import-none", "`s2s import` (float32)"),
        ("import-int8", "`s2s import --quantize int8`"),
        ("ct2-convert", "`ct2-transformers-converter` (float32)"),
    ):
        c = costs.get(key)
        if c:
            files = ", ".join(
                f"{k} {v:,.0f}" if v >= 1 else f"{k} {v:.2f}"
                for k, v in c["files_mb"].items()
                if k != "total"
            )
            t.row(label, c["wall_s"], c["peak_rss_mb"], c["files_mb"]["total"], files)
    report.text(
        "Loaded in a fresh process (`engine.load`, config.json's sha256 of every file checked, as `s2s serve`'s "
        "front end checks them once before its cores start: a core is given the files' stamps and does not hash "
        "them again; CTranslate2 quantizing its float32 model.bin at load for int8), then one input answered "
        f"twice (greedy, the target language forced, {n} tokens); the quicker of two such processes (the second "
        "reads the files from the page cache, as a restarted core does). Anonymous: RssAnon, the process's own "
        "memory; the rest is pages of mapped files, which processes mapping them share:"
    )
    t = report.table(
        "load",
        "system",
        ("load s", "{:.1f}"),
        ("RSS after load MB", "{:,.0f}"),
        ("of it anonymous MB", "{:,.0f}"),
        ("peak while loading MB", "{:,.0f}"),
        ("first answer s", "{:.2f}"),
        ("second answer s", "{:.2f}"),
        ("RSS after answers MB", "{:,.0f}"),
    )
    for key, label in (
        ("load-engine-float32", "engine float32"),
        ("load-engine-float32-screen-on", "engine float32, greedy_screen on"),
        ("load-engine-int8", "engine int8"),
        ("load-ct2-float32", "CTranslate2 float32"),
        ("load-ct2-int8", "CTranslate2 int8"),
    ):
        if c := costs.get(key):
            t.row(
                label,
                c["load_s"],
                c["rss_loaded_mb"],
                c.get("anon_loaded_mb", NAN),
                c["peak_loading_mb"],
                c["first_s"],
                c["second_s"],
                c["rss_answered_mb"],
            )
    report.text(
        "`s2s serve --instances 1` of the bundle alone (the quicker to ready of two starts): from the process's "
        "start to KServe ServerReady, then one "
        f"seq2seq.v1 Generate (source en, target fr, greedy, {n} tokens) twice; RSS of the engine core's process and of "
        "the front end after the answers:"
    )
    t = report.table(
        "serve",
        "bundle",
        ("start to ready s", "{:.1f}"),
        ("first answer s", "{:.2f}"),
        ("second answer s", "{:.2f}"),
        ("core RSS MB", "{:,.0f}"),
        ("of it anonymous MB", "{:,.0f}"),
        ("core peak MB", "{:,.0f}"),
        ("front end RSS MB", "{:,.0f}"),
    )
    for key, label in (("serve-float32", "float32"), ("serve-int8", "int8")):
        if c := costs.get(key):
            t.row(
                label,
                c["ready_s"],
                c["first_s"],
                c["second_s"],
                c["core_rss_mb"],
                c.get("core_anon_mb", NAN),
                c["core_peak_mb"],
                c["front_rss_mb"],
            )
    report.text(
        f"Speed per core: exactly {n} tokens per answer after the forced language token on both sides (min = max "
        "decoding length), one thread each, the least of the passes column's ABBA passes after a warm-up; "
        "sequences/s. "
        "The engine's timings include its tokenizing and detokenizing; CTranslate2 gets its source tokens ready-made."
    )
    t = report.table(
        "speed",
        "precision",
        "search",
        ("batch", "{}"),
        ("inputs", "{}"),
        ("passes", "{}"),
        ("engine seq/s", "{:.3f}"),
        ("CTranslate2 seq/s", "{:.3f}"),
        ("engine / CTranslate2", "{:.2f}×"),
    )
    cells = []
    for key, c in costs.items():
        if key.startswith("speed-"):  # speed-<precision>-b<beam>-x<batch>
            precision, beam, batch = key.split("-")[1:]
            cells.append(((precision != "float32", int(beam[1:]), int(batch[1:])), precision, c))
    for (_, beam, batch), precision, c in sorted(cells):
        e, ct = c["engine_seq_s"], c["ct2_seq_s"]
        search = "greedy" if beam == 1 else f"beam {beam}"
        t.row(precision, search, batch, c["inputs"], c.get("repeats", 3), e, ct, e / ct)
    report.text(
        f"Where a decoder step goes (`--step profile`): ONNX Runtime's per-operator profile of decoder.onnx, one "
        f"thread, {n // 2} cached positions, a source of 12; the output projection is the one MatMul (int8: its "
        "quantized nodes) that makes the logits, d 1024 × 256,206 per row; MatMul kernels: MatMul, DynamicQuantizeMatMul "
        "and MatMulIntegerToFloat (the weights, and attention's products with V; its scores are FusedMatMul):"
    )
    t = report.table(
        "step",
        "precision",
        ("batch", "{}"),
        ("decoder step ms", "{:.1f}"),
        ("output projection", "{:.0%}"),
        ("MatMul kernels", "{:.0%}"),
    )
    for precision in ("float32", "int8"):
        for batch in (1, 16, 64):
            if c := costs.get(f"profile-{precision}-x{batch}"):
                matmuls = sum(
                    v
                    for k, v in c["ops"].items()
                    if k in ("MatMul", "DynamicQuantizeMatMul", "MatMulIntegerToFloat")
                )
                t.row(precision, batch, c["step_ms"], c["projection_share"], matmuls)
    return report
