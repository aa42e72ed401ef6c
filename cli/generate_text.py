"""nmt-generate on raw text through a CTranslate2 export of one language pair, on the CPU: the same lines as
the Translator's route, from a process that never loads torch (``generation/ct2_text.py`` says why)."""
from __future__ import annotations

import logging
import os
import sys
import time

from nmt_toolkit.cli.decoding import h_bpe_symbol
from nmt_toolkit.cli.generate_output import open_output

logger = logging.getLogger("nmt_toolkit.generate")


def _translator(configs: dict, record: dict, sentences: int):
    from nmt_toolkit.generation.ct2_text import ExportTextTranslator, machine_threads

    gen, io, task_cfg = configs["generation"].for_engine("ctranslate2"), configs["io"], configs["task"]
    size = task_cfg.batch_size or gen.cpu_batch_size or 0
    tokens = 0 if size else (task_cfg.max_tokens or 0)
    translator = ExportTextTranslator(gen.path, record, gen, io.threads or machine_threads(), size or tokens,
                                      sentences, scores=not (io.quiet or io.plain), seed=configs["common"].seed,
                                      max_source_positions=task_cfg.max_source_positions,
                                      batch_type="examples" if size else "tokens", workers=io.decode_workers)
    logger.info("CTranslate2 on %s: %d replica(s), %d thread(s) each", gen.path, translator.workers,
                max(1, (io.threads or machine_threads()) // translator.workers))
    return translator


def _lines(translator, io, sid: int, raw: str, hyps: list[dict]) -> list[str]:
    """The printed lines of one sentence: its translation alone (--plain), or S-/H-/D-/P- lines."""
    from nmt_toolkit.generation.output import hypothesis_lines, printable

    if io.plain:
        return [printable(translator.detokenize(translator.tgt_dict.string(hyps[0]["tokens"])))]
    return [f"S-{sid}\t{printable(raw)}", *hypothesis_lines(sid, hyps, translator.tgt_dict, translator.detokenize,
                                                            h_bpe_symbol(io, translator))]


def generate_text(configs: dict, record: dict) -> int:
    from tqdm import tqdm

    from nmt_toolkit.data.lines import read_lines
    from nmt_toolkit.generation.output import OrderedPrinter

    io = configs["io"]
    raw = read_lines(io.input, f"--input {io.input}")
    translator = _translator(configs, record, len(raw))
    sources = translator.encode(raw, f"--input {io.input}")
    subset = os.path.basename(io.input) if io.input != "-" else "stdin"
    out = open_output(io, subset)
    printer = OrderedPrinter(None if io.quiet else out)
    start, n_tok = time.perf_counter(), 0
    for sid, hyps in tqdm(translator.translate(sources), total=len(sources), desc=f"generate {subset}",
                          file=sys.stderr, disable=None, leave=False):
        if not io.quiet:
            printer.add(sid, _lines(translator, io, sid, raw[sid], hyps))
        n_tok += len(hyps[0]["tokens"])
    printer.close()
    elapsed = time.perf_counter() - start
    logger.info("translated %d sentences (%d tokens) in %.1fs (%.2f sentences/s, %.2f tokens/s)", len(sources),
                n_tok, elapsed, len(sources) / max(elapsed, 1e-9), n_tok / max(elapsed, 1e-9))
    out.close()
    return 0
