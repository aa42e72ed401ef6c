"""Our transformer → a Hugging Face Marian folder (``MarianMTModel`` and ``MarianTokenizer`` load it).

Every file is written here, without ``transformers`` (only the tests import it): ``config.json`` and
``generation_config.json``, ``model.safetensors`` (Marian's parameter names: our fused [Q; K; V] and [K; V]
projections split back into ``q_proj``/``k_proj``/``v_proj``), and the tokenizer's files: ``vocab.json`` (our
dictionary in our order: Marian takes its special ids from the config, so no permutation is needed),
``target_vocab.json`` when the sides have separate vocabularies, ``source.spm``/``target.spm`` (the
sentencepiece model(s) the data-bin was made with), ``tokenizer_config.json`` and ``special_tokens_map.json``.
The folder is what ``huggingface-cli upload`` publishes.

Hugging Face's Marian computes a post-norm transformer with sinusoids in Marian's layout, which it always
recomputes (the positions are not weights of its files): a model with pre-norm layers, learned positions or
another sinusoid layout cannot be represented and is refused naming the option. Decoding starts from the
model's start symbol (``decoder_start_token_id``: EOS for models trained here, pad for imported Marian ones).
"""
from __future__ import annotations

import json
import os
import shutil

import torch

from nmt_toolkit.outputs import OutputKind, as_output

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "swish"}
SPECIALS = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


def marian_state_dict(state: dict, cfg) -> dict:
    """Our ``state_dict`` under ``MarianMTModel``'s names (the inverse of ``marian_import.convert_state_dict``
    for a model without symbols Marian lacks)."""
    d = cfg.embed_dim
    out = {}
    if cfg.share_all_embeddings:
        out["model.shared.weight"] = state["encoder.embed.embed_tokens.weight"]
    else:
        out["model.encoder.embed_tokens.weight"] = state["encoder.embed.embed_tokens.weight"]
        out["model.decoder.embed_tokens.weight"] = state["decoder.embed.embed_tokens.weight"]
    for side, layers in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        for i in range(layers):
            src, dst = f"{side}.layers.{i}.", f"model.{side}.layers.{i}."
            for part in ("weight", "bias"):
                for x, tensor in zip("qkv", state[f"{src}self_attn.in_proj.{part}"].split(d)):
                    out[f"{dst}self_attn.{x}_proj.{part}"] = tensor
                out[f"{dst}self_attn.out_proj.{part}"] = state[f"{src}self_attn.out_proj.{part}"]
                out[f"{dst}self_attn_layer_norm.{part}"] = state[f"{src}self_attn_res.norm.{part}"]
                out[f"{dst}fc1.{part}"] = state[f"{src}ffn.fc1.{part}"]
                out[f"{dst}fc2.{part}"] = state[f"{src}ffn.fc2.{part}"]
                out[f"{dst}final_layer_norm.{part}"] = state[f"{src}ffn_res.norm.{part}"]
                if side == "decoder":
                    out[f"{dst}encoder_attn.q_proj.{part}"] = state[f"{src}encoder_attn.q_proj.{part}"]
                    for x, tensor in zip("kv", state[f"{src}encoder_attn.kv_proj.{part}"].split(d)):
                        out[f"{dst}encoder_attn.{x}_proj.{part}"] = tensor
                    out[f"{dst}encoder_attn.out_proj.{part}"] = state[f"{src}encoder_attn.out_proj.{part}"]
                    out[f"{dst}encoder_attn_layer_norm.{part}"] = state[f"{src}encoder_attn_res.norm.{part}"]
    vocab = state["decoder.embed.embed_tokens.weight"].size(0)
    bias = state.get("decoder.output_bias", torch.zeros(vocab))
    out["final_logits_bias"] = bias.reshape(1, -1)
    return {k: v.detach().float().cpu().contiguous().clone() for k, v in out.items()}


def marian_config(cfg, src_dict, tgt_dict, start: int) -> dict:
    """``config.json`` of the ``MarianMTModel``."""
    return {
        "architectures": ["MarianMTModel"], "model_type": "marian", "vocab_size": len(src_dict),
        "decoder_vocab_size": len(tgt_dict), "d_model": cfg.embed_dim, "encoder_layers": cfg.encoder_layers,
        "decoder_layers": cfg.decoder_layers, "encoder_attention_heads": cfg.attention_heads,
        "decoder_attention_heads": cfg.attention_heads, "encoder_ffn_dim": cfg.ffn_embed_dim,
        "decoder_ffn_dim": cfg.ffn_embed_dim, "activation_function": ACTIVATIONS[cfg.activation_fn],
        "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "max_position_embeddings": cfg.max_positions,
        "scale_embedding": not cfg.no_scale_embedding, "pad_token_id": tgt_dict.pad(),
        "eos_token_id": tgt_dict.eos(), "forced_eos_token_id": tgt_dict.eos(), "decoder_start_token_id": start,
        "share_encoder_decoder_embeddings": cfg.share_all_embeddings, "tie_word_embeddings": True,
        "is_encoder_decoder": True, "init_std": 0.02, "use_cache": True, "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0, "torch_dtype": "float32",
    }


