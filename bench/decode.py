#!/usr/bin/env python
"""Decode-speed benchmark: the s2s engine against PyTorch eager and CTranslate2, side by side.

On the same held-out sources (``checkpoints/<model>/test.tsv``) and the same weights, every
engine generates exactly N new tokens per input (EOS ignored, so every engine does the same
work), single-threaded, one engine at a time:

  ort+kv      the serving engine: ONNX Runtime, KV cache   (engine.generate, ignore_eos=True)
  ort-nocache the same graphs, whole prefix recomputed every step (bench.baselines.generate_no_cache)
  torch+kv    PyTorch eager with the KV cache (model.decode_step N times; training code untouched)
  ct2         CTranslate2 on the same weights, converted by bench/ct2_convert.py
              (translate_batch, beam 1, min = max decoding length = N)
  and with --int8 (the default except with --quick):
  ort-int8+kv the engine on an int8 bundle (s2s export --quantize int8, or --int8-variant) exported to .cache/bench/models/
  ct2-int8    CTranslate2 with compute_type="int8"

Each cell of the grid (batch size x new tokens) runs a warm-up of every engine, then R timed
repeats over the same inputs, the engines taking turns within each repeat (one at a time); the table gives the medians as sequences/s and generated tokens/s, the spread
(max-min)/median, and each engine's ratio to CTranslate2 of the same precision (>1 = faster
than CTranslate2). Timings include tokenization and detokenization for every engine.

Before timing, the CTranslate2 conversion is verified: greedy tokens (stopping at EOS) equal
PyTorch's on held-out inputs, and the teacher-forced log-probabilities agree. With --int8 the
accuracy change of int8 (exact match, chrF, BLEU with the tokenize the checkpoint was evaluated with, and how many
outputs stay identical to float32) is measured on --accuracy-sentences test sentences, greedy
with EOS as served.

Real-inputs table (after the grid; ``--real-only`` runs only it, ``--no-real`` skips it): the held-out
sources as they come (CHECKPOINT/test.tsv's source column in the seeded shuffled order, cycled to
--real-inputs = 640 inputs), greedy and beam 4 (--beams), stopped at EOS, one thread per engine, batch
sizes --batch-sizes:

  engine      engine.load(bundle, threads=1, device="cpu").generate(texts, beam_size=b, max_batch_size=B * b)
              (refills the batch as rows finish; its timing includes tokenizing and detokenizing)
  CTranslate2 Translator(inter_threads=1, intra_threads=1).translate_batch(tokens, max_batch_size=B,
              beam_size=b, max_decoding_length=<the engine's budget>, min_decoding_length=0,
              length_penalty=--ct2-length-penalty), its own length sorting; the inputs are tokenized with
              the bundle's tokenizer outside the timing, the output tokens mapped to ids after it

in float32 and in int8 (with --int8, the default except with --quick: the engine on the int8 bundle below,
CTranslate2 compute_type="int8").
Per (search, batch) cell every system gets one warm-up on 2B inputs, then --real-repeats (3) timed passes
over all inputs, the systems taking turns and the order reversed every other pass (ABBA), so drift on the
machine does not land on one side; the table gives the median pass as sequences/s, the spread and the
ratio engine / CTranslate2 of the same precision, and how many outputs (token ids, on the distinct inputs)
are identical to CTranslate2's, plus the acceptance sub-table of the issue "Engine speed: ahead of
CTranslate2 per core" (float32 >= 0.9x at batch 1 and >= 1.0x at batch 16 and 64, int8 >= 0.8x at
every batch size; both searches must meet it).

The report is printed and written into docs/BENCHMARKS.md between
``<!-- bench-decode:begin -->`` and ``<!-- bench-decode:end -->`` (other sections are kept); the real-inputs
table sits inside it between ``<!-- bench-decode-real:begin -->`` and ``<!-- bench-decode-real:end -->``,
which is all that ``--real-only`` rewrites.
``--quick`` runs a tiny grid and real-inputs table (8 inputs; < 1 minute) and writes nothing unless --output is given.

Converted/exported artifacts are cached under .cache/bench/ and rebuilt when the checkpoint's
weights change. The machine should be otherwise idle: the load average at start is recorded.
Exit status: 0, or 1 when the conversion check fails (the report is still written), 2 when an
input is missing. The default run takes about 10 minutes on 2 cores (the grid about 4, the
real-inputs table about 5, an estimate from --quick rates; ``--real-only`` about 5), plus ~30 s
the first time to export the int8 bundle.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.markdown import markers, write_section  # noqa: E402
from export.quantize import CHOICES as QUANTIZE_CHOICES  # noqa: E402  (torch-free: names only)

CACHE = ROOT / ".cache" / "bench"
ENGINES = ("ort+kv", "ort-nocache", "torch+kv", "ct2")
INT8_ENGINES = ("ort-int8+kv", "ct2-int8")
NOTES = {
    "ort+kv": "the serving engine: ONNX Runtime with the KV cache",
    "ort-nocache": "the same ONNX graphs, whole prefix recomputed each step",
    "torch+kv": "PyTorch eager with the KV cache",
    "ct2": "CTranslate2 float32 (same weights, bench/ct2_convert.py)",
    "ort-int8+kv": "the engine on an int8 bundle (s2s export --quantize int8; export/quantize.py)",
    "ct2-int8": "CTranslate2 compute_type=int8",
}
BASELINE = {"ort+kv": "ct2", "ort-nocache": "ct2", "torch+kv": "ct2", "ct2": "ct2",
            "ort-int8+kv": "ct2-int8", "ct2-int8": "ct2-int8"}


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/decode.py",
        description=__doc__.split("\n\n")[0] + " Grid: batch sizes x new tokens; see the module docstring for what each engine is.",
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", default="translate-en-ja",
                   help="model name: checkpoint checkpoints/NAME, bundle models/NAME/<latest version> (default: %(default)s)")
    p.add_argument("--checkpoint", type=Path, help="checkpoint folder (default: checkpoints/MODEL); its test.tsv gives the inputs")
    p.add_argument("--bundle", type=Path, help="float32 ONNX bundle folder (default: the latest models/MODEL/<version>)")
    p.add_argument("--data", type=Path, help="TSV of source<TAB>reference (default: CHECKPOINT/test.tsv)")
    p.add_argument("--batch-sizes", type=_ints, default=[1, 16, 64], help="comma-separated batch sizes (default: 1,16,64)")
    p.add_argument("--new-tokens", type=_ints, default=[32, 64],
                   help="comma-separated numbers of tokens generated per input, EOS ignored; at most the model's max_len (default: 32,64)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per cell, after one warm-up; the median is reported (>= 3; default: %(default)s)")
    p.add_argument("--min-sentences", type=int, default=32,
                   help="inputs per timed repeat: max(batch size, this), split in batches of the batch size (default: %(default)s)")
    p.add_argument("--engines", default=",".join(ENGINES),
                   help=f"comma-separated subset of {','.join(ENGINES)} (ct2 is the ratio baseline; default: all)")
    p.add_argument("--int8", action=argparse.BooleanOptionalAction, default=None,
                   help=f"also time {', '.join(INT8_ENGINES)} and measure int8's accuracy change (the first run exports an "
                        "int8 bundle, ~30 s; default: on, off with --quick)")
    p.add_argument("--int8-variant", default="int8", choices=[c for c in QUANTIZE_CHOICES if c != "none"],
                   help="which int8 export the engine's int8 rows use (export/quantize.py; int8 = the default variant; "
                        "bench/int8_variants.py compares them all)")
    p.add_argument("--accuracy-sentences", type=int, default=200, help="test sentences for the int8 accuracy check (default: %(default)s)")
    p.add_argument("--verify-sentences", type=int, default=64,
                   help="held-out inputs on which CTranslate2 greedy must equal PyTorch greedy (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="threads of every engine (ORT intra-op, torch, CT2 intra_threads; default: 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the choice of test sentences (default: %(default)s)")
    p.add_argument("--real", action=argparse.BooleanOptionalAction, default=True,
                   help="also time the real-inputs table: held-out inputs as they come, stopped at EOS, engine vs "
                        "CTranslate2 (default: on)")
    p.add_argument("--real-only", action="store_true",
                   help="run only the real-inputs table (plus the conversion check); rewrites only its part of the report")
    p.add_argument("--real-inputs", type=int, default=640,
                   help="inputs per timed pass of the real-inputs table, cycling through the test set (default: %(default)s)")
    p.add_argument("--real-repeats", type=int, default=3,
                   help="timed passes per real-inputs cell, after one warm-up; the median is reported (>= 3; default: %(default)s)")
    p.add_argument("--served-default", action=argparse.BooleanOptionalAction, default=True,
                   help="with the real-inputs table: CPU per sequence and held-out chrF of the served default search "
                        "against CTranslate2's default beam 4 (bench/served_default.py; default: on)")
    p.add_argument("--beams", type=_ints, default=[1, 4], help="beam sizes of the real-inputs table (1 = greedy; default: 1,4)")
    p.add_argument("--ct2-length-penalty", type=float, default=0.6,
                   help="CTranslate2's length_penalty in beam search (score / length**p; the engine uses GNMT's "
                        "((5+|Y|)/6)**0.6, which CTranslate2 does not offer; default: %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="tiny grid and real-inputs table for development and smoke tests (batch 1,4; 8,16 tokens; 4 grid "
                        "inputs, 8 real inputs; < 1 minute); writes no docs unless --output")
    p.add_argument("--output", type=Path, help="markdown file to update (default: docs/BENCHMARKS.md; none with --quick)")
    p.add_argument("--no-write", action="store_true", help="print the report only")
    p.add_argument("--json", type=Path, help="also write the raw results as JSON here")
    a = p.parse_args(argv)
    if a.quick:
        a.batch_sizes, a.new_tokens, a.min_sentences = [1, 4], [8, 16], 4
        a.verify_sentences, a.accuracy_sentences = min(a.verify_sentences, 16), min(a.accuracy_sentences, 32)
        a.real_inputs = min(a.real_inputs, 8)
    if a.real_only:
        a.real = True
    if a.int8 is None:
        a.int8 = not a.quick
    a.engines = [e for e in a.engines.split(",") if e]
    unknown = set(a.engines) - set(ENGINES)
    if unknown:
        p.error(f"unknown engines {sorted(unknown)}; choose from {ENGINES}")
    if a.int8:
        a.engines += list(INT8_ENGINES)
    if a.repeats < 3 or a.real_repeats < 3:
        p.error("--repeats and --real-repeats must be >= 3 (the median of fewer is not a median)")
    if a.real and (a.real_inputs < 1 or not a.beams or min(a.beams) < 1):
        p.error("--real-inputs must be >= 1 and --beams positive")
    a.checkpoint = a.checkpoint or ROOT / "checkpoints" / a.model
    a.data = a.data or a.checkpoint / "test.tsv"
    if a.bundle is None:
        versions = sorted((int(v.name) for v in (ROOT / "models" / a.model).glob("*") if v.name.isdigit()), reverse=True)
        if not versions:
            p.error(f"no bundle under {ROOT / 'models' / a.model}: export one (s2s export) or pass --bundle")
        a.bundle = ROOT / "models" / a.model / str(versions[0])
    if a.output is None and not a.quick:
        a.output = ROOT / "docs" / "BENCHMARKS.md"
    return a


# ----------------------------------------------------------------------------- engines

@dataclass
class Runner:
    """One engine: ``run(texts, n)`` decodes a batch, exactly n new tokens each, and returns token-id rows or texts."""

    name: str
    run: Callable[[list[str], int], list]


def torch_forced(model, src, src_mask, n: int) -> list[list[int]]:
    """PyTorch eager greedy with the KV cache, exactly n steps (EOS is fed back like any token).

    ``training.decoding.greedy`` stops at EOS; this is its loop without the stop.
    """
    import torch

    sp = model.config.special
    b = src.shape[0]
    cross = model.cross_kv(model.encode(src, src_mask))
    past, past_mask = model.empty_past(b)
    tok = torch.full((b, 1), sp.bos, dtype=torch.long)
    one = torch.ones(b, 1, dtype=torch.long)
    out = []
    for step in range(n):
        positions = torch.full((b, 1), step, dtype=torch.long)
        logits, past = model.decode_step(tok, positions, past, past_mask, cross, src_mask)
        past_mask = torch.cat([past_mask, one], dim=1)
        tok = logits[:, -1].argmax(-1, keepdim=True)
        out.append(tok)
    return torch.cat(out, 1).tolist()


def make_runners(args, ck, engine, engine_int8, ct2, ct2_int8) -> dict[str, Runner]:
    import torch

    from bench.baselines import generate, generate_no_cache
    from engine.generator import pad_batch

    codec, sp = ck.codec, ck.config.special

    def ort_kv(eng):
        return lambda texts, n: generate(eng, texts, n, batch_size=len(texts), ignore_eos=True)

    def torch_kv(texts, n):
        with torch.inference_mode():
            ids, mask = (torch.from_numpy(a) for a in pad_batch([codec.source_ids(t) for t in texts], sp.pad))
            return [codec.decode(r) for r in torch_forced(ck.model, ids, mask, n)]

    def ct2_run(tr):
        return lambda texts, n: [codec.decode(r) for r in tr.greedy([codec.source_ids(t) for t in texts], n, force=True)]

    runners = {
        "ort+kv": Runner("ort+kv", ort_kv(engine)),
        "ort-nocache": Runner("ort-nocache", lambda texts, n: generate_no_cache(engine, texts, n, ignore_eos=True)),
        "torch+kv": Runner("torch+kv", torch_kv),
        "ct2": Runner("ct2", ct2_run(ct2)),
    }
    if engine_int8 is not None:
        runners["ort-int8+kv"] = Runner("ort-int8+kv", ort_kv(engine_int8))
        runners["ct2-int8"] = Runner("ct2-int8", ct2_run(ct2_int8))
    return {k: v for k, v in runners.items() if k in args.engines}


# ----------------------------------------------------------------------------- measuring

class Timed:
    """What a cell of timings reports; the dataclasses below hold ``sequences`` and ``times``."""

    sequences: int
    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def seq_s(self) -> float:
        return self.sequences / self.median

    @property
    def spread(self) -> float:
        return (max(self.times) - min(self.times)) / self.median


@dataclass
class Cell(Timed):
    engine: str
    batch: int
    new_tokens: int
    sequences: int
    times: list[float] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.sequences * self.new_tokens / self.median


def time_cells(runners: list[Runner], texts: list[str], batch: int, n: int, repeats: int, tick=lambda: None) -> list[Cell]:
    """One grid cell for every engine. Engines run one at a time but take turns repeat by repeat,
    so a passing disturbance of the machine hits all of them alike rather than one engine's cell."""
    chunks = [texts[k : k + batch] for k in range(0, len(texts), batch)]
    cells = [Cell(r.name, batch, n, len(texts)) for r in runners]
    for r in runners:
        r.run(chunks[0], n)  # warm-up: session/allocator caches, lazy initialisation
    for _ in range(repeats):
        for r, cell in zip(runners, cells):
            t0 = time.perf_counter()
            out = [o for c in chunks for o in r.run(c, n)]
            cell.times.append(time.perf_counter() - t0)
            cell.outputs = out
        tick()
    return cells


