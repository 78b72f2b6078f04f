"""Build Hugging Face tokenizers: character level for the symbolic tasks, BPE for translation.

Both reserve ``contract.tokens.SPECIAL_TOKENS`` first, so <pad>=0, <bos>=1, <eos>=2, <unk>=3.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from contract.tokens import SPECIAL_TOKENS, UNK


def char_tokenizer(alphabet: Iterable[str]) -> Tokenizer:
    """One token per character of a closed alphabet (digits and '+' for addition)."""
    chars = sorted(set(alphabet))
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *chars])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters join without spaces
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def bpe_tokenizer(texts: Iterable[str], vocab_size: int = 8000) -> Tokenizer:
    """A joint source+target BPE (sentencepiece-style Metaspace, so Japanese needs no spaces).

    Joint because UI strings copy a lot across languages (product names, numbers, identifiers)
    and one table lets the model share source, target and output embeddings (§3.4), which
    halves the embedding parameters of a small model.
    """
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), min_frequency=2, show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok
