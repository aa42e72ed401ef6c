"""fairseq ``transformer`` weights → our :class:`~nmt_toolkit.models.transformer.TransformerModel`.

fairseq keeps separate Q, K and V projections and names its sub-layer norms after the sub-layer; we fuse
the projections into one matrix per attention (``in_proj`` = [Q; K; V] for self-attention, ``kv_proj`` =
[K; V] for encoder–decoder attention) and hold each norm in the sub-layer's residual wrapper. The mapping is
exact (a concatenation and renaming), so a fairseq model and ours with these weights compute the same
function; ``tests/parity/`` checks that against numbers recorded from real fairseq.

Learned positional tables: fairseq counts positions from ``padding_idx + 1`` and keeps the unused rows
``0 .. padding_idx``; ours starts at position 0, so those rows are dropped. Sinusoidal encodings carry no
weights (our model must be built with ``sinusoid_layout="fairseq"`` to compute fairseq's).

Checkpoints of older fairseq releases (the published 2018–2019 WMT models) use older names, which fairseq
0.12 renames when it loads them (``upgrade_state_dict_named``); :func:`upgrade_state_dict` applies the same
renames first. Their ``encoder.version``/``decoder.version`` also decide whether fairseq applies a pre-norm
stack's final LayerNorm (:func:`final_norms_dropped`).
"""
from __future__ import annotations

import re
from typing import Mapping

import torch

from nmt_toolkit.errors import NmtError

#: fairseq's transformer architectures we import: each preset's values for options a checkpoint may lack
#: (fairseq ≤ 0.9 stored only what the user typed plus what the preset filled at the time)
_BASE = dict(encoder_embed_dim=512, encoder_ffn_embed_dim=2048, encoder_layers=6, encoder_attention_heads=8,
             encoder_normalize_before=False, encoder_learned_pos=False, decoder_layers=6,
             decoder_normalize_before=False, decoder_learned_pos=False, attention_dropout=0.0,
             activation_dropout=0.0, activation_fn="relu", dropout=0.1, share_decoder_input_output_embed=False,
             share_all_embeddings=False, no_scale_embedding=False, layernorm_embedding=False,
             max_source_positions=1024, max_target_positions=1024)
_BIG = dict(encoder_embed_dim=1024, encoder_ffn_embed_dim=4096, encoder_attention_heads=16, dropout=0.3)
ARCHITECTURES = {
    "transformer": {}, "transformer_wmt_en_de": {},
    "transformer_iwslt_de_en": dict(encoder_ffn_embed_dim=1024, encoder_attention_heads=4),
    "transformer_vaswani_wmt_en_de_big": _BIG,
    "transformer_vaswani_wmt_en_fr_big": {**_BIG, "dropout": 0.1},
    "transformer_wmt_en_de_big": {**_BIG, "attention_dropout": 0.1},
    "transformer_wmt_en_de_big_t2t": {**_BIG, "attention_dropout": 0.1, "activation_dropout": 0.1,
                                      "encoder_normalize_before": True, "decoder_normalize_before": True},
}
#: options that change the computation in ways our model does not have: refused by name when set
_UNSUPPORTED = ("adaptive_softmax_cutoff", "adaptive_input", "no_token_positional_embeddings", "cross_self_attention",
                "no_cross_attention", "tie_adaptive_weights", "merge_src_tgt_embed", "encoder_layers_to_keep",
                "decoder_layers_to_keep", "checkpoint_activations_with_offload")

_LAYER_NORMS = {"self_attn_layer_norm": "self_attn_res.norm", "encoder_attn_layer_norm": "encoder_attn_res.norm",
                "final_layer_norm": "ffn_res.norm"}
