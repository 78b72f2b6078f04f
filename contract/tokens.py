"""Special tokens, defined once. Their ids are their positions in this tuple.

Every tokenizer this project builds reserves these four tokens first, so the ids are the same
for every model; the bundle still records them in ``config.json`` so a reader never guesses.
"""

from dataclasses import dataclass

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)


@dataclass(frozen=True)
class SpecialIds:
    pad: int = SPECIAL_TOKENS.index(PAD)
    bos: int = SPECIAL_TOKENS.index(BOS)
    eos: int = SPECIAL_TOKENS.index(EOS)
    unk: int = SPECIAL_TOKENS.index(UNK)
