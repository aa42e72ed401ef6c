"""What each format we export to can hold: one check for every exporter, refusing a model before anything is
written and naming every option the format cannot represent at once (as CTranslate2's ConfigurationChecker
does), so a user fixes them in one go instead of one refusal at a time.

Each format's limits are a list of ``(applies, option, why)`` rows; a model class other than the built-in
transformer is refused whole (a plugin's layers have no counterpart in any of these formats).
"""
from __future__ import annotations

from typing import Optional

from nmt_toolkit.errors import UsageError

#: the formats, as their messages name them
TARGETS = {"ctranslate2": "CTranslate2", "fairseq": "fairseq", "marian": "Hugging Face Marian"}


class NotExportable(UsageError):
    """A model the chosen format cannot represent (exit 2, as for any option that does not fit): the message
    names every reason."""


def _head_dims(cfg) -> list:
    """A ``--key-dim``/``--value-dim`` other than d_model/h: every format we export to splits the model
    dimension evenly between the heads."""
    even = cfg.embed_dim // cfg.attention_heads
    return [(value is not None and (value != even or cfg.embed_dim % cfg.attention_heads),
             f"--{name.replace('_', '-')} {value}",
             f"its attention heads have d_model / heads = {cfg.embed_dim} / {cfg.attention_heads} dimensions")
            for name, value in (("key_dim", cfg.key_dim), ("value_dim", cfg.value_dim))]


def _ctranslate2(cfg, dictionaries, subword_kind) -> list:
    return [(cfg.activation_fn not in ("relu", "gelu", "silu"), f"--activation-fn {cfg.activation_fn}",
             "it has no such activation")]


def _fairseq(cfg, dictionaries, subword_kind) -> list:
    return [(cfg.output_bias, "--output-bias", "its output projection has no bias"),
            (cfg.decoder_start == "pad", "--decoder-start pad", "it starts decoding from EOS"),
            (cfg.activation_fn == "silu", "--activation-fn silu", "not among the activations we export"),
            (cfg.sinusoid_layout == "marian" and cfg.positional_embeddings == "sinusoidal",
             "--sinusoid-layout marian", "not among the layouts we export")]


def _marian(cfg, dictionaries, subword_kind) -> list:
    src_dict, tgt_dict = dictionaries
    repeated = [side for d, side in ((src_dict, "source"), (tgt_dict, "target")) if len(set(d.symbols)) != len(d.symbols)]
    return [
        (cfg.normalize_before, "--normalize-before", "Marian's layers are post-norm"),
        (cfg.positional_embeddings != "sinusoidal", f"--positional-embeddings {cfg.positional_embeddings}",
         "Marian computes sinusoidal positions"),
        (cfg.positional_embeddings == "sinusoidal" and cfg.sinusoid_layout != "marian",
         f"--sinusoid-layout {cfg.sinusoid_layout}", "Hugging Face recomputes Marian's own sinusoids (sine half, "
                                                     "cosine half, from position 0): train with --sinusoid-layout marian"),
        (cfg.layernorm_embedding, "--layernorm-embedding", "Marian has no LayerNorm on its embeddings"),
        (not (cfg.share_all_embeddings or cfg.share_decoder_input_output_embed), "an untied output projection",
         "export with --share-all-embeddings or --share-decoder-input-output-embed"),
        (not cfg.share_all_embeddings and len(src_dict) != len(tgt_dict),
         f"separate dictionaries of {len(src_dict)} and {len(tgt_dict)} symbols",
         "Transformers gives Marian's decoder embeddings as many rows as the source vocabulary"),
        (subword_kind != "sentencepiece", f"subword model {subword_kind or 'none'}",
         "MarianTokenizer reads sentencepiece models"),
        (bool(repeated), f"the {' and '.join(repeated)} dictionary repeats a symbol (#fairseq:overwrite)",
         "a Marian vocabulary maps each token to one id"),
    ]


def registered_model(config: dict, what: str) -> tuple:
    """``(model class, model config)`` that a checkpoint's plain config builds, without building the model
    (what an exporter that converts the weights directly checks)."""
    from nmt_toolkit.config import from_dict
    from nmt_toolkit.registry import MODELS, import_builtin_components

    import_builtin_components()
    entry = MODELS.get((config.get("components") or {}).get("model"))
    return entry.obj, from_dict(entry.config, config.get("model") or {}, what=f"{what}: model config")


_LIMITS = {"ctranslate2": _ctranslate2, "fairseq": _fairseq, "marian": _marian}


def check_exportable(cfg, target: str, what: str, *, model_class: type, dictionaries: Optional[tuple] = None,
                     subword_kind: Optional[str] = None) -> None:
    """Refuse with one :class:`NotExportable` naming ``what`` (the checkpoint) and every reason the model
    cannot be written in ``target``'s format ("ctranslate2", "fairseq" or "marian"). ``cfg`` is the model's
    config and ``model_class`` the class it builds; Marian needs the ``(source, target)`` dictionaries and the
    subword model's kind too."""
    from nmt_toolkit.models.transformer import TransformerModel

    name = TARGETS[target]
    if model_class is not TransformerModel:
        raise NotExportable(f"{what}: cannot be exported to {name}: a {model_class.__name__} (only the built-in "
                            f"transformer model: a plugin's layers have no {name} equivalent)")
    problems = [f"{option} ({why})" for applies, option, why in
                _head_dims(cfg) + _LIMITS[target](cfg, dictionaries, subword_kind) if applies]
    if problems:
        raise NotExportable(f"{what}: cannot be exported to {name}: {'; '.join(problems)}")
