"""Our Transformer → a CTranslate2 model directory, built through CTranslate2's public spec API.

CTranslate2 (the ``[ct2]`` extra) is what MT deployments run for fast inference (int8/int16/float16/bfloat16,
CPU and GPU). Its ``TransformerSpec`` has exactly our layer structure, checked against ``ctranslate2.specs``
of 4.8.5: self-attention ``linear[0]`` is the fused [Q; K; V] projection (our ``in_proj``) and ``linear[1]``
the output (``out_proj``); encoder–decoder attention ``linear[0]`` is Q (``q_proj``), ``linear[1]`` the
fused [K; V] (``kv_proj``), ``linear[2]`` the output; each sub-layer's ``layer_norm`` is our residual
wrapper's norm (applied before the sub-layer with ``pre_norm``, after the residual sum without);
``ffn.linear_0``/``linear_1`` are ``fc1``/``fc2``; ``decoder.projection`` is the pre-softmax matrix
(the tied embedding when shared; CTranslate2 stores equal arrays once). ``--layernorm-embedding`` is the
spec's ``layernorm_embedding`` of each stack (a LayerNorm on embeddings + positions).

Positions. Without an explicit table CTranslate2 computes its own sinusoid, laid out as tensor2tensor
does (all sines, then all cosines, timescales ``10000^(i / (d/2 - 1))``) — not the paper's interleaved
``sin, cos`` pairs of section 3.5, and not counted from fairseq's ``padding_idx + 1``. So every model is
exported with an explicit ``position_encodings.encodings`` table: the rows our own positional module adds
at positions ``0 .. N-1`` (sinusoidal of either layout, or the learned table), which CTranslate2 adds at
decoding step / source position ``t`` as we do. ``N`` is ``--max-positions`` for learned tables and
``max(--max-positions, 1024)`` for sinusoids; longer inputs are truncated by the engine.

Tokens: the vocabularies are our dictionaries' symbols in index order (``<s> <pad> </s> <unk>`` first, as
CTranslate2's defaults name them); the decoder starts from ``</s>`` (fairseq's convention, ours) and
CTranslate2 appends ``</s>`` to each source (``add_source_eos``), as our binarizer does. LayerNorm epsilon
is torch's 1e-5.

Alignment. The attention CTranslate2 returns (``return_attention``) is the spec's ``alignment_layer``
averaged over its first ``alignment_heads`` heads (one by default); the export sets the last layer and every
head, the attention our alignments take the argmax of (``generation/ct2_search.py``), and records
``alignment_heads`` in ``nmt_export.json``.

What CTranslate2 cannot represent is refused with one line naming the option: a ``--key-dim`` or
``--value-dim`` other than ``embed_dim / heads`` (its attention splits the model dimension evenly), an
activation it lacks, or a model class other than the built-in Transformer (e.g. a plugin's).
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Optional

from nmt_toolkit.errors import UsageError
from nmt_toolkit.export.exportable import check_exportable
from nmt_toolkit.export_record import EXPORT_JSON, read_export
from nmt_toolkit.outputs import OutputKind, as_output

QUANTIZATIONS = ("none", "int8", "int8_float16", "int16", "float16", "bfloat16")
MIN_SINUSOID_ROWS = 1024


def require_ctranslate2(specs: bool = True):
    """The ``ctranslate2`` module, or a usage error saying how to install it; ``specs``: with the model
    specifications an export builds (they import torch when it is installed, which decoding does without)."""
    try:
        import ctranslate2
        if specs:
            import ctranslate2.specs  # noqa: F401
    except ImportError:
        raise UsageError("CTranslate2 is not installed: pip install 'nmt_toolkit[ct2]' "
                         "(or pip install ctranslate2)") from None
    return ctranslate2


def position_table(embedder, cfg):
    """``[N, D]`` float32 numpy: what ``embedder`` adds at positions ``0 .. N-1`` (see the module docstring)."""
    import torch

    rows = cfg.max_positions if cfg.positional_embeddings == "learned" else max(cfg.max_positions, MIN_SINUSOID_ROWS)
    with torch.no_grad():
        return embedder.embed_positions(rows, 0, dtype=torch.float32).detach().cpu().contiguous().numpy()


def build_spec(model, src_dict, tgt_dict):
    """The ``ctranslate2.specs.TransformerSpec`` of ``model`` (a built-in :class:`TransformerModel`)."""
    require_ctranslate2()
    import numpy as np
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "silu": common_spec.Activation.SWISH}[cfg.activation_fn]
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers), cfg.attention_heads, pre_norm=cfg.normalize_before,
        activation=activation, layernorm_embedding=cfg.layernorm_embedding, alignment_layer=-1,
        alignment_heads=cfg.attention_heads)

    def array(tensor):
        return np.ascontiguousarray(tensor.detach().float().cpu().numpy())

    def linear(target, layer):
        target.weight = array(layer.weight)
        if layer.bias is not None:
            target.bias = array(layer.bias)

    def norm(target, layer):
        target.gamma, target.beta = array(layer.weight), array(layer.bias)

    def stack(target, side, embeddings):
        embeddings.weight = array(side.embed.embed_tokens.weight)
        target.scale_embeddings = not cfg.no_scale_embedding  # True: x sqrt(d_model), as our _Embedder
        target.position_encodings.encodings = position_table(side.embed, cfg)
        if cfg.layernorm_embedding:  # on embeddings + positions, before the first layer, as our _Embedder
            norm(target.layernorm_embedding, side.embed.layernorm)
        if cfg.normalize_before:
            norm(target.layer_norm, side.layer_norm)

    def self_attention_and_ffn(target, layer):
        linear(target.self_attention.linear[0], layer.self_attn.in_proj)
        linear(target.self_attention.linear[1], layer.self_attn.out_proj)
        norm(target.self_attention.layer_norm, layer.self_attn_res.norm)
        linear(target.ffn.linear_0, layer.ffn.fc1)
        linear(target.ffn.linear_1, layer.ffn.fc2)
        norm(target.ffn.layer_norm, layer.ffn_res.norm)

    encoder, decoder = model.encoder, model.decoder
    stack(spec.encoder, encoder, spec.encoder.embeddings[0])
    for target, layer in zip(spec.encoder.layer, encoder.layers):
        self_attention_and_ffn(target, layer)
    stack(spec.decoder, decoder, spec.decoder.embeddings)
    for target, layer in zip(spec.decoder.layer, decoder.layers):
        self_attention_and_ffn(target, layer)
        linear(target.attention.linear[0], layer.encoder_attn.q_proj)
        linear(target.attention.linear[1], layer.encoder_attn.kv_proj)
        linear(target.attention.linear[2], layer.encoder_attn.out_proj)
        norm(target.attention.layer_norm, layer.encoder_attn_res.norm)
    spec.decoder.projection.weight = array(decoder.output_weight())
    if getattr(decoder, "output_bias", None) is not None:
        spec.decoder.projection.bias = array(decoder.output_bias)

    spec.register_source_vocabulary([src_dict[i] for i in range(len(src_dict))])
    spec.register_target_vocabulary([tgt_dict[i] for i in range(len(tgt_dict))])
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = (
        src_dict[src_dict.unk()], src_dict[src_dict.bos()], src_dict[src_dict.eos()])
    spec.config.decoder_start_token = tgt_dict[model.decoder_start(tgt_dict)]  # EOS (fairseq's) or pad (Marian's)
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = 1e-5
    return spec


def _export_names(folder: str) -> list:
    """The subword model an earlier export's record names (its name is the data-bin's)."""
    record = read_export(folder) or {}
    return [(record.get("subword") or {}).get("model")]


#: a CTranslate2 model folder as an output: CTranslate2's files, our dictionaries, subword model and record
CTRANSLATE2_FOLDER = OutputKind("a CTranslate2 model folder", markers=("model.bin",),
                                required=("model.bin", "config.json"),
                                members=("config.json", "*vocabulary.json", "*vocabulary.txt", "dict*.txt",
                                         EXPORT_JSON), named_by=_export_names)


def export(checkpoint, task, output_dir, quantization: str = "none", overwrite: bool = False) -> dict:
    """Write ``checkpoint`` (decoded with ``task``'s dictionaries) as a CTranslate2 model in ``output_dir`` (a
    path, or an output a program claimed already): ``model.bin``, CTranslate2's ``config.json`` and
    vocabularies, our ``dict.<lang>.txt`` and the subword model copied beside them, and ``nmt_export.json``
    (what was exported). Written into a staging folder and swapped in when complete
    (:class:`~nmt_toolkit.outputs.FolderOutput`). Returns the JSON record. ``checkpoint``: a path, or the model
    :func:`~nmt_toolkit.loading.open_model` read already."""
    require_ctranslate2()
    import ctranslate2

    from nmt_toolkit.loading import as_opened, load_models
    from nmt_toolkit.checkpoints import task_dictionaries

    if quantization not in QUANTIZATIONS:
        raise UsageError(f"--quantization {quantization}: expected one of {', '.join(QUANTIZATIONS)}")
    output = as_output(output_dir, CTRANSLATE2_FOLDER, overwrite)
    src, tgt, langs, files = task_dictionaries(task)
    opened = as_opened(checkpoint)  # a path is read here, once
    checkpoint = opened.path
    models, configs = load_models([opened], src, tgt, files, langs=langs)
    model = models[0]
    check_exportable(model.cfg, "ctranslate2", checkpoint, model_class=type(model))
    spec = build_spec(model, task.src_dict, task.tgt_dict)
    multilingual = _multilingual_config(task)
    if multilingual:
        spec.config.add_attribute("languages", multilingual["languages"])
        spec.config.add_attribute("multilingual", multilingual["multilingual"])
    spec.validate()
    spec.optimize(quantization=None if quantization == "none" else quantization)
    record = {"format": "ctranslate2", "ctranslate2_version": ctranslate2.__version__,
              "quantization": quantization, "checkpoint": os.path.abspath(checkpoint),
              "source_lang": task.cfg.source_lang, "target_lang": task.cfg.target_lang,
              "dictionaries": {}, "subword": None, "bpe_symbol": task.bpe_symbol(),
              "target_lang_tag": task.default_target_lang_tag(),
              "max_positions": int(position_table(model.encoder.embed, model.cfg).shape[0]),
              "alignment_heads": model.cfg.attention_heads,
              "model": configs[0]["components"].get("arch"), "model_config": configs[0].get("model")}
    if multilingual:
        record.update(source_lang=None, target_lang=None, languages=multilingual["languages"],
                      task=multilingual["task"])
    with output.staged() as staging:
        spec.save(staging)
        _write_beside_model(staging, task, record, bool(multilingual))
    return record


def _write_beside_model(folder: str, task, record: dict, multilingual: bool) -> None:
    """Our dictionaries, the subword model and the record (``nmt_export.json``), completing ``record``."""
    for side, dictionary in (("source", task.src_dict), ("target", task.tgt_dict)):
        lang = getattr(task.cfg, f"{side}_lang")
        name = "dict.txt" if multilingual else f"dict.{lang}.txt"  # a multilingual model: one joint dictionary
        dictionary.save(os.path.join(folder, name))
        record["dictionaries"][side] = name
    subword = task.subword_record()
    if subword and subword.get("type"):
        path = subword["model"] if os.path.isabs(subword["model"]) else os.path.join(task.cfg.data, subword["model"])
        shutil.copyfile(path, os.path.join(folder, os.path.basename(path)))
        record["subword"] = {**subword, "model": os.path.basename(path)}
    with open(os.path.join(folder, EXPORT_JSON), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, default=str)
        handle.write("\n")


def _multilingual_config(task) -> Optional[dict]:
    """A multilingual task's languages, the task options that decode it (``task``) and, for CTranslate2's
    config.json, the directions and where each language's token goes (``multilingual``); None for others."""
    from nmt_toolkit.model_folder import multilingual_task_options
    from nmt_toolkit.tasks.multilingual import language_token

    record = task.multilingual_record()
    if record is None:
        return None
    tokens = {lang: language_token(lang, record["lang_tok_style"]) for lang in record["languages"]}
    return {"languages": record["languages"], "task": multilingual_task_options(record),
            "multilingual": {**{k: v for k, v in record.items() if k != "languages"}, "language_tokens": tokens}}