def generation_config(tgt_dict, start: int, max_length: int) -> dict:
    """``generation_config.json``: OPUS-MT's defaults (beam 4, pad never generated, EOS forced at the limit)."""
    return {"decoder_start_token_id": start, "pad_token_id": tgt_dict.pad(), "eos_token_id": tgt_dict.eos(),
            "forced_eos_token_id": tgt_dict.eos(), "bad_words_ids": [[tgt_dict.pad()]], "num_beams": 4,
            "max_length": max_length}


def _write_json(path: str, value: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def _vocab(d) -> dict:
    return {symbol: index for index, symbol in enumerate(d.symbols)}


def write_marian_folder(folder: str, model, src_dict, tgt_dict, langs: tuple, subword_files: dict) -> None:
    """Write every file of the Marian folder into the (new, empty) ``folder``."""
    from safetensors.torch import save_file

    cfg = model.cfg
    start = model.decoder_start(tgt_dict)
    separate = not cfg.share_all_embeddings
    _write_json(os.path.join(folder, "config.json"), marian_config(cfg, src_dict, tgt_dict, start))
    _write_json(os.path.join(folder, "generation_config.json"),
                generation_config(tgt_dict, start, min(512, cfg.max_positions)))
    save_file(marian_state_dict(model.state_dict(), cfg), os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    _write_json(os.path.join(folder, "vocab.json"), _vocab(src_dict))
    if separate:
        _write_json(os.path.join(folder, "target_vocab.json"), _vocab(tgt_dict))
    for role in ("source", "target"):
        shutil.copyfile(subword_files[role], os.path.join(folder, f"{role}.spm"))
    _write_json(os.path.join(folder, "tokenizer_config.json"),
                {"tokenizer_class": "MarianTokenizer", "source_lang": langs[0], "target_lang": langs[1],
                 "separate_vocabs": separate, "model_max_length": min(512, cfg.max_positions), **SPECIALS})
    _write_json(os.path.join(folder, "special_tokens_map.json"), dict(SPECIALS))


#: a Hugging Face Marian folder as an output: the files :func:`write_marian_folder` writes
MARIAN_FOLDER = OutputKind("a Hugging Face Marian folder", markers=("model.safetensors",),
                           required=("config.json", "model.safetensors"),
                           members=("config.json", "generation_config.json", "vocab.json", "target_vocab.json",
                                    "source.spm", "target.spm", "tokenizer_config.json", "special_tokens_map.json"))


def export(checkpoint, task, output_dir, overwrite: bool = False) -> dict:
    """Write ``checkpoint`` (with ``task``'s dictionaries and sentencepiece models) as a Hugging Face Marian
    folder at ``output_dir`` (a path, or an output a program claimed already), atomically: a staging folder
    swapped in when complete (:class:`~nmt_toolkit.outputs.FolderOutput`). ``checkpoint``: a path, or the model
    :func:`~nmt_toolkit.loading.open_model` read already."""
    from nmt_toolkit.export.exportable import check_exportable
    from nmt_toolkit.checkpoints import task_dictionaries
    from nmt_toolkit.loading import as_opened, load_models

    output = as_output(output_dir, MARIAN_FOLDER, overwrite)
    src, tgt, langs, _ = task_dictionaries(task)
    opened = as_opened(checkpoint)
    checkpoint = opened.path
    model = load_models([opened], src, tgt, task.dictionary_files(), langs=langs)[0][0]
    kind, files = task.subword_files()
    check_exportable(model.cfg, "marian", checkpoint, model_class=type(model), dictionaries=(src, tgt),
                     subword_kind=kind)
    with output.staged() as folder:
        write_marian_folder(folder, model, src, tgt, langs, files)
    return {"path": str(output), "source_lang": langs[0], "target_lang": langs[1],
            "decoder_start": model.cfg.decoder_start, "vocabulary": (len(src), len(tgt))}
