"""The Transformer of "Attention Is All You Need" (section 3) and its named architectures.

``TransformerModel.build_model(cfg, src_dict, tgt_dict)`` builds the model from a :class:`TransformerConfig`
and the task's dictionaries; the model knows nothing of files. See ``docs/architecture.md`` (Model contract)
for the interface the trainer and the beam search use, and :mod:`nmt_toolkit.modules.caches` for the
incremental-decoding state. The model is plain PyTorch; inference back ends (``generation/cpu.py``, the
CTranslate2 export) work from the outside.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from nmt_toolkit.config import check_ranges, option
from nmt_toolkit.errors import UsageError
from nmt_toolkit.modules.caches import DecoderState, StaticDecoderState
from nmt_toolkit.modules.layers import TransformerDecoderLayer, TransformerEncoderLayer
from nmt_toolkit.modules.positional import build_positional_embedding
from nmt_toolkit.registry import register_architecture, register_model


@dataclass
class TransformerConfig:
    """Options of the ``transformer`` model (Table 3 rows are reachable with these flags)."""

    encoder_layers: int = option(6, "number of encoder layers (N)", low=1, high=1000)
    decoder_layers: int = option(6, "number of decoder layers (N)", low=1, high=1000)
    embed_dim: int = option(512, "model dimension d_model (embeddings and every sub-layer output)", low=1,
                            high=65536)
    ffn_embed_dim: int = option(2048, "inner dimension d_ff of the position-wise feed-forward networks", low=1,
                                 high=1 << 20)
    attention_heads: int = option(8, "number of attention heads (h)", low=1, high=1024)
    key_dim: Optional[int] = option(None, "per-head query/key dimension d_k [default: embed_dim / heads]", low=1,
                                   high=65536)
    value_dim: Optional[int] = option(None, "per-head value dimension d_v [default: embed_dim / heads]", low=1,
                                     high=65536)
    dropout: float = option(0.1, "dropout on sub-layer outputs and on embedding + position sums (P_drop)",
                            low=0, high=1, high_open=True)
    attention_dropout: float = option(0.0, "dropout on attention probabilities", low=0, high=1, high_open=True)
    activation_dropout: float = option(0.0, "dropout after the feed-forward activation", low=0, high=1, high_open=True)
    activation_fn: str = option("relu", "feed-forward activation (silu is Marian's swish)",
                                choices=["relu", "gelu", "silu"])
    normalize_before: bool = option(False, "pre-norm layers x + Sublayer(LayerNorm(x)) with a final LayerNorm "
                                           "(the paper uses post-norm)")
    positional_embeddings: str = option("sinusoidal", "sinusoidal (section 3.5, any length) or learned "
                                                      "(Table 3 row E)", choices=["sinusoidal", "learned"])
    sinusoid_layout: str = option("paper", "sinusoidal encodings as in the paper (sin/cos interleaved) or as "
                                           "fairseq lays them out (sine half, cosine half, positions from "
                                           "padding_idx+1): for models made by or for fairseq) or as Marian "
                                           "lays them out (the paper's frequencies, sine half then cosine half, "
                                           "positions from 0): for Hugging Face Marian (OPUS-MT) models",
                                  choices=["paper", "fairseq", "marian"])
    max_positions: int = option(1024, "rows of the learned positional table (sinusoidal has no limit)", low=1,
                                high=1_000_000)
    share_all_embeddings: bool = option(False, "one matrix for encoder input, decoder input and pre-softmax "
                                               "weights (needs a joined dictionary)")
    share_decoder_input_output_embed: bool = option(False, "tie the decoder input embeddings and the "
                                                           "pre-softmax weights")
    no_scale_embedding: bool = option(False, "do not multiply embeddings by sqrt(d_model)")
    layernorm_embedding: bool = option(False, "LayerNorm on embeddings + positions before dropout (fairseq's "
                                              "--layernorm-embedding; not in the paper)")
    output_bias: bool = option(False, "a learned bias on the pre-softmax projection (Marian's final_logits_bias; "
                                      "not in the paper)")
    decoder_start: str = option("eos", "the decoder's first input symbol: eos (fairseq's) or pad (Marian's)",
                                choices=["eos", "pad"])

    def validate(self) -> None:
        check_ranges(self)
        if (self.key_dim is None or self.value_dim is None) and self.embed_dim % self.attention_heads:
            raise UsageError(f"--embed-dim {self.embed_dim} is not divisible by --attention-heads "
                             f"{self.attention_heads}; set --key-dim and --value-dim explicitly")


def _embedding(num: int, dim: int, pad: int) -> nn.Embedding:
    """Token embeddings, N(0, d^-0.5) with a zero padding row."""
    emb = nn.Embedding(num, dim, padding_idx=pad)
    nn.init.normal_(emb.weight, mean=0.0, std=dim ** -0.5)
    with torch.no_grad():
        emb.weight[pad].zero_()
    return emb


def _layer_kwargs(cfg: TransformerConfig) -> dict:
    return dict(embed_dim=cfg.embed_dim, ffn_embed_dim=cfg.ffn_embed_dim, heads=cfg.attention_heads,
                key_dim=cfg.key_dim, value_dim=cfg.value_dim, dropout=cfg.dropout,
                attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout,
                activation_fn=cfg.activation_fn, normalize_before=cfg.normalize_before)


class _Embedder(nn.Module):
    """Token embedding × sqrt(d_model) + positional encoding, then dropout (section 3.4, 5.4)."""

    def __init__(self, cfg: TransformerConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if cfg.no_scale_embedding else math.sqrt(cfg.embed_dim)
        self.embed_positions = build_positional_embedding(cfg.positional_embeddings, cfg.embed_dim,
                                                          cfg.max_positions, cfg.sinusoid_layout)
        self.layernorm = nn.LayerNorm(cfg.embed_dim) if cfg.layernorm_embedding else None
        self.dropout = cfg.dropout

    def forward(self, tokens: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        x = self.embed_tokens(tokens)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        x = x + self.embed_positions(tokens.size(1), offset, dtype=x.dtype)
        if self.layernorm is not None:
            x = self.layernorm(x)
        return F.dropout(x, self.dropout, self.training) if self.training and self.dropout > 0 else x


class TransformerEncoder(nn.Module):
    def __init__(self, cfg: TransformerConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.padding_idx = embed_tokens.padding_idx
        self.embed = _Embedder(cfg, embed_tokens)
        self.layers = nn.ModuleList(TransformerEncoderLayer(**_layer_kwargs(cfg)) for _ in range(cfg.encoder_layers))
        self.layer_norm = nn.LayerNorm(cfg.embed_dim) if cfg.normalize_before else None

    def forward(self, src_tokens: torch.Tensor, src_lengths: Optional[torch.Tensor] = None) -> dict:
        padding_mask = src_tokens.eq(self.padding_idx)
        # at inference a batch without padding drops the mask (SDPA's fastest path); in training the check would
        # read the device once per update (a host stall, and a graph break under torch.compile), so the mask
        # stays (an all-True mask gives the same numbers)
        mask = padding_mask if self.training or bool(padding_mask.any()) else None
        x = self.embed(src_tokens)
        for layer in self.layers:
            x = layer(x, mask)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return {"encoder_out": x, "encoder_padding_mask": padding_mask}


class TransformerDecoder(nn.Module):
    def __init__(self, cfg: TransformerConfig, embed_tokens: nn.Embedding, num_outputs: int, share_output: bool):
        super().__init__()
        self.embed = _Embedder(cfg, embed_tokens)
        self.layers = nn.ModuleList(TransformerDecoderLayer(**_layer_kwargs(cfg)) for _ in range(cfg.decoder_layers))
        self.layer_norm = nn.LayerNorm(cfg.embed_dim) if cfg.normalize_before else None
        self.output_projection = None
        if not share_output:
            self.output_projection = nn.Linear(cfg.embed_dim, num_outputs, bias=False)
            nn.init.normal_(self.output_projection.weight, mean=0.0, std=cfg.embed_dim ** -0.5)
        # a bias apart from the (possibly tied) matrix, so that tying stays a matter of one weight
        self.output_bias = nn.Parameter(torch.zeros(num_outputs)) if cfg.output_bias else None

    def output_weight(self) -> torch.Tensor:
        """The pre-softmax matrix [V, D] (the decoder embeddings when tied)."""
        proj = self.output_projection
        return self.embed.embed_tokens.weight if proj is None else proj.weight

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The pre-softmax linear map: logits ``[..., V]`` (``generation/cpu.py`` may swap it on a decoding
        copy of the model for a packed product)."""
        return F.linear(x, self.output_weight(), self.output_bias)

    def forward(self, prev_output_tokens: torch.Tensor, encoder_out: dict,
                incremental_state: Optional[DecoderState] = None, need_attn: bool = False):
        """Logits ``[B, T, V]`` and the last layer's encoder–decoder attention averaged over heads (``[B, T,
        S]``, when ``need_attn``). With an ``incremental_state`` only the newest position of each row is
        computed (``[B, 1, V]``); ``encoder_out`` may then hold one row per decoder row or one per sentence
        with the rows grouped by sentence (the beam search's layout: the encoder–decoder keys/values are
        never copied per beam). With a :class:`StaticDecoderState` ``prev_output_tokens`` may hold only the
        newest tokens: the position is the state's (a device tensor), and ``encoder_out`` is read only at the
        first step of a batch."""
        enc, enc_mask = encoder_out["encoder_out"], encoder_out["encoder_padding_mask"]
        caches = [(None, None)] * len(self.layers)
        if incremental_state is None:
            if not self.training and enc_mask is not None and not bool(enc_mask.any()):  # as in the encoder
                enc_mask = None
            x = self.embed(prev_output_tokens)
        else:
            if not isinstance(incremental_state, (DecoderState, StaticDecoderState)):
                raise TypeError(f"incremental_state must be a DecoderState (model.make_decoder_state()), got "
                                f"{type(incremental_state).__name__}")
            x = self.embed(prev_output_tokens[:, -1:], offset=incremental_state.position(prev_output_tokens))
            caches = self._caches(incremental_state, x, enc, enc_mask)
        attn = None
        last = len(self.layers) - 1
        for i, (layer, (self_cache, cross_cache)) in enumerate(zip(self.layers, caches)):
            x, layer_attn = layer(x, enc, enc_mask, need_attn=need_attn and i == last, self_cache=self_cache,
                                  cross_cache=cross_cache)
            if layer_attn is not None:
                attn = layer_attn.mean(dim=1)  # average over heads: [B, T, S]
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return self.project(x), attn

    def _caches(self, state: DecoderState | StaticDecoderState, x: torch.Tensor, enc: torch.Tensor, enc_mask) -> list:
        """Each layer's (self-attention, encoder–decoder) caches, made (or, static, filled) at the first step."""
        if not state.started:
            self.embed.embed_positions.reserve(state.capacity)
            state.start([layer.self_attn for layer in self.layers],
                        [layer.encoder_attn.project_memory(enc, enc_mask) for layer in self.layers], x)
        return list(zip(state.self_attn, state.cross_attn))


