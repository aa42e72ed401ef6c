"""Multi-head attention (section 3.2) with its own d_k and d_v, and caches for incremental decoding.

Tensors are batch-first: queries ``[B, T, D]``, keys/values ``[B, S, D]``. Heads are laid out as
``[B, H, T, d]`` for :func:`torch.nn.functional.scaled_dot_product_attention`.

Incremental state (a plain dict owned by the caller, shared by all layers of one model; each attention
module stores one entry under its own ``state_key``):

- self-attention: ``{"kt": [S, H, d_k, capacity, beam], "v": [S, H, capacity, beam, d_v], "len": int}``
  (with the C kernels of :mod:`~nmt_toolkit.modules.cpu_kernels`, chosen when the cache is created, the keys
  are ``"k"`` [S, H, capacity, beam, d_k] instead: every key vector contiguous, as the kernel reads them) —
  preallocated buffers (capacity ``state["_capacity"]`` when the caller sets it, else 16) that grow by
  doubling; one step writes one position, so a sentence of T steps costs O(T) copies. Keys are stored
  transposed: the filled part is then a ``[d_k, positions]`` matrix per sentence and head, which a batched
  product reads faster (≈ 20 % on CPU) than the transpose of a ``[positions, d_k]`` one. Without
  ``state["_beam"]`` every decoder row is its own line (``S`` = rows, ``beam`` = 1) and a reorder copies the
  filled part of the cache into a reused spare buffer (double buffering: no allocation per step);
- *beam layout* (``state["_beam"] = k`` and ``state["_sentences"] = n``, set by a beam search whose rows
  are grouped by sentence, ``k`` per sentence): the ``k`` beams of a sentence write their keys side by side
  (``[.., position, beam, d]``) and never move. Which slot holds a row's key at each earlier position is
  the row's *ancestry*, ``state["_ancestry"]`` ``[S, k, capacity]``; a reorder rewrites that small integer
  table instead of copying keys and values, and a row attends to all ``k * len`` keys of its sentence with
  the other lines masked out (one ``[k, d] x [d, k * len]`` product per sentence and head instead of ``k``
  thin ones). Only when sentences leave the batch are keys copied: those of the last live sentences, into
  the slots freed at the front (the search keeps its sentences in that same order);
- encoder–decoder attention: ``{"k": [B, H, S, d_k], "v": [B, H, S, d_v], "mask": [B, S] bool or None,
  "keep": [B, 1, 1, S] bool or None}``, computed once from the encoder output at the first step (``mask`` is
  True at padded source positions, ``keep`` its negation as SDPA takes it). On the decoding-step path
  (:meth:`MultiheadAttention.step_cross`) B counts *sentences*: the beams of a sentence share one entry
  (``"sentence_level": True``, keys stored transposed as ``"kt"``, padding as an additive ``"bias"``) and
  are its query-length axis. With the C kernels the entry holds ``"k"`` [n, H, S, d_k] and the padding as
  ``"pad"`` [n, S] (0 or -inf) instead.

:func:`reorder_state` applies a beam reordering to every entry; sentence-level entries follow the kept
sentences.
"""
from __future__ import annotations

import contextlib
import itertools
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from nmt_toolkit.modules import cpu_kernels, packed_linear

_ids = itertools.count()


