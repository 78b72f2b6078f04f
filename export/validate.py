"""Export validation: ONNX Runtime against PyTorch on the same inputs, before a bundle is published.

Checks, on random batches with source padding, a ragged cache (holes, as rows that joined a
running batch later) and the empty first-step cache:
  * encoder cross K/V and decoder present K/V within ``atol``, logits within ``atol`` times their largest magnitude
    where that is over 1 (float32's rounding grows with the values: a Flan-T5-base-sized model's logits reach the
    hundreds, where 1e-4 absolute is a few units in the last place);
  * greedy decoding through the server's engine gives the same tokens as PyTorch's.
Raises ValueError with the figures when a check fails.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine import EngineOptions, Runner, Sequence, StepLoop
from engine.search import EndRules
from training.decoding import greedy
from training.model import Transformer


def _max_diff(torch_out: list[torch.Tensor], ort_out: list[np.ndarray]) -> float:
    return max(float(np.abs(t.numpy() - o).max()) if o.size else 0.0 for t, o in zip(torch_out, ort_out))


@torch.no_grad()
def validate_bundle(
    model: Transformer,
    folder: Path,
    atol: float | None = 1e-4,
    seed: int = 0,
    n_greedy: int = 16,
    one_token_over_past: bool = False,
) -> dict:
    """atol=None (quantized graphs) reports the differences without failing on them. one_token_over_past: the
    decoder takes several new tokens only over an empty cache (GroupQueryAttention's limit, export/fused.py), so
    the ragged cache gets one new token, as the engine feeds it, and the empty one two."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    # The graphs against PyTorch: greedy through the engine without its int8 screen (exact by construction,
    # engine/screen.py, and tested there), which would hold GBs more for a 256k vocabulary while this runs.
    engine = Runner(folder, EngineOptions(device="cpu", verify_hashes=True, greedy_screen="off"))
    report: dict = {"atol": atol}
    report["encoder_max_abs_diff"], src_mask, cross_o = _check_encoder(model, engine, g)
    cases = _check_decoder(model, engine, g, src_mask, cross_o, one_token_over_past)
    report["decoder"] = cases
    same, n = _check_greedy(model, engine, g, n_greedy)
    report["greedy_identical"] = f"{same}/{n}"

    if atol is not None:
        worst = max(
            [report["encoder_max_abs_diff"]]
            + [case["present_max_abs_diff"] for case in cases.values()]
            + [case["logits_max_abs_diff"] / case["logits_scale"] for case in cases.values()]
        )
        if worst > atol or same != n:
            raise ValueError(f"export validation failed for {folder}: {report}")
    return report


def _check_encoder(model: Transformer, engine: Runner, g: torch.Generator) -> tuple:
    """The encoder's cross K/V on a random batch with source padding: (the largest difference at real positions,
    the source mask, ONNX Runtime's cross K/V)."""
    c = model.config
    b, s = 4, 7
    src = torch.randint(4, c.src_vocab_size, (b, s), generator=g)
    lengths = torch.tensor([7, 3, 5, 1])
    src_mask = (torch.arange(s)[None] < lengths[:, None]).long()
    src = src * src_mask
    cross_t = [t for kv in model.cross_kv(model.encode(src, src_mask)) for t in kv]
    cross_o = engine.encode(src.numpy(), src_mask.numpy())
    # Padded positions' K/V never reach an output (masked), so compare real positions only.
    keep = src_mask.bool()[:, None, :, None].expand_as(cross_t[0])
    diff = max(float((t - torch.from_numpy(o)).abs()[keep].max()) for t, o in zip(cross_t, cross_o))
    return diff, src_mask, cross_o


def _check_decoder(
    model: Transformer,
    engine: Runner,
    g: torch.Generator,
    src_mask: torch.Tensor,
    cross_o: list[np.ndarray],
    one_token_over_past: bool,
) -> dict:
    """Decoder: ragged cache with holes, two new tokens; then the empty first-step cache (one token over a past
    and two over none with ``one_token_over_past``); where the graph takes cross K/V per source, 3 rows a source (a
    beam's) over a ragged cache, one token, as the engine feeds a beam. Per case, the logits' and present K/V's
    largest differences."""
    c, n = model.config, src_mask.shape[0]
    cases = {}
    shapes = (
        (("ragged_past", 6, 1, 1), ("empty_past", 0, 2, 1))
        if one_token_over_past
        else (("ragged_past", 6, 2, 1), ("empty_past", 0, 1, 1))
    )
    if engine.config.cross_per_source:
        shapes += (("per_source", 6, 1, 3),)
    for name, p, t, rows_per_source in shapes:
        b = n * rows_per_source
        past = [torch.randn(b, c.n_heads, p, c.d_head, generator=g) for _ in range(2 * c.n_decoder_layers)]
        past_mask = (torch.rand(b, p, generator=g) > 0.3).long()
        tgt = torch.randint(4, c.tgt_vocab_size, (b, t), generator=g)
        positions = torch.randint(0, c.max_len - t, (b, 1), generator=g) + torch.arange(t)
        cross = [torch.from_numpy(x) for x in cross_o]
        logits_t, present_t = model.decode_step(
            tgt,
            positions,
            list(zip(past[::2], past[1::2])),
            past_mask,
            list(zip(cross[::2], cross[1::2])),
            src_mask,
        )
        logits_o, present_o = engine.decode(
            tgt.numpy(),
            positions.numpy(),
            past_mask.numpy(),
            [x.numpy() for x in past],
            cross_o,
            src_mask.numpy(),
        )
        cases[name] = {
            "logits_max_abs_diff": _max_diff([logits_t], [logits_o]),
            "logits_scale": max(1.0, float(logits_t.abs().max())),
            "present_max_abs_diff": _max_diff([x for kv in present_t for x in kv], present_o),
        }
    return cases


def _check_greedy(model: Transformer, engine: Runner, g: torch.Generator, n_greedy: int) -> tuple[int, int]:
    """Greedy tokens: PyTorch vs the engine's step loop, on random sources of ragged lengths: (the same, of n)."""
    c = model.config
    # Real tokens only: <pad> (the last id of imported vocabularies) inside a source would read as padding.
    srcs = [
        [
            t if t != c.special.pad else 4
            for t in torch.randint(4, c.src_vocab_size, (int(n),), generator=g).tolist()
        ]
        + [c.special.eos]
        for n in torch.randint(1, min(12, c.max_len - 2), (n_greedy,), generator=g)
    ]
    budget = min(20, c.max_len - 1)
    ids = torch.full(
        (len(srcs), max(map(len, srcs))), c.special.pad, dtype=torch.long
    )  # pad: not always id 0
    for i, r in enumerate(srcs):
        ids[i, : len(r)] = torch.tensor(r)
    mask = (ids != c.special.pad).long()
    want = greedy(model, ids, mask, budget, suppressed=engine.config.task.suppressed_ids)
    gen = StepLoop(engine, EndRules())  # the graphs against PyTorch's plain greedy: no generate() end rules
    seqs = [Sequence(r, budget) for r in srcs]
    gen.add(seqs)
    while len(gen):
        gen.step()
    return sum(s.result == w for s, w in zip(seqs, want)), len(srcs)
