"""Self-contained model folders: the weights, the model config, both dictionaries and the subword model(s),
described by ``manifest.json``; the unit people download, share, serve and fine-tune, usable with no data-bin.

::

    FOLDER/
      manifest.json       format, version, languages, file names, dictionary sizes and sha256, subword scheme
      config.json         {"components": {"task", "arch", "model"}, "model": {…}}: as our checkpoints store it
      model.safetensors   the weights under our state-dict names (safetensors: no pickle, no code on load)
      dict.<src>.txt dict.<tgt>.txt   (a multilingual folder: one dict.txt, the joint dictionary)
      spm.model | source.spm target.spm | bpe.codes | source.bpe target.bpe   (none for scheme "none")

A dictionary's ``size`` and ``sha256`` are its :meth:`Dictionary.fingerprint` (the sha256 of the symbols in index
order, what decides the ids), the identity checkpoints and data-bins record: a folder can be compared with either.
Every file the manifest names is a plain name inside the folder, and none is a link leading out of it; nothing
outside it is ever read. The manifest's ``files`` records the size and sha256 of every other file: reading
checks them for config.json and the subword models (another sentencepiece model segments otherwise, with no
error) and the size of the weights (their shapes and values are checked when loaded; hashing gigabytes on
every load would cost seconds). A folder written before ``files`` existed is read without it.

A multilingual folder (a ``--task translation_multi_simple_epoch`` model) has no ``source_lang``/``target_lang``:
its manifest lists ``languages`` (every language with a token in the dictionary) and, under ``multilingual``,
the trained directions (``lang_pairs``), the tag style and where the tags go (``encoder_langtok``,
``decoder_langtok``); ``config.json`` holds the same as the task's options, and its one ``dict.txt`` (source
and target alike) holds the language tokens. It is written as version 2, so an nmt_toolkit that would decode
it without its tags refuses it by version.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from typing import Optional

from nmt_toolkit.data.dictionary import Dictionary, fingerprint_mismatch
from nmt_toolkit.data.folder_files import member
from nmt_toolkit.data.json_files import read_json_object
from nmt_toolkit.data.language_codes import check_language_code, check_language_tag, is_language_code
from nmt_toolkit.errors import DataError, UsageError, check_format_version
from nmt_toolkit.export_record import is_export_folder
from nmt_toolkit.outputs import OutputKind, as_output

FORMAT = "nmt_toolkit-model-folder"
VERSION = 2
#: the version a bilingual folder is written as (readable by every nmt_toolkit that reads model folders)
BILINGUAL_VERSION = 1
MULTILINGUAL_TASK = "translation_multi_simple_epoch"
LANG_TOK_STYLES = ("multilingual", "opus_mt")
JOINT_DICTIONARY = "dict.txt"
MANIFEST = "manifest.json"
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
SCHEMES = ("sentencepiece", "bpe", "none")
#: the manifest's subword scheme → the codec kind of data/subword.py (and of preprocess.json)
CODEC_KINDS = {"sentencepiece": "sentencepiece", "bpe": "subword_nmt"}
ROLES = ("source", "target")
_SUBWORD_NAMES = {"sentencepiece": ("spm.model", "source.spm", "target.spm"),
                  "bpe": ("bpe.codes", "source.bpe", "target.bpe")}


def _manifest_names(folder: str) -> list[str]:
    """The file names an earlier folder's manifest lists (what --overwrite may remove with it)."""
    manifest = read_json_object(os.path.join(folder, MANIFEST), "manifest")
    subword = manifest.get("subword") or {}
    return [manifest.get("weights"), manifest.get("config"), subword.get("source"), subword.get("target"),
            *[(manifest.get("dictionaries") or {}).get(role, {}).get("file") for role in ROLES]]