@register_model("transformer", config=TransformerConfig)
class TransformerModel(nn.Module):
    """Encoder–decoder Transformer; ``forward`` returns unnormalised logits ``[B, T, V]``."""

    def __init__(self, cfg: TransformerConfig, encoder: TransformerEncoder, decoder: TransformerDecoder):
        super().__init__()
        self.cfg = cfg
        self.encoder = encoder
        self.decoder = decoder

    @classmethod
    def build_model(cls, cfg: TransformerConfig, src_dict, tgt_dict) -> "TransformerModel":
        cfg.validate()
        if cfg.share_all_embeddings:
            if src_dict != tgt_dict:
                raise UsageError(
                    "--share-all-embeddings requires a joined dictionary (the source and target dictionaries "
                    f"differ: {len(src_dict)} and {len(tgt_dict)} symbols); preprocess with --joined-dictionary "
                    "or drop --share-all-embeddings")
            enc_emb = dec_emb = _embedding(len(src_dict), cfg.embed_dim, src_dict.pad())
        else:
            enc_emb = _embedding(len(src_dict), cfg.embed_dim, src_dict.pad())
            dec_emb = _embedding(len(tgt_dict), cfg.embed_dim, tgt_dict.pad())
        share_output = cfg.share_all_embeddings or cfg.share_decoder_input_output_embed
        encoder = TransformerEncoder(cfg, enc_emb)
        decoder = TransformerDecoder(cfg, dec_emb, len(tgt_dict), share_output)
        return cls(cfg, encoder, decoder)

    # ------------------------------------------------------------------ the Model contract

    def forward(self, src_tokens, src_lengths, prev_output_tokens) -> torch.Tensor:
        """Teacher-forced logits. ``prev_output_tokens`` is the target shifted right behind the start symbol;
        the data pipeline always puts EOS there (fairseq's convention), so a model that starts decoding from
        pad (``decoder_start="pad"``, Marian's) gets pad in that first column, as it sees in the search."""
        if self.cfg.decoder_start == "pad":
            prev_output_tokens = prev_output_tokens.clone()
            prev_output_tokens[:, 0] = self.decoder.embed.embed_tokens.padding_idx
        encoder_out = self.forward_encoder(src_tokens, src_lengths)
        return self.decoder(prev_output_tokens, encoder_out)[0]

    def forward_encoder(self, src_tokens, src_lengths=None) -> dict:
        """``{"encoder_out": [B, S, D], "encoder_padding_mask": [B, S] bool (True at pads)}``."""
        return self.encoder(src_tokens, src_lengths)

    def forward_decoder(self, prev_output_tokens, encoder_out: dict, incremental_state: Optional[DecoderState] = None,
                        need_attn: bool = False):
        """``(logits, attn)``: logits ``[B, T, V]``, or ``[B, 1, V]`` for the last position only when an
        ``incremental_state`` (:meth:`make_decoder_state`) is given (filled on the first call, then grown one
        step per call).
        ``attn`` is the last layer's encoder–decoder attention averaged over heads ``[B, T, S]`` when
        ``need_attn``, else None."""
        return self.decoder(prev_output_tokens, encoder_out, incremental_state, need_attn)

    @staticmethod
    def reorder_encoder_out(encoder_out: dict, new_order: torch.Tensor) -> dict:
        return {k: (v.index_select(0, new_order) if isinstance(v, torch.Tensor) else v)
                for k, v in encoder_out.items()}

    #: the beam search may keep encoder outputs and encoder–decoder keys/values once per sentence
    #: (``forward_decoder`` rows grouped by sentence; see ``reorder_incremental_state``)
    supports_sentence_level_encoder_out = True

    #: ``forward_decoder`` accepts a :class:`~nmt_toolkit.modules.caches.StaticDecoderState` (the static-shape
    #: search of generation/static_search.py)
    supports_static_decoder_state = True

    @staticmethod
    def make_decoder_state(beam: int = 1, sentences: Optional[int] = None, capacity: int = 16) -> DecoderState:
        """An empty incremental state for ``forward_decoder`` (see :mod:`nmt_toolkit.modules.caches`)."""
        return DecoderState(beam=beam, sentences=sentences, capacity=capacity)

    @staticmethod
    def reorder_incremental_state(incremental_state: DecoderState, new_order: torch.Tensor,
                                  sentence_order: Optional[torch.Tensor] = None, per_sentence: bool = False) -> None:
        """Reorder (in place) every cached key/value, self- and encoder–decoder attention alike.

        With ``per_sentence`` the encoder–decoder keys/values are held once per sentence: they follow
        ``sentence_order`` (the sentences kept, as for ``reorder_encoder_out``), or stay when it is None."""
        incremental_state.reorder(new_order, sentence_order, per_sentence)

    def decoder_start(self, tgt_dict) -> int:
        """The index every target sequence is fed to the decoder after: EOS (fairseq's convention) or, for
        Marian's models, the padding symbol."""
        return tgt_dict.pad() if self.cfg.decoder_start == "pad" else tgt_dict.eos()

    def max_positions(self) -> tuple[int, int]:
        return (self.encoder.embed.embed_positions.max_positions(),
                self.decoder.embed.embed_positions.max_positions())

    # ------------------------------------------------------------------ self-description

    def num_parameters_by_component(self) -> dict[str, int]:
        """Parameter counts per component; a shared matrix is counted once, under its first owner."""
        shared_all = self.cfg.share_all_embeddings
        tied_out = self.decoder.output_projection is None
        names = {
            "encoder.embed.embed_tokens": "embeddings (shared: encoder, decoder, output)" if shared_all
            else "encoder embeddings",
            "encoder.embed.embed_positions": "encoder positions (learned)",
            "encoder.layers": "encoder layers",
            "encoder.layer_norm": "encoder final LayerNorm",
            "decoder.embed.embed_tokens": "decoder embeddings (shared with output)" if tied_out
            else "decoder embeddings",
            "decoder.embed.embed_positions": "decoder positions (learned)",
            "decoder.layers": "decoder layers",
            "decoder.layer_norm": "decoder final LayerNorm",
            "decoder.output_projection": "output projection",
            "decoder.output_bias": "output bias",
        }
        counts: dict[str, int] = {}
        for name, p in self.named_parameters():  # yields a shared Parameter once
            label = next((v for k, v in names.items() if name.startswith(k + ".") or name == k), name)
            counts[label] = counts.get(label, 0) + p.numel()
        return counts

    def flops_per_target_token(self, src_len: int = 25, tgt_len: int = 25) -> float:
        """Forward FLOPs (2 per multiply-add) per target token for a source of ``src_len`` and a target of
        ``tgt_len`` tokens: every matmul, attention as the dense T×S products SDPA computes; the encoder is
        shared by the ``tgt_len`` target tokens. LayerNorm, softmax and element-wise work are left out.
        A training step (forward + backward) costs about 3× this."""
        c = self.cfg
        d, f, h = c.embed_dim, c.ffn_embed_dim, c.attention_heads
        dk, dv = c.key_dim or d // h, c.value_dim or d // h
        vocab = self.decoder.output_weight().size(0)
        ffn = 4 * d * f
        self_proj = 2 * d * h * (2 * dk + dv) + 2 * h * dv * d
        enc_tok = self_proj + 2 * src_len * h * (dk + dv) + ffn  # per source token and layer
        dec_tok = (self_proj + 2 * tgt_len * h * (dk + dv)  # masked self-attention
                   + 2 * d * h * dk + 2 * h * dv * d + 2 * src_len * h * (dk + dv)  # enc-dec: Q, out, attention
                   + 2 * d * h * (dk + dv) * src_len / tgt_len  # enc-dec K, V: once per source token
                   + ffn)
        return c.encoder_layers * enc_tok * src_len / tgt_len + c.decoder_layers * dec_tok + 2 * d * vocab


