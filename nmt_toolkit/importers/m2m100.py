"""Hugging Face M2M-100 (``M2M100ForConditionalGeneration``) → a multilingual model folder of ours.

An M2M-100 model is fairseq's many-to-many Transformer, which ours computes with existing options: pre-norm
layers with a final layer norm after each stack (``--normalize-before``), embeddings scaled by sqrt(d_model)
(unless ``scale_embedding`` is false: ``--no-scale-embedding``), fairseq's sinusoids counted from
``padding_idx + 1`` (``--sinusoid-layout fairseq``), one embedding matrix for encoder, decoder and output
(``--share-all-embeddings``) and decoding from ``</s>``. The layers map weight for weight as the Marian
import maps them (:func:`~nmt_toolkit.importers.marian.convert_state_dict`), plus the two final norms.

Vocabulary: ``vocab.json`` holds fairseq's dictionary (``<s> <pad> </s> <unk>`` first, then the
sentencepiece pieces); ``M2M100Tokenizer`` gives the language tokens ``__en__`` … the ids after it, in the
order of its language-code list (``tokenizer_config.json`` ``language_codes``: ``m2m100``'s 100 codes or
``wmt21``'s 8), and the embedding matrix has a few more rows that no token names (fairseq pads its
dictionary with ``madeupword0000`` …, the names they get here). The rows are put in our dictionary order
(:func:`~nmt_toolkit.importers.marian.dictionary_order`, the identity for fairseq's order). NLLB-200's
dense models are the same architecture with an ``NllbTokenizer``: no vocab.json, the sentencepiece pieces
at their id + 1 after the same four symbols, and the language codes (``eng_Latn``) and ``<mask>`` at the ids
the tokenizer's files record (:func:`nllb_vocabulary`).

The folder is a multilingual one (``docs/multilingual.md``): its languages are the tokenizer's, every
direction between them is listed, sources start with the source language's token (``encoder_langtok src``:
``__en__ … </s>``, as the tokenizer writes them) and the decoder reads ``</s> __de__`` first
(``decoder_langtok``: the target token is the search's forced first token, Transformers'
``forced_bos_token_id``). Weights are read as the Marian import reads them (safetensors, or
``pytorch_model.bin`` with ``weights_only``); what our model cannot reproduce is refused naming the
``config.json`` key.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass

from nmt_toolkit.data.folder_files import member
from nmt_toolkit.data.language_codes import check_language_code
from nmt_toolkit.data.subword import load_codec
from nmt_toolkit.errors import DataError
from nmt_toolkit.importers.marian import (_json, _refuse, _vocab, checked_result, convert_state_dict,
                                              dictionary_order, read_weights, shared_fields)

#: M2M100Tokenizer's language-code lists (``language_codes`` of tokenizer_config.json), in id order
LANGUAGE_CODES = {
    "m2m100": ("af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he "
               "hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no "
               "ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo "
               "zh zu").split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}
FLORES_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")  # NLLB's language codes (FLORES-200): eng_Latn, zho_Hans …
MADEUP_WORD = "madeupword{:04d}"  # fairseq's name for the rows that round a dictionary's size up
SPM_FILE = "sentencepiece.bpe.model"
#: the sinusoid tables older Transformers versions saved with the weights (recomputed, as Transformers does now)
POSITION_TABLES = ("model.encoder.embed_positions.weights", "model.decoder.embed_positions.weights")
#: the final layer norms of the two pre-norm stacks: Transformers' names → ours
FINAL_NORMS = {"model.encoder.layer_norm": "encoder.layer_norm", "model.decoder.layer_norm": "decoder.layer_norm"}


@dataclass
class M2M100Folder:
    """The files of an ``M2M100ForConditionalGeneration`` folder, read and checked."""

    path: str
    config: dict
    weights: dict  # Transformers' names, ``model.`` prefix added where a file lacks it
    vocab: list  # id → token: vocab.json's, the language tokens, then the unnamed rows
    languages: list
    spm: str
    tokenizer_config: dict


def language_token(code: str) -> str:
    """M2M100Tokenizer's token of a language code (fairseq's ``__de__``)."""
    return f"__{code}__"


def _prefixed(weights: dict) -> dict:
    return {(k if k.startswith(("model.", "lm_head", "final_logits_bias")) else f"model.{k}"): v
            for k, v in weights.items()}


def _embedding_rows(weights: dict, path: str) -> int:
    for name in ("model.shared.weight", "model.encoder.embed_tokens.weight"):
        if name in weights:
            return int(weights[name].shape[0]) if weights[name].dim() else 0
    raise DataError(f"{path}: tensor 'model.shared.weight' is missing (the embeddings of every M2M-100 model)")


def read_m2m100_folder(path: str) -> M2M100Folder:
    """Read the files of an ``M2M100ForConditionalGeneration`` folder (``save_pretrained``'s, or a Hub
    download): config.json, the weights, sentencepiece.bpe.model, tokenizer_config.json, and vocab.json for
    an M2M100Tokenizer (an NllbTokenizer has none)."""
    if not os.path.isdir(path):
        raise DataError(f"--path {path}: not a folder (a Hugging Face M2M100ForConditionalGeneration folder is "
                        f"expected)")
    config = _json(os.path.join(path, "config.json"), "the model config")
    where = os.path.join(path, "config.json")
    if config.get("model_type") != "m2m_100":
        _refuse(where, "model_type", config.get("model_type"), "only m2m_100 models are imported (NLLB-MoE's "
                                                              "expert layers have no place in our transformer)")
    tok_path = os.path.join(path, "tokenizer_config.json")
    tokenizer_config = _json(tok_path, "the tokenizer config") if os.path.isfile(tok_path) else {}
    spm = os.path.join(path, SPM_FILE)
    if not os.path.isfile(spm):
        raise DataError(f"{path}: {SPM_FILE} is missing (the tokenizer's sentencepiece model)")
    load_codec("sentencepiece", member(path, SPM_FILE, "the sentencepiece model"))
    if not any(os.path.isfile(os.path.join(path, name)) for name in ("model.safetensors", "pytorch_model.bin")):
        raise DataError(f"{path}: no model.safetensors or pytorch_model.bin (not an M2M100ForConditionalGeneration "
                        f"folder)")
    weights = _prefixed(read_weights(path))
    rows = _embedding_rows(weights, path)
    if str(tokenizer_config.get("tokenizer_class", "")).startswith("Nllb"):
        vocab, languages = nllb_vocabulary(spm, tokenizer_config, rows, config, path)
    else:
        codes = tokenizer_config.get("language_codes", "m2m100")
        if codes not in LANGUAGE_CODES:
            raise DataError(f"{tok_path}: language_codes={json.dumps(codes)} is not one of M2M100Tokenizer's "
                            f"({', '.join(LANGUAGE_CODES)})")
        languages = list(LANGUAGE_CODES[codes])
        vocab = full_vocabulary(_vocab(os.path.join(path, "vocab.json")), languages, rows, config, tokenizer_config,
                                path)
    for code in languages:
        check_language_code(code, f"{tok_path}: language code")
    return M2M100Folder(path=path, config=config, weights=weights, vocab=vocab, languages=languages, spm=spm,
                        tokenizer_config=tokenizer_config)


def nllb_vocabulary(spm: str, tokenizer_config: dict, rows: int, config: dict, path: str) -> tuple[list, list]:
    """Every embedding row's token and the languages of an NllbTokenizer folder. Its ids are fairseq's: ``<s>
    <pad> </s> <unk>`` at 0–3, sentencepiece piece ``i`` (from 3 on) at ``i + 1``, then the added tokens at
    the ids the folder records (:func:`added_tokens`): the FLORES-200 language codes (``eng_Latn`` …, in id
    order) and ``<mask>``. A language code's token is named as fairseq's NLLB dictionary names it,
    ``__eng_Latn__`` (names do not reach the model; ids do)."""
    import sentencepiece

    tok_path = os.path.join(path, "tokenizer_config.json")
    if tokenizer_config.get("legacy_behaviour"):
        raise DataError(f"{tok_path}: legacy_behaviour=true (the source language's token after </s>) is not "
                        f"imported; our multilingual models put it first")
    processor = sentencepiece.SentencePieceProcessor(model_file=spm)
    tokens = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>"}
    tokens.update({i + 1: processor.id_to_piece(i) for i in range(3, processor.get_piece_size())})
    added = added_tokens(path, tokenizer_config)
    for index, content in added.items():
        if content in tokens.values() and tokens.get(index) != content:
            raise DataError(f"{path}: the tokenizer gives {content!r} id {index}, which the sentencepiece model's "
                            f"layout does not")
    codes = [added[i] for i in sorted(added) if FLORES_CODE.fullmatch(added[i])]
    if not codes:
        raise DataError(f"{tok_path}: the tokenizer records no language code such as eng_Latn with its id "
                        f"(added_tokens_decoder, or tokenizer.json's added_tokens); save it again with a current "
                        f"Transformers")
    tokens.update({i: language_token(t) if t in codes else t for i, t in added.items()})
    if config.get("vocab_size", rows) != rows or max(tokens) >= rows:
        _refuse(os.path.join(path, "config.json"), "vocab_size", config.get("vocab_size", rows),
                f"the embeddings have {rows} rows, the tokenizer's ids reach {max(tokens)}")
    vocab, unnamed = [], 0
    for i in range(rows):
        vocab.append(tokens.get(i) or MADEUP_WORD.format(unnamed))
        unnamed += i not in tokens
    return vocab, codes


def added_tokens(path: str, tokenizer_config: dict) -> dict:
    """id → content of the tokens a Hugging Face tokenizer adds to its model's vocabulary, as
    tokenizer_config.json (``added_tokens_decoder``) and tokenizer.json (``added_tokens``) record them; the
    two disagreeing is refused."""
    added = {}
    for index, entry in (tokenizer_config.get("added_tokens_decoder") or {}).items():
        if isinstance(entry, dict) and isinstance(entry.get("content"), str) and str(index).isdigit() \
                and len(str(index)) <= 18:
            added[int(index)] = entry["content"]
    tok_json = os.path.join(path, "tokenizer.json")
    if os.path.isfile(tok_json):
        for entry in _json(tok_json, "the tokenizer").get("added_tokens") or []:
            if not (isinstance(entry, dict) and isinstance(entry.get("id"), int) and isinstance(entry.get("content"),
                                                                                             str)):
                continue
            if added.setdefault(entry["id"], entry["content"]) != entry["content"]:
                raise DataError(f"{tok_json}: gives id {entry['id']} to {entry['content']!r}, tokenizer_config.json "
                                f"to {added[entry['id']]!r}")
    return added


def full_vocabulary(vocab: list, codes: list, rows: int, config: dict, tokenizer_config: dict, path: str) -> list:
    """Every embedding row's token: vocab.json's, the language tokens after them (M2M100Tokenizer's ids), and
    ``madeupword`` names for the rows left. A language token that vocab.json already holds, or that
    tokenizer_config.json records at another id, and embeddings too small for the tokens, are refused."""
    tokens = list(vocab) + [language_token(code) for code in codes]
    clash = next((t for t in vocab if t in set(tokens[len(vocab):])), None)
    if clash is not None:
        raise DataError(f"{path}: vocab.json holds the language token {clash!r}, which M2M100Tokenizer gives the "
                        f"id after its last entry")
    recorded = tokenizer_config.get("added_tokens_decoder") or {}
    for index, entry in recorded.items():
        content = entry.get("content") if isinstance(entry, dict) else None
        if content in tokens[len(vocab):] and str(tokens.index(content)) != str(index):
            raise DataError(f"{path}: tokenizer_config.json gives {content!r} id {index}; M2M100Tokenizer's "
                            f"layout gives it {tokens.index(content)}")
    if config.get("vocab_size", rows) != rows or rows < len(tokens):
        _refuse(os.path.join(path, "config.json"), "vocab_size", config.get("vocab_size", rows),
                f"the embeddings have {rows} rows, the vocabulary and language tokens {len(tokens)}")
    return tokens + [MADEUP_WORD.format(i) for i in range(rows - len(tokens))]


def transformer_config(config: dict, path: str = "config.json"):
    """Our :class:`TransformerConfig` for an M2M-100 ``config.json``; what it cannot reproduce is refused in
    one line naming the key (``encoder_layerdrop``/``decoder_layerdrop`` only skip layers in training)."""
    from nmt_toolkit.models.transformer import TransformerConfig

    fields = shared_fields(config, path, activation="relu", attention_dropout=0.1, scale_embedding=True)
    if config.get("pad_token_id", 1) != 1:
        _refuse(path, "pad_token_id", config.get("pad_token_id"), "M2M-100's positions count from pad_token_id + 1; "
                                                                  "our fairseq sinusoids count from 2")
    if config.get("decoder_start_token_id", 2) != config.get("eos_token_id", 2):
        _refuse(path, "decoder_start_token_id", config.get("decoder_start_token_id"), "decoding starts from the "
                                                                                      "EOS symbol")
    if not config.get("tie_word_embeddings", True):
        _refuse(path, "tie_word_embeddings", False, "our model ties the output matrix to the shared embeddings")
    return TransformerConfig(
        **fields, normalize_before=True, sinusoid_layout="fairseq", share_all_embeddings=True,
        share_decoder_input_output_embed=False, output_bias=False, decoder_start="eos")


def converted(folder: M2M100Folder) -> tuple:
    """``(model config dict, our state dict, the joint dictionary)`` of an M2M-100 folder."""
    where = os.path.join(folder.path, "config.json")
    cfg = transformer_config(folder.config, where)
    dictionary, order = dictionary_order(folder.vocab, folder.config, folder.tokenizer_config, where)
    layers = {k: v for k, v in folder.weights.items() if k not in POSITION_TABLES}
    norms = {}
    for theirs, ours in FINAL_NORMS.items():
        for part in ("weight", "bias"):
            if f"{theirs}.{part}" not in layers:
                raise DataError(f"{where}: tensor '{theirs}.{part}' is missing (the final layer norm of a "
                                f"pre-norm M2M-100 stack)")
            norms[f"{ours}.{part}"] = layers.pop(f"{theirs}.{part}").float()
    state = convert_state_dict(layers, cfg, order, order, where)
    if bool(state["decoder.output_bias"].any()):  # a symbol of ours M2M-100 lacks (<s>): kept at p = 0
        cfg.output_bias = True
    else:
        del state["decoder.output_bias"]
    state.update(norms)
    return asdict(cfg), state, dictionary


def import_m2m100(path: str):
    """The M2M-100 folder ``path`` read, converted and checked, as an
    :class:`~nmt_toolkit.importers.imported_model.ImportedModel` (written as a multilingual model folder: every
    direction between the tokenizer's languages); nothing is written here."""
    from nmt_toolkit.importers.imported_model import ImportedModel

    folder = read_m2m100_folder(path)
    model_config, state, dictionary = converted(folder)
    checked_result(path, model_config, state, dictionary, dictionary)
    langs = folder.languages
    multilingual = {"languages": langs, "lang_pairs": [f"{a}-{b}" for a in langs for b in langs if a != b],
                    "lang_tok_style": "multilingual", "encoder_langtok": "src", "decoder_langtok": True}
    return ImportedModel(origin={"format": "m2m100", "path": path}, model_config=model_config, state_dict=state,
                         src_dict=dictionary, tgt_dict=dictionary, subword_scheme="sentencepiece",
                         subword_files={"source": folder.spm, "target": folder.spm}, multilingual=multilingual)
