"""What a big-vocabulary model costs to load and serve: each figure taken in a fresh process, so that one
measurement's memory is not another's.

  probe engine BUNDLE   ``engine.load(bundle, threads=1, greedy_screen=SCREEN)`` (config.json's hashes checked): the
                        load's wall time, RSS after it and its peak (VmHWM), then one input's first and second
                        answers (greedy, N tokens) and RSS after them
  probe ct2 DIR TYPE    the same (the source tokens given as JSON) for ``ctranslate2.Translator(DIR, compute_type=TYPE, 1 thread)``
  serve(repo, model)    ``s2s serve`` with one engine core: time from start to KServe ServerReady, the first
                        and second answers through seq2seq.v1 Generate, RSS of the core process and of the front end

    python -m bench.engine.nllb_cost probe engine BUNDLE SCREEN|- N | probe ct2 DIR TYPE N TOKENS   (prints JSON)

RSS is VmRSS of /proc/<pid>/status, in MB (10^6 bytes); the bundle's files are read from the page cache (they were
just written or read), as on a server that restarts a core.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import ROOT
from bench.engine.nllb_setup import measured, python

TEXT = "the quick dog sees a big red house"
SOURCE, TARGET = "en", "fr"  # eng_Latn, fra_Latn


def status_mb(pid: int | str = "self") -> dict[str, float]:
    """VmRSS, VmHWM (peak RSS), RssAnon (the process's own) and RssFile (pages of mapped files: the weights ONNX
    Runtime maps from external data, which every process mapping them shares) of a process, MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024 / 1e6
    return out


def probe_engine(folder: Path, n: int, greedy_screen: str = "auto") -> dict:
    t0 = time.perf_counter()
    import engine

    imported = time.perf_counter()
    before = status_mb()["VmRSS"]
    t = engine.load(folder, threads=1, device="cpu", greedy_screen=greedy_screen)
    loaded = time.perf_counter()
    after = status_mb()
    answers = []
    for _ in range(2):
        a0 = time.perf_counter()
        r = t.generate(
            [TEXT],
            beam_size=1,
            min_new_tokens=n + 1,
            max_new_tokens=n + 1,
            source_languages=[SOURCE],
            target_languages=[TARGET],
        )
        answers.append(time.perf_counter() - a0)
        assert len(r[0].tokens) == n, len(r[0].tokens)
    return _figures(imported - t0, before, loaded - imported, after, answers)


def probe_ct2(folder: Path, compute_type: str, n: int, tokens: list[str]) -> dict:
    t0 = time.perf_counter()
    import ctranslate2

    imported = time.perf_counter()
    before = status_mb()["VmRSS"]
    t = ctranslate2.Translator(
        str(folder), device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=1
    )
    loaded = time.perf_counter()
    after = status_mb()
    answers = []
    for _ in range(2):
        a0 = time.perf_counter()
        r = t.translate_batch(
            [tokens],
            target_prefix=[["fra_Latn"]],
            beam_size=1,
            min_decoding_length=n + 1,
            max_decoding_length=n + 1,
        )
        answers.append(time.perf_counter() - a0)
        assert len(r[0].hypotheses[0]) == n + 1, len(r[0].hypotheses[0])  # the prefix token included
    return _figures(imported - t0, before, loaded - imported, after, answers)


def _figures(import_s: float, before: float, load_s: float, after: dict, answers: list[float]) -> dict:
    end = status_mb()
    return {
        "import_s": import_s,
        "rss_before_mb": before,
        "load_s": load_s,
        "rss_loaded_mb": after["VmRSS"],
        "anon_loaded_mb": after["RssAnon"],
        "file_loaded_mb": after["RssFile"],
        "peak_loading_mb": after["VmHWM"],
        "first_s": answers[0],
        "second_s": answers[1],
        "rss_answered_mb": end["VmRSS"],
        "anon_answered_mb": end["RssAnon"],
        "peak_mb": end["VmHWM"],
    }