#: a model folder as an output: what nmt-export --format folder, nmt-convert and --save-model-folder replace
MODEL_FOLDER = OutputKind("a model folder", markers=(MANIFEST,), required=(MANIFEST,),
                          members=(CONFIG, WEIGHTS, "dict*.txt", *[n for names in _SUBWORD_NAMES.values()
                                                                   for n in names]),
                          named_by=_manifest_names)


def is_model_folder(path: str) -> bool:
    """A directory holding ``manifest.json`` (what every ``--path`` takes as a model folder)."""
    return bool(path) and os.path.isdir(path) and os.path.isfile(os.path.join(path, MANIFEST))


def data_folder_of(path: Optional[str]) -> Optional[str]:
    """The folder that serves as the data-bin of ``--path`` when no data-bin is given: a model folder (or an
    ensemble ``a:b`` whose first member is one: the others are checked against its dictionaries) or a folder
    ``nmt-export --format ctranslate2`` wrote, both holding their dictionaries and subword models; None for no
    path. Any other path needs a data-bin, and the error says why: it does not exist, it is a folder that is
    neither, or it is a checkpoint file, which holds no dictionaries of ours."""
    first = (path or "").split(":")[0]
    if not first or is_model_folder(first) or is_export_folder(first):
        return first or None
    if not os.path.exists(first):
        raise DataError(f"{first}: no such checkpoint or model folder")
    if os.path.isdir(first):
        raise DataError(f"{first}: a folder without {MANIFEST}, so not a model folder (nmt-export --format folder "
                        f"writes one; a checkpoint is a file, decoded with its data-bin)")
    raise UsageError(f"{first}: a checkpoint file holds no dictionaries; give the data-bin it was trained on "
                     f"(positional DATA, or Translator.load(path, data=...)), or a model folder")


def scheme_of_codec(kind: Optional[str]) -> str:
    """preprocess.json's subword ``type`` (or None) → the manifest's scheme."""
    if not kind:
        return "none"
    for scheme, codec_kind in CODEC_KINDS.items():
        if codec_kind == kind:
            return scheme
    raise UsageError(f"unknown subword model type {kind!r} (choices: {', '.join(CODEC_KINDS.values())})")


@dataclass
class ModelFolder:
    """A model folder read and checked by :func:`read_model_folder`."""

    path: str
    manifest: dict
    config: dict
    src_dict: Dictionary
    tgt_dict: Dictionary
    subword_scheme: str
    subword_paths: dict  # role → absolute path of the subword model file (empty for scheme "none")

    @property
    def multilingual(self) -> Optional[dict]:
        """The manifest's multilingual record (directions, tag style, tag places), or None (a bilingual folder)."""
        return self.manifest.get("multilingual")

    @property
    def languages(self) -> list[str]:
        """Every language the model translates from or into."""
        if self.multilingual is not None:
            return list(self.manifest["languages"])
        return [self.source_lang, self.target_lang]

    @property
    def source_lang(self) -> str:
        return self._pair()[0]

    @property
    def target_lang(self) -> str:
        return self._pair()[1]

    def _pair(self) -> tuple[str, str]:
        """The language pair of a bilingual folder; a multilingual folder has none, so what reads one (data
        binarized for it, fine-tuning) refuses it in one line."""
        if self.multilingual is not None:
            raise UsageError(f"{self.path}: a multilingual model folder ({', '.join(self.languages)}); it decodes "
                             f"with --source-lang and --target-lang, and is not read as one language pair here")
        return self.manifest["source_lang"], self.manifest["target_lang"]

    def task_options(self) -> Optional[dict]:
        """The options of the task that decodes a multilingual folder (as config.json records them), or None."""
        return None if self.multilingual is None else dict(self.config["task"])

    @property
    def target_lang_tag(self) -> Optional[str]:
        return self.manifest.get("target_lang_tag")

    @property
    def dict_files(self) -> tuple[str, str]:
        return tuple(os.path.join(self.path, self.manifest["dictionaries"][role]["file"]) for role in ROLES)

    @property
    def codec_kind(self) -> Optional[str]:
        """The codec kind of data/subword.py (``None`` for scheme "none")."""
        return CODEC_KINDS.get(self.subword_scheme)

    def codec(self, role: str = "source"):
        """The subword codec of ``role`` (``None`` for scheme "none")."""
        from nmt_toolkit.data.subword import load_codec

        if self.subword_scheme == "none":
            return None
        return load_codec(self.codec_kind, self.subword_paths[role])

    def state_dict(self) -> dict:
        """The weights from ``model.safetensors`` (read without pickle: no code runs)."""
        return _read_safetensors(os.path.join(self.path, self.manifest["weights"]))

    def checkpoint(self) -> dict:
        """A dict shaped like our checkpoints (``model``, ``config``, ``version``, ``dictionaries``), so the
        checkpoint loading path builds and checks the model as it does for a ``.pt`` file."""
        from nmt_toolkit.checkpoints import VERSION as CHECKPOINT_VERSION, dictionaries_record

        pair = (None, None) if self.multilingual is not None else self._pair()  # a multilingual model: any two
        task = self.task_options() or {"source_lang": pair[0], "target_lang": pair[1]}
        config = {"components": dict(self.config["components"]), "model": dict(self.config["model"]), "task": task}
        return {"model": self.state_dict(), "config": config, "version": CHECKPOINT_VERSION,
                "dictionaries": dictionaries_record(self.src_dict, self.tgt_dict, *pair)}


