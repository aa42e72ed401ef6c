"""Hugging Face Marian (``MarianMTModel``: the OPUS-MT models) → a model folder of ours.

A Marian model is our post-norm Transformer with four differences, each a named option of
:class:`~nmt_toolkit.models.transformer.TransformerConfig`: the feed-forward activation is SiLU ("swish";
``--activation-fn silu``), the pre-softmax projection has a bias (``final_logits_bias``; ``--output-bias``),
the sinusoids are laid out sine half then cosine half (``--sinusoid-layout marian``) and decoding starts from
the padding symbol (``--decoder-start pad``). Everything else maps weight for weight: Marian's separate Q, K, V
projections are concatenated into our fused ones, its layer norms are our residual wrappers' norms.

Vocabulary: our dictionaries put ``<s> <pad> </s> <unk>`` at indices 0–3 (fairseq's order, which the
data pipeline, the search and every data-bin rely on), while a Marian vocabulary has ``</s>`` at 0, ``<unk>``
at 1 and ``<pad>`` last, and no ``<s>``. The embedding rows (and ``final_logits_bias``) are therefore permuted
into our order rather than teaching the dictionary another order: index ``i`` of our dictionary holds Marian
id ``order[i]``. A symbol Marian lacks (``<s>``) gets a zero embedding row and an output bias of
:data:`ABSENT_LOGIT`, so its probability is exactly 0 in float32 and our log-probabilities equal Marian's.

Weights are read from ``model.safetensors``, or from ``pytorch_model.bin`` through ``torch.load(...,
weights_only=True)``, which refuses a pickle that would run code. Options our model cannot reproduce are
refused in one line naming the ``config.json`` key.

Nothing is written until the whole result is known to load: every key read from config.json has its JSON type
and the range :class:`TransformerConfig` declares for the option it becomes, the converted weights have the
shapes the resulting config builds and finite float values (:func:`nmt_toolkit.models.state_dict_checks.check_state_dict`, the
loader's own checks), the sentencepiece models load, the languages are language codes and a default tag is a
tag of the vocabulary. A file of the folder that is a link leading out of it is refused
(:mod:`nmt_toolkit.data.folder_files`), as are JSON files nested too deep or holding absurd integers
(:mod:`nmt_toolkit.data.json_files`).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Optional

import torch

from nmt_toolkit.data.dictionary import BOS, EOS, PAD, UNK, Dictionary
from nmt_toolkit.data.folder_files import member
from nmt_toolkit.data.json_files import read_json_object
from nmt_toolkit.data.language_codes import check_language_code, check_language_tag
from nmt_toolkit.data.subword import load_codec
from nmt_toolkit.errors import DataError, UsageError

#: the output bias of a symbol our dictionary has and Marian's vocabulary lacks: exp() of it underflows to 0 in
#: float32 next to any logit above -896, and it stays finite (weights are checked for NaN/inf at load). Not
#: lower: label smoothing charges eps/V of every symbol's -log p, here about 1000 * eps / V nats per token
ABSENT_LOGIT = -1e3
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
#: keys of older Marian/BART configs whose only value Hugging Face's MarianMTModel computes
_FIXED_KEYS = {"normalize_before": False, "normalize_embedding": False, "add_final_layer_norm": False,
               "static_position_embeddings": True, "add_bias_logits": False, "layernorm_embedding": False,
               "scale_embedding": None, "encoder_layerdrop": None, "decoder_layerdrop": None}
_SAME = (("encoder_ffn_dim", "decoder_ffn_dim"), ("encoder_attention_heads", "decoder_attention_heads"))
#: config.json keys every BART-family model (Marian, M2M-100) names the same way → the TransformerConfig field
#: each becomes; a value is checked against that field's type and declared range, naming the key
SHARED_FIELDS = {"encoder_layers": "encoder_layers", "decoder_layers": "decoder_layers", "d_model": "embed_dim",
                 "encoder_ffn_dim": "ffn_embed_dim", "decoder_ffn_dim": "ffn_embed_dim",
                 "encoder_attention_heads": "attention_heads", "decoder_attention_heads": "attention_heads",
                 "dropout": "dropout", "attention_dropout": "attention_dropout",
                 "activation_dropout": "activation_dropout", "max_position_embeddings": "max_positions"}
#: the values a BART-family config.json may leave out (Transformers' defaults)
_SHARED_DEFAULTS = {"encoder_layers": 12, "decoder_layers": 12, "d_model": 1024, "encoder_ffn_dim": 4096,
                    "encoder_attention_heads": 16, "dropout": 0.1, "activation_dropout": 0.0,
                    "max_position_embeddings": 1024}
#: the other config.json keys the importers read, with the JSON type each must have (null: left out)
OTHER_KEYS = {"pad_token_id": int, "eos_token_id": int, "decoder_start_token_id": int, "vocab_size": int,
              "decoder_vocab_size": int, "scale_embedding": bool, "share_encoder_decoder_embeddings": bool,
              "tie_word_embeddings": bool, "activation_function": str, "model_type": str,
              **{key: bool for key, value in _FIXED_KEYS.items() if isinstance(value, bool)}}
_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
_SIZES = ("vocab_size", "decoder_vocab_size")
_IDS = ("pad_token_id", "eos_token_id", "decoder_start_token_id")


@dataclass
class MarianFolder:
    """The files of a ``MarianMTModel`` folder, read and checked."""

    path: str
    config: dict
    weights: dict
    source_vocab: list  # Marian id → token
    target_vocab: list
    source_spm: str
    target_spm: str
    tokenizer_config: dict


def _json(path: str, what: str) -> dict:
    """A JSON object of a Hugging Face folder (config, vocabulary, tokenizer files), read within limits from a
    file that does not lead out of the folder."""
    return read_json_object(member(os.path.dirname(path), os.path.basename(path)), what)


def weights_file(folder: str) -> str:
    """The weights a Hugging Face folder holds: ``model.safetensors``, else ``pytorch_model.bin``."""
    safetensors_path = os.path.join(folder, "model.safetensors")
    return safetensors_path if os.path.isfile(safetensors_path) else os.path.join(folder, "pytorch_model.bin")


def read_weights(folder: str) -> dict:
    """The state dict of ``model.safetensors`` or, failing that, ``pytorch_model.bin`` (weights only: a
    pickle naming anything but tensors and containers is refused without running it). A tensor that is not
    floating point is refused: converted to float32 it would be garbage, not weights."""
    path = weights_file(folder)
    if not os.path.isfile(path):
        raise DataError(f"{folder}: no model.safetensors or pytorch_model.bin (not a Hugging Face model folder)")
    state = _read_state(member(folder, os.path.basename(path), "the weights"))
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            raise DataError(f"{path}: tensor {name!r} is {str(tensor.dtype).replace('torch.', '')}, not floating "
                            f"point: not a model's weights")
    return state


def _read_state(path: str) -> dict:
    if path.endswith(".safetensors"):
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(path)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise DataError(f"{path}: not a readable safetensors file ({first})") from None
    import pickle

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unsupported content"
        raise DataError(f"{path}: refusing to load: the pickle holds more than weights ({first[:160]})") from None
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{path}: not a readable PyTorch weights file ({first})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise DataError(f"{path}: not a state dict of tensors")
    return state


def _vocab(path: str) -> list:
    """``vocab.json`` (token → id) as a list indexed by id; gaps, duplicates of an id and tokens our
    dictionary files cannot hold (empty, with whitespace) are refused by name."""
    table = _json(path, "the vocabulary")
    by_id: dict[int, str] = {}
    for token, index in table.items():
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise DataError(f"{path}: token {token!r} has id {index!r}, not a whole number >= 0")
        if index in by_id:
            raise DataError(f"{path}: id {index} is given to both {by_id[index]!r} and {token!r}")
        if not token or any(c.isspace() for c in token):
            raise DataError(f"{path}: token {token!r} is empty or holds whitespace (a dictionary symbol cannot)")
        by_id[index] = token
    if sorted(by_id) != list(range(len(by_id))):
        missing = next(i for i in range(len(by_id)) if i not in by_id)
        raise DataError(f"{path}: ids are not 0..{len(by_id) - 1} (id {missing} has no token)")
    return [by_id[i] for i in range(len(by_id))]


def read_marian_folder(path: str) -> MarianFolder:
    """Read the files of a ``MarianMTModel`` folder (``save_pretrained``'s, or a Hub download)."""
    if not os.path.isdir(path):
        raise DataError(f"--path {path}: not a folder (a Hugging Face MarianMTModel folder is expected)")
    config = _json(os.path.join(path, "config.json"), "the model config")
    check_types(config, os.path.join(path, "config.json"))
    tok_path = os.path.join(path, "tokenizer_config.json")
    tokenizer_config = _json(tok_path, "the tokenizer config") if os.path.isfile(tok_path) else {}
    source_vocab = _vocab(os.path.join(path, "vocab.json"))
    separate = bool(tokenizer_config.get("separate_vocabs")) or os.path.isfile(os.path.join(path, "target_vocab.json"))
    target_vocab = _vocab(os.path.join(path, "target_vocab.json")) if separate else source_vocab
    spm = {}
    for role in ("source", "target"):
        spm[role] = os.path.join(path, f"{role}.spm")
        if not os.path.isfile(spm[role]):
            raise DataError(f"{path}: {role}.spm is missing (the sentencepiece model of the {role} side)")
        load_codec("sentencepiece", member(path, f"{role}.spm", f"the {role} sentencepiece model"))
    return MarianFolder(path=path, config=config, weights=read_weights(path), source_vocab=source_vocab,
                        target_vocab=target_vocab, source_spm=spm["source"], target_spm=spm["target"],
                        tokenizer_config=tokenizer_config)


def _refuse(path: str, key: str, value, why: str):
    raise UsageError(f"{path}: config.json {key}={json.dumps(value)} is not supported ({why})")


def _invalid(path: str, key: str, value, why: str):
    shown = json.dumps(value)
    raise DataError(f"{path}: config.json {key}={shown[:60] + '…' if len(shown) > 60 else shown}: {why}")


def _kinds() -> dict:
    """config.json key → the JSON type its value must have."""
    from nmt_toolkit.models.transformer import TransformerConfig

    numbers = {f.name: type(f.default) for f in fields(TransformerConfig)}
    return {**{key: numbers[name] for key, name in SHARED_FIELDS.items()}, **OTHER_KEYS}


def _fits(value, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind in (int, float):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and (kind is float or isinstance(value, int))
    return isinstance(value, kind)


def check_types(config: dict, path: str) -> None:
    """Every key the importers read has the JSON type its option needs (a boolean is no number, a number no
    boolean; null stands for a left-out key, except where a number is needed), refused naming the key before
    any value is used."""
    for key, kind in _kinds().items():
        value = config.get(key)
        if key in config and (value is not None or key in SHARED_FIELDS) and not _fits(value, kind):
            _invalid(path, key, value, f"expected {_KIND_NAMES[kind]}")
    sizes = [config[key] for key in _SIZES if config.get(key) is not None]
    for key in _SIZES:
        if config.get(key) is not None and config[key] < 1:
            _invalid(path, key, config[key], "must be a number of tokens >= 1")
    for key in _IDS:
        if config.get(key) is not None and not 0 <= config[key] < max(sizes, default=config[key] + 1):
            _invalid(path, key, config[key], f"must be an id of the vocabulary (0 to {max(sizes, default=0) - 1})"
                     if sizes else "must be an id >= 0")


def shared_fields(config: dict, path: str, activation: str, attention_dropout: float, scale_embedding: bool) -> dict:
    """The :class:`TransformerConfig` fields every BART-family ``config.json`` (Marian, M2M-100) names the same
    way; the arguments are the family's defaults for the keys a config may leave out. Refuses, naming the key,
    a value of the wrong type or outside the range TransformerConfig declares for its option, and what one value
    of ours cannot hold (different encoder and decoder widths or head counts) or compute."""
    from nmt_toolkit.models.transformer import TransformerConfig

    check_types(config, path)
    declared, kinds = {f.name: f.metadata["range"] for f in fields(TransformerConfig)}, _kinds()
    given = {**_SHARED_DEFAULTS, "attention_dropout": attention_dropout, **config}
    for key, name in SHARED_FIELDS.items():
        if given.get(key) is not None and not declared[name].contains(given[key]):
            _invalid(path, key, given[key], f"must be {declared[name].describe(kinds[key])}")
    for a, b in _SAME:
        if config.get(a) != config.get(b):
            _refuse(path, b, config.get(b), f"differs from {a}={config.get(a)}; our transformer has one value for both")
    activation = config.get("activation_function", activation)
    if activation not in ACTIVATIONS:
        _refuse(path, "activation_function", activation, f"expected one of {', '.join(ACTIVATIONS)}")
    d_model, heads = given["d_model"], given["encoder_attention_heads"]
    if d_model % heads:
        _refuse(path, "d_model", d_model, f"not divisible by encoder_attention_heads={heads}")
    return dict(
        encoder_layers=given["encoder_layers"], decoder_layers=given["decoder_layers"], embed_dim=d_model,
        ffn_embed_dim=given["encoder_ffn_dim"], attention_heads=heads, dropout=float(given["dropout"]),
        attention_dropout=float(given["attention_dropout"]), activation_dropout=float(given["activation_dropout"]),
        activation_fn=ACTIVATIONS[activation], positional_embeddings="sinusoidal",
        max_positions=given["max_position_embeddings"],
        no_scale_embedding=not (scale_embedding if config.get("scale_embedding") is None else config["scale_embedding"]),
        layernorm_embedding=False)


def transformer_config(config: dict, path: str = "config.json"):
    """Our :class:`TransformerConfig` for a Marian ``config.json``; what it cannot reproduce is refused in
    one line naming the key."""
    from nmt_toolkit.models.transformer import TransformerConfig

    if config.get("model_type", "marian") != "marian":
        _refuse(path, "model_type", config.get("model_type"), "only marian models are imported")
    for key, value in _FIXED_KEYS.items():
        if value is not None and key in config and config[key] != value:
            _refuse(path, key, config[key], f"Marian's transformer has {key}={json.dumps(value)}")
    fields = shared_fields(config, path, activation="gelu", attention_dropout=0.0, scale_embedding=False)
    share_all = config.get("share_encoder_decoder_embeddings", True)
    tied = config.get("tie_word_embeddings", True)
    if share_all and not tied:
        _refuse(path, "tie_word_embeddings", tied, "with share_encoder_decoder_embeddings our model ties the "
                                                   "output matrix to the shared embeddings too")
    start = config.get("decoder_start_token_id", config.get("pad_token_id"))
    if start not in (config.get("pad_token_id"), config.get("eos_token_id")):
        _refuse(path, "decoder_start_token_id", start, "decoding starts from the pad or the EOS symbol")
    return TransformerConfig(
        **fields, normalize_before=False, sinusoid_layout="marian", share_all_embeddings=bool(share_all),
        share_decoder_input_output_embed=bool(tied) and not share_all, output_bias=True,
        decoder_start="pad" if start == config.get("pad_token_id") else "eos")


def dictionary_order(vocab: list, config: dict, tokenizer_config: dict, path: str) -> tuple[Dictionary, list]:
    """Our dictionary for a Marian vocabulary and ``order``: our index → Marian id (-1: Marian has no such
    symbol). Marian's EOS, pad and unk ids (config.json, tokenizer_config.json) take our slots 2, 1, 3; a
    ``<s>`` token, if the vocabulary has one, slot 0; every other token follows in Marian's id order."""
    unk_token = tokenizer_config.get("unk_token", UNK)
    unk_token = unk_token.get("content", UNK) if isinstance(unk_token, dict) else unk_token
    specials = {BOS: vocab.index(BOS) if BOS in vocab else -1,
                PAD: config.get("pad_token_id"), EOS: config.get("eos_token_id"),
                UNK: vocab.index(unk_token) if unk_token in vocab else -1}
    for key, symbol in (("pad_token_id", PAD), ("eos_token_id", EOS)):
        if not isinstance(specials[symbol], int) or not 0 <= specials[symbol] < len(vocab):
            _refuse(path, key, specials[symbol], f"not an id of the {len(vocab)}-token vocabulary")
    if specials[UNK] < 0:
        raise DataError(f"{path}: the vocabulary has no unknown-word token {unk_token!r} (tokenizer_config.json "
                        f"unk_token)")
    d = Dictionary()
    order = [specials[d[i]] for i in range(d.nspecial)]
    taken = set(order)
    for marian_id, token in enumerate(vocab):
        if marian_id in taken:
            continue
        if token in d:
            raise DataError(f"{path}: vocabulary token {token!r} (id {marian_id}) is one of our special symbols "
                            f"but not Marian's {token} id")
        d.add_symbol(token, 0)
        order.append(marian_id)
    return d, order


def _rows(matrix: torch.Tensor, order: list, fill: float = 0.0) -> torch.Tensor:
    """``matrix`` rows in our order (``fill`` where Marian has no symbol)."""
    index = torch.tensor([max(i, 0) for i in order])
    out = matrix.index_select(0, index).clone()
    absent = torch.tensor([i < 0 for i in order])
    out[absent] = fill
    return out


def _embedding_name(state: dict, side: str, path: str) -> str:
    for name in (f"model.{side}.embed_tokens.weight", "model.shared.weight"):
        if name in state:
            return name
    raise DataError(f"{path}: tensor 'model.{side}.embed_tokens.weight' (or model.shared.weight) is missing")


def _embeddings(state: dict, side: str, path: str) -> torch.Tensor:
    return state[_embedding_name(state, side, path)]


def expected_shape(name: str, cfg) -> Optional[tuple]:
    """The shape config.json gives a BART-family layer tensor (by its name's ending), or None for others."""
    d, ffn = cfg.embed_dim, cfg.ffn_embed_dim
    for ending, shape in (("_proj.weight", (d, d)), ("fc1.weight", (ffn, d)), ("fc1.bias", (ffn,)),
                          ("fc2.weight", (d, ffn)), ("_proj.bias", (d,)), ("layer_norm.weight", (d,)),
                          ("layer_norm.bias", (d,)), ("fc2.bias", (d,))):
        if name.endswith(ending):
            return shape
    return None


def _shaped(name: str, tensor: torch.Tensor, shape: tuple, path: str) -> torch.Tensor:
    """``tensor`` as float32, once its shape is the one config.json gives it."""
    if tuple(tensor.shape) != tuple(shape):
        raise DataError(f"{path}: tensor {name!r} has shape {tuple(tensor.shape)}, config.json's sizes (d_model, "
                        f"encoder_ffn_dim, the vocabulary) give it {tuple(shape)}: the weights and config disagree")
    return tensor.float()


def convert_state_dict(weights: dict, cfg, src_order: list, tgt_order: list, path: str) -> dict:
    """Our ``state_dict`` from a ``MarianMTModel``'s (names with or without the ``model.`` prefix); a
    missing tensor, or one with no place in our model, is refused by name."""
    state = {(k if k.startswith(("model.", "final_logits_bias", "lm_head")) else f"model.{k}"): v
             for k, v in weights.items()}
    used = {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}  # recomputed

    def take(name: str) -> torch.Tensor:
        if name not in state:
            raise DataError(f"{path}: tensor {name!r} is missing (a layer of the model has it)")
        used.add(name)
        return _shaped(name, state[name], expected_shape(name, cfg) or state[name].shape, path)

    def rows(order: list) -> int:
        return len(order) - order.count(-1)

    out = {}
    enc, dec = (_rows(_shaped(name, state[name], (rows(order), cfg.embed_dim), path), order)
                for name, order in ((_embedding_name(state, "encoder", path), src_order),
                                    (_embedding_name(state, "decoder", path), tgt_order)))
    used.update(k for k in ("model.shared.weight", "model.encoder.embed_tokens.weight",
                            "model.decoder.embed_tokens.weight") if k in state)
    out["encoder.embed.embed_tokens.weight"] = enc
    out["decoder.embed.embed_tokens.weight"] = enc if cfg.share_all_embeddings else dec
    for side, layers in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        for i in range(layers):
            src, dst = f"model.{side}.layers.{i}.", f"{side}.layers.{i}."
            for part in ("weight", "bias"):
                out[f"{dst}self_attn.in_proj.{part}"] = torch.cat([take(f"{src}self_attn.{x}_proj.{part}")
                                                                   for x in "qkv"])
                out[f"{dst}self_attn.out_proj.{part}"] = take(f"{src}self_attn.out_proj.{part}")
                out[f"{dst}self_attn_res.norm.{part}"] = take(f"{src}self_attn_layer_norm.{part}")
                out[f"{dst}ffn.fc1.{part}"] = take(f"{src}fc1.{part}")
                out[f"{dst}ffn.fc2.{part}"] = take(f"{src}fc2.{part}")
                out[f"{dst}ffn_res.norm.{part}"] = take(f"{src}final_layer_norm.{part}")
                if side == "decoder":
                    out[f"{dst}encoder_attn.q_proj.{part}"] = take(f"{src}encoder_attn.q_proj.{part}")
                    out[f"{dst}encoder_attn.kv_proj.{part}"] = torch.cat([take(f"{src}encoder_attn.{x}_proj.{part}")
                                                                          for x in "kv"])
                    out[f"{dst}encoder_attn.out_proj.{part}"] = take(f"{src}encoder_attn.out_proj.{part}")
                    out[f"{dst}encoder_attn_res.norm.{part}"] = take(f"{src}encoder_attn_layer_norm.{part}")
    tied = cfg.share_all_embeddings or cfg.share_decoder_input_output_embed
    if "lm_head.weight" in state:
        used.add("lm_head.weight")
        if not tied:
            out["decoder.output_projection.weight"] = _rows(_shaped(
                "lm_head.weight", state["lm_head.weight"], (rows(tgt_order), cfg.embed_dim), path), tgt_order)
    elif not tied:
        raise DataError(f"{path}: tensor 'lm_head.weight' is missing (config.json tie_word_embeddings=false)")
    bias = state.get("final_logits_bias", torch.zeros(1, rows(tgt_order)))
    bias = _shaped("final_logits_bias", bias.reshape(-1), (rows(tgt_order),), path)
    used.add("final_logits_bias")
    out["decoder.output_bias"] = _rows(bias.unsqueeze(1), tgt_order, ABSENT_LOGIT).squeeze(1)
    left = sorted(k for k in state if k not in used)
    if left:
        raise DataError(f"{path}: weights that have no place in our transformer: {', '.join(left[:3])}"
                        + (f" and {len(left) - 3} more" if len(left) > 3 else ""))
    return out


def converted(folder: MarianFolder) -> tuple:
    """``(model config dict, our state dict, source dictionary, target dictionary)`` of a Marian folder. The
    output bias is kept only where it does something: a non-zero ``final_logits_bias`` or a symbol of ours
    Marian lacks."""
    where = os.path.join(folder.path, "config.json")
    cfg = transformer_config(folder.config, where)
    src_dict, src_order = dictionary_order(folder.source_vocab, folder.config, folder.tokenizer_config, where)
    tgt_dict, tgt_order = (src_dict, src_order) if folder.target_vocab is folder.source_vocab else \
        dictionary_order(folder.target_vocab, folder.config, folder.tokenizer_config, where)
    if cfg.share_all_embeddings and folder.target_vocab is not folder.source_vocab:
        _refuse(where, "share_encoder_decoder_embeddings", True, "the folder has separate source and target "
                                                                 "vocabularies (target_vocab.json)")
    named = {k if k.startswith(("model.", "final_logits_bias", "lm_head")) else f"model.{k}": v
             for k, v in folder.weights.items()}
    for side, key, order in (("encoder", "vocab_size", src_order), ("decoder", "decoder_vocab_size", tgt_order)):
        matrix = _embeddings(named, side, where)
        rows, tokens = int(matrix.shape[0]) if matrix.dim() else 0, len(order) - order.count(-1)
        if rows != tokens:
            _refuse(where, key, folder.config.get(key, rows), f"the {side} embeddings have {rows} rows, its "
                                                              f"vocabulary {tokens} tokens")
    state = convert_state_dict(folder.weights, cfg, src_order, tgt_order, where)
    if not bool(state["decoder.output_bias"].any()):
        del state["decoder.output_bias"]
        cfg.output_bias = False
    return asdict(cfg), state, src_dict, tgt_dict


def languages(path: str, tokenizer_config: dict, source_lang: Optional[str], target_lang: Optional[str]) -> list:
    """The direction: the flags, else tokenizer_config.json's ``source_lang``/``target_lang``; each a language
    code (it names the folder's dictionary files), refused naming the flag or the file and key."""
    langs = []
    for flag, given in (("--source-lang", source_lang), ("--target-lang", target_lang)):
        key = flag[2:].replace("-", "_")
        if given is not None:
            langs.append(check_language_code(given, flag, UsageError))
        elif tokenizer_config.get(key) is None:
            raise DataError(f"{path}: tokenizer_config.json names no {key}; give it with {flag}")
        else:
            langs.append(check_language_code(tokenizer_config[key], f"{os.path.join(path, 'tokenizer_config.json')}: "
                                                                    f"{key}"))
    return langs


def checked_result(path: str, model_config: dict, state: dict, src_dict, tgt_dict) -> None:
    """The converted model as every program will load it (the loader's checks: a model the config builds,
    tensors of its names and shapes, finite float values), before anything is written."""
    from nmt_toolkit.models.state_dict_checks import check_state_dict
    from nmt_toolkit.registry import import_builtin_components

    import_builtin_components()
    config = {"components": {"task": "translation", "arch": "transformer", "model": "transformer"},
              "model": model_config}
    check_state_dict(weights_file(path), config, state, src_dict, tgt_dict)


def import_marian(path: str, source_lang: Optional[str] = None, target_lang: Optional[str] = None,
                  target_lang_tag: Optional[str] = None):
    """The Marian folder ``path`` read, converted and checked, as an
    :class:`~nmt_toolkit.importers.imported_model.ImportedModel` (written as a model folder); nothing is
    written here."""
    from nmt_toolkit.importers.imported_model import ImportedModel

    folder = read_marian_folder(path)
    model_config, state, src_dict, tgt_dict = converted(folder)
    langs = languages(path, folder.tokenizer_config, source_lang, target_lang)
    if target_lang_tag is not None:
        check_language_tag(target_lang_tag, src_dict.symbols, "--target-lang-tag", owner=f"{path}'s vocabulary")
    checked_result(path, model_config, state, src_dict, tgt_dict)
    return ImportedModel(origin={"format": "marian", "path": path}, model_config=model_config, state_dict=state,
                         src_dict=src_dict, tgt_dict=tgt_dict, source_lang=langs[0], target_lang=langs[1],
                         subword_scheme="sentencepiece",
                         subword_files={"source": folder.source_spm, "target": folder.target_spm},
                         target_lang_tag=target_lang_tag)
