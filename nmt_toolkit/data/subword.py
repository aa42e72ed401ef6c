"""sentencepiece and subword-nmt BPE behind one interface: learn, encode, decode.

A codec turns raw text into space-joined pieces (``encode``) and back (``decode``); ``encode_pieces``
gives the pieces as a list (what the binarizer looks up in the dictionary). ``nmt-preprocess`` stores the
learned model in the data-bin folder and records ``{"type": …, "model": file name}`` in ``preprocess.json``,
so :func:`load_codec` can rebuild the codec for generation without being told again.

- ``sentencepiece``: one joint model (``--bpe-vocab-size``); pieces carry ``▁`` at word starts.
- ``subword_nmt``: joint BPE codes (``--bpe-merges``) on whitespace-tokenized text; non-final pieces end with
  ``@@`` (``decode`` removes ``"@@ "``).

Each library is imported by the code that uses it: a data-bin needs one of them, ``--help`` neither.
"""
from __future__ import annotations

import itertools
import logging
import os
from typing import Optional, Sequence

from nmt_toolkit.errors import DataError, UsageError

logger = logging.getLogger(__name__)

KINDS = ("sentencepiece", "subword_nmt")


class SentencePieceCodec:
    kind = "sentencepiece"

    def __init__(self, model_path: str):
        import sentencepiece as spm

        self.model_path = model_path
        try:
            self.sp = spm.SentencePieceProcessor(model_file=model_path)
        except (OSError, RuntimeError) as exc:
            raise DataError(f"{model_path}: not a sentencepiece model ({exc})") from None

    def encode_pieces(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def encode_pieces_batch(self, lines: Sequence[str]) -> list[list[str]]:
        return self.sp.encode(list(lines), out_type=str)

    def encode(self, text: str) -> str:
        return " ".join(self.encode_pieces(text))

    def decode(self, pieces: str) -> str:
        return self.sp.decode(pieces.split())


class SubwordNmtCodec:
    kind = "subword_nmt"

    def __init__(self, codes_path: str):
        from subword_nmt.apply_bpe import BPE

        self.model_path = codes_path
        try:
            with open(codes_path, encoding="utf-8") as handle:
                _check_codes(codes_path, handle)
                self.bpe = BPE(handle, separator="@@")
        except (OSError, ValueError, UnicodeDecodeError, IndexError) as exc:
            raise DataError(f"{codes_path}: not a subword-nmt codes file ({exc})") from None

    def encode_pieces(self, text: str) -> list[str]:
        return self.bpe.segment(" ".join(text.split())).split()

    def encode_pieces_batch(self, lines: Sequence[str]) -> list[list[str]]:
        return [self.encode_pieces(line) for line in lines]

    def encode(self, text: str) -> str:
        return " ".join(self.encode_pieces(text))

    def decode(self, pieces: str) -> str:
        return (pieces + " ").replace("@@ ", "").rstrip()


def _check_codes(path: str, handle) -> None:
    """Every merge line holds two units, as subword-nmt's BPE expects: it prints its own message and exits
    the process on any other line. Reads the lines as BPE does, then leaves ``handle`` at the start."""
    lines = handle.read().rstrip("\n").split("\n")
    handle.seek(0)
    for number, line in enumerate(lines, start=1):
        if number == 1 and line.startswith("#version:"):
            continue
        if len(line.strip("\r\n ").split(" ")) != 2:
            raise DataError(f"{path} line {number}: not a subword-nmt codes file (expected two units separated "
                            f"by a space, got {line.strip()[:40]!r}); give the bpe.codes written by "
                            f"nmt-preprocess or subword-nmt learn-bpe")


def load_codec(kind: str, model_path: str):
    if kind == "sentencepiece":
        return SentencePieceCodec(model_path)
    if kind == "subword_nmt":
        return SubwordNmtCodec(model_path)
    raise UsageError(f"unknown subword model type {kind!r} (choices: {', '.join(KINDS)})")


def learn_sentencepiece(files: Sequence[str], model_prefix: str, vocab_size: int, threads: int = 1,
                        max_sentences: int = 10_000_000) -> str:
    """Train one joint sentencepiece model on ``files``; returns ``<model_prefix>.model``."""
    import sentencepiece as spm

    with open(os.devnull, "w") as quiet:
        try:
            spm.SentencePieceTrainer.train(
                input=",".join(files), model_prefix=model_prefix, vocab_size=vocab_size,
                character_coverage=1.0, model_type="unigram", hard_vocab_limit=False,
                input_sentence_size=max_sentences, shuffle_input_sentence=True, num_threads=max(1, threads),
                bos_id=-1, eos_id=-1, unk_id=0, logstream=quiet,
            )
        except (RuntimeError, OSError) as exc:
            raise DataError(f"sentencepiece training on {', '.join(files)} failed: {exc}") from None
    return model_prefix + ".model"


def learn_subword_nmt(files: Sequence[str], codes_path: str, merges: int) -> str:
    """Learn joint BPE codes on the whitespace-tokenized lines of ``files``; returns ``codes_path``."""
    from subword_nmt.learn_bpe import learn_bpe

    handles = [open(f, encoding="utf-8", newline="\n") for f in files]  # one line per \n, as binarizing reads
    try:
        lines = (" ".join(line.split()) + "\n" for line in itertools.chain(*handles))
        with open(codes_path, "w", encoding="utf-8") as out:
            try:
                learn_bpe(lines, out, merges, min_frequency=2)
            except ValueError:  # learn_bpe takes max() of the pair counts: empty when no word has two symbols
                raise DataError(f"--bpe subword_nmt: {' and '.join(files)} hold no word of two or more characters "
                                f"to merge; use --bpe sentencepiece, or no --bpe") from None
    finally:
        for h in handles:
            h.close()
    return codes_path


def model_file_name(kind: str) -> str:
    return "spm.model" if kind == "sentencepiece" else "bpe.codes"


def codec_from_record(data_dir: str, record: Optional[dict]):
    """The codec described by ``preprocess.json``'s ``subword`` entry (``None`` when there is none)."""
    if not record or not record.get("type"):
        return None
    path = record["model"]
    if not os.path.isabs(path):
        path = os.path.join(data_dir, path)
    if not os.path.isfile(path):
        raise DataError(f"{os.path.join(data_dir, 'preprocess.json')}: subword model {path} is missing")
    return load_codec(record["type"], path)


def side_codec(data_dir: str, record: Optional[dict], role: str = "source"):
    """The codec of one side (``role``: "source" encodes the input, "target" decodes the output) from a
    ``subword`` record: the target side's own model where one is recorded (``target_model``), else the joint
    one; None without a subword model."""
    if role == "target" and record and record.get("target_model"):
        record = {**record, "model": record["target_model"]}
    return codec_from_record(data_dir, record)


def marker_of(kind: Optional[str]) -> Optional[str]:
    """What ``Dictionary.string(..., bpe_symbol=)`` removes to undo a segmentation of ``kind`` (a subword
    record's ``type``), or None."""
    return {"sentencepiece": "sentencepiece", "subword_nmt": "@@ "}.get(kind)
