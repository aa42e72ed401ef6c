"""Multi-head attention (section 3.2) with its own d_k and d_v, batch-first, through SDPA.

Tensors are batch-first: queries ``[B, T, D]``, keys/values ``[B, S, D]``; heads are laid out as
``[B, H, T, d]`` for :func:`torch.nn.functional.scaled_dot_product_attention`. One forward serves training
and incremental decoding; with a cache (:mod:`~nmt_toolkit.modules.caches`) the self-attention appends the
new position's keys/values and attends over all of them, and the encoder–decoder attention reads the
keys/values it projected once (:meth:`MultiheadAttention.project_memory`).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from nmt_toolkit.modules.caches import CrossAttentionCache, SelfAttentionCache


class MultiheadAttention(nn.Module):
    """Eq. 1 per head, ``Attention(Q,K,V) = softmax(QK^T / sqrt(d_k)) V``, h heads, concatenated, projected.

    ``self_attention=True`` fuses the Q, K and V projections into one matrix (one matmul per call); for
    encoder–decoder attention Q is projected from the decoder and K, V (fused) from the encoder output.
    The parameter count equals three separate ``Linear`` layers with biases.

    ``attention_kernel`` computes eq. 1 with SDPA's signature: SDPA itself, unless a back end replaces it on an
    instance (generation/cpu.py does for decoding on the CPU, where writing it out is faster).
    """

    attention_kernel = staticmethod(F.scaled_dot_product_attention)

    def __init__(self, embed_dim: int, num_heads: int, key_dim: Optional[int] = None,
                 value_dim: Optional[int] = None, dropout: float = 0.0, self_attention: bool = True):
        super().__init__()
        if key_dim is None and embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by {num_heads} heads; set key_dim/value_dim")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.key_dim = key_dim or embed_dim // num_heads
        self.value_dim = value_dim or embed_dim // num_heads
        self.dropout = dropout
        self.self_attention = self_attention
        self.scaling = 1.0 / math.sqrt(self.key_dim)
        hk, hv = num_heads * self.key_dim, num_heads * self.value_dim
        self._split = (hk, hk, hv)
        if self_attention:
            self.in_proj = nn.Linear(embed_dim, 2 * hk + hv)
        else:
            self.q_proj = nn.Linear(embed_dim, hk)
            self.kv_proj = nn.Linear(embed_dim, hk + hv)
        self.out_proj = nn.Linear(hv, embed_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """fairseq's initialisation, so that the same recipe learns the same model (docs/training.md, "Parity
        with fairseq"): Q, K and V Xavier-uniform with gain 1/sqrt(2), each block as if it were its own
        ``Linear(embed_dim, n)`` (fairseq notes that convergence is clearly better with the smaller scale), their
        biases as ``nn.Linear``'s default U(-1/sqrt(d), 1/sqrt(d)); the output projection Xavier-uniform with a
        zero bias. The paper does not say how it initialised."""
        hk, _, hv = self._split
        blocks = ([(self.in_proj, self._split)] if self.self_attention
                  else [(self.q_proj, (hk,)), (self.kv_proj, (hk, hv))])
        for layer, rows in blocks:
            start = 0
            for n in rows:
                bound = math.sqrt(6.0 / (self.embed_dim + n)) / math.sqrt(2.0)
                nn.init.uniform_(layer.weight[start:start + n], -bound, bound)
                start += n
            bias_bound = 1.0 / math.sqrt(self.embed_dim)
            nn.init.uniform_(layer.bias, -bias_bound, bias_bound)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    # ------------------------------------------------------------------ projections

    def _heads(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """``[B, T, H*dim]`` → ``[B, H, T, dim]`` (a view)."""
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, dim).transpose(1, 2)

    def _project_kv(self, source: torch.Tensor):
        k, v = self.kv_proj(source).split(self._split[1:], dim=-1)
        return self._heads(k, self.key_dim), self._heads(v, self.value_dim)

    def project_memory(self, memory: torch.Tensor,
                       key_padding_mask: Optional[torch.Tensor] = None) -> CrossAttentionCache:
        """Encoder–decoder keys/values of ``memory`` [n, S, D] (``key_padding_mask`` [n, S] True at pads),
        projected once for incremental decoding."""
        k, v = self._project_kv(memory)
        # contiguous once: a view of the fused K|V projection cannot be folded into one batch of matrices,
        # so every decoding step's product would otherwise copy it
        k, v = k.contiguous(), v.contiguous()
        keep = None
        if key_padding_mask is not None and bool(key_padding_mask.any()):
            keep = ~key_padding_mask[:, None, None, :]
        return CrossAttentionCache(k, v, keep)

    def empty_cache(self, rows: int, capacity: int, like: torch.Tensor) -> SelfAttentionCache:
        """A self-attention cache for ``rows`` hypotheses, preallocated for ``capacity`` positions."""
        return SelfAttentionCache.empty(rows, self.num_heads, self.key_dim, self.value_dim, capacity, like)

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        query: torch.Tensor,
        key: Optional[torch.Tensor] = None,
        key_padding_mask: Optional[torch.Tensor] = None,
        causal: bool = False,
        cache: Optional[SelfAttentionCache | CrossAttentionCache] = None,
        need_weights: bool = False,
    ):
        """Attend from ``query`` [B, T, D] to ``key`` [B, S, D] (``None`` for self-attention).

        ``key_padding_mask`` [B, S] is True at padded keys; ``causal`` masks future keys. Incremental
        decoding (``cache``, one new position per row, ``T`` = 1): self-attention appends this position's
        keys/values to its :class:`SelfAttentionCache` (or a static-shape cache, whose unwritten positions it
        masks) and attends over the cached ones; encoder–decoder attention reads its
        :class:`CrossAttentionCache` (``key`` is not used) — when it holds ``n`` sentences for ``B = n * w``
        rows, the ``w`` rows of a sentence are its block of ``w`` queries.
        Returns ``(output [B, T, D], probs [B, H, T, S] or None)``.
        """
        bsz, tgt_len, _ = query.shape
        keep = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
        if cache is not None and tgt_len != 1:
            raise ValueError("incremental decoding computes one new position per row")
        if self.self_attention:
            q, k, v = self.in_proj(query).split(self._split, dim=-1)  # split: one concat in backward
            q, k, v = self._heads(q, self.key_dim), self._heads(k, self.key_dim), self._heads(v, self.value_dim)
            if cache is not None:
                k, v = cache.append(k, v)
                keep = cache.visible()  # None, or (static-shape caches) True at the positions written so far
                causal = False  # the newest position may see every cached one
        elif cache is not None:
            sentences = cache.k.size(0)
            if bsz % sentences:
                raise ValueError(f"{bsz} decoder rows do not divide into {sentences} sentences of the cache")
            q = self._heads(self.q_proj(query.reshape(sentences, bsz // sentences, -1)), self.key_dim)
            k, v, keep = cache.k, cache.v, cache.keep
        else:
            q = self._heads(self.q_proj(query), self.key_dim)
            k, v = self._project_kv(key)
        out, probs = self._attend(q, k, v, keep, causal, need_weights)
        out = out.transpose(1, 2).reshape(bsz, tgt_len, self._split[2])
        if probs is not None and probs.size(0) != bsz:  # sentence blocks back to rows
            probs = probs.transpose(1, 2).reshape(bsz, self.num_heads, 1, probs.size(-1))
        return self.out_proj(out), probs

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: Optional[torch.Tensor],
                causal: bool, need_weights: bool):
        """Eq. 1 for every head: ``q`` [B, H, T, d_k], ``k`` [B, H, S, d_k], ``v`` [B, H, S, d_v]; ``keep``
        (bool, broadcast to [B, H, T, S]) is True where a query may see a key. Through SDPA, or written out
        (softmax in float32) when the probabilities are asked for."""
        if causal and (keep is not None or need_weights or k.size(2) != q.size(2)):
            # SDPA's is_causal aligns top-left; queries at the end of a longer key sequence need bottom-right
            allowed = _causal_keep(q.size(2), k.size(2), q.device)
            keep = allowed if keep is None else keep & allowed
            causal = False
        if not need_weights:
            out = self.attention_kernel(q, k, v, attn_mask=keep, is_causal=causal, scale=self.scaling,
                                        dropout_p=self.dropout if self.training else 0.0)
            return out, None
        scores = torch.matmul(q, k.transpose(-1, -2)).float() * self.scaling  # [B, H, T, S]
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        dropped = F.dropout(probs, self.dropout, self.training) if self.dropout > 0 else probs
        return torch.matmul(dropped.to(v.dtype), v), probs


def _causal_keep(tgt_len: int, src_len: int, device) -> torch.Tensor:
    """[T, S] bool, True where query t (the last T of S positions) may attend to key s."""
    return torch.ones(tgt_len, src_len, dtype=torch.bool, device=device).tril_(src_len - tgt_len)