# --------------------------------------------------------------------------- writing


def write_model_folder(out_dir: str, *, arch: str, model_config: dict, state_dict, src_dict: Dictionary,
                       tgt_dict: Dictionary, source_lang: Optional[str], target_lang: Optional[str],
                       subword_scheme: str, subword_files: dict, target_lang_tag: Optional[str] = None, made_by: str,
                       overwrite: bool = False, multilingual: Optional[dict] = None) -> None:
    """Write a model folder at ``out_dir`` (a path, or an output a program claimed already), atomically, through
    :class:`~nmt_toolkit.outputs.FolderOutput`: a failure leaves no half folder and an earlier one intact, and
    only an earlier model folder is ever replaced (with ``overwrite``).

    ``subword_files`` maps the roles "source"/"target" to existing files to copy (one path for both: a joint
    model). ``multilingual`` (a multilingual model; no language pair then) holds ``languages``, ``lang_pairs``
    (a list), ``lang_tok_style``, ``encoder_langtok`` and ``decoder_langtok``.
    """
    output = as_output(out_dir, MODEL_FOLDER, overwrite)
    names = _subword_names(subword_scheme, subword_files)
    languages = _languages_entry(source_lang, target_lang, multilingual, src_dict, tgt_dict)
    components = {"task": MULTILINGUAL_TASK if multilingual else "translation", "arch": arch,
                  "model": _model_name(arch)}
    config = {"components": components, "model": dict(model_config)}
    if multilingual:
        config["task"] = multilingual_task_options(languages["multilingual"])
    with output.staged() as tmp:
        dict_entries = _write_dictionaries(tmp, src_dict, tgt_dict, source_lang, target_lang, bool(multilingual))
        for role, name in names.items():
            if not os.path.exists(os.path.join(tmp, name)):
                shutil.copyfile(subword_files[role], os.path.join(tmp, name))
        _write_json(os.path.join(tmp, CONFIG), config)
        _write_safetensors(os.path.join(tmp, WEIGHTS), state_dict)
        manifest = {
            "format": FORMAT, "version": VERSION if multilingual else BILINGUAL_VERSION, **languages,
            "weights": WEIGHTS, "config": CONFIG, "dictionaries": dict_entries,
            "subword": {"scheme": subword_scheme, **names}, "target_lang_tag": target_lang_tag,
            "made_by": made_by, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        manifest["files"] = _fingerprints(tmp, manifest)
        _write_json(os.path.join(tmp, MANIFEST), manifest)


def multilingual_task_options(record: dict) -> dict:
    """The options of ``--task translation_multi_simple_epoch`` that a multilingual record stands for (what
    config.json holds, and what decoding sets the task up with)."""
    return {"lang_pairs": ",".join(record["lang_pairs"]), "lang_tok_style": record["lang_tok_style"],
            "encoder_langtok": record["encoder_langtok"], "decoder_langtok": record["decoder_langtok"]}


def _languages_entry(source_lang, target_lang, multilingual: Optional[dict], src_dict: Dictionary,
                     tgt_dict: Dictionary) -> dict:
    """The manifest's languages: the pair of a bilingual model, or the languages and the multilingual record."""
    if not multilingual:
        if not source_lang or not target_lang:
            raise UsageError("a bilingual model folder needs its source and target language")
        return {"source_lang": source_lang, "target_lang": target_lang}
    if src_dict != tgt_dict:
        raise UsageError("a multilingual model has one joint dictionary; the source and target ones differ")
    manifest = {"languages": list(multilingual["languages"]),
                "multilingual": {key: multilingual[key] for key in MULTILINGUAL_KEYS}}
    manifest["multilingual"]["lang_pairs"] = list(manifest["multilingual"]["lang_pairs"])
    _check_multilingual(manifest, "the multilingual record")
    return manifest


MULTILINGUAL_KEYS = ("lang_pairs", "lang_tok_style", "encoder_langtok", "decoder_langtok")


def _check_multilingual(manifest: dict, where: str) -> None:
    """The languages and the multilingual record: distinct codes, directions between them, known tag options."""
    langs, record = manifest.get("languages"), manifest["multilingual"]
    if not isinstance(langs, list) or not langs or len(set(map(str, langs))) != len(langs) or not all(
            is_language_code(lang) for lang in langs):
        raise DataError(f"{where}: 'languages' must list distinct language codes (ASCII letters, digits and _)")
    if not isinstance(record, dict) or set(record) != set(MULTILINGUAL_KEYS):
        raise DataError(f"{where}: 'multilingual' must hold exactly {', '.join(MULTILINGUAL_KEYS)}")
    pairs, known = record["lang_pairs"], set(langs)  # a set: a many-to-many model lists thousands of directions
    if not isinstance(pairs, list) or not pairs or not all(
            isinstance(p, str) and p.count("-") == 1 and all(x in known for x in p.split("-")) for p in pairs):
        raise DataError(f"{where}: 'multilingual.lang_pairs' must list directions SRC-TGT between its languages "
                        f"({', '.join(map(str, langs))})")
    if record["lang_tok_style"] not in LANG_TOK_STYLES:
        raise DataError(f"{where}: 'multilingual.lang_tok_style' must be one of {', '.join(LANG_TOK_STYLES)}")
    if record["encoder_langtok"] not in (None, "src", "tgt") or not isinstance(record["decoder_langtok"], bool):
        raise DataError(f"{where}: 'multilingual.encoder_langtok' must be null, src or tgt and 'decoder_langtok' "
                        f"true or false")


def _model_name(arch: str) -> str:
    """The model an ``--arch`` configures (an architecture preset's parent, or a model name itself)."""
    from nmt_toolkit.registry import ARCHITECTURES, MODELS, import_builtin_components

    import_builtin_components()
    if arch in ARCHITECTURES:
        return ARCHITECTURES.get(arch).parent
    if arch in MODELS:
        return arch
    raise UsageError(ARCHITECTURES.unknown_message(arch))


def _subword_names(scheme: str, files: dict) -> dict:
    """role → file name inside the folder; checks the scheme and that the files exist."""
    if scheme not in SCHEMES:
        raise UsageError(f"subword scheme {scheme!r}: expected one of {', '.join(SCHEMES)}")
    files = dict(files or {})
    unknown = [role for role in files if role not in ROLES]
    if unknown:
        raise UsageError(f"subword file role {unknown[0]!r}: expected source or target")
    if scheme == "none":
        if files:
            raise UsageError("subword scheme 'none' takes no subword files")
        return {}
    if set(files) != set(ROLES):
        raise UsageError(f"subword scheme {scheme!r} needs a source and a target file (the same path if joint)")
    for path in files.values():
        if not os.path.isfile(path):
            raise DataError(f"{path}: subword model not found")
    joint, source, target = _SUBWORD_NAMES[scheme]
    if os.path.realpath(files["source"]) == os.path.realpath(files["target"]):
        return {"source": joint, "target": joint}
    return {"source": source, "target": target}


def _write_dictionaries(folder: str, src_dict: Dictionary, tgt_dict: Dictionary, source_lang: Optional[str],
                        target_lang: Optional[str], joint: bool = False) -> dict:
    if joint:  # a multilingual model: one dictionary, every language's token in it
        src_dict.save(os.path.join(folder, JOINT_DICTIONARY))
        entry = {"file": JOINT_DICTIONARY, **src_dict.fingerprint()}
        return {"source": entry, "target": dict(entry)}
    entries = {}
    for role, dictionary, lang in (("source", src_dict, source_lang), ("target", tgt_dict, target_lang)):
        name = f"dict.{lang}.txt"
        if role == "target" and name == entries["source"]["file"]:
            name = f"dict.target.{lang}.txt"  # one language on both sides: two files all the same
        dictionary.save(os.path.join(folder, name))
        entries[role] = {"file": name, **dictionary.fingerprint()}
    return entries


def _write_json(path: str, value: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def _write_safetensors(path: str, state_dict) -> None:
    """Floating-point tensors as float32; every tensor copied to its own memory (safetensors refuses tensors
    that share storage, as tied embeddings do; each name keeps its own copy so loading needs no tying)."""
    import torch
    from safetensors.torch import save_file

    tensors = {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach().to("cpu")
        if tensor.is_floating_point():
            tensor = tensor.to(torch.float32)
        tensors[name] = tensor.contiguous().clone()
    save_file(tensors, path, metadata={"format": "pt"})


# --------------------------------------------------------------------------- reading


def read_model_folder(path: str) -> ModelFolder:
    """Read and check the folder at ``path``: its manifest, the sizes and sha256 it records of the other files,
    the config (the model's options as their dataclass declares them) and the dictionaries (against the
    manifest's sha256). The weights are read on :meth:`ModelFolder.state_dict`. A malformed folder is one
    DataError naming the file and what is wrong."""
    if not os.path.isdir(path):
        raise DataError(f"{path}: no such model folder" if not os.path.exists(path) else f"{path}: not a folder")
    manifest_path = member(path, MANIFEST)
    manifest = read_json_object(manifest_path, "the manifest", missing=_MISSING)
    _check_manifest(manifest, manifest_path, path)
    config_path = os.path.join(path, manifest["config"])
    config = read_json_object(config_path, "the model config", missing=_MISSING)
    _check_config(config, config_path, manifest)
    dicts = [_read_dictionary(path, manifest, role) for role in ROLES]
    if manifest.get("target_lang_tag") is not None:
        check_language_tag(manifest["target_lang_tag"], dicts[0].symbols, f"{manifest_path}: target_lang_tag",
                           owner=os.path.join(path, manifest["dictionaries"]["source"]["file"]))
    scheme = manifest["subword"]["scheme"]
    subword_paths = {role: os.path.join(path, manifest["subword"][role]) for role in ROLES if scheme != "none"}
    return ModelFolder(path, manifest, config, dicts[0], dicts[1], scheme, subword_paths)


_MISSING = f"missing (a model folder holds {MANIFEST}, {CONFIG}, weights and dictionaries)"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _check_manifest(manifest: dict, where: str, folder: str) -> None:
    if manifest.get("format") != FORMAT:
        raise DataError(f"{where}: format {manifest.get('format')!r} is not {FORMAT!r} (not a model folder "
                        f"written by nmt_toolkit)")
    check_format_version(manifest.get("version"), VERSION, where, "model folder")
    multilingual = "multilingual" in manifest
    if multilingual and manifest["version"] < VERSION:
        raise DataError(f"{where}: a multilingual record in a version-{manifest['version']} manifest (multilingual "
                        f"folders are version {VERSION}): an edited file")
    for key in ("weights", "config") if multilingual else ("source_lang", "target_lang", "weights", "config"):
        if not isinstance(manifest.get(key), str) or not manifest[key]:
            raise DataError(f"{where}: {key!r} is missing or not a string")
    for key in () if multilingual else ("source_lang", "target_lang"):
        check_language_code(manifest[key], f"{where}: {key}")
    if multilingual and manifest.get("target_lang_tag") is not None:
        raise DataError(f"{where}: target_lang_tag {manifest['target_lang_tag']!r} in a multilingual folder, whose "
                        f"tags follow its multilingual record: an edited file")
    dictionaries, subword = manifest.get("dictionaries"), manifest.get("subword")
    if not isinstance(dictionaries, dict) or not all(isinstance(dictionaries.get(r), dict) for r in ROLES):
        raise DataError(f"{where}: 'dictionaries' needs a 'source' and a 'target' entry")
    if multilingual:
        _check_multilingual(manifest, where)
        if dictionaries["source"] != dictionaries["target"]:
            raise DataError(f"{where}: a multilingual model has one joint dictionary; 'dictionaries' names two")
    if not isinstance(subword, dict) or subword.get("scheme") not in SCHEMES:
        raise DataError(f"{where}: 'subword.scheme' must be one of {', '.join(SCHEMES)}")
    files = [("weights", manifest["weights"]), ("config", manifest["config"])]
    files += [(f"dictionaries.{r}.file", dictionaries[r].get("file")) for r in ROLES]
    if subword["scheme"] != "none":
        files += [(f"subword.{r}", subword.get(r)) for r in ROLES]
    for key, name in files:
        _check_member(where, folder, key, name)
    _check_fingerprints(manifest, where, folder)


def _check_member(where: str, folder: str, key: str, name) -> None:
    """A file the manifest names: a plain name inside the folder, present, and not a link leading out of it."""
    if not isinstance(name, str) or not name or os.path.basename(name) != name or name in (".", ".."):
        raise DataError(f"{where}: {key} {name!r} is not a file name inside the folder")
    if not os.path.isfile(os.path.join(folder, name)):
        raise DataError(f"{os.path.join(folder, name)}: missing (named by {where} as {key})")
    member(folder, name, f"{key} of {MANIFEST}")


def _fingerprinted(manifest: dict) -> list[str]:
    """The files whose size and sha256 the manifest records (``files``): every file it names but the
    dictionaries, which it identifies by their symbols."""
    subword = manifest["subword"]
    names = [manifest["config"], manifest["weights"]]
    if subword["scheme"] != "none":
        names += [subword[role] for role in ROLES]
    return list(dict.fromkeys(names))


def _fingerprints(folder: str, manifest: dict) -> dict:
    """``files`` of a new manifest: name → size and sha256 of each of :func:`_fingerprinted`."""
    return {name: {"size": os.path.getsize(os.path.join(folder, name)), "sha256": file_sha256(os.path.join(folder, name))}
            for name in _fingerprinted(manifest)}


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_fingerprints(manifest: dict, where: str, folder: str) -> None:
    """The files against the sizes and sha256 the manifest records: the config and the subword models by
    sha256 (another sentencepiece model segments otherwise, with no error), the weights by size (their shapes
    against the config and their values are checked when loaded; hashing gigabytes on every load would cost
    seconds). A folder written before the record existed has none, and is read as before."""
    record = manifest.get("files")
    if record is None:
        return
    if not isinstance(record, dict):
        raise DataError(f"{where}: 'files' must be an object: file name → its size and sha256")
    for name in _fingerprinted(manifest):
        entry = record.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int) or \
                not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]):
            raise DataError(f"{where}: files.{name} must hold the file's size and sha256 (64 hexadecimal digits)")
        path = os.path.join(folder, name)
        size = os.path.getsize(path)
        digest = None if name == manifest["weights"] else file_sha256(path)
        if size != entry["size"] or digest not in (None, entry["sha256"]):
            shown = f", sha256 {digest[:12]}…" if digest else ""
            recorded = f", sha256 {entry['sha256'][:12]}…" if digest else ""
            raise DataError(f"{path}: differs from the file the manifest records ({size} bytes{shown} against "
                            f"{entry['size']} bytes{recorded}): the file was edited or replaced")