# ---------------------------------------------------------------------- named architectures
# Each runs on the dataclass defaults before --config YAML and explicit flags are applied.


@register_architecture("transformer", "transformer_base")
def transformer_base(cfg: TransformerConfig) -> None:
    """Base model (Table 3): N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1."""
    cfg.encoder_layers = cfg.decoder_layers = 6
    cfg.embed_dim, cfg.ffn_embed_dim, cfg.attention_heads = 512, 2048, 8
    cfg.dropout = 0.1


@register_architecture("transformer", "transformer_big")
def transformer_big(cfg: TransformerConfig) -> None:
    """Big model (Table 3): N=6, d_model=1024, d_ff=4096, h=16, d_k=d_v=64, P_drop=0.3 (en-de)."""
    transformer_base(cfg)
    cfg.embed_dim, cfg.ffn_embed_dim, cfg.attention_heads = 1024, 4096, 16
    cfg.dropout = 0.3


@register_architecture("transformer", "transformer_big_enfr")
def transformer_big_enfr(cfg: TransformerConfig) -> None:
    """Big model for WMT14 en-fr: as transformer_big with P_drop=0.1 (section 6.1)."""
    transformer_big(cfg)
    cfg.dropout = 0.1


@register_architecture("transformer", "transformer_parsing")
def transformer_parsing(cfg: TransformerConfig) -> None:
    """Constituency parsing (section 6.3): 4 layers, d_model=1024 as stated; our choices for what the paper
    leaves open: d_ff=4096 and h=16 (the big model's ratios, d_k=d_v=64), dropout 0.3 and attention
    dropout 0.1 (WSJ alone is small), sinusoidal positions (outputs are long)."""
    cfg.encoder_layers = cfg.decoder_layers = 4
    cfg.embed_dim, cfg.ffn_embed_dim, cfg.attention_heads = 1024, 4096, 16
    cfg.dropout, cfg.attention_dropout = 0.3, 0.1


