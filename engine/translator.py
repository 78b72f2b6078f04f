"""The in-process text API, CTranslate2's ``Translator`` shape: texts (or tokens) in, translations out.

It sits on the other two roles: a ``runner.Runner`` (the graphs) and the step loop
(``drive.run``); it adds the tokenizer and the decoding options' checks and defaults::

    import engine
    en_ja = engine.load("models/translate-en-ja/1")
    [r.text for r in en_ja.generate(["Save changes"], beam_size=4)]
    en_ja.translate_batch([en_ja.source_tokens("Save changes")], beam_size=4, num_hypotheses=2, return_scores=True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from contract import bundle
from contract.decoding import DecodingOptions, check
from contract.text import TextCodec
from engine.drive import run
from engine.runner import EngineOptions, Runner
from engine.search import TextHypothesis
from engine.sequence import Sequence


@dataclass(frozen=True)
class Result:
    """One input's output, as ``Translator.generate`` returns it: the best hypothesis, and all of them."""

    text: str
    tokens: list[int]  # generated ids, EOS excluded
    input_tokens: int  # source ids, EOS included
    score: float = 0.0
    # best first; hypotheses[0] is text/tokens/score
    hypotheses: list[TextHypothesis] = field(default_factory=list)


@dataclass(frozen=True)
class TranslationResult:
    """CTranslate2's ``TranslationResult`` (n-best token strings, best first, and their scores, empty unless
    asked), so that code written for ``ctranslate2.Translator.translate_batch`` runs on this one unchanged."""

    hypotheses: list[list[str]]
    scores: list[float]


