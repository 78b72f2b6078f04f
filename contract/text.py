"""Text <-> ids, the same way in training, evaluation and serving.

The tokenizer itself is a Hugging Face ``tokenizers`` file that travels with the weights; this
module adds what the model expects around it: the task's source preprocessing (reversed input),
EOS on the source (and a start token where the family has one), BOS/EOS on the target, and the
unknown-character policy.

A source is text, whatever it holds: ``"a </s> b"`` or ``"<pad> a"`` or ``"__de__ a"`` is read as those characters,
never as the model's end of sequence, padding or language token, which only the model's own plan puts around a
source (``source_ids``, ``contract/languages.py``). A target prefix may not hold them either (the server refuses
one that does). A multi-target Marian model's codes (``>>fra<<``) are not special tokens: a source that starts with
one still asks for that language, as MarianTokenizer reads it (``contract/languages.py``, ``source_prefix``).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from contract.config import TaskConfig
from contract.tokens import SpecialIds


class UnknownCharactersError(ValueError):
    """The input holds characters the model's vocabulary cannot represent."""

    def __init__(self, chars: list[str]):
        self.chars = chars
        shown = ", ".join(repr(c) for c in chars[:10])
        super().__init__(f"input has characters outside the model's vocabulary: {shown}")


# Prefix of the renamed vocabulary entries of special tokens in the source tokenizer: no text matches it.
_UNMATCHED = "\u0000special:"


def reading_specials_as_text(tok: Tokenizer) -> Tokenizer:
    """A copy of ``tok`` that reads the strings of its special tokens in a text as text (what HF's tokenizers call
    ``split_special_tokens``): the added-token matcher skips them (``encode_special_tokens``), and their entries in
    the model's own vocabulary (a converted SentencePiece model lists ``</s>`` among its pieces, where the model
    could still piece it together from the characters) are renamed to a string no text holds. The unknown token's
    entry stays where the model names it: text that is not in the vocabulary reads as unknown either way."""
    spec = json.loads(tok.to_str())
    special = {t["content"] for t in spec.get("added_tokens") or () if t.get("special")}
    model = spec["model"]
    vocab = model.get("vocab")
    if isinstance(vocab, list):  # Unigram: [piece, score] by id
        for entry in vocab:
            if entry[0] in special:
                entry[0] = _UNMATCHED + entry[0]
    elif isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: piece -> id
        merged = {p for m in model.get("merges") or () for p in (m.split(" ") if isinstance(m, str) else m)}
        for piece in special & vocab.keys() - {model.get("unk_token")} - merged:
            vocab[_UNMATCHED + piece] = vocab.pop(piece)
    copy = Tokenizer.from_str(json.dumps(spec))
    copy.encode_special_tokens = True
    return copy


class TextCodec:
    """``tokenizer`` reads sources; ``target_tokenizer`` (default: the same) reads target prefixes and writes outputs:
    models imported from other trainers may have one vocabulary, or one segmentation, per side. Sources are read
    by a copy of ``tokenizer`` that takes special tokens' strings as text (``reading_specials_as_text``)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        task: TaskConfig,
        special: SpecialIds,
        target_tokenizer: Tokenizer | None = None,
    ):
        self.tokenizer, self.task, self.special = tokenizer, task, special
        self.target_tokenizer = target_tokenizer or tokenizer
        self.source_tokenizer = reading_specials_as_text(tokenizer)
        specials = {special.pad, special.bos, special.eos, special.unk}
        # The most characters one token covers (the Metaspace marker standing for one space). A text
        # longer than max_chars(n) cannot fit in n tokens, so servers refuse it before tokenizing.
        self.longest_token_chars = max(
            (
                len(piece)
                for piece, i in tokenizer.get_vocab(with_added_tokens=False).items()
                if i not in specials
            ),
            default=1,
        )

    @classmethod
    def from_file(
        cls, path: Path, task: TaskConfig, special: SpecialIds, target_path: Path | None = None
    ) -> TextCodec:
        """``target_path``: the target side's tokenizer, where there is one (read only if the file exists)."""
        target = (
            Tokenizer.from_file(str(target_path))
            if target_path is not None and Path(target_path).is_file()
            else None
        )
        return cls(Tokenizer.from_file(str(path)), task, special, target)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def _ids(self, text: str, tokenizer: Tokenizer) -> list[int]:
        enc = tokenizer.encode(text, add_special_tokens=False)
        if self.task.unknown == "reject" and self.special.unk in enc.ids:
            bad = sorted({text[s:e] for i, (s, e) in zip(enc.ids, enc.offsets) if i == self.special.unk})
            raise UnknownCharactersError(bad)
        return enc.ids

    def max_chars(self, max_source_tokens: int) -> int:
        """Characters a source of at most ``max_source_tokens`` tokens (EOS included) can have.

        Exact for these tokenizers up to Unicode normalization: NFKC composes a letter and a combining
        mark into one character, so a text that long with many combining marks might still have fit."""
        return max(0, max_source_tokens - 1 - len(self._start)) * self.longest_token_chars

    @property
    def _start(self) -> list[int]:
        return [] if self.task.source_start_id is None else [self.task.source_start_id]

    def source_ids(self, text: str) -> list[int]:
        """Encoder input: the task's source start token where it has one (BART's <s>), the (optionally reversed)
        source tokens, then EOS."""
        if self.task.reverse_source:
            text = text[::-1]
        return self._start + self._ids(text, self.source_tokenizer) + [self.special.eos]

    def target_ids(self, text: str) -> list[int]:
        """Target tokens without BOS/EOS (the training batcher adds them)."""
        return self._ids(text, self.target_tokenizer)

    def decode(self, ids: list[int]) -> str:
        """Generated ids -> text; stops at the first EOS, drops special tokens and the spaces around the text (a
        word marker left alone at the end, before a dropped <unk>, would leave one; MarianTokenizer strips them too)."""
        if self.special.eos in ids:
            ids = ids[: ids.index(self.special.eos)]
        return self.target_tokenizer.decode(ids, skip_special_tokens=True).strip()
