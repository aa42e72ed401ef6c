"""Our transformer → a fairseq 0.12 checkpoint that ``fairseq-generate`` loads and decodes.

The weights are :func:`nmt_toolkit.importers.fairseq.convert_state_dict` run backwards (fused projections
split into Q, K, V; norms renamed). The options are written as an ``argparse.Namespace`` under ``args``,
the layout of fairseq's published models, which every fairseq version reads (it rebuilds its ``cfg``
from it). Positions: a model with fairseq's sinusoid layout is exported as fairseq's sinusoidal module; the
paper's interleaved sinusoids have no fairseq equivalent, so they are exported as a *learned* table holding
exactly our encodings for the first ``max_positions`` positions (fairseq then refuses longer inputs, as it
does for any learned table); learned positions are exported as they are.
"""
from __future__ import annotations

import argparse
import errno
import json
import os

import torch

from nmt_toolkit.modules.positional import sinusoidal_table
from nmt_toolkit.outputs import OutputKind, as_output, os_reason

#: positions exported for a paper-sinusoid model (fairseq's own default table size)
SINUSOID_EXPORT_POSITIONS = 1024


def fairseq_state_dict(state: dict, cfg, padding_idx: int = 1) -> dict:
    """Our ``state_dict`` → fairseq names and layout (``convert_state_dict``'s inverse)."""
    hk = (cfg.key_dim or cfg.embed_dim // cfg.attention_heads) * cfg.attention_heads
    out = {}
    for side, layers in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        emb = state.get(f"{side}.embed.embed_tokens.weight")
        if emb is None:  # shared: the decoder holds the encoder's matrix
            emb = state["encoder.embed.embed_tokens.weight"]
        out[f"{side}.embed_tokens.weight"] = emb
        if cfg.positional_embeddings == "learned":
            table = state[f"{side}.embed.embed_positions.weight"]
        elif cfg.sinusoid_layout == "paper":
            table = sinusoidal_table(SINUSOID_EXPORT_POSITIONS, cfg.embed_dim)
        else:
            table = None
        if table is not None:
            out[f"{side}.embed_positions.weight"] = torch.cat([table.new_zeros(padding_idx + 1, table.size(1)), table])
        for part in ("weight", "bias"):
            for ours, theirs in (("embed.layernorm", "layernorm_embedding"), ("layer_norm", "layer_norm")):
                if f"{side}.{ours}.{part}" in state:
                    out[f"{side}.{theirs}.{part}"] = state[f"{side}.{ours}.{part}"]
        for i in range(layers):
            src = dst = f"{side}.layers.{i}."
            for part in ("weight", "bias"):
                q, k, v = state[f"{src}self_attn.in_proj.{part}"].split([hk, hk, hk], dim=0)
                out.update({f"{dst}self_attn.q_proj.{part}": q, f"{dst}self_attn.k_proj.{part}": k,
                            f"{dst}self_attn.v_proj.{part}": v,
                            f"{dst}self_attn.out_proj.{part}": state[f"{src}self_attn.out_proj.{part}"],
                            f"{dst}self_attn_layer_norm.{part}": state[f"{src}self_attn_res.norm.{part}"],
                            f"{dst}final_layer_norm.{part}": state[f"{src}ffn_res.norm.{part}"]})
                for fc in ("fc1", "fc2"):
                    out[f"{dst}{fc}.{part}"] = state[f"{src}ffn.{fc}.{part}"]
                if side == "decoder":
                    k, v = state[f"{src}encoder_attn.kv_proj.{part}"].split([hk, hk], dim=0)
                    out.update({f"{dst}encoder_attn.q_proj.{part}": state[f"{src}encoder_attn.q_proj.{part}"],
                                f"{dst}encoder_attn.k_proj.{part}": k, f"{dst}encoder_attn.v_proj.{part}": v,
                                f"{dst}encoder_attn.out_proj.{part}": state[f"{src}encoder_attn.out_proj.{part}"],
                                f"{dst}encoder_attn_layer_norm.{part}": state[f"{src}encoder_attn_res.norm.{part}"]})
        out[f"{side}.version"] = torch.tensor([3.0])  # fairseq's current state-dict version (no upgrades)
    out["decoder.output_projection.weight"] = state.get("decoder.output_projection.weight",
                                                        out["decoder.embed_tokens.weight"])
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def fairseq_args(cfg, source_lang: str, target_lang: str) -> argparse.Namespace:
    """fairseq-train's options for this model (``--arch transformer`` with every size given explicitly)."""
    learned = cfg.positional_embeddings == "learned" or cfg.sinusoid_layout == "paper"
    positions = cfg.max_positions if cfg.positional_embeddings == "learned" else SINUSOID_EXPORT_POSITIONS
    model = dict(
        arch="transformer", _name="transformer", encoder_layers=cfg.encoder_layers, decoder_layers=cfg.decoder_layers,
        encoder_embed_dim=cfg.embed_dim, decoder_embed_dim=cfg.embed_dim, decoder_output_dim=cfg.embed_dim,
        decoder_input_dim=cfg.embed_dim, encoder_ffn_embed_dim=cfg.ffn_embed_dim,
        decoder_ffn_embed_dim=cfg.ffn_embed_dim, encoder_attention_heads=cfg.attention_heads,
        decoder_attention_heads=cfg.attention_heads, encoder_normalize_before=cfg.normalize_before,
        decoder_normalize_before=cfg.normalize_before, encoder_learned_pos=learned, decoder_learned_pos=learned,
        max_source_positions=positions, max_target_positions=positions, dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout,
        activation_fn=cfg.activation_fn, share_all_embeddings=cfg.share_all_embeddings,
        share_decoder_input_output_embed=cfg.share_all_embeddings or cfg.share_decoder_input_output_embed,
        no_scale_embedding=cfg.no_scale_embedding, layernorm_embedding=cfg.layernorm_embedding,
        adaptive_softmax_cutoff=None, adaptive_input=False, no_token_positional_embeddings=False,
        cross_self_attention=False, no_cross_attention=False, tie_adaptive_weights=False,
        encoder_layerdrop=0.0, decoder_layerdrop=0.0, encoder_layers_to_keep=None, decoder_layers_to_keep=None,
        quant_noise_pq=0.0, quant_noise_pq_block_size=8, quant_noise_scalar=0.0)
    task = dict(task="translation", data="", source_lang=source_lang, target_lang=target_lang,
                left_pad_source=True, left_pad_target=False, criterion="cross_entropy", optimizer=None,
                lr_scheduler="fixed", lr=[0.0], seed=1, no_progress_bar=True)
    return argparse.Namespace(**task, **model)


def _save(state: dict, path: str) -> None:
    """``torch.save``, its zip writer's failure (a full disk) reported as the OSError it is."""
    try:
        torch.save(state, path)
    except RuntimeError as exc:
        raise OSError(errno.EIO, os_reason(exc, os.path.dirname(path))) from exc


#: a fairseq export as an output: the checkpoint, its dictionaries and our record of the export
FAIRSEQ_FOLDER = OutputKind("a fairseq export", markers=("checkpoint.pt",), required=("checkpoint.pt",),
                            members=("dict.*.txt", "nmt_export.json"))


def export(checkpoint, task, output_dir, overwrite: bool = False) -> dict:
    """Write ``output_dir/checkpoint.pt`` (fairseq 0.12's layout) and the data-bin's dictionaries beside it,
    into a staging folder swapped in when complete (``output_dir``: a path, or an output a program claimed
    already). ``checkpoint``: a path, or the model :func:`~nmt_toolkit.loading.open_model` read already."""
    from nmt_toolkit.export.exportable import check_exportable, registered_model
    from nmt_toolkit.loading import as_opened
    from nmt_toolkit.checkpoints import check_task_dictionaries

    output = as_output(output_dir, FAIRSEQ_FOLDER, overwrite)
    opened = as_opened(checkpoint)  # ours, or a model folder's weights and config
    checkpoint, state = opened.path, opened.checkpoint()
    check_task_dictionaries(state, checkpoint, task)
    model_class, cfg = registered_model(state["config"], checkpoint)
    check_exportable(cfg, "fairseq", checkpoint, model_class=model_class)
    src, tgt = task.source_dictionary, task.target_dictionary
    langs = (task.cfg.source_lang, task.cfg.target_lang)
    out = {"args": fairseq_args(cfg, *langs), "cfg": None,
           "model": fairseq_state_dict(state["model"], cfg, src.pad()),
           "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "NmtToolkit",
                                  "lr_scheduler_state": {"best": None}, "num_updates": 0}],
           "extra_state": {"train_iterator": {"epoch": 1}, "val_loss": None}, "last_optimizer_state": None}
    record = {"format": "fairseq", "source": os.path.abspath(checkpoint),
              "fairseq_checkpoint": os.path.join(str(output), "checkpoint.pt"),
              "positions": "learned" if out["args"].encoder_learned_pos else "sinusoidal",
              "max_positions": out["args"].max_source_positions}
    with output.staged() as folder:
        _save(out, os.path.join(folder, "checkpoint.pt"))
        for lang, d in zip(langs, (src, tgt)):
            d.save(os.path.join(folder, f"dict.{lang}.txt"))
        with open(os.path.join(folder, "nmt_export.json"), "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)
    return record
