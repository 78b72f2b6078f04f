"""The encoder-decoder Transformer of Vaswani et al. 2017, "Attention Is All You Need".

Section numbers refer to the paper. Post-LN as in the paper: each sub-layer is
``LayerNorm(x + Dropout(Sublayer(x)))`` (§3.1, §5.4).

The paper's choices are the defaults of ``ModelConfig``'s architecture knobs (activation, embedding
scale, positions, pre/post norm and a final norm, output bias, a norm on the embeddings); the models other
trainers made (``export/hf_marian.py``: Marian's swish, unscaled embeddings, half-split sinusoids;
``export/hf_bart.py``: BART's learned positions and embedding LayerNorm; ``export/hf_t5.py``: T5's relative position
bias, RMSNorm, gated FFN, unscaled attention and no biases) are this same model with those knobs moved, so every
imported model runs, exports and is validated through this file.

The model exposes the two calls that inference needs and that the ONNX export traces:
``encode(src, src_mask)`` and ``decode_step(tgt, positions, past, past_mask, cross, src_mask)``.
Training runs the same ``decode_step`` with an empty cache, so the code the tests cover is
the code that is exported.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contract.config import ModelConfig
from training.positions import PositionalEncoding, RelativePositionBias

# Added to attention scores of masked positions. A large finite value rather than -inf keeps a
# fully masked row (a padding row of a batch) finite instead of NaN; exp(-1e9) is exactly 0 in
# float32, so real rows are unaffected.
MASKED = -1e9

KV = tuple[Tensor, Tensor]  # (key, value), each (B, H, L, Dh)


@torch.library.custom_op("s2s::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, n_heads: int, scale: float) -> Tensor:
    """§3.2.1 for all heads at once: softmax(Q K^T * scale + bias) V with the heads merged again, scale 1/sqrt(d_k).

    q: (B, T, H Dh) projected queries; k, v: (B, H, L, Dh); bias: additive, broadcastable to (B, H, T, L), 0 where a
    position is seen and MASKED where not (plus T5's position bias per head). One operator so that the export can map it to ONNX
    Runtime's fused com.microsoft.MultiHeadAttention (export/fused.py) instead of ~10 nodes per
    attention; this eager body is the reference the exported graphs are validated against.
    """
    b, t, d = q.shape
    d_k = d // n_heads
    qh = q.view(b, t, n_heads, d_k).transpose(1, 2)  # (B, H, T, Dh)
    attn = ((qh @ k.transpose(-2, -1)) * scale + bias).softmax(dim=-1)  # (B, H, T, L)
    return (attn @ v).transpose(1, 2).reshape(b, t, d)  # (B, T, H Dh)


@attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, n_heads: int, scale: float) -> Tensor:
    return torch.empty_like(q)


@torch.library.custom_op("s2s::cached_attention", mutates_args=())
def cached_attention(
    q: Tensor,
    k_new: Tensor,
    v_new: Tensor,
    past_k: Tensor,
    past_v: Tensor,
    bias: Tensor,
    n_heads: int,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Decoder self-attention over the cache: the new tokens' keys and values appended to it, then §3.2.1.

    q, k_new, v_new: (B, T, H Dh) projections of the T new tokens; past_k, past_v: (B, H, P, Dh); bias as
    ``attention``'s, (B, 1, T, P+T). Returns the attention (B, T, d_model) and the cache with the new tokens,
    (B, H, P+T, Dh) each. One operator so that the export can map the append and the attention together to ONNX
    Runtime's GroupQueryAttention, which appends inside its kernel (export/fused.py); this eager body (a Concat,
    then ``attention``) is what the exported graphs are validated against."""
    b, t, d = k_new.shape
    k = torch.cat([past_k, k_new.view(b, t, n_heads, d // n_heads).transpose(1, 2)], dim=2)  # (B, H, P+T, Dh)
    v = torch.cat([past_v, v_new.view(b, t, n_heads, d // n_heads).transpose(1, 2)], dim=2)
    return attention(q, k, v, bias, n_heads, scale), k, v


@cached_attention.register_fake
def _(
    q: Tensor,
    k_new: Tensor,
    v_new: Tensor,
    past_k: Tensor,
    past_v: Tensor,
    bias: Tensor,
    n_heads: int,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    b, h, p, d_k = past_k.shape
    present = past_k.new_empty(b, h, p + k_new.shape[1], d_k)
    return torch.empty_like(q), present, torch.empty_like(present)


class MultiHeadAttention(nn.Module):
    """§3.2.2: MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),
    with §3.2.1 Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (T5: no 1/sqrt(d_k), no biases, heads of d_kv)."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.h, self.d_k = c.n_heads, c.d_head
        inner, bias = c.n_heads * c.d_head, c.projection_bias
        self.w_q = nn.Linear(c.d_model, inner, bias=bias)
        self.w_k = nn.Linear(c.d_model, inner, bias=bias)
        self.w_v = nn.Linear(c.d_model, inner, bias=bias)
        self.w_o = nn.Linear(inner, c.d_model, bias=bias)
        self.dropout = nn.Dropout(c.dropout)
        self.scale = self.d_k**-0.5 if c.scale_attention else 1.0

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.d_k).transpose(1, 2)  # (B, H, T, Dh)

    def project_kv(self, x: Tensor) -> KV:
        return self.split_heads(self.w_k(x)), self.split_heads(self.w_v(x))  # 2 x (B, H, L, Dh)

    def attend(self, x: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        """x: queries (B, T, d_model); k, v: (B, H, L, Dh); bias: from mask_bias, broadcastable to (B, H, T, L)."""
        if not self.training:
            # One operator: the export maps it to ONNX Runtime's fused MultiHeadAttention, which takes
            # the queries before the head split and returns them merged (export/fused.py).
            return self.w_o(attention(self.w_q(x), k, v, bias, self.h, self.scale))  # (B, T, d_model)
        # Training: PyTorch's fused kernel, dropout inside (0.96x of the written-out ops in
        # docs/studies/train-speed.md on 2 cores, kept for the memory it saves on longer batches).
        q = self.split_heads(self.w_q(x))  # (B, H, T, Dh)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias.to(q.dtype), dropout_p=self.dropout.p, scale=self.scale
        )
        return self.w_o(out.transpose(1, 2).flatten(2))  # (B, T, d_model)

    def attend_per_source(self, x: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        """Cross-attention of B = N x g query rows over K/V kept once per source, k, v (N, H, S, Dh): the g rows of
        one source (its beam) read as one sequence of g x T queries against its one copy, and split back, as
        CTranslate2 folds a beam's queries. Training and the per-row cache are the case g = 1 (N = B)."""
        b, t, d = x.shape
        return self.attend(x.reshape(k.shape[0], -1, d), k, v, bias).reshape(b, t, d)

    def attend_cached(self, x: Tensor, past: KV, bias: Tensor) -> tuple[Tensor, KV]:
        """Self-attention of x (B, T, d_model) over the cache ``past`` (B, H, P, Dh) and x itself, its keys and
        values appended: the attention (B, T, d_model) and the new cache (B, H, P+T, Dh)."""
        if not self.training:  # one operator for the export (``cached_attention``)
            out, k, v = cached_attention(
                self.w_q(x), self.w_k(x), self.w_v(x), past[0], past[1], bias, self.h, self.scale
            )
            return self.w_o(out), (k, v)
        k_new, v_new = self.project_kv(x)  # (B, H, T, Dh)
        k, v = torch.cat([past[0], k_new], dim=2), torch.cat([past[1], v_new], dim=2)  # (B, H, P+T, Dh)
        return self.attend(x, k, v, bias), (k, v)


def mask_bias(keep: Tensor) -> Tensor:
    """A boolean mask as the additive bias attention takes: 0 where seen, MASKED where not. Additive, not
    boolean, so that a fully masked row (a padding row of a batch) stays finite; built once per pass."""
    return torch.where(keep, 0.0, MASKED)  # one Where node in the exported graphs


# swish(x) = x * sigmoid(x); gelu_tanh: GELU's tanh approximation (T5's gelu_new)
ACTIVATION = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "swish": F.silu,
}


class FeedForward(nn.Module):
    """§3.3: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, max(0, .) being the configured activation; gated (``ffn_glu``,
    Shazeer 2020 "GLU Variants Improve Transformer"): FFN(x) = (act(x W_1) * x V) W_2."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        bias = c.projection_bias
        self.w_1, self.w_2 = nn.Linear(c.d_model, c.d_ff, bias=bias), nn.Linear(c.d_ff, c.d_model, bias=bias)
        if c.ffn_glu:
            self.v = nn.Linear(c.d_model, c.d_ff, bias=bias)
        self.dropout = nn.Dropout(c.dropout)
        self.act = ACTIVATION[c.activation]

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.w_1(x))  # (B, T, d_ff)
        if hasattr(self, "v"):
            h = h * self.v(x)
        return self.w_2(self.dropout(h))


def norm_layer(c: ModelConfig) -> nn.Module:
    """LayerNorm (Ba et al. 2016), or RMSNorm (Zhang and Sennrich 2019: x / RMS(x) * g, no mean subtracted and no
    bias; T5's)."""
    return nn.RMSNorm(c.d_model, eps=c.norm_eps) if c.rms_norm else nn.LayerNorm(c.d_model, eps=c.norm_eps)


def sublayer_input(norm: nn.Module, x: Tensor, pre: bool) -> Tensor:
    """What a sub-layer reads: x itself (post-norm, the paper), or LayerNorm(x) (pre-norm)."""
    return norm(x) if pre else x


def add_norm(norm: nn.Module, x: Tensor, y: Tensor, pre: bool) -> Tensor:
    """§3.1 Add & Norm of a sub-layer's output y: LayerNorm(x + y) post-norm; x + y pre-norm (normed on the way in)."""
    return x + y if pre else norm(x + y)


class EncoderLayer(nn.Module):
    """§3.1 encoder layer: self-attention, then FFN, each wrapped in Add & Norm."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c)
        self.ffn = FeedForward(c)
        self.norm1, self.norm2 = norm_layer(c), norm_layer(c)
        self.dropout = nn.Dropout(c.dropout)
        self.pre = c.norm == "pre"

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        h = sublayer_input(self.norm1, x, self.pre)
        k, v = self.self_attn.project_kv(h)
        x = add_norm(self.norm1, x, self.dropout(self.self_attn.attend(h, k, v, bias)), self.pre)
        h = sublayer_input(self.norm2, x, self.pre)
        return add_norm(self.norm2, x, self.dropout(self.ffn(h)), self.pre)


class DecoderLayer(nn.Module):
    """§3.1 decoder layer: masked self-attention, cross-attention over the encoder output, FFN."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c)
        self.cross_attn = MultiHeadAttention(c)
        self.ffn = FeedForward(c)
        self.norm1, self.norm2, self.norm3 = (norm_layer(c) for _ in range(3))
        self.dropout = nn.Dropout(c.dropout)
        self.pre = c.norm == "pre"

    def forward(
        self, y: Tensor, past: KV, self_bias: Tensor, cross: KV, cross_bias: Tensor
    ) -> tuple[Tensor, KV]:
        h = sublayer_input(self.norm1, y, self.pre)
        a, (k, v) = self.self_attn.attend_cached(h, past, self_bias)  # cache (B, H, P+T, Dh)
        y = add_norm(self.norm1, y, self.dropout(a), self.pre)
        h = sublayer_input(self.norm2, y, self.pre)
        y = add_norm(
            self.norm2,
            y,
            self.dropout(self.cross_attn.attend_per_source(h, cross[0], cross[1], cross_bias)),
            self.pre,
        )
        h = sublayer_input(self.norm3, y, self.pre)
        y = add_norm(self.norm3, y, self.dropout(self.ffn(h)), self.pre)
        return y, (k, v)


class Transformer(nn.Module):
    """§3 EncoderDecoder: embeddings (§3.4) + positional encoding (§3.5) + N encoder and N decoder layers."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.config = c
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.special.pad)
        self.tgt_embed = (
            self.src_embed
            if c.share_embeddings
            else nn.Embedding(c.tgt_vocab_size, c.d_model, padding_idx=c.special.pad)
        )
        if c.positions == "relative":  # T5: a bias on the self-attention scores, one table per stack
            buckets, distance = c.relative_attention_num_buckets, c.relative_attention_max_distance
            self.encoder_position_bias = RelativePositionBias(
                c.n_heads, buckets, distance, bidirectional=True
            )
            self.decoder_position_bias = RelativePositionBias(
                c.n_heads, buckets, distance, bidirectional=False
            )
        else:
            self.pos = PositionalEncoding(c.d_model, c.max_len, c.positions, c.position_offset)
        if c.positions == "learned":  # a stored table per stack (BART's); a sinusoid is one function for both
            self.decoder_pos = PositionalEncoding(c.d_model, c.max_len, c.positions, c.position_offset)
        if c.embedding_norm:  # BART's layernorm_embedding, one per stack
            self.encoder_embed_norm, self.decoder_embed_norm = norm_layer(c), norm_layer(c)
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_decoder_layers))
        if c.final_norm:  # pre-norm stacks end on an un-normed residual sum: one LayerNorm after each stack
            self.encoder_norm, self.decoder_norm = norm_layer(c), norm_layer(c)
        self.output_projection = nn.Linear(c.d_model, c.tgt_vocab_size, bias=c.output_bias)
        if c.tie_output:  # §3.4: share the target embedding and the pre-softmax projection
            self.output_projection.weight = self.tgt_embed.weight
        self.dropout = nn.Dropout(c.dropout)
        # §3.4: embeddings are multiplied by sqrt(d_model)
        self.scale = math.sqrt(c.d_model) if c.scale_embedding else 1.0
        self._init_weights()

    def _init_weights(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        # The tied table also feeds the output softmax; N(0, d^-1/2) keeps the scaled input
        # embeddings and the initial logits both at unit scale.
        nn.init.normal_(self.tgt_embed.weight, std=self.config.d_model**-0.5)
        if not self.config.share_embeddings:
            nn.init.normal_(self.src_embed.weight, std=self.config.d_model**-0.5)

    def embed(self, stack: str, ids: Tensor, positions: Tensor) -> Tensor:
        """§3.4 + §3.5 for the encoder's or the decoder's ids: scaled embeddings plus positions (then LayerNorm where
        the family has one there) -> (B, T, d_model). Relative positions add nothing here (``position_bias``)."""
        c = self.config
        x = (self.src_embed if stack == "encoder" else self.tgt_embed)(ids) * self.scale
        if c.positions != "relative":
            x = x + (self.decoder_pos if stack == "decoder" and c.positions == "learned" else self.pos)(
                positions
            )
        if c.embedding_norm:
            x = getattr(self, f"{stack}_embed_norm")(x)
        return self.dropout(x)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """src, src_mask: (B, S) ids and 1/0 mask -> memory (B, S, d_model)."""
        positions = torch.arange(src.shape[1], device=src.device).expand_as(src)
        bias = mask_bias(
            src_mask.bool()[:, None, None, :]
        )  # (B, 1, 1, S): queries may look at real tokens only
        if self.config.positions == "relative":  # sources are right-padded: a row's tokens sit at 0, 1, ...
            bias = bias + self.encoder_position_bias(positions, positions)  # (B, H, S, S)
        x = self.embed("encoder", src, positions)
        for layer in self.encoder:
            x = layer(x, bias)
        return self.encoder_norm(x) if self.config.final_norm else x

    def cross_kv(self, memory: Tensor) -> list[KV]:
        """Cross-attention K/V of every decoder layer: computed once per source, reused each step."""
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder]

    def empty_past(self, batch: int, device: torch.device | None = None) -> tuple[list[KV], Tensor]:
        c = self.config
        z = torch.zeros(batch, c.n_heads, 0, c.d_head, device=device)
        return [(z, z) for _ in range(c.n_decoder_layers)], torch.zeros(
            batch, 0, dtype=torch.long, device=device
        )

    def decode_step(
        self,
        tgt: Tensor,  # (B, T) target ids fed now
        positions: Tensor,  # (B, T) their absolute positions
        past: list[KV],  # per layer (B, H, P, Dh)
        past_mask: Tensor,  # (B, P) 1 = real cached position
        cross: list[KV],  # per layer (N, H, S, Dh): per source, B = N x g rows (a beam's g rows share theirs)
        src_mask: Tensor,  # (N, S)
    ) -> tuple[Tensor, list[KV]]:
        """One decoder pass over T new tokens on top of P cached ones -> logits (B, T, V), present K/V (B, H, P+T, Dh).

        §3.2.3 masking: a token sees the real cached positions and the new tokens up to itself,
        so a future target token cannot change earlier logits. Holes in the cache (rows that
        joined a running batch later than others) are masked like padding.
        """
        t = tgt.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).tril()  # (T, T)
        self_keep = torch.cat(
            [past_mask.bool()[:, None, :].expand(-1, t, -1), causal.expand(tgt.shape[0], -1, -1)], dim=2
        )[:, None]  # (B, 1, T, P+T)
        self_bias = mask_bias(self_keep)
        if self.config.positions == "relative":
            # a row's cached tokens are its positions 0, 1, ... in order (holes before them, masked): each row's
            # distances are its own, whenever it joined the batch
            keys = torch.cat([past_mask.cumsum(1) - 1, positions], dim=1)  # (B, P+T)
            self_bias = self_bias + self.decoder_position_bias(positions, keys)  # (B, H, T, P+T)
        cross_bias = mask_bias(src_mask.bool()[:, None, None, :])  # (N, 1, 1, S)
        y = self.embed("decoder", tgt, positions)
        present: list[KV] = []
        for layer, layer_past, layer_cross in zip(self.decoder, past, cross):
            y, kv = layer(y, layer_past, self_bias, layer_cross, cross_bias)
            present.append(kv)
        if self.config.final_norm:
            y = self.decoder_norm(y)
        if self.config.scale_output:  # T5 v1.0: the tied table's logits rescaled (Mesh TensorFlow's)
            y = y * self.config.d_model**-0.5
        return self.output_projection(y), present

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: logits (B, T, V) for every target position at once."""
        memory = self.encode(src, src_mask)
        past, past_mask = self.empty_past(src.shape[0], src.device)
        positions = torch.arange(tgt_in.shape[1], device=src.device).expand_as(tgt_in)
        logits, _ = self.decode_step(tgt_in, positions, past, past_mask, self.cross_kv(memory), src_mask)
        return logits
