"""The systems the engine grid times, each a side: ``run(texts, tokens, beam, batch)`` decodes every input (source
texts and, for CTranslate2, their tokens made outside the timing) and returns token-id rows. Forced sides generate
exactly N new tokens (EOS ignored, so every system does the same work); real sides stop at EOS or the budget.
``time_sides`` runs them taking turns: one warm-up each, then passes in ABBA (or rotated) order."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.harness.load import abba


@dataclass
class Side:
    system: str  # "engine", "engine no cache", "torch", "ct2", "engine gnmt", "engine screen off"
    precision: str  # "float32" | "int8"
    run: Callable[[list[str], list[list[str]], int, int], list[list[int]]]
    only: str = ""  # "greedy" or "beam": the searches it runs (empty: every one)


@dataclass
class Cell:
    system: str
    precision: str
    beam: int
    batch: int
    times: list[float] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)

    @property
    def seq_s(self) -> float:
        return len(self.ids) / statistics.median(self.times)

    @property
    def tok_s(self) -> float:
        return sum(map(len, self.ids)) / statistics.median(self.times)

    @property
    def spread(self) -> float:
        return (max(self.times) - min(self.times)) / statistics.median(self.times)


def time_sides(
    sides: list[Side], texts: list[str], tokens: list, beam: int, batch: int, repeats: int
) -> list[Cell]:
    """One (search, batch) cell of every side that runs ``beam``; the median of ``repeats`` passes counts."""
    sides = [s for s in sides if s.only != ("beam" if beam == 1 else "greedy")]
    cells = [Cell(s.system, s.precision, beam, batch) for s in sides]
    warm = min(len(texts), 2 * batch)
    for s in sides:  # session and allocator caches, lazy initialisation
        s.run(texts[:warm], tokens[:warm], beam, batch)
    for r in range(repeats):
        order = (
            abba(range(len(sides)), r)
            if len(sides) == 2
            else [(k + r) % len(sides) for k in range(len(sides))]
        )
        for k in order:
            t0 = time.perf_counter()
            cells[k].ids = sides[k].run(texts, tokens, beam, batch)
            cells[k].times.append(time.perf_counter() - t0)
    return cells


# ---- the engine -------------------------------------------------------------------------------------------
def engine_forced(engine, n: int, precision: str = "float32", system: str = "engine") -> Side:
    """The engine, exactly n new tokens: greedy rows with EOS never matched (past the +50 cap the paper's rule
    sets), beams with min = max new tokens (CTranslate2's min_decoding_length)."""
    from engine.drive import run
    from engine.search import Greedy
    from engine.sequence import Sequence

    def go(texts, _tokens, beam, batch):
        if beam > 1:
            res = engine.generate(
                texts, beam_size=beam, max_batch_size=batch * beam, min_new_tokens=n, max_new_tokens=n
            )
            return [list(r.tokens) for r in res]
        seqs = [Sequence(engine.codec.source_ids(t), n, 1) for t in texts]
        for s in seqs:
            s.search = Greedy(eos=-1, budget=min(n, engine.config.model.max_len - 1))
        return [list(s.result) for s in run(engine.runner, seqs, batch)]

    return Side(system, precision, go)


def engine_real(
    engine, budget: int, precision: str, rule: str = "ctranslate2", alpha: float = 0.6, system: str = ""
) -> Side:
    """The engine stopped at EOS; beams rank and stop by ``rule``: CTranslate2's (with its length_penalty
    ``alpha``, the same search as its side) or GNMT's, the engine's default (beams only). ``system``: its name in
    the tables, where it is not the served bundle's engine."""

    def go(texts, _tokens, beam, batch):
        search = {} if beam == 1 else dict(length_penalty_type=rule)
        if beam > 1 and rule == "ctranslate2":
            search["length_penalty"] = alpha
        res = engine.generate(
            texts, beam_size=beam, max_new_tokens=budget, max_batch_size=batch * beam, **search
        )
        return [list(r.tokens) for r in res]

    return Side(
        system or ("engine gnmt" if rule == "gnmt" else "engine"),
        precision,
        go,
        "beam" if rule == "gnmt" else "",
    )


def engine_no_cache(engine, n: int) -> Side:
    """Greedy with no KV cache, the whole prefix fed again each step: what the cache is measured against."""

    def go(texts, _tokens, _beam, batch):
        r, sp, out = engine.runner, engine.runner.special, []
        from engine.step_loop import pad_batch

        for k in range(0, len(texts), batch):
            ids, mask = pad_batch([engine.codec.source_ids(t) for t in texts[k : k + batch]], sp.pad)
            cross, b = r.encode(ids, mask), len(ids)
            tgt = np.full((b, 1), sp.bos, np.int64)
            empty = [np.zeros((b, r.n_heads, 0, r.d_head), np.float32)] * (2 * r.n_layers)
            for _ in range(n):
                positions = np.broadcast_to(np.arange(tgt.shape[1]), tgt.shape).copy()
                logits, _ = r.decode(tgt, positions, np.zeros((b, 0), np.int64), empty, cross, mask)
                tgt = np.concatenate([tgt, logits[:, -1].argmax(-1)[:, None]], axis=1)
            out += tgt[:, 1:].tolist()
        return out

    return Side("engine no cache", "float32", go, "greedy")


def torch_forced(model, codec, n: int) -> Side:
    """PyTorch eager greedy with the KV cache, exactly n steps (training.decoding.greedy without its EOS stop)."""

    def go(texts, _tokens, _beam, batch):
        import torch

        from engine.step_loop import pad_batch

        sp, out = model.config.special, []
        with torch.inference_mode():
            for k in range(0, len(texts), batch):
                src, mask = (
                    torch.from_numpy(a)
                    for a in pad_batch([codec.source_ids(t) for t in texts[k : k + batch]], sp.pad)
                )
                b = src.shape[0]
                cross = model.cross_kv(model.encode(src, mask))
                past, past_mask = model.empty_past(b)
                tok, one, rows = (
                    torch.full((b, 1), sp.bos, dtype=torch.long),
                    torch.ones(b, 1, dtype=torch.long),
                    [],
                )
                for step in range(n):
                    positions = torch.full((b, 1), step, dtype=torch.long)
                    logits, past = model.decode_step(tok, positions, past, past_mask, cross, mask)
                    past_mask = torch.cat([past_mask, one], dim=1)
                    tok = logits[:, -1].argmax(-1, keepdim=True)
                    rows.append(tok)
                out += torch.cat(rows, 1).tolist()
        return out

    return Side("torch", "float32", go, "greedy")


# ---- CTranslate2 ------------------------------------------------------------------------------------------
def ct2(translator, vocab: list[str], precision: str, length: int, forced: bool, alpha: float = 0.6) -> Side:
    """``translate_batch`` on tokens made outside the timing, its own length sorting; ``forced``: min = max
    decoding length; else EOS-stopped at ``length`` with ``length_penalty`` alpha on beams."""
    index = {t: i for i, t in enumerate(vocab)}

    def go(_texts, tokens, beam, batch):
        kw = dict(min_decoding_length=length) if forced else dict(min_decoding_length=0, length_penalty=alpha)
        res = translator.translate_batch(tokens, beam_size=beam, max_batch_size=batch, batch_type="examples",
                                         max_decoding_length=length, return_scores=False, **kw)  # fmt: skip
        return [[index.get(t, -1) for t in r.hypotheses[0]] for r in res]

    return Side("ct2", precision, go)
