"""Convert an s2s checkpoint to a CTranslate2 model through CTranslate2's Python ``TransformerSpec`` API: the same
weights in the engine users compare us with (the benchmarks, and the decoding tests' oracle). Needs the bench extra.

There is no stock converter for this project's checkpoints, so the spec is filled tensor by tensor:

* post-LN layers (``pre_norm=False``, no final layer norm), or pre-LN layers with a final layer norm per stack
  (``pre_norm=True``, ``s2s train --norm pre``); ReLU FFN, ``n_heads`` heads;
* self-attention Q/K/V fused into one projection, cross-attention K/V fused (CTranslate2's layout);
* embeddings multiplied by sqrt(d_model) (``scale_embeddings``), as ``Transformer.embed`` does;
* the sinusoidal table passed explicitly as ``position_encodings.encodings``: ours interleaves
  sin/cos (``pe[:, 0::2] = sin``, ``pe[:, 1::2] = cos``, paper §3.5) while CTranslate2's built-in
  table is concatenated ``[sin..., cos...]``; passing ours keeps the layout (and caps positions
  at ``max_len``, as the model does);
* the output projection is the (tied) target embedding plus its own bias;
* layer-norm epsilon 1e-5 (torch's default, which the model uses);
* the vocabulary is the tokenizer's id -> token list; the source EOS is appended by the caller
  (``TextCodec.source_ids``), so ``add_source_eos`` stays off; decoding starts from ``<bos>``.

CTranslate2 picks the compute type (float32 / int8) when the model is loaded, so one float32
conversion serves both. ``convert`` caches its output and rebuilds it when the checkpoint's
weights (sha256) or this converter change.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from contract.tokens import BOS, EOS, SPECIAL_TOKENS, UNK
from training import checkpoint as ckpt_io
from training.model import Transformer

CONVERTER_VERSION = 2  # 2: pre-norm models
STAMP = "s2s_conversion.json"


def vocabulary(tokenizer) -> list[str]:
    """The tokenizer's tokens in id order (CTranslate2 maps token strings to ids by position)."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for tok, i in vocab.items():
        if i >= len(tokens) or tokens[i] is not None:
            raise ValueError(
                f"tokenizer ids are not a contiguous 0..{len(vocab) - 1} range (id {i}, token {tok!r})"
            )
        tokens[i] = tok
    if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise ValueError(f"tokenizer does not start with the special tokens {SPECIAL_TOKENS}: {tokens[:4]}")
    return tokens


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().float().numpy().copy()


def _linear(spec, layer: torch.nn.Linear) -> None:
    spec.weight = _np(layer.weight)
    spec.bias = _np(layer.bias)


def _fused(spec, layers: list[torch.nn.Linear]) -> None:
    spec.weight = np.concatenate([_np(layer.weight) for layer in layers], axis=0)
    spec.bias = np.concatenate([_np(layer.bias) for layer in layers], axis=0)


