"""Tiny Marian checkpoints made here, as a user's Hugging Face directory would hold them (never downloaded).

SentencePiece models trained on generated lines, vocab.json as Marian's converter lays it out (``</s>`` 0,
``<unk>`` 1, pieces, ``<pad>`` last), a ``MarianMTModel`` at transformers' own tester sizes trained a few
hundred steps so that its outputs depend on the input and end at EOS by themselves, then its LayerNorms
and ``final_logits_bias`` perturbed (an untrained model's are exactly 1, 0, 0 and would hide mistakes).
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

WORDS = (
    "the cat dog sees a big small red house tree runs jumps over under green blue sky water fire "
    "quick slow bird fish eats drinks old new"
).split()
JAPANESE = ["猫", "犬", "家", "木", "空", "水", "赤い", "大きい", "見る", "食べる"]
ODD = [
    "ＡＢＣ",
    "１２３",
    "ｶﾀｶﾅ",
    "ﬁne",
    "café",
    "①",
    "Ⅻ",
    "\u3000",
]  # full-width, half-width kana, ligature, NFKC cases


def lines(n: int, seed: int, japanese: bool = False) -> list[str]:
    rng = random.Random(seed)
    pool = WORDS + (JAPANESE if japanese else [])
    out = []
    for _ in range(n):
        words = [rng.choice(pool) for _ in range(rng.randint(1, 8))]
        if rng.random() < 0.1:
            words.insert(rng.randrange(len(words) + 1), rng.choice(ODD))
        out.append(" ".join(words))
    return out


def target_of(line: str) -> str:
    """The task: the words, each reversed (depends on the whole input, and has its length)."""
    return " ".join(w[::-1] for w in line.split())


def train_spm(texts: list[str], path: Path, vocab_size: int, model_type: str = "unigram") -> None:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        unk_id=1,
        eos_id=0,
        bos_id=-1,
        pad_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
    )
    path.write_bytes(model.getvalue())


def vocab_of(*spm_paths: Path, codes: tuple[str, ...] = ()) -> dict[str, int]:
    """Marian's layout: </s>, <unk>, language codes, the pieces of each model in order, <pad> last."""
    import sentencepiece as spm

    vocab = {"</s>": 0, "<unk>": 1}
    for c in codes:
        vocab.setdefault(c, len(vocab))
    for p in spm_paths:
        sp = spm.SentencePieceProcessor(model_file=str(p))
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def make(
    folder: Path,
    *,
    separate_vocabs: bool = False,
    codes: tuple[str, ...] = (),
    activation: str = "swish",
    steps: int = 300,
    seed: int = 0,
    n_lines: int = 400,
    langs: tuple[str, str] | None = None,
    heads: int = 4,
):
    """A trained tiny Marian checkpoint in ``folder``; returns (model, tokenizer, source lines). ``heads`` of d_model
    16: 2 heads of 8 take the import's GroupQueryAttention, 4 of 4 the standard nodes (its kernel needs a multiple
    of 8 per head)."""
    import torch
    from transformers import GenerationConfig, MarianMTModel

    torch.set_num_threads(1)  # tiny matrices: more threads only contend for the cores
    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    src = lines(n_lines, seed, japanese=True)
    if codes:
        src = [f"{codes[i % len(codes)]} {s}" for i, s in enumerate(src)]
    plain = [s.split(" ", 1)[1] if codes else s for s in src]
    tgt = [target_of(s) for s in plain]
    if codes:  # the code chooses the target: ">>up<<" upper-cases it
        tgt = [t.upper() if s.startswith(codes[0]) else t for s, t in zip(src, tgt)]
    tok = _tokenizer(folder / "spm", plain, tgt, separate_vocabs, codes, langs)
    cfg = _config(tok, separate_vocabs, heads, activation)
    model = MarianMTModel(cfg)
    _train(model, tok, src, tgt, steps, seed)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=cfg.decoder_start_token_id,
        eos_token_id=0,
        pad_token_id=tok.pad_token_id,
        bos_token_id=0,
        bad_words_ids=[[tok.pad_token_id]],
        num_beams=4,
        max_length=48,
    )
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model, tok, src


def _tokenizer(
    work: Path, plain: list[str], tgt: list[str], separate_vocabs: bool, codes: tuple[str, ...], langs
):
    """SentencePiece models of the source (without its codes) and target lines under ``work``, Marian's vocabulary
    (or vocabularies) of them, and the MarianTokenizer that reads them."""
    from transformers import MarianTokenizer

    work.mkdir(exist_ok=True)
    train_spm(plain, work / "source.spm", 120)
    train_spm(tgt, work / "target.spm", 100 if separate_vocabs else 120)
    files = {}
    if separate_vocabs:
        (work / "vocab.json").write_text(json.dumps(vocab_of(work / "source.spm")))
        (work / "target_vocab.json").write_text(json.dumps(vocab_of(work / "target.spm")))
        files["target_vocab_file"] = str(work / "target_vocab.json")
    else:
        (work / "vocab.json").write_text(
            json.dumps(vocab_of(work / "source.spm", work / "target.spm", codes=codes))
        )
    return MarianTokenizer(
        source_spm=str(work / "source.spm"),
        target_spm=str(work / "target.spm"),
        vocab=str(work / "vocab.json"),
        separate_vocabs=separate_vocabs,
        source_lang=langs and langs[0],
        target_lang=langs and langs[1],
        **files,
    )


def _config(tok, separate_vocabs: bool, heads: int, activation: str):
    """A tiny MarianConfig (d_model 16, 2 + 2 layers) over the tokenizer's vocabularies, no dropout."""
    from transformers import MarianConfig

    src_v = len(tok.encoder)
    tgt_v = len(tok.target_encoder) if separate_vocabs else src_v
    pad = tok.pad_token_id
    return MarianConfig(
        vocab_size=src_v,
        decoder_vocab_size=tgt_v,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        max_position_embeddings=64,
        activation_function=activation,
        scale_embedding=True,
        pad_token_id=pad,
        decoder_start_token_id=(tgt_v - 1 if separate_vocabs else pad),
        eos_token_id=0,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=not separate_vocabs,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )


def _train(model, tok, src: list[str], tgt: list[str], steps: int, seed: int) -> None:
    """``steps`` Adam steps on random batches of 32 pairs; then the LayerNorms and the final logits bias perturbed,
    so that a missing LayerNorm or bias shows."""
    import torch

    pad = tok.pad_token_id
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(seed)
    data = tok(
        src, text_target=tgt, return_tensors="pt", padding=True
    )  # tokenized once: MarianTokenizer is slow
    data["labels"][data["labels"] == pad] = -100
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, len(src), (32,), generator=g)
        loss = model(**{k: v[rows] for k, v in data.items()}).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():  # perturb what training barely moved, so a missing LayerNorm or bias shows
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
        model.final_logits_bias.add_(torch.randn_like(model.final_logits_bias) * 0.2)