def sdpa_backends(device: torch.device):
    """A context in which :func:`~torch.nn.functional.scaled_dot_product_attention` may use every CUDA
    kernel but cuDNN's (flash, memory-efficient, math); nothing changes on other devices.

    Why. Where torch prefers cuDNN's attention (half precision on Hopper GPUs), cuDNN builds an execution
    plan for every new shape, and token-based batches bring a new (batch, length) shape almost every step:
    measured on an H100 (torch 2.11, small model, ``--max-tokens 8192``), the first 60 updates of
    ``nmt-train --fp16`` ran at 5,500-19,000 target tokens/s with cuDNN allowed and 57,000-192,000 without
    (``--bf16`` alike; float32 never takes cuDNN's kernel). The trainer's forward passes and the generator
    run inside this context; it saves and restores torch's global switches, so code around it is unaffected."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


class MultiheadAttention(nn.Module):
    """Eq. 1 per head, ``Attention(Q,K,V) = softmax(QK^T / sqrt(d_k)) V``, h heads, concatenated, projected.

    ``self_attention=True`` fuses the Q, K and V projections into one matrix (one matmul per call); for
    encoder–decoder attention Q is projected from the decoder and K, V (fused) from the encoder output.
    The parameter count equals three separate ``Linear`` layers with biases.
    """

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
        self.state_key = f"attn{next(_ids)}"
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
        k, v = packed_linear.apply(self.kv_proj, source).split(self._split[1:], dim=-1)
        return self._heads(k, self.key_dim), self._heads(v, self.value_dim)

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        query: torch.Tensor,
        key: Optional[torch.Tensor] = None,
        key_padding_mask: Optional[torch.Tensor] = None,
        causal: bool = False,
        incremental_state: Optional[dict] = None,
        need_weights: bool = False,
    ):
        """Attend from ``query`` [B, T, D] to ``key`` [B, S, D] (``None`` for self-attention).

        ``key_padding_mask`` [B, S] is True at padded keys. ``causal`` masks future keys (full-sequence
        decoder self-attention). With ``incremental_state``, self-attention appends this step's keys and
        values to the cache (``query`` holds only the new positions) and encoder–decoder attention
        projects ``key`` once and reuses it. Returns ``(output [B, T, D], probs [B, H, T, S] or None)``.
        """
        bsz, tgt_len, _ = query.shape
        hk, _, hv = self._split
        mask = key_padding_mask
        if self.self_attention:
            q, k, v = packed_linear.apply(self.in_proj, query).split(self._split, dim=-1)  # split: one concat in backward
            q, k, v = self._heads(q, self.key_dim), self._heads(k, self.key_dim), self._heads(v, self.value_dim)
            if incremental_state is not None:
                k, v = self._append(incremental_state, k, v)
                causal = causal and tgt_len > 1  # one new query may see every cached key
        else:
            q = self._heads(packed_linear.apply(self.q_proj, query), self.key_dim)
            if incremental_state is not None:
                entry = incremental_state.get(self.state_key)
                if entry is None:
                    k, v = self._project_kv(key)
                    keep = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
                    entry = {"k": k, "v": v, "mask": key_padding_mask, "keep": keep}
                    incremental_state[self.state_key] = entry
                k, v, mask = entry["k"], entry["v"], entry["mask"]
            else:
                k, v = self._project_kv(key)

        if need_weights:
            out, probs = self._attention_with_probs(q, k, v, mask, causal)
        else:
            if incremental_state is not None and not self.self_attention:
                attn_mask = entry["keep"]  # built once per source
            else:
                attn_mask = None if mask is None else ~mask[:, None, None, :]
            if causal and (attn_mask is not None or k.size(2) != tgt_len):
                # SDPA's is_causal aligns top-left; queries at the end of a longer cache need bottom-right
                attn_mask = _causal_keep(tgt_len, k.size(2), q.device) & (True if attn_mask is None else attn_mask)
                causal = False
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.0,
                is_causal=causal, scale=self.scaling)
            probs = None
        out = out.transpose(1, 2).reshape(bsz, tgt_len, hv)
        return packed_linear.apply(self.out_proj, out), probs

    def _attention_with_probs(self, q, k, v, mask, causal):
        """The explicit (slower) path that also returns the per-head probabilities."""
        scores = torch.matmul(q, k.transpose(-1, -2)).float() * self.scaling  # [B, H, T, S]
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :], float("-inf"))
        if causal:
            scores = scores.masked_fill(~_causal_keep(scores.size(-2), scores.size(-1), q.device), float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        dropped = F.dropout(probs, self.dropout, self.training) if self.dropout > 0 else probs
        return torch.matmul(dropped.to(v.dtype), v), probs

    def _append(self, state: dict, k: torch.Tensor, v: torch.Tensor):
        """Write this step's keys/values into the preallocated cache; return views of the filled part."""
        new = k.size(2)
        if int(state.get("_beam", 1)) > 1:
            raise ValueError("a beam-layout incremental state serves forward_step only (see the module docstring)")
        entry = self._cache_with_room(state, k.size(0), new, k, beam=1)
        length = entry["len"]
        vc = entry["v"][:, :, :, 0]
        vc[:, :, length:length + new] = v
        entry["len"] = length + new
        if "k" in entry:  # the C kernel's layout (a cache that step_self created)
            kc = entry["k"][:, :, :, 0]
            kc[:, :, length:length + new] = k
            return kc[:, :, :length + new], vc[:, :, :length + new]
        ktc = entry["kt"][..., 0]
        ktc[:, :, :, length:length + new] = k.transpose(2, 3)
        return ktc[:, :, :, :length + new].transpose(2, 3), vc[:, :, :length + new]


    def _cache_with_room(self, state: dict, rows: int, new: int, like: torch.Tensor, beam: int,
                         kernel: bool = False) -> dict:
        """This module's self-attention cache entry, created (capacity ``state["_capacity"]``, else 16) or
        grown by doubling so that ``new`` more positions fit. ``kernel``: keys laid out for the C kernel
        (``"k"`` [S, H, capacity, beam, d_k], see the module docstring) instead of transposed (``"kt"``)."""
        entry = state.get(self.state_key)
        if entry is None:
            cap = max(int(state.get("_capacity", 16)), new, 1)
            keys = (("k", like.new_empty(rows, self.num_heads, cap, beam, self.key_dim)) if kernel
                    else ("kt", like.new_empty(rows, self.num_heads, self.key_dim, cap, beam)))
            entry = {keys[0]: keys[1], "v": like.new_empty(rows, self.num_heads, cap, beam, self.value_dim), "len": 0}
            state[self.state_key] = entry
        elif entry["len"] + new > entry["v"].size(2):
            _grow(entry, max(2 * entry["v"].size(2), entry["len"] + new))
        return entry

    # ------------------------------------------------------------------ one decoding step (inference only)
    # These methods serve incremental decoding only (the decoder's ``forward_step``); the training forward
    # above does not use them. Inputs are 2-D ``[N, D]`` (one new position per row), which keeps every
    # projection a plain addmm and avoids layout copies.

    def step_self(self, x: torch.Tensor, state: dict) -> torch.Tensor:
        """Self-attention of one new position per row ``x`` [N, D] over the cache (which it extends).

        In the beam layout (module docstring) the ``N = n * w`` rows are the ``w`` beams of ``n`` sentences and
        each attends to its own line through the ancestry mask; otherwise every row is a sentence of its own."""
        rows = x.size(0)
        hk, _, hv = self._split
        h, dk, dv = self.num_heads, self.key_dim, self.value_dim
        beam = int(state.get("_beam", 1))
        sents = int(state["_sentences"]) if beam > 1 else rows
        w = rows // sents
        qkv = packed_linear.apply(self.in_proj, x)
        entry = state.get(self.state_key)
        kernel = cpu_kernels.usable(qkv) if entry is None else "k" in entry  # decided once per cache
        entry = self._cache_with_room(state, sents, 1, qkv, beam, kernel)
        pos = entry["len"]
        if kernel:
            anc = _ancestry(state, sents, w, pos, entry["v"].size(2), qkv.device) if beam > 1 else None
            entry["len"] = pos + 1
            out = cpu_kernels.self_step(qkv, entry["k"], entry["v"], anc, sents, w, pos, self.scaling)
            return packed_linear.apply(self.out_proj, out)
        ktc, vc = entry["kt"][:sents], entry["v"][:sents]
        ktc[:, :, :, pos, :w].copy_(qkv[:, hk:2 * hk].view(sents, w, h, dk).permute(0, 2, 3, 1))
        vc[:, :, pos, :w].copy_(qkv[:, 2 * hk:].view(sents, w, h, dv).transpose(1, 2))
        if w < beam:  # slots no row writes still enter the products (with weight 0, which must not meet a NaN)
            ktc[:, :, :, pos, w:].zero_()
            vc[:, :, pos, w:].zero_()
        entry["len"] = pos + 1
        width = (pos + 1) * beam
        keys_t = ktc[:, :, :, :pos + 1].reshape(sents * h, dk, width)  # views: no copy
        values = vc[:, :, :pos + 1].reshape(sents * h, width, dv)
        q = qkv[:, :hk].view(sents, w, h, dk).transpose(1, 2).reshape(sents * h, w, dk)
        if beam > 1:  # other lines' keys get -inf
            bias = _foreign_keys(state, sents, w, pos, vc.size(2), h, qkv)
            scores = torch.baddbmm(bias, q, keys_t, alpha=self.scaling)
        else:
            scores = torch.bmm(q, keys_t).mul_(self.scaling)
        probs = torch.softmax(scores.float(), dim=-1).to(vc.dtype)
        out = torch.bmm(probs, values)  # [n*H, w, dv]
        out = out.view(sents, h, w, dv).transpose(1, 2).reshape(rows, hv)
        return packed_linear.apply(self.out_proj, out)

    def step_cross(self, x: torch.Tensor, encoder_out: torch.Tensor, key_padding_mask: Optional[torch.Tensor],
                   state: dict, need_weights: bool = False):
        """Encoder–decoder attention of one position per row ``x`` [N, D].

        Keys/values are projected once per *sentence* (``encoder_out`` [n, S, D]); the ``N = n * w`` rows are
        the ``w`` beams of each sentence, consecutive, and become the query-length axis of their sentence
        (``[n, H, w, d]``), so no beam ever needs its own copy of the keys. Returns ``(out [N, D], probs
        [N, H, 1, S] or None)``.
        """
        entry = state.get(self.state_key)
        if entry is None:
            entry = self._cross_entry(encoder_out, key_padding_mask, cpu_kernels.usable(x))
            state[self.state_key] = entry
        rows = x.size(0)
        if "k" in entry and not need_weights:
            w = rows // entry["k"].size(0)
            q = packed_linear.apply(self.q_proj, x)
            return packed_linear.apply(self.out_proj, cpu_kernels.cross_step(q, entry["k"], entry["v"], entry["pad"],
                                                                             w, self.scaling)), None
        kt, v, bias = self._cross_torch_layout(entry)
        sents, h, dk, src_len = kt.shape
        w = rows // sents
        hv = self._split[2]
        q = packed_linear.apply(self.q_proj, x).view(sents, w, h, dk).transpose(1, 2)
        q = q.reshape(sents * h, w, dk)
        kt = kt.view(sents * h, dk, src_len)
        if bias is None:
            scores = torch.bmm(q, kt).mul_(self.scaling)
        else:
            scores = torch.baddbmm(bias.view(sents * h, 1, src_len), q, kt, alpha=self.scaling)  # broadcast over w
        probs = torch.softmax(scores.float(), dim=-1)
        out = torch.bmm(probs.to(v.dtype), v.view(sents * h, src_len, -1))  # [n*H, w, dv]
        out = out.view(sents, h, w, -1).transpose(1, 2).reshape(rows, hv)
        if need_weights:
            probs = probs.view(sents, h, w, src_len).transpose(1, 2).reshape(rows, h, 1, src_len)
        else:
            probs = None
        return packed_linear.apply(self.out_proj, out), probs

    def _cross_entry(self, encoder_out: torch.Tensor, key_padding_mask: Optional[torch.Tensor],
                     kernel: bool = False) -> dict:
        """Per sentence: keys stored transposed (``kt`` [n, H, d_k, S]) and values contiguous (``v`` [n, H, S,
        d_v]), the layouts batched matrix products take without copies, and the padding as an additive
        ``bias`` [n, H, 1, S] (0 or -inf, laid out per head once so that every step adds it by broadcasting;
        None without padding). At a beam step the attention is then three small batched products (SDPA's
        CPU kernel costs about twice as much at these shapes). For the C kernel (``kernel``): keys as ``k``
        [n, H, S, d_k] and the padding as ``pad`` [n, S]."""
        k, v = self._project_kv(encoder_out)
        mask = key_padding_mask
        blocked = mask is not None and bool(mask.any())
        if kernel:
            return {"k": k.contiguous(), "v": v.contiguous(), "pad": _additive_mask(mask, k) if blocked else None,
                    "sentence_level": True}
        bias = None
        if blocked:
            bias = _additive_mask(mask, k)[:, None, None, :].expand(-1, self.num_heads, 1, -1).contiguous()
        return {"kt": k.transpose(2, 3).contiguous(), "v": v.contiguous(), "bias": bias, "sentence_level": True}

    def _cross_torch_layout(self, entry: dict):
        """``(kt, v, bias)`` of a cross-attention entry as the torch path takes them (a kernel-layout entry
        is viewed so when attention weights are asked for)."""
        if "kt" in entry:
            return entry["kt"], entry["v"], entry["bias"]
        pad = entry["pad"]
        bias = None if pad is None else pad[:, None, None, :].expand(-1, self.num_heads, 1, -1).contiguous()
        return entry["k"].transpose(2, 3), entry["v"], bias


