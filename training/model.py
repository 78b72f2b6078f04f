"""The encoder-decoder Transformer of Vaswani et al. 2017, "Attention Is All You Need".

Section numbers refer to the paper. Post-LN as in the paper: each sub-layer is
``LayerNorm(x + Dropout(Sublayer(x)))`` (§3.1, §5.4).

The paper's choices are the defaults of ``ModelConfig``'s architecture knobs (activation, embedding
scale, positions, pre/post norm and a final norm, output bias, a norm on the embeddings); the models other
trainers made (``export/hf_marian.py``: Marian's swish, unscaled embeddings, half-split sinusoids;
``export/hf_bart.py``: BART's learned positions and embedding LayerNorm) are this same model with those knobs
moved, so every imported model runs, exports and is validated through this file.

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

# Added to attention scores of masked positions. A large finite value rather than -inf keeps a
# fully masked row (a padding row of a batch) finite instead of NaN; exp(-1e9) is exactly 0 in
# float32, so real rows are unaffected.
MASKED = -1e9

KV = tuple[Tensor, Tensor]  # (key, value), each (B, H, L, Dh)


class PositionalEncoding(nn.Module):
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    ``sinusoid_half`` lays the same values out as all sines, then all cosines (Marian), computed in float64
    as its trainer did, so positions agree to the last bit; ``sinusoid_fairseq`` is fairseq's table (M2M100, NLLB:
    frequencies spaced over d/2 - 1 steps, float32); ``learned`` is a stored table. In every kind the row for
    position p is p + offset (the families that reserve the first rows: fairseq's start after the padding id)."""

    def __init__(self, d_model: int, max_len: int, kind: str = "sinusoid", offset: int = 0):
        super().__init__()
        self.offset = offset
        if kind == "learned":
            self.table = nn.Embedding(max_len + offset, d_model)  # a weight, loaded with the others
            return
        rows = max_len + offset
        if kind == "sinusoid":
            pos = torch.arange(rows, dtype=torch.float32).unsqueeze(1)  # (L, 1)
            inv_freq = torch.exp(
                torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
            )
            pe = torch.zeros(rows, d_model)
            pe[:, 0::2] = torch.sin(pos * inv_freq)
            pe[:, 1::2] = torch.cos(pos * inv_freq)
        elif (
            kind == "sinusoid_fairseq"
        ):  # as fairseq computes it (M2M100SinusoidalPositionalEmbedding), to the bit
            half = d_model // 2
            freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
            angle = torch.arange(rows, dtype=torch.int64).float().unsqueeze(1) * freq.unsqueeze(0)
            pe = torch.cat([torch.sin(angle), torch.cos(angle), torch.zeros(rows, d_model % 2)], dim=1)
        else:  # sinusoid_half
            pos = torch.arange(rows, dtype=torch.float64).unsqueeze(1)  # (L, 1)
            angle = pos / torch.pow(
                10000.0, torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
            )  # (L, ceil(d/2))
            pe = torch.cat([torch.sin(angle), torch.cos(angle[:, : d_model // 2])], dim=1).float()
        self.register_buffer("pe", pe, persistent=False)  # a function of the config, not a weight

    def forward(self, positions: Tensor) -> Tensor:
        # Explicit positions (B, T) rather than arange: a decode step of a batch whose rows
        # joined at different times feeds each row its own position.
        if hasattr(self, "table"):
            return self.table(positions + self.offset)  # (B, T, d_model)
        return self.pe[positions + self.offset if self.offset else positions]  # (B, T, d_model)


@torch.library.custom_op("s2s::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, n_heads: int) -> Tensor:
    """§3.2.1 for all heads at once: softmax(Q K^T / sqrt(d_k) + bias) V with the heads merged again.

    q: (B, T, d_model) projected queries; k, v: (B, H, L, Dh); bias: additive, broadcastable to
    (B, 1, T, L), 0 where a position is seen and MASKED where not. One operator so that the export can map it to ONNX
    Runtime's fused com.microsoft.MultiHeadAttention (export/fused.py) instead of ~10 nodes per
    attention; this eager body is the reference the exported graphs are validated against.
    """
    b, t, d = q.shape
    d_k = d // n_heads
    qh = q.view(b, t, n_heads, d_k).transpose(1, 2)  # (B, H, T, Dh)
    attn = (qh @ k.transpose(-2, -1) / math.sqrt(d_k) + bias).softmax(dim=-1)  # (B, H, T, L)
    return (attn @ v).transpose(1, 2).reshape(b, t, d)  # (B, T, d_model)


@attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, n_heads: int) -> Tensor:
    return torch.empty_like(q)


@torch.library.custom_op("s2s::cached_attention", mutates_args=())
def cached_attention(
    q: Tensor, k_new: Tensor, v_new: Tensor, past_k: Tensor, past_v: Tensor, bias: Tensor, n_heads: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Decoder self-attention over the cache: the new tokens' keys and values appended to it, then §3.2.1.

    q, k_new, v_new: (B, T, d_model) projections of the T new tokens; past_k, past_v: (B, H, P, Dh); bias as
    ``attention``'s, (B, 1, T, P+T). Returns the attention (B, T, d_model) and the cache with the new tokens,
    (B, H, P+T, Dh) each. One operator so that the export can map the append and the attention together to ONNX
    Runtime's GroupQueryAttention, which appends inside its kernel (export/fused.py); this eager body (a Concat,
    then ``attention``) is what the exported graphs are validated against."""
    b, t, d = k_new.shape
    k = torch.cat([past_k, k_new.view(b, t, n_heads, d // n_heads).transpose(1, 2)], dim=2)  # (B, H, P+T, Dh)
    v = torch.cat([past_v, v_new.view(b, t, n_heads, d // n_heads).transpose(1, 2)], dim=2)
    return attention(q, k, v, bias, n_heads), k, v


@cached_attention.register_fake
def _(
    q: Tensor, k_new: Tensor, v_new: Tensor, past_k: Tensor, past_v: Tensor, bias: Tensor, n_heads: int
) -> tuple[Tensor, Tensor, Tensor]:
    b, h, p, d_k = past_k.shape
    present = past_k.new_empty(b, h, p + k_new.shape[1], d_k)
    return torch.empty_like(q), present, torch.empty_like(present)


class MultiHeadAttention(nn.Module):
    """§3.2.2: MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),
    with §3.2.1 Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.d_k).transpose(1, 2)  # (B, H, T, Dh)

    def project_kv(self, x: Tensor) -> KV:
        return self.split_heads(self.w_k(x)), self.split_heads(self.w_v(x))  # 2 x (B, H, L, Dh)

    def attend(self, x: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        """x: queries (B, T, d_model); k, v: (B, H, L, Dh); bias: from mask_bias, broadcastable to (B, 1, T, L)."""
        if not self.training:
            # One operator: the export maps it to ONNX Runtime's fused MultiHeadAttention, which takes
            # the queries before the head split and returns them merged (export/fused.py).
            return self.w_o(attention(self.w_q(x), k, v, bias, self.h))  # (B, T, d_model)
        # Training: PyTorch's fused kernel, dropout inside (0.96x of the written-out ops in
        # docs/studies/train-speed.md on 2 cores, kept for the memory it saves on longer batches).
        q = self.split_heads(self.w_q(x))  # (B, H, T, Dh)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias.to(q.dtype), dropout_p=self.dropout.p, scale=self.d_k**-0.5
        )
        return self.w_o(out.transpose(1, 2).flatten(2))  # (B, T, d_model)

    def attend_cached(self, x: Tensor, past: KV, bias: Tensor) -> tuple[Tensor, KV]:
        """Self-attention of x (B, T, d_model) over the cache ``past`` (B, H, P, Dh) and x itself, its keys and
        values appended: the attention (B, T, d_model) and the new cache (B, H, P+T, Dh)."""
        if not self.training:  # one operator for the export (``cached_attention``)
            out, k, v = cached_attention(
                self.w_q(x), self.w_k(x), self.w_v(x), past[0], past[1], bias, self.h
            )
            return self.w_o(out), (k, v)
        k_new, v_new = self.project_kv(x)  # (B, H, T, Dh)
        k, v = torch.cat([past[0], k_new], dim=2), torch.cat([past[1], v_new], dim=2)  # (B, H, P+T, Dh)
        return self.attend(x, k, v, bias), (k, v)


def mask_bias(keep: Tensor) -> Tensor:
    """A boolean mask as the additive bias attention takes: 0 where seen, MASKED where not. Additive, not
    boolean, so that a fully masked row (a padding row of a batch) stays finite; built once per pass."""
    return torch.where(keep, 0.0, MASKED)  # one Where node in the exported graphs


ACTIVATION = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}  # swish(x) = x * sigmoid(x)


class FeedForward(nn.Module):
    """§3.3: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, max(0, .) being the configured activation."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu"):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.act = ACTIVATION[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(self.act(self.w_1(x))))


def sublayer_input(norm: nn.LayerNorm, x: Tensor, pre: bool) -> Tensor:
    """What a sub-layer reads: x itself (post-norm, the paper), or LayerNorm(x) (pre-norm)."""
    return norm(x) if pre else x


def add_norm(norm: nn.LayerNorm, x: Tensor, y: Tensor, pre: bool) -> Tensor:
    """§3.1 Add & Norm of a sub-layer's output y: LayerNorm(x + y) post-norm; x + y pre-norm (normed on the way in)."""
    return x + y if pre else norm(x + y)


class EncoderLayer(nn.Module):
    """§3.1 encoder layer: self-attention, then FFN, each wrapped in Add & Norm."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.dropout)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.dropout, c.activation)
        self.norm1, self.norm2 = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
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
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.dropout)
        self.cross_attn = MultiHeadAttention(c.d_model, c.n_heads, c.dropout)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.dropout, c.activation)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(c.d_model) for _ in range(3))
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
            self.norm2, y, self.dropout(self.cross_attn.attend(h, cross[0], cross[1], cross_bias)), self.pre
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
        self.pos = PositionalEncoding(c.d_model, c.max_len, c.positions, c.position_offset)
        if c.positions == "learned":  # a stored table per stack (BART's); a sinusoid is one function for both
            self.decoder_pos = PositionalEncoding(c.d_model, c.max_len, c.positions, c.position_offset)
        if c.embedding_norm:  # BART's layernorm_embedding, one per stack
            self.encoder_embed_norm, self.decoder_embed_norm = (
                nn.LayerNorm(c.d_model),
                nn.LayerNorm(c.d_model),
            )
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_decoder_layers))
        if c.final_norm:  # pre-norm stacks end on an un-normed residual sum: one LayerNorm after each stack
            self.encoder_norm, self.decoder_norm = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
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
        the family has one there) -> (B, T, d_model)."""
        c = self.config
        table, pos = (
            (self.src_embed, self.pos)
            if stack == "encoder"
            else (self.tgt_embed, self.decoder_pos if c.positions == "learned" else self.pos)
        )
        x = table(ids) * self.scale + pos(positions)
        if c.embedding_norm:
            x = getattr(self, f"{stack}_embed_norm")(x)
        return self.dropout(x)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """src, src_mask: (B, S) ids and 1/0 mask -> memory (B, S, d_model)."""
        positions = torch.arange(src.shape[1], device=src.device).expand_as(src)
        bias = mask_bias(
            src_mask.bool()[:, None, None, :]
        )  # (B, 1, 1, S): queries may look at real tokens only
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
        cross: list[KV],  # per layer (B, H, S, Dh)
        src_mask: Tensor,  # (B, S)
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
        cross_bias = mask_bias(src_mask.bool()[:, None, None, :])  # (B, 1, 1, S)
        y = self.embed("decoder", tgt, positions)
        present: list[KV] = []
        for layer, layer_past, layer_cross in zip(self.decoder, past, cross):
            y, kv = layer(y, layer_past, self_bias, layer_cross, cross_bias)
            present.append(kv)
        if self.config.final_norm:
            y = self.decoder_norm(y)
        return self.output_projection(y), present

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: logits (B, T, V) for every target position at once."""
        memory = self.encode(src, src_mask)
        past, past_mask = self.empty_past(src.shape[0], src.device)
        positions = torch.arange(tgt_in.shape[1], device=src.device).expand_as(tgt_in)
        logits, _ = self.decode_step(tgt_in, positions, past, past_mask, self.cross_kv(memory), src_mask)
        return logits