# ----------------------------------------------------------------------------- artifacts

def cached_bundle(checkpoint_dir: Path, name: str, quantize: str = "none", fused: bool = False) -> Path:
    """A bundle of the checkpoint under .cache/bench/models/, exported once per weights and variant:
    ``quantize`` as `s2s export --quantize` ("int8" = the default variant), ``fused`` as --fused-attention."""
    from contract import bundle
    from export.quantize import resolve
    from training import checkpoint as ckpt_io

    quantize = resolve(quantize)
    repo = CACHE / "models"
    bname = "-".join([name] + ([quantize] if quantize != "none" else []) + (["fused"] if fused else []))
    folder = repo / bname / "1"
    want = bundle.FORMAT_CONTRIB_OPS if fused else bundle.FORMAT_VERSION
    # Exported again when the weights, the variant or the export code (export/*.py) changed since.
    recipe = max(p.stat().st_mtime for p in (ROOT / "export").glob("*.py"))
    if (folder / "config.json").is_file() and (folder / "config.json").stat().st_mtime > recipe:
        try:
            cfg = bundle.read_bundle(folder, verify_hashes=False)
            if (cfg.source_checkpoint_sha256 == ckpt_io.weights_sha256(checkpoint_dir) and cfg.quantization == quantize
                    and cfg.format_version == want):
                return folder
        except Exception:  # stale or partial: re-export
            pass
    import logging
    import warnings

    from export.onnx_export import ExportOptions, export

    logging.getLogger("s2s").setLevel(logging.WARNING)
    print(f"exporting {bname} from {checkpoint_dir} to {folder} ...", file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.onnx's dynamic-axis naming notes
        return export(ExportOptions(checkpoint=checkpoint_dir, repo=repo, name=bname, version=1, quantize=quantize, fused=fused))


def machine() -> dict:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"nproc": nproc, "cpu": cpu, "loadavg": os.getloadavg()}