#: buffers fairseq does not load: the versions (read by :func:`final_norms_dropped`) and the sinusoidal
#: modules' ``_float_tensor``/``weights`` that older releases saved (SinusoidalPositionalEmbedding deletes them)
_IGNORED = re.compile(r"(^|\.)(version|_float_tensor)$|embed_positions\.(_float_tensor|weights)$")
#: older releases' layer norm names (TransformerEncoderLayer / TransformerDecoder.upgrade_state_dict_named)
_OLD_LAYER_NORMS = {"encoder": {"0": "self_attn_layer_norm", "1": "final_layer_norm"},
                    "decoder": {"0": "self_attn_layer_norm", "1": "encoder_attn_layer_norm", "2": "final_layer_norm"}}


def upgrade_state_dict(state: Mapping[str, torch.Tensor],
                       share_decoder_input_output_embed: bool | None = None) -> dict[str, torch.Tensor]:
    """``state`` under fairseq 0.12's names, renamed as fairseq 0.12 renames an older checkpoint on load.

    - ``*.self_attn.in_proj_weight``/``in_proj_bias`` (and ``encoder_attn``): [Q; K; V] stacked along the output
      dimension → ``q_proj``/``k_proj``/``v_proj`` (MultiheadAttention);
    - ``encoder.layers.N.layer_norms.{0,1}`` → ``self_attn_layer_norm``/``final_layer_norm``
      (TransformerEncoderLayer); ``decoder.layers.N.layer_norms.{0,1,2}`` → ``self_attn_layer_norm``/
      ``encoder_attn_layer_norm``/``final_layer_norm`` (TransformerDecoder);
    - ``decoder.embed_out`` → ``decoder.output_projection.weight`` when there is none and the output matrix is
      not tied (TransformerDecoder; ``None`` = the checkpoint's options are unknown: rename it whenever present).
    """
    out = dict(state)
    for key in [k for k in out if k.endswith("in_proj_weight")]:
        prefix = key[: -len("in_proj_weight")]
        weight = out.pop(key)
        dim = weight.shape[0] // 3
        for i, x in enumerate("qkv"):
            out[f"{prefix}{x}_proj.weight"] = weight[i * dim:(i + 1) * dim]
        if f"{prefix}in_proj_bias" in out:
            bias = out.pop(f"{prefix}in_proj_bias")
            for i, x in enumerate("qkv"):
                out[f"{prefix}{x}_proj.bias"] = bias[i * dim:(i + 1) * dim]
    for key in list(out):
        m = re.match(r"(encoder|decoder)(\.layers\.\d+\.)layer_norms\.(\d+)\.(weight|bias)$", key)
        if m and m.group(3) in _OLD_LAYER_NORMS[m.group(1)]:
            out[f"{m.group(1)}{m.group(2)}{_OLD_LAYER_NORMS[m.group(1)][m.group(3)]}.{m.group(4)}"] = out.pop(key)
    if "decoder.output_projection.weight" not in out and "decoder.embed_out" in out \
            and not share_decoder_input_output_embed:
        out["decoder.output_projection.weight"] = out.pop("decoder.embed_out")
    return out


def final_norms_dropped(state: Mapping[str, torch.Tensor]) -> list[str]:
    """The sides (``encoder.version``, ``decoder.version``) whose version makes fairseq 0.12 leave out a pre-norm
    stack's final LayerNorm: encoder version < 2, decoder version <= 2, an absent version counting as 1
    ("earlier checkpoints did not normalize after the stack of layers"; the weights are ignored if present)."""
    def version(side: str) -> float:
        value = state.get(f"{side}.version")
        return float(value.reshape(-1)[0]) if isinstance(value, torch.Tensor) and value.numel() else 1.0

    return [f"{side}.version {version(side):g}" for side, dropped in
            (("encoder", version("encoder") < 2), ("decoder", version("decoder") <= 2)) if dropped]