def probe(kind: str, path: Path, n: int, compute_type: str = "", tokens: list[str] | None = None) -> dict:
    """A probe in a process of its own; its JSON figures, and its peak RSS as wait4 saw it."""
    args = ["-m", "bench.engine.nllb_cost", "probe", kind, str(path), compute_type or "-", str(n)]
    m = measured(python(*args, *([json.dumps(tokens)] if tokens else [])))
    return json.loads(m.out.strip().splitlines()[-1])


def ct2_source(folder: Path, text: str = TEXT) -> list[str]:
    """``text`` as CTranslate2 reads it for NLLB: the source language's token, the pieces, </s> (the engine's own
    tokenizing, so that both read the same ids)."""
    import engine

    t = engine.load(folder, threads=1, device="cpu")
    ids, _ = t.config.languages.apply(t.codec.source_ids(text), SOURCE, TARGET)
    return [t.codec.tokenizer.id_to_token(i) for i in ids]


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def serve(repo: Path, model: str, n: int, timeout: float = 600.0) -> dict:
    """``s2s serve`` of one model with one engine core, from start to its second answer."""
    import grpc

    from bench.serving.server_process import die_with_parent, free_port
    from protos.inference import grpc_service_pb2 as kpb
    from protos.inference import grpc_service_pb2_grpc as kgrpc
    from protos.seq2seq.v1 import seq2seq_pb2 as pb
    from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

    port, metrics = free_port(), free_port()
    cmd = python(
        "-m", "s2s.cli", "serve", "--model-repo", str(repo), "--models", model, "--instances", "1",
        "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics), "--http-port", "0",
        "--log-level", "WARNING", "--grace-s", "2",
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("S2S_")}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=die_with_parent
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            ready = kgrpc.GRPCInferenceServiceStub(ch)
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"s2s serve exited with {proc.returncode}: {proc.stderr.read()[-2000:]}"
                    )
                if time.perf_counter() - t0 > timeout:
                    raise RuntimeError(f"s2s serve not ready after {timeout:.0f} s")
                with contextlib.suppress(grpc.RpcError):
                    if ready.ServerReady(kpb.ServerReadyRequest(), timeout=1.0).ready:
                        break
                time.sleep(0.1)
            ready_s = time.perf_counter() - t0
            stub = pb_grpc.Seq2SeqStub(ch)
            req = pb.GenerateRequest(
                model=model,
                inputs=[TEXT],
                source_language=SOURCE,
                target_language=TARGET,
                # the forced language token counts among max_new_tokens: n + 1 for n tokens of answer
                options=pb.GenerateOptions(beam_size=1, min_new_tokens=n + 1, max_new_tokens=n + 1),
            )
            answers = []
            for _ in range(2):
                a0 = time.perf_counter()
                r = stub.Generate(req, timeout=timeout)
                answers.append(time.perf_counter() - a0)
                assert r.outputs[0].output_tokens == n, r.outputs[0].output_tokens
        cores = [
            c for c in children(proc.pid) if b"server.core.process" in Path(f"/proc/{c}/cmdline").read_bytes()
        ]
        assert len(cores) == 1, cores
        core, front = status_mb(cores[0]), status_mb(proc.pid)
        return {
            "ready_s": ready_s,
            "first_s": answers[0],
            "second_s": answers[1],
            "core_rss_mb": core["VmRSS"],
            "core_anon_mb": core["RssAnon"],
            "core_file_mb": core["RssFile"],
            "core_peak_mb": core["VmHWM"],
            "front_rss_mb": front["VmRSS"],
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def main(argv: list[str]) -> int:
    if argv[:1] != ["probe"] or len(argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    kind, path, compute_type, n = argv[1], Path(argv[2]), argv[3], int(argv[4])
    if kind == "engine":  # compute_type: the greedy screen (auto | on | off), "-" for the default
        out = probe_engine(path, n, "auto" if compute_type == "-" else compute_type)
    else:
        out = probe_ct2(path, compute_type, n, json.loads(argv[5]))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