# ----------------------------------------------------------------------------- accuracy (int8)

def accuracy(args, ck, engine, engine_int8, ct2, ct2_int8, pairs) -> list[dict]:
    import sacrebleu

    from bench.baselines import generate

    srcs, refs = [s for s, _ in pairs], [r for _, r in pairs]
    codec = ck.codec
    budget = min(ck.task.max_new_tokens, ck.config.max_len - 1)
    tok = ck.extra.get("config", {}).get("bleu_tokenize", "13a") if ck.task.name == "translation" else "13a"

    def ct2_gen(tr):
        # The engine caps each output at min(budget, source length + 50) (Generator.budget);
        # CTranslate2 takes one cap per batch, so its outputs are cut the same way (a greedy prefix).
        out = []
        for k in range(0, len(srcs), 64):
            ids = [codec.source_ids(s) for s in srcs[k : k + 64]]
            out += [codec.decode(r[: len(i) + 50]) for i, r in zip(ids, tr.greedy(ids, budget))]
        return out

    systems = [("ort+kv", "float32", lambda: generate(engine, srcs, budget, batch_size=64)),
               ("ort+kv", "int8", lambda: generate(engine_int8, srcs, budget, batch_size=64)),
               ("ct2", "float32", lambda: ct2_gen(ct2)),
               ("ct2", "int8", lambda: ct2_gen(ct2_int8))]
    rows, base = [], {}
    for name, prec, fn in systems:
        t0 = time.perf_counter()
        hyps = fn()
        secs = time.perf_counter() - t0
        if prec == "float32":
            base[name] = hyps
        rows.append({
            "engine": name, "precision": prec, "n": len(refs),
            "exact": sum(h == r for h, r in zip(hyps, refs)) / len(refs),
            "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
            # BLEU only for translation: 4-gram BLEU of one-token answers (addition) is 0 whatever the accuracy.
            "bleu": sacrebleu.corpus_bleu(hyps, [refs], tokenize=tok).score if ck.task.name == "translation" else None,
            "bleu_tokenize": tok,
            "same_as_fp32": sum(a == b for a, b in zip(hyps, base[name])) / len(refs),
            "seconds": secs,
        })
    return rows