def convert_state_dict(state: Mapping[str, torch.Tensor], padding_idx: int = 1,
                       share_decoder_input_output_embed: bool | None = None) -> dict[str, torch.Tensor]:
    """Our ``state_dict`` from a fairseq ``transformer`` model's ``state_dict`` (``checkpoint["model"]``), older
    names renamed first (:func:`upgrade_state_dict`). ``share_decoder_input_output_embed``: whether the model
    ties its output matrix to the decoder embeddings (``None``: tied when the tensors are equal).

    Raises :class:`NmtError` naming a tensor the layout needs and the checkpoint lacks, or any fairseq tensor
    it does not know how to place, so that a model with an unsupported feature (adaptive softmax, …) is
    refused instead of half-loaded."""
    state = upgrade_state_dict(state, share_decoder_input_output_embed)
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()

    def take(name: str) -> torch.Tensor:
        if name not in state:
            raise NmtError(f"fairseq tensor {name!r} is missing (a transformer layer has it; the checkpoint is "
                           "truncated or of another architecture)")
        used.add(name)
        return state[name]

    for side in ("encoder", "decoder"):
        for part in ("weight", "bias"):
            if f"{side}.layernorm_embedding.{part}" in state:
                out[f"{side}.embed.layernorm.{part}"] = take(f"{side}.layernorm_embedding.{part}")
        if f"{side}.embed_tokens.weight" in state:
            out[f"{side}.embed.embed_tokens.weight"] = take(f"{side}.embed_tokens.weight")
        if f"{side}.embed_positions.weight" in state:  # learned positions (sinusoidal ones have no weights)
            out[f"{side}.embed.embed_positions.weight"] = take(f"{side}.embed_positions.weight")[padding_idx + 1:]
        for part in ("weight", "bias"):
            if f"{side}.layer_norm.{part}" in state:
                out[f"{side}.layer_norm.{part}"] = take(f"{side}.layer_norm.{part}")
        layers = sorted({int(m.group(1)) for k in state for m in [re.match(rf"{side}\.layers\.(\d+)\.", k)] if m})
        for i in layers:
            src, dst = f"{side}.layers.{i}.", f"{side}.layers.{i}."
            for part in ("weight", "bias"):
                q, k, v = (take(f"{src}self_attn.{x}_proj.{part}") for x in "qkv")
                out[f"{dst}self_attn.in_proj.{part}"] = torch.cat([q, k, v], dim=0)
                out[f"{dst}self_attn.out_proj.{part}"] = take(f"{src}self_attn.out_proj.{part}")
                if side == "decoder":
                    out[f"{dst}encoder_attn.q_proj.{part}"] = take(f"{src}encoder_attn.q_proj.{part}")
                    k, v = (take(f"{src}encoder_attn.{x}_proj.{part}") for x in "kv")
                    out[f"{dst}encoder_attn.kv_proj.{part}"] = torch.cat([k, v], dim=0)
                    out[f"{dst}encoder_attn.out_proj.{part}"] = take(f"{src}encoder_attn.out_proj.{part}")
                for fc in ("fc1", "fc2"):
                    out[f"{dst}ffn.{fc}.{part}"] = take(f"{src}{fc}.{part}")
                for theirs, ours in _LAYER_NORMS.items():
                    if f"{src}{theirs}.{part}" in state:
                        out[f"{dst}{ours}.{part}"] = take(f"{src}{theirs}.{part}")
    if "decoder.output_projection.weight" in state:
        proj = take("decoder.output_projection.weight")
        tied = share_decoder_input_output_embed
        if tied is None:
            tied = proj.data_ptr() == state.get("decoder.embed_tokens.weight", proj).data_ptr() or torch.equal(
                proj, state.get("decoder.embed_tokens.weight", torch.empty(0)))
        if not tied:
            out["decoder.output_projection.weight"] = proj
    left = sorted(k for k in state if k not in used and not _IGNORED.search(k))
    if left:
        raise NmtError(f"fairseq weights that have no place in our transformer: {', '.join(left[:5])}"
                       + (f" and {len(left) - 5} more" if len(left) > 5 else ""))
    return out


