"""Raw text through a CTranslate2 export, without torch: what ``nmt-generate --engine ctranslate2 --input FILE``
runs when ``--path`` is a folder ``nmt-export --format ctranslate2`` wrote for one language pair.

Such a folder holds all that decoding needs (the model, the dictionaries, the subword model), so the program
can stay as small as CTranslate2 itself: importing torch alone costs a process about 220 MB and 1.5 s, more
than a small student's whole CTranslate2 decode. The sentences are encoded as the Translator encodes them
(``source_text.py``), searched by the same :class:`~nmt_toolkit.generation.ct2_search.CT2Search` as the
Translator's CTranslate2 engine, and printed as the same lines.

The cores are shared as on the torch engine's CPU path: one CTranslate2 replica per thread (its
``inter_threads``, at most 4 and at most one per batch), each decoding batches of its own on one thread,
since a batch split over several threads waits at every step for the slowest of them (see
``generation/parallel.py``). A call hands CTranslate2 many batches at once (``max_batch_size``), which it
sorts by length and spreads over the replicas.
"""
from __future__ import annotations

import os
from typing import Iterator, Optional

from nmt_toolkit.data import subword
from nmt_toolkit.data.language_codes import check_language_tag
from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.export_record import export_dictionaries
from nmt_toolkit.generation.ct2_search import CT2Search, refuse_unsupported
from nmt_toolkit.generation.output import Detokenizer
from nmt_toolkit.generation.parallel import auto_workers
from nmt_toolkit.generation.source_text import check_texts, encode_lines

#: batches handed to CTranslate2 per call and replica: enough for each replica to stay busy between calls,
#: few enough that progress is reported as the input goes
BATCHES_PER_CALL = 4


def machine_threads() -> int:
    """The cores this process may run on (what torch's default thread count would be on most machines)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class ExportTextTranslator:
    """A CTranslate2 export (``folder``, its checked record) translating raw lines: ``gen`` a GenerationConfig
    with the engine's rules applied; ``threads`` cores in all; ``batch_size`` sentences per batch (tokens with
    ``batch_type`` "tokens"); ``sentences`` how many will be translated (so that no replica is made without a
    batch to decode; ``workers``: the replicas, when the user named them)."""

    def __init__(self, folder: str, record: dict, gen, threads: int, batch_size: int, sentences: int,
                 scores: bool = True, seed: Optional[int] = None, max_source_positions: Optional[int] = None,
                 batch_type: str = "examples", workers: Optional[int] = None):
        from nmt_toolkit.export.ctranslate2 import require_ctranslate2

        refuse_unsupported(gen)
        ct2 = require_ctranslate2(specs=False)
        self.folder, self.gen, self.batch_size = folder, gen, batch_size
        self.src_dict, self.tgt_dict = export_dictionaries(folder, record)
        self.codec = subword.side_codec(folder, record.get("subword"), "source")
        target_codec = subword.side_codec(folder, record.get("subword"), "target")
        self._bpe = subword.marker_of((record.get("subword") or {}).get("type"))
        self.detokenize = Detokenizer(target_codec, self._bpe if target_codec is None else None)
        self.tag = self._target_lang_tag(record)
        rows = int(record["max_positions"])
        self.limit = min((rows, "the model's source positions"),
                         (max_source_positions or rows, "--max-source-positions"), key=lambda limit: limit[0])
        gen.check_model_limit(rows)
        per_batch = batch_size if batch_type == "examples" else max(1, batch_size // 32)  # ~32 tokens a sentence
        self.per_call = max(1, per_batch) * BATCHES_PER_CALL
        self.workers = workers or auto_workers(-(-sentences // max(per_batch, 1)), threads)
        self.per_call *= self.workers
        if seed is not None:
            ct2.set_random_seed(seed)
        try:
            translator = ct2.Translator(folder, device="cpu", inter_threads=self.workers,
                                        intra_threads=max(1, threads // self.workers))
        except (RuntimeError, ValueError) as exc:
            raise DataError(f"--path {folder}: CTranslate2 cannot load it ({exc})") from None
        self.search = CT2Search(translator, gen, rows, scores, max_batch_size=batch_size, batch_type=batch_type)

    def bpe_symbol(self):
        """The subword marker of the export's segmentation (what ``--remove-bpe auto`` removes), or None."""
        return self._bpe

    def _target_lang_tag(self, record: dict) -> Optional[str]:
        """``--target-lang-tag``, else the export's (checked when its record was read)."""
        if self.gen.target_lang_tag is not None:
            check_language_tag(self.gen.target_lang_tag, self.src_dict.symbols, "--target-lang-tag", UsageError)
        return self.gen.target_lang_tag or record.get("target_lang_tag")

    def encode(self, lines: list[str], what: str) -> list[list[str]]:
        """Each line's source symbols with its EOS last, as the Translator encodes it; a line too long is a
        DataError naming it."""
        check_texts(lines, what, 1, "line")
        ids = encode_lines(lines, self.src_dict, self.codec, self.limit, what, tag=self.tag)
        symbols = self.src_dict.symbols
        return [[symbols[i] for i in row] for row in ids]

    def translate(self, sources: list[list[str]]) -> Iterator[tuple[int, list[dict]]]:
        """``(index, hypotheses)`` of every source (symbols with their EOS), shortest first, a few batches per
        replica at a time; each hypothesis with ``tokens`` (target ids, EOS last) besides the search's
        fields, as the output lines take it."""
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        step = self.per_call
        eos = self.tgt_dict.eos()
        for start in range(0, len(order), step):
            chunk = order[start:start + step]
            found = self.search.search([sources[i][:-1] for i in chunk], [len(sources[i]) for i in chunk])
            for i, hyps in zip(chunk, found):
                for hyp in hyps:
                    hyp["tokens"] = [self.tgt_dict.index(s) for s in hyp["symbols"]] + [eos]
                yield i, hyps