# ----------------------------------------------------------------------------- real inputs (stopped at EOS)

REAL = "bench-decode-real"  # the marked part of the decode section that the real-inputs table owns
# The issue's targets: engine / CTranslate2 sequences/s, same precision, per batch size (both searches must meet them).
REAL_TARGETS = {("float32", 1): 0.9, ("float32", 16): 1.0, ("float32", 64): 1.0,
                ("int8", 1): 0.8, ("int8", 16): 0.8, ("int8", 64): 0.8}


@dataclass
class RealSystem:
    """One side of the real-inputs table: ``run(texts, tokens, beam, batch)`` returns raw outputs, ``ids`` maps them
    to token-id rows (EOS excluded) after the timing."""

    name: str  # "engine" | "ct2" | "engine-gnmt" (beam rows only: the engine's default, the paper's rule)
    precision: str  # "float32" | "int8"
    run: Callable[[list[str], list[list[str]], int, int], list]
    ids: Callable[[list], list[list[int]]]
    beams_only: bool = False


@dataclass
class RealCell(Timed):
    system: str
    precision: str
    beam: int
    batch: int
    sequences: int
    times: list[float] = field(default_factory=list)
    raw: list = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)

    @property
    def mean_len(self) -> float:
        return sum(len(r) for r in self.ids) / max(len(self.ids), 1)


def real_systems(args, budget: int, engine, engine_int8, ct2, ct2_int8) -> list[RealSystem]:
    def eng(e, rule="ctranslate2"):
        def run(texts, _tokens, beam, batch):
            # The engine's max_batch_size counts rows (a beam counts its width): B inputs = B x beam rows, as CTranslate2.
            # Beam rows rank and stop by CTranslate2's rule with its length_penalty, so both sides do the same search;
            # "engine-gnmt" times the engine's default (GNMT's penalty, stopping when no live beam can still win).
            search = ({} if beam == 1 else dict(length_penalty_type="gnmt") if rule == "gnmt" else
                      dict(length_penalty_type="ctranslate2", length_penalty=args.ct2_length_penalty))
            return e.generate(texts, beam_size=beam, max_new_tokens=budget, max_batch_size=batch * beam, **search)
        return run

    def ct2_run(tr):
        def run(_texts, tokens, beam, batch):
            return tr.translator.translate_batch(
                tokens, max_batch_size=batch, batch_type="examples", beam_size=beam, length_penalty=args.ct2_length_penalty,
                max_decoding_length=budget, min_decoding_length=0, return_scores=False)
        return run

    def ct2_ids(tr):
        return lambda res: [[tr.ids[t] for t in r.hypotheses[0]] for r in res]

    def eng_ids(res):
        return [list(r.tokens) for r in res]

    systems = [RealSystem("engine", "float32", eng(engine), eng_ids), RealSystem("ct2", "float32", ct2_run(ct2), ct2_ids(ct2)),
               RealSystem("engine-gnmt", "float32", eng(engine, "gnmt"), eng_ids, beams_only=True)]
    if engine_int8 is not None:
        systems += [RealSystem("engine", "int8", eng(engine_int8), eng_ids),
                    RealSystem("ct2", "int8", ct2_run(ct2_int8), ct2_ids(ct2_int8))]
    return systems


def time_real(systems: list[RealSystem], texts: list[str], tokens: list[list[str]], beams: list[int], batches: list[int],
              repeats: int, tick=lambda: None) -> list[RealCell]:
    """Every (beam, batch) cell for every system: one warm-up each on 2B inputs, then ``repeats`` passes over all
    inputs, the systems taking turns, the order reversed every other pass (ABBA: no side always runs first)."""
    cells: list[RealCell] = []
    for beam in beams:
        for batch in batches:
            active = [s for s in systems if beam > 1 or not s.beams_only]
            row = [RealCell(s.name, s.precision, beam, batch, len(texts)) for s in active]
            warm = min(len(texts), 2 * batch)
            for s in active:
                s.run(texts[:warm], tokens[:warm], beam, batch)
            for rep in range(repeats):
                order = list(range(len(active)))
                if rep % 2:
                    order.reverse()
                for i in order:
                    t0 = time.perf_counter()
                    out = active[i].run(texts, tokens, beam, batch)
                    row[i].times.append(time.perf_counter() - t0)
                    row[i].raw = out
                tick()
            for s, c in zip(active, row):
                c.ids, c.raw = s.ids(c.raw), []
            cells += row
    return cells