def model_args(checkpoint: dict, path: str = "checkpoint") -> dict:
    """The model options of a fairseq checkpoint as a plain dict: ``cfg["model"]`` (0.10+) or ``args``
    (≤ 0.9), completed with the architecture preset's values for options the file does not carry."""
    cfg = checkpoint.get("cfg")
    args = cfg.get("model") if isinstance(cfg, dict) and isinstance(cfg.get("model"), dict) else None
    if args is None and isinstance(checkpoint.get("args"), dict):
        args = checkpoint["args"]
    if args is None:
        raise NmtError(f"{path}: a fairseq checkpoint without model options (neither cfg.model nor args)")
    arch = args.get("arch") or args.get("_name")
    if arch not in ARCHITECTURES:
        raise NmtError(f"{path}: fairseq architecture {arch!r} is not supported (we import "
                       f"{', '.join(sorted(ARCHITECTURES))})")
    full = {**_BASE, **ARCHITECTURES[arch]}
    for side in ("decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_attention_heads"):
        full[side] = full[side.replace("decoder", "encoder")]
    full.update({k: v for k, v in args.items() if v is not None or k not in full})
    if "relu_dropout" in args and "activation_dropout" not in args:
        full["activation_dropout"] = args["relu_dropout"]
    for side in ("decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_attention_heads"):
        if args.get(side) is None:
            full[side] = full[side.replace("decoder", "encoder")]
    return full


def transformer_config(args: dict, path: str = "checkpoint"):
    """Our :class:`TransformerConfig` for fairseq model options; a one-line error naming each option our
    model cannot reproduce."""
    from nmt_toolkit.models.transformer import TransformerConfig

    def same(a: str, b: str):
        if args.get(a) != args.get(b):
            raise NmtError(f"{path}: fairseq option {a}={args.get(a)!r} differs from {b}={args.get(b)!r}; our "
                           "transformer has one value for both")
        return args.get(a)

    for name in _UNSUPPORTED:
        if args.get(name) not in (None, False, 0, "", []):
            raise NmtError(f"{path}: fairseq option {name}={args[name]!r} is not supported")
    if args.get("no_decoder_final_norm") and args.get("decoder_normalize_before"):  # post-norm: no final norm anyway
        raise NmtError(f"{path}: fairseq option no_decoder_final_norm={args['no_decoder_final_norm']!r} is not "
                       "supported (a pre-norm decoder without its final LayerNorm; ours always applies one)")
    for name in ("decoder_output_dim", "decoder_input_dim"):
        if args.get(name) not in (None, args.get("decoder_embed_dim")):
            raise NmtError(f"{path}: fairseq option {name}={args[name]!r} differs from decoder_embed_dim; not supported")
    if args.get("activation_fn", "relu") not in ("relu", "gelu"):
        raise NmtError(f"{path}: fairseq option activation_fn={args['activation_fn']!r} is not supported "
                       "(relu or gelu)")
    learned = same("encoder_learned_pos", "decoder_learned_pos")
    if learned:
        same("max_source_positions", "max_target_positions")
    return TransformerConfig(
        encoder_layers=int(args["encoder_layers"]), decoder_layers=int(args["decoder_layers"]),
        embed_dim=int(same("encoder_embed_dim", "decoder_embed_dim")),
        ffn_embed_dim=int(same("encoder_ffn_embed_dim", "decoder_ffn_embed_dim")),
        attention_heads=int(same("encoder_attention_heads", "decoder_attention_heads")),
        dropout=float(args["dropout"]), attention_dropout=float(args["attention_dropout"] or 0.0),
        activation_dropout=float(args["activation_dropout"] or 0.0), activation_fn=args.get("activation_fn") or "relu",
        normalize_before=bool(same("encoder_normalize_before", "decoder_normalize_before")),
        positional_embeddings="learned" if learned else "sinusoidal", sinusoid_layout="fairseq",
        max_positions=int(args["max_source_positions"]) if learned else 1024,
        share_all_embeddings=bool(args["share_all_embeddings"]),
        share_decoder_input_output_embed=bool(args["share_decoder_input_output_embed"]),
        no_scale_embedding=bool(args["no_scale_embedding"]), layernorm_embedding=bool(args["layernorm_embedding"]))