class Translator:
    """A bundle's runner and tokenizer: ``generate`` on texts, ``translate_batch`` on tokens as CTranslate2 takes them."""

    def __init__(self, folder: str | Path, options: EngineOptions = EngineOptions()):
        self.runner = Runner(Path(folder), options)
        self.folder, self.config = self.runner.folder, self.runner.config
        m = self.config.model
        self.codec = TextCodec.from_file(
            self.folder / bundle.TOKENIZER_FILE,
            self.config.task,
            m.special,
            self.folder / bundle.TARGET_TOKENIZER_FILE,
        )

    def generate(
        self,
        texts: list[str],
        *,
        target_prefixes: list[str | None] | None = None,
        max_batch_size: int = 64,
        source_languages: list[str | None] | None = None,
        target_languages: list[str | None] | None = None,
        **options,
    ) -> list[Result]:
        """Texts in, one ``Result`` (``.text``, ``.tokens``, ``.input_tokens``, ``.score``, ``.hypotheses``) each, in
        order. ``options``: the fields of ``contract.decoding.DecodingOptions`` by name (``beam_size=4``,
        ``num_hypotheses=4``, ``sampling_topk=10``, ...; 0 or None: the model's default); ``target_prefixes``: one text
        (or None) per input, forced as the start of its output. ``source_languages`` / ``target_languages``: one code per
        input (ISO 639-1 or the model's own; None: the bundle's source_language / target_language) for a multilingual
        bundle; a forced first token (a target language's, BART's <s>) is not part of the result. Rows are decoded
        together, at most ``max_batch_size`` at a time (a beam counts its width), and refilled as they finish."""
        if target_prefixes is not None and len(target_prefixes) != len(texts):
            raise ValueError(
                f"{len(target_prefixes)} target prefixes for {len(texts)} texts; give one (or None) per text"
            )
        sources = [self.codec.source_ids(t) for t in texts]
        prefixes = [self.codec.target_ids(p) if p else [] for p in (target_prefixes or [None] * len(texts))]
        if self.config.languages is None and (source_languages or target_languages):
            raise ValueError(f"{self.folder}: the model has no languages to choose from")
        forced = [[] for _ in texts]
        for i, (sl, tl) in enumerate(
            zip(source_languages or [None] * len(texts), target_languages or [None] * len(texts))
        ):
            sources[i], forced[i] = self.config.start(sources[i], sl, tl)
        seqs = self._decode(
            sources,
            [f + p for f, p in zip(forced, prefixes)],
            max_batch_size,
            options,
            [len(f) for f in forced],
        )
        out = []
        for s, src, f in zip(seqs, sources, forced):
            hyps = [
                TextHypothesis(
                    self.codec.decode(h.tokens[len(f) :]),
                    h.tokens[len(f) :],
                    h.score if s.options.return_scores else 0.0,
                )
                for h in s.hypotheses
            ]
            best = hyps[0]
            out.append(Result(best.text, best.tokens, len(src), best.score, hyps))
        return out

    def source_tokens(self, text: str) -> list[str]:
        """A text as ``translate_batch`` takes it: the model's source tokens (preprocessed, EOS included)."""
        return [self.codec.tokenizer.id_to_token(i) for i in self.codec.source_ids(text)]

    def translate_batch(
        self,
        source: list[list[str]],
        target_prefix: list[list[str] | None] | None = None,
        *,
        max_batch_size: int = 64,
        **options,
    ) -> list[TranslationResult]:
        """CTranslate2's call: the model's source tokens (preprocessed as the model reads them, e.g. reversed for a
        reversed-input task; EOS appended when missing, and the task's source start token), optional target prefix
        tokens; the same options as ``generate``. Returns token strings, EOS and a forced first token excluded."""
        tok = self.codec.target_tokenizer  # outputs and prefixes; sources are read by codec.tokenizer
        eos = self.config.model.special.eos

        def ids(tokens: list[str], vocab=tok) -> list[int]:
            out = [vocab.token_to_id(t) for t in tokens]
            if None in out:
                raise ValueError(
                    f"tokens not in the vocabulary: {[t for t, i in zip(tokens, out) if i is None][:10]}"
                )
            return out

        if target_prefix is not None and len(target_prefix) != len(source):
            raise ValueError(
                f"{len(target_prefix)} target prefixes for {len(source)} sources; give one (or None) each"
            )
        task = self.config.task
        start = [] if task.source_start_id is None else [task.source_start_id]  # BART's <s>

        def source_ids(tokens: list[str]) -> list[int]:
            x = ids(tokens, self.codec.tokenizer)
            x = x if x[: len(start)] == start else start + x
            return x if x[-1:] == [eos] else x + [eos]

        sources = [source_ids(s) for s in source]
        prefixes = [ids(p) if p else [] for p in (target_prefix or [None] * len(source))]
        forced = [] if task.forced_bos_id is None else [task.forced_bos_id]
        seqs = self._decode(
            sources, [forced + p for p in prefixes], max_batch_size, options, [len(forced)] * len(sources)
        )
        return [
            TranslationResult(
                [[tok.id_to_token(i) for i in h.tokens[len(forced) :]] for h in s.hypotheses],
                [h.score for h in s.hypotheses] if s.options.return_scores else [],
            )
            for s in seqs
        ]

    def _decode(
        self,
        sources: list[list[int]],
        prefixes: list[list[int]],
        max_batch_size: int,
        options: dict,
        forced: list[int] | None = None,
    ) -> list[Sequence]:
        """``forced``: per row, how many of its prefix tokens are a forced first token; those count among the new
        tokens, as generate() counts its forced BOS within max_length."""
        task, m = self.config.task, self.config.model
        if options.get("max_new_tokens") is None:  # None, as 0: the model's default
            options.pop("max_new_tokens", None)
        o = DecodingOptions(**options).resolved(
            min(task.beam_size, max_batch_size),
            task.max_new_tokens,
            task.length_penalty_type,
            task.length_penalty,
            task.no_repeat_ngram_size,
        )
        check(o, max_beam=max_batch_size, max_new_tokens=m.max_len - 1, vocab_size=m.tgt_vocab_size)
        seqs = [
            Sequence(src, max(1, o.max_new_tokens - f), options=o, prefix=p)
            for src, p, f in zip(sources, prefixes, forced or [0] * len(sources))
        ]
        # Shortest sources first, as CTranslate2's translate_batch sorts: rows of similar length share encoder batches
        # and cross-attention widths, and tend to finish together (docs/BENCHMARKS.md#design-choices). Every row decodes as it would alone, so the order changes no output; results keep input order.
        run(self.runner, sorted(seqs, key=lambda s: len(s.src_ids)), max_batch_size)
        return seqs