def real_table(args, ck, budget: int, engine, engine_int8, ct2, ct2_int8, sources: list[str]) -> dict:
    """Time the real-inputs table; returns what render_real needs."""
    from tqdm import tqdm

    codec = ck.codec
    texts = [sources[i % len(sources)] for i in range(args.real_inputs)]
    src_ids = [codec.source_ids(t) for t in texts]
    tokens = [[ct2.tokens[i] for i in r] for r in src_ids]  # outside the timing, as the brief of the table says
    first = {}
    for i, t in enumerate(texts):
        first.setdefault(t, i)
    distinct = sorted(first.values())
    loadavg = os.getloadavg()
    systems = real_systems(args, budget, engine, engine_int8, ct2, ct2_int8)
    bar = tqdm(total=len(args.beams) * len(args.batch_sizes) * args.real_repeats, desc="real inputs", unit="pass", file=sys.stderr)
    t_start = time.perf_counter()
    cells = time_real(systems, texts, tokens, args.beams, args.batch_sizes, args.real_repeats, tick=lambda: bar.update(1))
    bar.close()
    seconds = time.perf_counter() - t_start
    by = {(c.system, c.precision, c.beam, c.batch): c for c in cells}
    # The engine caps each output at min(budget, source length + 50) (Generator.budget); CTranslate2 takes one cap
    # per call, so its outputs are cut the same way before comparing (a prefix of what it generated).
    for c in cells:
        if c.system == "ct2":
            c.ids = [r[: len(s) + 50] for r, s in zip(c.ids, src_ids)]
    same = {}
    for c in cells:
        if c.system == "engine" and ("ct2", c.precision, c.beam, c.batch) in by:
            theirs = by[("ct2", c.precision, c.beam, c.batch)].ids
            same[(c.precision, c.beam, c.batch)] = sum(c.ids[i] == theirs[i] for i in distinct)
    # What the engine's timings include and CTranslate2's do not: tokenizing the inputs, detokenizing the outputs.
    ref = by.get(("engine", "float32", args.beams[0], args.batch_sizes[0]))
    t0 = time.perf_counter()
    for t in texts:
        codec.source_ids(t)
    for r in ref.ids if ref else []:
        codec.decode(r)
    codec_s = time.perf_counter() - t0
    return {"cells": cells, "same": same, "n": len(texts), "distinct": len(distinct), "loadavg": loadavg,
            "seconds": seconds, "codec_seconds": codec_s, "budget": budget}


def real_acceptance(real: dict, args) -> list[str]:
    by = {(c.system, c.precision, c.beam, c.batch): c for c in real["cells"]}
    rows = []
    for (prec, batch), target in REAL_TARGETS.items():
        values = []
        for beam in args.beams:
            e, c = by.get(("engine", prec, beam, batch)), by.get(("ct2", prec, beam, batch))
            if e and c:
                values.append((beam, e.seq_s / c.seq_s))
        if not values:
            continue
        shown = " / ".join(f"{v:.2f}x" for _, v in values)
        ok = "met" if min(v for _, v in values) >= target else "**not met**"
        what = f"engine / CTranslate2 {prec}" if prec == "float32" else "int8 engine / CTranslate2 int8"
        rows.append(f"| {what}, batch {batch} | {shown} | >= {target:g}x | {ok} |")
    if not rows:
        return []
    searches = " / ".join("greedy" if b == 1 else f"beam {b}" for b in args.beams)
    return ["", f"Acceptance (issue \"Engine speed: ahead of CTranslate2 per core\"; sequences/s ratios on real inputs, "
                f"one value per search: {searches}; a row is met when every value is):", "",
            "| figure | measured | target | |", "|---|---|---|---|", *rows]