MULTILINGUAL_TASK = "translation_multi_simple_epoch"
#: the language options of fairseq's multilingual task that decoding needs, under our task's names
_LANGUAGE_OPTIONS = ("lang_pairs", "lang_dict", "lang_tok_style", "encoder_langtok", "decoder_langtok")


def multilingual_task_options(checkpoint: dict, path: str = "checkpoint") -> dict | None:
    """The options of our ``translation_multi_simple_epoch`` task that decode a checkpoint of fairseq's task of
    that name as fairseq does (its directions, language list and token placement), or None for a checkpoint
    of any other task. Options of fairseq's task that change the tokens in ways ours has no option for are
    refused by name."""
    cfg = checkpoint.get("cfg")
    task = cfg.get("task") if isinstance(cfg, dict) and isinstance(cfg.get("task"), dict) else None
    if task is None and isinstance(checkpoint.get("args"), dict):
        task = checkpoint["args"]
    if not isinstance(task, dict) or (task.get("_name") or task.get("task")) != MULTILINGUAL_TASK:
        return None
    for name, allowed in (("lang_tok_style", ("multilingual", None)), ("lang_tok_replacing_bos_eos", (False, None)),
                          ("langs", (None, [])), ("enable_lang_ids", (False, None))):
        if task.get(name) not in allowed:
            raise NmtError(f"{path}: fairseq option {name}={task[name]!r} of {MULTILINGUAL_TASK} is not supported")
    options = {name: task.get(name) for name in _LANGUAGE_OPTIONS}
    if isinstance(options["lang_pairs"], (list, tuple)):
        options["lang_pairs"] = ",".join(options["lang_pairs"])
    options["lang_tok_style"] = "multilingual"
    options["decoder_langtok"] = bool(options["decoder_langtok"])
    return options


def is_fairseq_checkpoint(state: dict) -> bool:
    return isinstance(state, dict) and "model" in state and ("cfg" in state or "args" in state) and "config" not in state


def import_fairseq(path: str):
    """A fairseq checkpoint read safely (:mod:`.fairseq_pickle`), converted and checked: an
    :class:`~nmt_toolkit.importers.imported_model.ImportedModel` without dictionaries (written as our
    checkpoint; the dictionaries stay in the data-bin)."""
    from nmt_toolkit.importers import fairseq_pickle

    return imported(fairseq_pickle.read(path), path)


def load_fairseq_checkpoint(path: str) -> dict:
    """A fairseq checkpoint as one of ours: ``model`` (our parameter names), ``config`` (``components.model =
    transformer`` and the model options), ``version``."""
    return import_fairseq(path).checkpoint()


def converted(state: dict, path: str) -> dict:
    """A fairseq checkpoint's plain state (:func:`.fairseq_pickle.read`) as one of ours."""
    return imported(state, path).checkpoint()


def imported(state: dict, path: str):
    """A fairseq checkpoint's plain state (:func:`.fairseq_pickle.read`) as an imported model."""
    from dataclasses import asdict

    from nmt_toolkit.importers.imported_model import ImportedModel

    if not is_fairseq_checkpoint(state):
        raise NmtError(f"{path}: not a fairseq checkpoint (no model with cfg or args)")
    args = model_args(state, path)
    cfg = transformer_config(args, path)
    pad = int(args.get("pad", 1) if isinstance(args.get("pad", 1), int) else 1)
    if cfg.normalize_before:
        dropped = final_norms_dropped(state["model"])
        if dropped:
            raise NmtError(f"{path}: {dropped[0]} (an older fairseq release): fairseq applies no final LayerNorm "
                           "after this pre-norm stack, and our pre-norm transformer always applies one; not supported")
    share = bool(args.get("share_decoder_input_output_embed") or args.get("share_all_embeddings"))
    try:
        weights = convert_state_dict(state["model"], pad, share)
    except NmtError as exc:
        raise NmtError(f"{path}: {exc}") from None
    return ImportedModel(origin={"format": "fairseq", "path": path, "arch": args.get("arch")},
                         model_config=asdict(cfg), state_dict=weights, arch=args.get("arch", "transformer"),
                         task_options=multilingual_task_options(state, path))
