"""transformers' side of the import parity tests for the families of tests/bart_models.py and M2M100
(tests/m2m100_models.py, family "m2m100"): its tokenizer's ids per
source language, ``generate(forced_bos_token_id=...)`` per target language, and every decoder step's logits against
the engine's ``Runner`` on the same rows.

Rows are (source language, target language, text) in conventional codes (None for BART, which has no languages).
"""

from __future__ import annotations

import numpy as np
from bart_models import CODES

PAD, EOS, START = 1, 2, 2  # fairseq's ids, in every family here; decoding starts from </s>
AWKWARD = [
    "",
    " ",
    "  the   cat  ",
    "ＴＨＥ　ｃａｔ ＡＢＣ",
    "ﬁne ① Ⅻ ㍻",
    "café ｶﾀｶﾅ",
    "the\tcat\nsees",
    "猫が犬を見る。",
    "x y z q",
    "the the the the the the the the the the the the",
]


def own(family: str, code: str | None) -> str | None:
    """The code the family's tokenizer takes as src_lang (M2M100Tokenizer's are the conventional ones)."""
    return None if code is None or family == "m2m100" else CODES[family][code]


def forced_id(tok, family: str, target: str | None) -> int:
    """The token generate() is made to start with: the target language's, or BART's <s>."""
    if family == "m2m100":
        return tok.get_lang_id(target)
    return tok.bos_token_id if family == "bart" else tok.convert_tokens_to_ids(own(family, target))


def source_ids(tok, family: str, source: str | None, text: str) -> list[int]:
    if family != "bart":
        tok.src_lang = source if family == "m2m100" else own(family, source)
    return tok(text)["input_ids"]


def encode(tok, family: str, rows):
    import torch

    ids = [source_ids(tok, family, s, text) for s, _, text in rows]
    width = max(map(len, ids))
    return (
        torch.tensor([x + [PAD] * (width - len(x)) for x in ids]),
        torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
    )


def inputs(rows, n: int):
    """Mixed lengths and languages: the training rows, and rows of two lines joined."""
    joined = [(s, t, f"{a} {b}") for (s, t, a), (_, _, b) in zip(rows[::2], rows[1::2])]
    return (rows[: n // 2] + joined[: n - n // 2])[:n]


def hf_generate(model, tok, family: str, rows, batch: int = 100, **kw) -> list[list[int]]:
    """transformers' outputs in padded batches, one target language per batch (its forced BOS is one per call), in
    input order, without the start token, the forced one, the EOS and the padding."""
    import torch

    out: dict[int, list[int]] = {}
    for lang in sorted({t for _, t, _ in rows}, key=str):
        idx = [i for i, r in enumerate(rows) if r[1] == lang]
        for at in range(0, len(idx), batch):
            part = idx[at : at + batch]
            ids, mask = encode(tok, family, [rows[i] for i in part])
            with torch.no_grad():
                got = model.generate(
                    input_ids=ids, attention_mask=mask, forced_bos_token_id=forced_id(tok, family, lang), **kw
                )
            for i, r in zip(part, got[:, 2:].tolist()):
                r = r[: r.index(EOS)] if EOS in r else r
                out[i] = [t for t in r if t != PAD]
    return [out[i] for i in range(len(rows))]


def worst_step_logits(runner, model, tok, family: str, rows) -> tuple[float, int]:
    """The largest |logit difference| over every step of transformers' own greedy output fed back (teacher forcing)
    through the engine's decoder step by step, rows of mixed target languages in one padded batch; and the steps."""
    import torch

    ids, mask = encode(tok, family, rows)
    forced = torch.tensor([[START, forced_id(tok, family, t)] for _, t, _ in rows])
    with torch.no_grad():
        gen = model.generate(input_ids=ids, attention_mask=mask, decoder_input_ids=forced, num_beams=1)
        tgt = torch.cat([forced, gen[:, 2:]], 1)
        want = model(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits.numpy()
    cross = runner.encode(ids.numpy(), mask.numpy())
    b = len(rows)
    past = [np.zeros((b, runner.n_heads, 0, runner.d_head), np.float32)] * (2 * runner.n_layers)
    worst = 0.0
    for t in range(tgt.shape[1]):
        logits, past = runner.decode(
            tgt[:, t : t + 1].numpy(),
            np.full((b, 1), t, np.int64),
            np.ones((b, t), np.int64),
            past,
            cross,
            mask.numpy(),
        )
        live = (tgt[:, 1 : t + 1] == EOS).sum(1).numpy() == 0  # nothing is predicted after a row's EOS
        if live.any():
            worst = max(worst, float(np.abs(logits[:, 0] - want[:, t])[live].max()))
    return worst, tgt.shape[1]