@register_architecture("transformer", "transformer_iwslt_de_en")
def transformer_iwslt_de_en(cfg: TransformerConfig) -> None:
    """fairseq's IWSLT'14 de-en model: N=6, d_model=512, d_ff=1024, h=4 (recipes add --dropout 0.3)."""
    transformer_base(cfg)
    cfg.ffn_embed_dim, cfg.attention_heads = 1024, 4


@register_architecture("transformer", "transformer_small")
def transformer_small(cfg: TransformerConfig) -> None:
    """A small benchmark model: N=3, d_model=256, d_ff=1024, h=4 (compared with fairseq/CTranslate2)."""
    cfg.encoder_layers = cfg.decoder_layers = 3
    cfg.embed_dim, cfg.ffn_embed_dim, cfg.attention_heads = 256, 1024, 4
    cfg.dropout = 0.1


@register_architecture("transformer", "transformer_tiny")
def transformer_tiny(cfg: TransformerConfig) -> None:
    """For tests and demos, trains on Multi30k in minutes on a laptop CPU: N=2, d_model=128, d_ff=512, h=4."""
    cfg.encoder_layers = cfg.decoder_layers = 2
    cfg.embed_dim, cfg.ffn_embed_dim, cfg.attention_heads = 128, 512, 4
    cfg.dropout = 0.1


@register_architecture("transformer", "transformer_student")
def transformer_student(cfg: TransformerConfig) -> None:
    """A student for sequence-level knowledge distillation (Kim & Rush, 2016): a deep encoder and a shallow
    decoder (6 + 1 layers, d_model=256, d_ff=1024, h=4). The encoder runs once per sentence, the decoder once
    per output token and beam, so the decoder's depth sets the decoding speed (Kasai et al., 2021, "Deep
    Encoder, Shallow Decoder")."""
    cfg.encoder_layers, cfg.decoder_layers = 6, 1
    cfg.embed_dim, cfg.ffn_embed_dim, cfg.attention_heads = 256, 1024, 4
    cfg.dropout = 0.1