def _norm(spec, ln: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(ln.weight), _np(ln.bias)


def build_spec(model: Transformer, tokens: list[str]):
    """The CTranslate2 ``TransformerSpec`` of ``model`` (float32 weights, validated)."""
    from ctranslate2.specs import common_spec, transformer_spec

    c = model.config
    if len(tokens) != c.src_vocab_size or len(tokens) != c.tgt_vocab_size:
        raise ValueError(
            f"vocabulary has {len(tokens)} tokens, the model {c.src_vocab_size}/{c.tgt_vocab_size}"
        )
    # The knobs this project's trainer sets; an imported family goes through CTranslate2's own converter instead.
    unsupported = [
        f"{name}={getattr(c, name)!r}"
        for name, ok in (
            ("activation", c.activation == "relu"),
            ("positions", c.positions == "sinusoid" and c.position_offset == 0),
            ("scale_embedding", c.scale_embedding),
            ("embedding_norm", not c.embedding_norm),
            ("output_bias", c.output_bias),
            ("final_norm", c.final_norm == (c.norm == "pre")),
            ("moves_later_knobs", not c.moves_later_knobs),  # T5's
        )
        if not ok
    ]
    if unsupported:
        raise ValueError(f"no CTranslate2 conversion for a model with {', '.join(unsupported)}")
    relu, pre = common_spec.Activation.RELU, c.norm == "pre"
    enc = transformer_spec.TransformerEncoderSpec(
        c.n_encoder_layers, c.n_heads, pre_norm=pre, activation=relu
    )
    dec = transformer_spec.TransformerDecoderSpec(
        c.n_decoder_layers, c.n_heads, pre_norm=pre, activation=relu
    )
    spec = transformer_spec.TransformerSpec(enc, dec)

    pe = _np(model.pos.pe)  # (max_len, d_model), interleaved sin/cos
    enc.embeddings[0].weight = _np(model.src_embed.weight)
    enc.scale_embeddings = True  # x sqrt(d_model)
    enc.position_encodings.encodings = pe
    for ls, layer in zip(enc.layer, model.encoder):
        a = layer.self_attn
        _fused(ls.self_attention.linear[0], [a.w_q, a.w_k, a.w_v])
        _linear(ls.self_attention.linear[1], a.w_o)
        _norm(ls.self_attention.layer_norm, layer.norm1)
        _linear(ls.ffn.linear_0, layer.ffn.w_1)
        _linear(ls.ffn.linear_1, layer.ffn.w_2)
        _norm(ls.ffn.layer_norm, layer.norm2)

    if pre:  # the final layer norm after each stack
        _norm(enc.layer_norm, model.encoder_norm)
        _norm(dec.layer_norm, model.decoder_norm)

    dec.embeddings.weight = _np(model.tgt_embed.weight)
    dec.scale_embeddings = True
    dec.position_encodings.encodings = pe
    _linear(dec.projection, model.output_projection)  # weight tied to tgt_embed when tie_output; bias its own
    for ls, layer in zip(dec.layer, model.decoder):
        a, x = layer.self_attn, layer.cross_attn
        _fused(ls.self_attention.linear[0], [a.w_q, a.w_k, a.w_v])
        _linear(ls.self_attention.linear[1], a.w_o)
        _norm(ls.self_attention.layer_norm, layer.norm1)
        _linear(ls.attention.linear[0], x.w_q)
        _fused(ls.attention.linear[1], [x.w_k, x.w_v])
        _linear(ls.attention.linear[2], x.w_o)
        _norm(ls.attention.layer_norm, layer.norm2)
        _linear(ls.ffn.linear_0, layer.ffn.w_1)
        _linear(ls.ffn.linear_1, layer.ffn.w_2)
        _norm(ls.ffn.layer_norm, layer.norm3)

    eps = {m.eps for m in model.modules() if isinstance(m, torch.nn.LayerNorm)}
    if len(eps) != 1:
        raise ValueError(f"layer norms use several epsilons {eps}")
    spec.config.layer_norm_epsilon = float(eps.pop())
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    spec.config.decoder_start_token = BOS
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False  # TextCodec.source_ids already ends with <eos>
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.validate()
    return spec


def convert(checkpoint_dir: Path, out_dir: Path, force: bool = False) -> Path:
    """checkpoint folder -> CTranslate2 model folder (float32); reused when already converted from these weights."""
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    stamp = {
        "converter_version": CONVERTER_VERSION,
        "weights_sha256": ckpt_io.weights_sha256(checkpoint_dir),
        "checkpoint": str(checkpoint_dir.resolve()),
    }
    stamp_file = out_dir / STAMP
    if not force and (out_dir / "model.bin").is_file() and stamp_file.is_file():
        try:
            old = json.loads(stamp_file.read_text())
        except ValueError:
            old = {}
        if all(old.get(k) == stamp[k] for k in ("converter_version", "weights_sha256")):
            return out_dir
    ck = ckpt_io.load(checkpoint_dir)
    save(build_spec(ck.model, vocabulary(ck.codec.tokenizer)), out_dir, stamp)
    return out_dir


def save(spec, out_dir: Path, stamp: dict | None = None) -> Path:
    """Write a spec as a CTranslate2 model folder (float32; CTranslate2 quantizes on load), atomically."""
    out_dir = Path(out_dir)
    spec.optimize(quantization="float32")  # also aliases the shared embedding tables
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    spec.save(str(tmp))
    if stamp is not None:
        (tmp / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)
    return out_dir


class CT2Translator:
    """A CTranslate2 ``Translator`` fed and read in this project's ids (via the tokenizer's token strings)."""

    def __init__(self, model_dir: Path, tokens: list[str], compute_type: str = "float32", threads: int = 1):
        import ctranslate2

        self.translator = ctranslate2.Translator(
            str(model_dir), device="cpu", intra_threads=threads, inter_threads=1, compute_type=compute_type
        )
        self.tokens = tokens
        self.ids = {t: i for i, t in enumerate(tokens)}

    def greedy(self, src_ids: list[list[int]], max_new_tokens: int, force: bool = False) -> list[list[int]]:
        """Greedy decoding of a batch; force=True generates exactly max_new_tokens (EOS masked until then)."""
        src = [[self.tokens[i] for i in row] for row in src_ids]
        res = self.translator.translate_batch(
            src,
            beam_size=1,
            max_batch_size=0,
            max_decoding_length=max_new_tokens,
            min_decoding_length=max_new_tokens if force else 0,
            return_scores=False,
        )
        return [[self.ids[t] for t in r.hypotheses[0]] for r in res]


@torch.no_grad()
def verify(
    model: Transformer,
    codec,
    translator: CT2Translator,
    sources: list[str],
    max_new_tokens: int,
    batch_size: int = 64,
) -> dict:
    """CTranslate2 greedy vs PyTorch greedy (``training.decoding.greedy``, stops at EOS) on ``sources``.

    Returns the token agreement and, as a finer check, the largest difference of the per-token
    log-probabilities of the PyTorch outputs scored by both (teacher forcing, EOS included).
    """
    from engine.step_loop import pad_batch
    from training.decoding import greedy

    model.eval()
    sp = model.config.special
    src = [codec.source_ids(s) for s in sources]
    same, max_diff, first_mismatch = 0, 0.0, None
    for k in range(0, len(src), batch_size):
        chunk = src[k : k + batch_size]
        ids, mask = (torch.from_numpy(a) for a in pad_batch(chunk, sp.pad))
        ours = greedy(model, ids, mask, max_new_tokens)
        theirs = translator.greedy(chunk, max_new_tokens)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            if a == b:
                same += 1
            elif first_mismatch is None:
                first_mismatch = {"source": sources[k + i], "pytorch": a, "ctranslate2": b}
        # Teacher-forced log-probabilities of our outputs (+ EOS) under both implementations.
        scored = translator.translator.score_batch(
            [[translator.tokens[t] for t in r] for r in chunk],
            [[translator.tokens[t] for t in r] for r in ours],
        )
        tgt = [[sp.bos] + r for r in ours]
        tin, _ = pad_batch(tgt, sp.pad)
        logp = torch.log_softmax(model(ids, mask, torch.from_numpy(tin)), -1)
        for i, (r, res) in enumerate(zip(ours, scored)):
            gold = r + [sp.eos]
            ref = logp[i, torch.arange(len(gold)), torch.tensor(gold)].numpy()
            max_diff = max(max_diff, float(np.abs(ref - np.asarray(res.log_probs)).max()))
    return {
        "n": len(src),
        "identical": same,
        "rate": same / max(len(src), 1),
        "max_abs_logprob_diff": max_diff,
        "first_mismatch": first_mismatch,
    }