_POSITION_DIM = {"kt": 3, "k": 2, "v": 2}  # where a self-attention cache keeps its positions


def _cache_names(entry: dict) -> list:
    """The cache tensors of a self-attention entry (keys in one of two layouts, values)."""
    return [name for name in _POSITION_DIM if name in entry]


def _filled(buf: torch.Tensor, name: str, length: int) -> torch.Tensor:
    """The first ``length`` positions of cache tensor ``name`` (a view)."""
    return buf.narrow(_POSITION_DIM[name], 0, length)


def _grow(entry: dict, cap: int) -> None:
    length = entry["len"]
    for name in _cache_names(entry):
        dim = _POSITION_DIM[name]
        old = entry[name]
        shape = list(old.shape)
        shape[dim] = cap
        grown = old.new_empty(shape)
        _filled(grown, name, length).copy_(_filled(old, name, length))
        entry[name] = grown
        entry.pop("spare_" + name, None)


def _additive_mask(blocked: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """-inf where ``blocked`` (bool), 0 elsewhere, in ``like``'s dtype: a mask that attention scores add."""
    return like.new_zeros(blocked.shape).masked_fill_(blocked, float("-inf"))


def _foreign_keys(state: dict, sents: int, w: int, pos: int, cap: int, heads: int, like: torch.Tensor) -> torch.Tensor:
    """``[n * heads, w, (pos+1) * beam]``: -inf at the keys a row must not see (at every position, those of
    the slots that do not hold its ancestor's key), 0 elsewhere; added to the scores. Built once per step
    (all layers share it); position ``pos`` (written this step) is each row's own slot."""
    cached = state.get("_ancestry_mask")
    key = (pos, sents, w, heads, like.dtype)
    if cached is not None and cached[0] == key:
        return cached[1]
    beam = int(state["_beam"])
    anc = _ancestry(state, sents, w, pos, cap, like.device)
    foreign = anc[:sents, :w, : pos + 1].unsqueeze(3) != torch.arange(beam, device=anc.device)
    bias = _additive_mask(foreign, like).view(sents, 1, w, (pos + 1) * beam).expand(sents, heads, w, (pos + 1) * beam)
    bias = bias.reshape(sents * heads, w, (pos + 1) * beam)
    state["_ancestry_mask"] = (key, bias)
    return bias


def _ancestry(state: dict, sents: int, w: int, pos: int, cap: int, device) -> torch.Tensor:
    """The ancestry table ``[S, beam, >= cap]`` (int64) with step ``pos`` entered: each row's own slot at
    ``pos``. Grown with the caches; done once per step (every layer calls it)."""
    anc = state.get("_ancestry")
    if state.get("_ancestry_step") == (pos, sents, w) and anc is not None and anc.size(2) >= cap:
        return anc
    if anc is None or anc.size(2) < cap:
        rows = sents if anc is None else anc.size(0)  # sentences only ever leave: the first size holds
        grown = torch.zeros(rows, int(state["_beam"]), cap, dtype=torch.long, device=device)
        if anc is not None:
            grown[:, :, : anc.size(2)] = anc
        anc = state["_ancestry"] = grown
    anc[:sents, :w, pos] = torch.arange(w, device=anc.device)
    state["_ancestry_len"], state["_width"], state["_ancestry_step"] = pos + 1, w, (pos, sents, w)
    return anc


def _reorder_beams(state: dict, new_order: torch.Tensor, sentence_order: Optional[torch.Tensor]) -> None:
    """A beam reorder in the beam layout: new row ``j`` (sentence ``j // k``) continues row ``new_order[j]``
    (a row of the previous step, whose sentence is ``sentence_order[j // k]``, or ``j // k`` when no
    sentence left). The ancestry table takes the parent's line; keys move only for sentences that change
    slot (see the module docstring), and only their filled part."""
    beam = int(state["_beam"])
    n_new = new_order.numel() // beam
    dev = new_order.device
    if "_ancestry" in state:
        length, width = state["_ancestry_len"], state["_width"]
        parent_beam = (new_order % width).view(n_new, beam)
        src = sentence_order if sentence_order is not None else torch.arange(n_new, device=dev)
        anc = state["_ancestry"]
        anc[:n_new, :, :length] = anc[src.unsqueeze(1), parent_beam, :length]
    state.pop("_ancestry_mask", None)
    state.pop("_ancestry_step", None)
    state["_sentences"] = n_new
    if sentence_order is None:
        return
    moved = (sentence_order != torch.arange(n_new, device=dev)).nonzero().squeeze(1)
    if moved.numel() == 0:
        return
    src = sentence_order[moved]
    for entry in state.values():
        if isinstance(entry, dict) and "len" in entry:
            length = entry["len"]
            for name in _cache_names(entry):
                filled = _filled(entry[name], name, length)
                filled[moved] = filled[src]


def _causal_keep(tgt_len: int, src_len: int, device) -> torch.Tensor:
    """[T, S] bool, True where query t (the last T of S positions) may attend to key s."""
    return torch.ones(tgt_len, src_len, dtype=torch.bool, device=device).tril_(src_len - tgt_len)


def reorder_state(state: dict, new_order: torch.Tensor, sentence_order: Optional[torch.Tensor] = None,
                  per_sentence: bool = False) -> None:
    """Reorder every cached tensor of an incremental state along the batch dimension (beam search).

    Self-attention caches follow ``new_order`` (only their filled part is copied, into a reused spare
    buffer; in the beam layout only the ancestry table changes, see the module docstring). Encoder–decoder
    entries follow ``new_order`` too, unless ``per_sentence``: then they hold one row per sentence (see
    :meth:`MultiheadAttention.step_cross`) and follow ``sentence_order`` (the kept sentences), or stay as
    they are when it is None.
    """
    beam_layout = int(state.get("_beam", 1)) > 1
    if beam_layout:
        if not per_sentence:
            raise ValueError("a beam-layout incremental state reorders by sentence (per_sentence=True)")
        _reorder_beams(state, new_order, sentence_order)
    for entry in state.values():
        if not isinstance(entry, dict):
            continue
        if "len" in entry:  # a self-attention cache
            if beam_layout:
                continue
            length = entry["len"]
            for name in _cache_names(entry):
                buf = entry[name]
                if buf.requires_grad and torch.is_grad_enabled():  # out= does not record gradients
                    entry[name] = buf.index_select(0, new_order)
                    continue
                spare = entry.get("spare_" + name)
                rows = new_order.numel()
                if spare is None or spare.size(0) < rows or spare.shape[1:] != buf.shape[1:]:
                    spare = buf.new_empty((max(rows, buf.size(0)),) + tuple(buf.shape[1:]))
                out = spare[:rows]
                torch.index_select(_filled(buf, name, length), 0, new_order, out=_filled(out, name, length))
                entry[name], entry["spare_" + name] = out, buf
            continue
        if per_sentence and entry.get("sentence_level"):
            order = sentence_order
        else:
            order = new_order
        if order is None:
            continue
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                entry[name] = value.index_select(0, order)
