"""A SentencePiece model re-indexed by a vocabulary file, as a Hugging Face ``tokenizers`` JSON.

Marian's tokenizer is two SentencePiece models (source.spm, target.spm) whose pieces are looked up in
vocab.json (target_vocab.json for a second vocabulary), and transformers has no fast version of it; M2M100's is
one (sentencepiece.bpe.model, a unigram or a BPE model whatever its name says). The server reads only
``tokenizers`` files, so ``s2s import`` converts each side once:

* the model of a unigram SentencePiece: its pieces and scores, each at the id vocab.json gives it. The other ids
  (the other side's pieces in a joint vocabulary) keep their strings on the target side, so outputs
  decode, with a score no segmentation of this side's pieces can lose to (a target prefix takes one only
  where a character has no piece of its own, where SentencePiece would say <unk>); on the source side,
  which nothing decodes, they are renamed so that they never match at all;
* the model of a BPE SentencePiece: ``tokenizers``' BPE over vocab.json's ids with the merges transformers'
  own converter derives from the pieces' order (``convert_slow_tokenizer.SentencePieceExtractor``'s
  ``generate_merges``: the pair whose merged piece ranks first merges first, as SentencePiece's BPE does), unknown
  characters fused into one <unk>;
* the normalizer SentencePiece ran: its precompiled character map (NFKC and its rules) as it is,
  then its whitespace handling (strip, runs of spaces to one) and the ``▁`` word marker;
* the special tokens (``</s>``, ``<unk>``, ``<pad>``) and multi-target models' ``>>xx<<`` codes as added
  tokens at their vocab.json ids: a code at the head of a text is one token, as MarianTokenizer reads it.

tests/test_marian_import.py checks the ids against MarianTokenizer itself on awkward inputs.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE as BPE_MODEL
from tokenizers.models import Unigram

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # SentencePiece's piece types
UNIGRAM, BPE = 1, 2  # trainer_spec.model_type
MODEL_TYPES = {UNIGRAM: "unigram", BPE: "bpe", 3: "word", 4: "char"}
NEVER = (
    "\u0000unmatched:"  # prefix of ids this side never produces (no text holds U+0000 after normalization)
)


FOREIGN = -1e9  # the score of the other side's pieces on the target side


class TokenizerError(ValueError):
    """A tokenizer file that cannot be converted; the message names the file and the field."""


def read_spm(path: Path, types: tuple[int, ...] = (UNIGRAM,)):
    """The SentencePiece model's protobuf (transformers' copy of its schema: sentencepiece's own needs protobuf 7);
    ``types``: the model types the caller converts (``convert`` takes unigram and BPE, T5's converter unigram)."""
    from transformers.utils import sentencepiece_model_pb2_new as pb

    proto = pb.ModelProto()
    try:
        proto.ParseFromString(Path(path).read_bytes())
    except Exception as e:  # protobuf's DecodeError and friends
        raise TokenizerError(f"{path}: not a SentencePiece model ({type(e).__name__}: {e})") from None
    if not proto.pieces:
        raise TokenizerError(f"{path}: a SentencePiece model with no pieces")
    kind = proto.trainer_spec.model_type
    if kind not in types:
        took = " and ".join(f"{MODEL_TYPES[t]} ({t})" for t in types)
        raise TokenizerError(
            f"{path}: trainer_spec.model_type {kind} ({MODEL_TYPES.get(kind, 'unknown')}); {took} models are supported"
        )
    if proto.trainer_spec.byte_fallback:
        raise TokenizerError(f"{path}: trainer_spec.byte_fallback is on; byte fallback is not supported")
    return proto


def convert(spm_path: Path, vocab: dict[str, int], specials: dict[str, int], decodes: bool) -> Tokenizer:
    """One side's tokenizer: ``vocab`` maps pieces to the model's ids; ``specials`` the special tokens' ids;
    ``decodes``: this side's ids are decoded to text (the target side), so foreign ids keep their strings."""
    proto = read_spm(spm_path, (UNIGRAM, BPE))
    if proto.trainer_spec.model_type == BPE:
        tok = Tokenizer(_bpe(proto, vocab, specials, decodes))
    else:
        tok = Tokenizer(_unigram(proto, vocab, specials, decodes))
    ns = proto.normalizer_spec
    steps = []
    if ns.precompiled_charsmap:
        steps.append(normalizers.Precompiled(ns.precompiled_charsmap))
    if ns.remove_extra_whitespaces:
        steps += [normalizers.Strip(left=True, right=True), normalizers.Replace(Regex(" {2,}"), " ")]
    if steps:
        tok.normalizer = normalizers.Sequence(steps)
    scheme = "always" if ns.add_dummy_prefix else "never"
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme=scheme, split=proto.trainer_spec.split_by_whitespace
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)
    tok.add_special_tokens(
        [AddedToken(t, normalized=False, special=True) for t in sorted(specials, key=specials.get)]
    )
    codes = sorted((p for p in vocab if _is_language_code(p)), key=vocab.get)
    if codes:
        tok.add_tokens([AddedToken(c, normalized=False, special=False) for c in codes])
    for t, i in list(specials.items()) + [(c, vocab[c]) for c in codes]:
        if tok.token_to_id(t) != i:
            raise TokenizerError(
                f"{spm_path}: token {t!r} would get id {tok.token_to_id(t)}, not {i} as in the vocabulary"
            )
    return tok