def render_real(args, info: dict, real: dict) -> str:
    """The real-inputs table, as the text between the bench-decode-real markers."""
    by = {(c.system, c.precision, c.beam, c.batch): c for c in real["cells"]}
    precisions = ["float32"] + (["int8"] if any(c.precision == "int8" for c in real["cells"]) else [])
    la = real["loadavg"]
    lines = [
        "### Real inputs, stopped at EOS: engine vs CTranslate2",
        "",
        f"- date: {info['date']}; load average at the start of this table {la[0]:.2f} on {info['machine']['nproc']} CPU(s); "
        f"this table took {real['seconds']:.0f} s",
        f"- command: `{info['command']}`",
        f"- inputs: {real['n']} held-out sources as they come (`{info['data']}` source column, seeded shuffle "
        f"(seed {args.seed}) cycled; {real['distinct']} distinct), natural lengths, each stopped at EOS or at the engine's "
        f"budget (min({real['budget']}, source length + 50) tokens); {args.threads} thread(s) per engine, one engine at a time.",
        f"- engine: `engine.load(bundle, threads={args.threads}, device=\"cpu\").generate(texts, beam_size=b, "
        f"max_batch_size=B x b)` (beam rows add `length_penalty_type=\"ctranslate2\", length_penalty="
        f"{args.ct2_length_penalty:g}`: CTranslate2's ranking and stopping, the same search as its side) on `{info['bundle']}`" + (f" and on the int8 bundle `{info.get('bundle_int8', '?')}`"
                                                       if "int8" in precisions else "")
        + "; it refills the batch as rows finish; its timings include tokenizing the texts and detokenizing the "
        f"outputs ({1000 * real['codec_seconds']:.1f} ms for all {real['n']} inputs and outputs, measured apart).",
        f"- CTranslate2: `Translator(inter_threads=1, intra_threads={args.threads}, compute_type=float32"
        + ("|int8" if "int8" in precisions else "") + f").translate_batch(tokens, max_batch_size=B, beam_size=b, "
        f"max_decoding_length={real['budget']}, min_decoding_length=0, length_penalty={args.ct2_length_penalty:g})`, "
        "its own length sorting; tokenized with the bundle's tokenizer outside the timing.",
        f"- method: per cell one warm-up of each system on 2B inputs, then {args.real_repeats} timed passes over all "
        "inputs, the systems taking turns and the order reversed every other pass (ABBA); the median pass is reported. "
        "spread = (max-min)/median. *engine / CT2* = the engine's sequences/s divided by CTranslate2's of the same "
        "precision (> 1: the engine is faster).",
        "- *identical* = outputs (token ids) equal to CTranslate2's of the same precision, on the distinct inputs; "
        "CTranslate2's outputs are cut at source length + 50 as the engine's are.",
        "- *GNMT rule seq/s* (beam rows, float32): the engine with its default search, the paper's beam (GNMT's "
        "length penalty ((5+|Y|)/6)^0.6, stopping only once no live beam can still beat the best ended one, which "
        "runs more steps than CTranslate2's stop at beam_size ended hypotheses); timed in the same passes, "
        "for what the default costs, not compared with CTranslate2.",
        "- batch B counts inputs on both sides: the engine gets `max_batch_size=B x beam` (it counts rows, a beam "
        "its width, and refills rows as sequences finish); CTranslate2 decodes chunks of B length-sorted inputs "
        "(B x beam rows).",
        "",
        "| search | batch | precision | engine seq/s | CT2 seq/s | engine / CT2 | spread engine / CT2 | mean output tokens | identical | GNMT rule seq/s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for beam in args.beams:
        for batch in args.batch_sizes:
            for prec in precisions:
                e, c = by.get(("engine", prec, beam, batch)), by.get(("ct2", prec, beam, batch))
                if not (e and c):
                    continue
                same = real["same"].get((prec, beam, batch))
                g = by.get(("engine-gnmt", prec, beam, batch))
                lines.append(f"| {'greedy' if beam == 1 else f'beam {beam}'} | {batch} | {prec} | {e.seq_s:.1f} | {c.seq_s:.1f} | "
                             f"{e.seq_s / c.seq_s:.2f} | {100 * e.spread:.0f}% / {100 * c.spread:.0f}% | "
                             f"{e.mean_len:.1f} / {c.mean_len:.1f} | {same}/{real['distinct']} | "
                             f"{f'{g.seq_s:.1f}' if g else ''} |")
    lines += real_acceptance(real, args)
    return "\n".join(lines) + "\n"


def real_block(text: str) -> str:
    begin, end = markers(REAL)
    return f"{begin}\n{text.strip(chr(10))}\n{end}\n"


def write_real(path: Path, text: str) -> None:
    """--real-only: rewrite the real-inputs part of the decode section (placing it at the end of the section the
    first time), leaving the grid and everything else as it is."""
    begin, end = markers(REAL)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if begin in old and end in old:
        write_section(path, REAL, text)
        return
    dbegin, dend = markers("bench-decode")
    body = old.split(dbegin, 1)[1].split(dend, 1)[0].strip("\n") if dbegin in old and dend in old else ""
    write_section(path, "bench-decode", (body + "\n\n" if body else "") + real_block(text))


# ----------------------------------------------------------------------------- report

def acceptance(by: dict, args) -> list[str]:
    """Issue #3's targets, read off this run's cells (a row only where both of its cells were timed)."""
    def ratio(a: str, b: str, batch: int, n: int) -> float | None:
        x, y = by.get((a, batch, n)), by.get((b, batch, n))
        return x.tok_s / y.tok_s if x and y else None

    checks = [("KV cache / no cache, 64 new tokens, batch 16", [ratio("ort+kv", "ort-nocache", 16, 64)], 3.0)]
    checks += [(f"engine / PyTorch eager, batch {b}", [ratio("ort+kv", "torch+kv", b, n) for n in args.new_tokens], 1.0)
               for b in (1, 64)]
    checks.append(("engine / CTranslate2 float32, batch 64", [ratio("ort+kv", "ct2", 64, n) for n in args.new_tokens], 0.8))
    rows = []
    for what, values, target in checks:
        values = [v for v in values if v is not None]
        if values:
            shown = " / ".join(f"{v:.2f}x" for v in values)
            ok = "met" if (min(values) > target if target == 1.0 else min(values) >= target) else "**not met**"
            rows.append(f"| {what} | {shown} | {'>' if target == 1.0 else '>='} {target:g}x | {ok} |")
    if not rows:
        return []
    return ["", f"Acceptance (issue #3; tokens/s ratios, one value per new-token count {args.new_tokens}):", "",
            "| figure | measured | target | |", "|---|---|---|---|", *rows]


def render(args, info: dict, cells: list[Cell], verification: dict, consistency: dict, acc: list[dict] | None) -> str:
    c = info["model"]
    m = info["machine"]
    by = {(x.engine, x.batch, x.new_tokens): x for x in cells}
    lines = [
        "## Decode speed: engine vs PyTorch vs CTranslate2 (`bench/decode.py`)",
        "",
        f"- date: {info['date']}",
        f"- machine: {m['nproc']} CPU(s) (`nproc`), {m['cpu']}; load average at start {m['loadavg'][0]:.2f}",
        f"- software: Python {platform.python_version()}, onnxruntime {info['versions']['onnxruntime']}, "
        f"torch {info['versions']['torch']}, ctranslate2 {info['versions']['ctranslate2']}",
        f"- model: `{info['model_name']}` (checkpoint `{info['checkpoint']}`, bundle `{info['bundle']}`): "
        f"d_model {c['d_model']}, {c['n_heads']} heads, {c['n_encoder_layers']}+{c['n_decoder_layers']} layers, "
        f"d_ff {c['d_ff']}, vocab {c['src_vocab_size']}/{c['tgt_vocab_size']}"
        f"{' shared' if c['share_embeddings'] else ''}{', output tied' if c['tie_output'] else ''}, max_len {c['max_len']}",
        f"- command: `{info['command']}`",
        f"- method: every engine generates exactly N new tokens per input (EOS ignored), {args.threads} thread(s) each, "
        f"never two engines at once (they take turns, repeat by repeat); per cell one warm-up each, then {args.repeats} timed repeats over max(batch, "
        f"{args.min_sentences}) held-out sources (`{info['data']}`, seed {args.seed}), split in batches; medians; "
        "timings include (de)tokenization. spread = (max-min)/median. *x CT2* = tokens/s divided by CTranslate2's "
        "of the same precision (> 1: faster than CTranslate2).",
        "- engines: " + "; ".join(f"`{e}` {NOTES[e]}" for e in args.engines) + ".",
        f"- whole run: {info['seconds']:.0f} s",
        "",
        "**Conversion check** (CTranslate2 via `TransformerSpec`, bench/ct2_convert.py): "
        f"greedy tokens equal PyTorch's (`training.decoding.greedy`, stopping at EOS, budget {verification['budget']}) on "
        f"{verification['identical']}/{verification['n']} held-out inputs ({100 * verification['rate']:.1f}%); "
        f"teacher-forced log-probabilities of those outputs differ by at most {verification['max_abs_logprob_diff']:.1e}.",
    ]
    if verification.get("first_mismatch"):
        lines.append(f"First mismatch: `{json.dumps(verification['first_mismatch'], ensure_ascii=False)[:400]}`")
    if consistency:
        lines.append("Identical forced outputs (texts) in the timed runs, all cells: "
                     + "; ".join(f"{k}: {v}" for k, v in consistency.items()) + ".")
    lines += [
        "",
        "| new tokens | batch | engine | sequences/s | tokens/s | spread | x CT2 |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for n in args.new_tokens:
        for b in args.batch_sizes:
            for e in args.engines:
                x = by.get((e, b, n))
                if x is None:
                    continue
                base = by.get((BASELINE[e], b, n))
                ratio = f"{x.tok_s / base.tok_s:.2f}" if base else "-"
                lines.append(f"| {n} | {b} | {e} | {x.seq_s:.1f} | {x.tok_s:.0f} | {100 * x.spread:.0f}% | {ratio} |")
    # KV-cache speed-up of the engine, the figure the engine's design rests on.
    if "ort+kv" in args.engines and "ort-nocache" in args.engines:
        ups = [f"N={n} B={b}: {by[('ort+kv', b, n)].tok_s / by[('ort-nocache', b, n)].tok_s:.1f}x"
               for n in args.new_tokens for b in args.batch_sizes if ('ort+kv', b, n) in by and ('ort-nocache', b, n) in by]
        lines += ["", "KV cache speed-up of the engine (ort+kv / ort-nocache tokens/s): " + ", ".join(ups) + "."]
    lines += acceptance(by, args)
    if acc:
        speed = []
        for b in args.batch_sizes:
            for n in args.new_tokens:
                for f32, i8 in (("ort+kv", "ort-int8+kv"), ("ct2", "ct2-int8")):
                    if (f32, b, n) in by and (i8, b, n) in by:
                        speed.append((f32, b, n, by[(i8, b, n)].tok_s / by[(f32, b, n)].tok_s))
        lines += [
            "",
            f"**int8** (ORT: `{info.get('bundle_int8', '?')}`, `s2s export --quantize {args.int8_variant}`; CTranslate2: "
            f"`compute_type=\"int8\"`). Accuracy on {acc[0]['n']} test sentences, greedy with EOS, batch 64 "
            f"(BLEU tokenize `{acc[0]['bleu_tokenize']}`); *same as fp32* = outputs identical to the same engine in float32:",
            "",
            "| engine | precision | exact match | chrF | BLEU | same as fp32 | seconds |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in acc:
            bleu = "-" if r["bleu"] is None else f"{r['bleu']:.1f}"
            lines.append(f"| {r['engine']} | {r['precision']} | {100 * r['exact']:.1f}% | {r['chrf']:.1f} | {bleu} | "
                         f"{100 * r['same_as_fp32']:.1f}% | {r['seconds']:.1f} |")
        if speed:
            lines += ["", "int8 speed-up over float32 (tokens/s ratio, same engine):", "",
                      "| new tokens | batch | ort-int8+kv / ort+kv | ct2-int8 / ct2 |", "|---:|---:|---:|---:|"]
            ratio = {(e, b, n): r for e, b, n, r in speed}
            for n in args.new_tokens:
                for b in args.batch_sizes:
                    cols = [f"{ratio[(e, b, n)]:.2f}" if (e, b, n) in ratio else "-" for e in ("ort+kv", "ct2")]
                    lines.append(f"| {n} | {b} | {cols[0]} | {cols[1]} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    info = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "command": " ".join(["python bench/decode.py", shlex.join(sys.argv[1:] if argv is None else argv)]).strip()}
    if info["machine"]["loadavg"][0] > 0.5 * info["machine"]["nproc"]:
        print(f"warning: load average {info['machine']['loadavg'][0]:.2f} on {info['machine']['nproc']} CPUs: "
              "timings will be disturbed by other work", file=sys.stderr)

    import ctranslate2
    import onnxruntime
    import torch
    from tqdm import tqdm

    from bench.ct2_convert import CT2Translator, convert, verify, vocabulary
    from engine import EngineOptions, Translator
    from training import checkpoint as ckpt_io
    from training.tasks import read_tsv

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (e.g. when called twice in one process)
        pass
    info["versions"] = {"onnxruntime": onnxruntime.__version__, "torch": torch.__version__.split("+")[0],
                        "ctranslate2": ctranslate2.__version__}

    for what, path in (("checkpoint", args.checkpoint / "config.json"), ("data", args.data), ("bundle", args.bundle / "config.json")):
        if not path.is_file():
            print(f"bench/decode.py: {what} {path} is missing (train/export the model, or pass --{what})", file=sys.stderr)
            return 2
    ck = ckpt_io.load(args.checkpoint)
    c = ck.config
    if max(args.new_tokens) > c.max_len:
        print(f"bench/decode.py: --new-tokens {max(args.new_tokens)} > the model's max_len {c.max_len}", file=sys.stderr)
        return 2
    info.update(model=c.to_dict(), model_name=args.model, checkpoint=_rel(args.checkpoint), bundle=_rel(args.bundle),
                data=_rel(args.data))
    pairs = read_tsv(args.data)
    rng = random.Random(args.seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    shuffled = [pairs[i] for i in order]
    # The timed inputs cycle through the shuffled test set (a small test set repeats itself).
    need = max(max(args.batch_sizes), args.min_sentences)
    inputs = [shuffled[i % len(shuffled)][0] for i in range(need)]

    print(f"converting {args.checkpoint} for CTranslate2 ...", file=sys.stderr)
    ct2_dir = convert(args.checkpoint, CACHE / f"ct2-{args.model}")
    tokens = vocabulary(ck.codec.tokenizer)
    ct2 = CT2Translator(ct2_dir, tokens, "float32", args.threads)
    engine = Translator(args.bundle, EngineOptions(device="cpu", intra_op_threads=args.threads))
    if engine.config.source_checkpoint_sha256 != ckpt_io.weights_sha256(args.checkpoint):
        print(f"warning: {args.bundle} was not exported from {args.checkpoint} (weights differ)", file=sys.stderr)
        info["bundle"] += " (NOT exported from this checkpoint's weights)"

    budget = min(ck.task.max_new_tokens, c.max_len - 1)
    verification = verify(ck.model, ck.codec, ct2, [s for s, _ in shuffled[: args.verify_sentences]], budget)
    verification["budget"] = budget
    print(f"CT2 vs PyTorch greedy: {verification['identical']}/{verification['n']} identical, "
          f"max |d log p| {verification['max_abs_logprob_diff']:.1e}", file=sys.stderr)

    engine_int8 = ct2_int8 = None
    if args.int8:
        folder_int8 = cached_bundle(args.checkpoint, args.model, args.int8_variant)
        info["bundle_int8"] = _rel(folder_int8)
        engine_int8 = Translator(folder_int8, EngineOptions(device="cpu", intra_op_threads=args.threads))
        ct2_int8 = CT2Translator(ct2_dir, tokens, "int8", args.threads)

    cells: list[Cell] = []
    consistency: dict = {}
    acc = None
    if not args.real_only:
        runners = make_runners(args, ck, engine, engine_int8, ct2, ct2_int8)
        order = [runners[e] for e in args.engines if e in runners]
        bar = tqdm(total=len(args.new_tokens) * len(args.batch_sizes) * args.repeats, desc="decode grid", unit="repeat", file=sys.stderr)
        for n in args.new_tokens:
            for b in args.batch_sizes:
                bar.set_postfix_str(f"N={n} B={b}")
                cells += time_cells(order, inputs[: max(b, args.min_sentences)], b, n, args.repeats, tick=lambda: bar.update(1))
        bar.close()

        # The forced outputs must agree across our three implementations (CT2 masks EOS until N, so
        # it only agrees up to the first EOS and is compared by the conversion check instead).
        by = {(x.engine, x.batch, x.new_tokens): x for x in cells}
        for a, b_ in (("ort+kv", "ort-nocache"), ("ort+kv", "torch+kv"), ("ort-int8+kv", "ort+kv")):
            pairs_ab = [(x.outputs, by[(b_, x.batch, x.new_tokens)].outputs) for x in cells
                        if x.engine == a and (b_, x.batch, x.new_tokens) in by]
            if pairs_ab:
                same = sum(u == v for xs, ys in pairs_ab for u, v in zip(xs, ys))
                consistency[f"{a} = {b_}"] = f"{same}/{sum(len(xs) for xs, _ in pairs_ab)}"

        if args.int8:
            print(f"int8 accuracy on {args.accuracy_sentences} test sentences ...", file=sys.stderr)
            acc = accuracy(args, ck, engine, engine_int8, ct2, ct2_int8, shuffled[: args.accuracy_sentences])

    real = real_text = None
    if args.real:
        real = real_table(args, ck, budget, engine, engine_int8, ct2, ct2_int8, [s for s, _ in shuffled])
        real_text = render_real(args, info, real)
        if args.served_default and engine.config.task.beam_size > 1:
            from bench import served_default
            from contract.decoding import DecodingOptions

            print("served default vs CTranslate2's default beam 4 ...", file=sys.stderr)
            texts = [shuffled[i % len(shuffled)][0] for i in range(args.real_inputs)]
            real["served_default"] = sd = served_default.measure(engine, ct2, ck.codec, texts, args.batch_sizes,
                                                                 args.real_repeats, budget)
            task = engine.config.task
            d = DecodingOptions(length_penalty_type=task.length_penalty_type)
            real_text += served_default.render(sd, f"beam {task.beam_size}, length_penalty_type "
                                                   f"{d.length_penalty_type}, length_penalty {d.alpha:g}")

    info["seconds"] = time.perf_counter() - started
    if args.real_only:
        report = real_text
    else:
        report = render(args, info, cells, verification, consistency, acc)
        if real_text:
            report += "\n" + real_block(real_text)
    print(report)
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if args.json:
        real_json = None if real is None else {
            **{k: v for k, v in real.items() if k not in ("cells", "same")},
            "same": {f"{p}/beam{b}/batch{B}": v for (p, b, B), v in real["same"].items()},
            "cells": [{**{k: v for k, v in c.__dict__.items() if k not in ("raw", "ids")}, "seq_s": c.seq_s,
                       "mean_output_tokens": c.mean_len} for c in real["cells"]]}
        args.json.write_text(json.dumps({"info": info, "verification": verification, "consistency": consistency,
                                         "accuracy": acc, "cells": [{**{k: v for k, v in x.__dict__.items() if k != "outputs"},
                                                                     "seq_s": x.seq_s, "tok_s": x.tok_s} for x in cells],
                                         "real": real_json},
                                        indent=2, ensure_ascii=False, default=str))
    if args.output and not args.no_write:
        if args.real_only:
            write_real(args.output, real_text)
        else:
            write_section(args.output, "bench-decode", report)
        print(f"wrote {_rel(args.output)}", file=sys.stderr)
    return 0 if verification["rate"] == 1.0 else 1


def _rel(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


if __name__ == "__main__":
    sys.exit(main())