def _check_config(config: dict, where: str, manifest: dict) -> None:
    components = config.get("components")
    if not isinstance(components, dict) or not isinstance(components.get("model"), str):
        raise DataError(f"{where}: 'components.model' is missing")
    if not isinstance(config.get("model"), dict):
        raise DataError(f"{where}: 'model' (the model's options) is missing or not an object")
    if "multilingual" in manifest and (components.get("task") != MULTILINGUAL_TASK or config.get("task") !=
                                       multilingual_task_options(manifest["multilingual"])):
        raise DataError(f"{where}: the task and its options differ from the manifest's multilingual record "
                        f"({MULTILINGUAL_TASK} with {multilingual_task_options(manifest['multilingual'])}): an "
                        f"edited file")
    if "multilingual" not in manifest and components.get("task", "translation") != "translation":
        raise DataError(f"{where}: task {components.get('task')!r} without the manifest's multilingual record: an "
                        f"edited file")
    _check_model_options(components["model"], config["model"], where)


def _check_model_options(model: str, options: dict, where: str) -> None:
    """The model's options as its config dataclass declares them (types, ranges, consistency), refused naming
    this file and the key: a value the loader would trip over later (a string where a number goes, a width of
    0, a billion layers) never reaches it."""
    from nmt_toolkit.config import from_dict
    from nmt_toolkit.errors import NmtError
    from nmt_toolkit.registry import MODELS, import_builtin_components

    import_builtin_components()
    if model not in MODELS:
        raise DataError(f"{where}: components.model {model!r} is not a model this nmt_toolkit knows (a plugin's? "
                        f"load it with --user-dir)")
    try:
        cfg = from_dict(MODELS.get(model).config, options, what=f"{where}: model")
        if hasattr(cfg, "validate"):
            cfg.validate()
    except NmtError as exc:
        raise DataError(str(exc) if str(exc).startswith(where) else f"{where}: model: {exc}") from None


def _read_dictionary(folder: str, manifest: dict, role: str) -> Dictionary:
    entry = manifest["dictionaries"][role]
    path = os.path.join(folder, entry["file"])
    dictionary = Dictionary.load(path)
    problem = fingerprint_mismatch(dictionary.fingerprint(), entry, required=True)
    if problem:
        raise DataError(f"{path}: the {role} dictionary differs from the one the manifest records ({problem}): the "
                        f"file was edited or replaced")
    return dictionary


def _read_safetensors(path: str) -> dict:
    """safetensors only: a file that is not one (a pickle, a torch zip) is refused, never unpickled."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not os.path.isfile(path):
        raise DataError(f"{path}: missing (the model folder's weights)")
    try:
        weights = load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{path}: not a safetensors file ({first}); a model folder's weights are never read "
                        f"as a pickle") from None
    for name, tensor in weights.items():
        if not tensor.is_floating_point():  # integers would be copied into float parameters as numbers
            raise DataError(f"{path}: tensor {name!r} is {str(tensor.dtype).replace('torch.', '')}, not floating "
                            f"point (a model folder's weights are float32)")
    return weights