def _unigram(proto, vocab: dict[str, int], specials: dict[str, int], decodes: bool) -> Unigram:
    """The pieces and scores at vocab.json's ids; every other id a string no text matches (or, where the side is
    decoded, its own string at a score that never wins)."""
    spm_scores = {p.piece: p.score for p in proto.pieces if p.type in (NORMAL, USER_DEFINED)}
    floor = min(spm_scores.values(), default=0.0)
    table: list[tuple[str, float] | None] = [None] * (
        max(vocab.values()) + 1
    )  # ids checked against the model's
    for piece, i in vocab.items():
        if piece in spm_scores:
            table[i] = (piece, spm_scores[piece])
        elif piece in specials or _is_language_code(piece):
            table[i] = (piece, floor)  # matched as added tokens before the model sees the text
        elif decodes:
            table[i] = (piece, FOREIGN)
        else:
            table[i] = (f"{NEVER}{i}", floor)
    for i, entry in enumerate(table):
        if entry is None:  # a hole in vocab.json's ids
            table[i] = (f"{NEVER}{i}", floor)
    return Unigram(table, unk_id=specials["<unk>"], byte_fallback=False)


def _bpe(proto, vocab: dict[str, int], specials: dict[str, int], decodes: bool) -> BPE_MODEL:
    """vocab.json's ids with the merges transformers derives from the SentencePiece model's pieces. A merge into a
    piece vocab.json lacks is left out (the slow tokenizer reads such a piece as <unk>; ``missing_pieces`` warns)."""
    # SentencePieceExtractor.extract's own steps: its constructor reads the model with sentencepiece's schema, which
    # needs protobuf 7 (the server's grpc pins 6), so the pieces come from read_spm's copy of it.
    from transformers.tokenization_utils_base import generate_merges

    merges = generate_merges({p.piece: i for i, p in enumerate(proto.pieces)})
    ours = {p.piece for p in proto.pieces if p.type in (NORMAL, USER_DEFINED)}
    table = {
        piece
        if piece in ours or piece in specials or decodes or _is_language_code(piece)
        else f"{NEVER}{i}": i
        for piece, i in vocab.items()
    }
    merges = [(a, b) for a, b in merges if all(x in ours and x in table for x in (a, b, a + b))]
    return BPE_MODEL(table, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=False, dropout=None)


def _is_language_code(piece: str) -> bool:
    return piece.startswith(">>") and piece.endswith("<<") and len(piece) > 4


def missing_pieces(spm_path: Path, vocab: dict[str, int]) -> list[str]:
    """This side's pieces that the vocabulary lacks (MarianTokenizer reads them as <unk>; this conversion cannot)."""
    return [
        p.piece
        for p in read_spm(spm_path, (UNIGRAM, BPE)).pieces
        if p.type == NORMAL and p.piece not in vocab
    ]
