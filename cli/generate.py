"""nmt-generate: translate a binarized split or a raw text file with beam search; fairseq's output lines.

\b
    nmt-generate data-bin/wmt14_en_de --path ck/averaged.pt --gen-subset test --beam 4 --lenpen 0.6
    nmt-generate data-bin/wmt14_en_de --path a.pt:b.pt --input raw.en          # ensemble, raw text
    nmt-generate data-bin/wmt14_en_de --path ck.pt | grep ^H | cut -f3-

Lines (S-, T-, H-, D-, P-, A-) are printed in input order with base-2 scores; the run ends with a sacreBLEU
line (D- lines against the detokenized references) starting with "Generate". Progress goes to stderr.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from nmt_toolkit.cli.decoding import (DecodeDeviceConfig, InputFormatConfig, constrained_translator, h_bpe_symbol,
                                      load_translator, refuse_with_html, task_groups)
from nmt_toolkit.cli.generate_output import open_output
from nmt_toolkit.config import CommonConfig, Group, build_command, option
from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.generation.terminology import TerminologyConfig

logger = logging.getLogger("nmt_toolkit.generate")


@dataclass
class GenerateIOConfig(DecodeDeviceConfig, InputFormatConfig):
    gen_subset: str = option("test", "binarized split to translate (ignored with --input)")
    input: Optional[str] = option(None, "translate this raw text file instead ('-': stdin), encoded with the "
                                        "data-bin's subword model", metavar="FILE")
    results_path: Optional[str] = option(None, "write the lines to FOLDER/generate-<subset>.txt instead of stdout",
                                         metavar="FOLDER", output="folder")
    quiet: bool = option(False, "print only the final score line")
    plain: bool = option(False, "print only the detokenized best translation, one line per sentence in input "
                                "order (no S-/H-/D-/P- lines; no per-token scores are computed; the BLEU line "
                                "goes to the log)")
    num_shards: int = option(1, "decode only every N-th batch (with --shard-id): one process per shard, e.g. per GPU; "
                                "under torchrun the ranks are the shards. Merge: cat the outputs, grep ^D- | sort -V",
                             low=1)
    shard_id: int = option(0, "which of the --num-shards shards this process decodes (0 .. N-1)", low=0)
    remove_bpe: Optional[str] = option(None, "undo subword segmentation in H- lines too: '@@ ', 'sentencepiece' "
                                             "or 'auto' (D- lines are always detokenized)", metavar="SYMBOL")
    print_alignment: bool = option(False, "print A- lines: for each target token the most attended source token")
    constraints_file: Optional[str] = option(None, "with --constraints on a binarized split: line N holds the "
                                                   "TAB-separated target phrases of sentence N (empty: none)",
                                             metavar="FILE")
    decode_workers: Optional[int] = option(None, "CPU: decode this many batches at once, each on its share of "
                                                 "torch's threads (CTranslate2's inter_threads). Default: one per "
                                                 "intra-op thread, at most 4, with at least 4 batches each; GPU "
                                                 "decoding and --sampling use 1", metavar="N", low=1)
    attention_plot: Optional[str] = option(None, "write one PNG attention heatmap per sentence to this folder, as "
                                                 "in the paper's Figures 3-5 (needs matplotlib: the [viz] extra)",
                                           metavar="DIR", output="folder")
    attention_plot_max: int = option(20, "plot at most this many sentences", low=0)
    attention_plot_kind: str = option("encoder-decoder", "which attention to plot",
                                      choices=("encoder", "decoder", "encoder-decoder"))
    attention_plot_layer: int = option(-1, "which layer to plot (0 = first, -1 = last)", low=-1)
    attention_plot_head: int = option(-1, "which head to plot (-1 = the mean of all heads)", low=-1)


def _check_before_setup(io: GenerateIOConfig) -> None:
    """What can be refused before any model is loaded: the shards, html's input, matplotlib, the results
    folder."""
    from nmt_toolkit.generation.output import ATTENTION_PLOTS, RESULTS_FOLDER
    from nmt_toolkit.outputs import check_folder, claim_folder

    _shard_from_torchrun(io)
    if io.format == "html" and (not io.input or io.num_shards > 1 or io.attention_plot):
        raise UsageError("--format html translates the HTML lines of --input FILE, unsharded and without "
                         "--attention-plot (a binarized split is text already encoded)")
    if io.attention_plot and io.engine == "ctranslate2":
        raise UsageError("--attention-plot plots the torch model's layers: use --engine torch")
    if io.attention_plot:
        check_folder(io.attention_plot, ATTENTION_PLOTS, f"--attention-plot {io.attention_plot}")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--attention-plot needs matplotlib: pip install 'nmt_toolkit[viz]'") from None
        claim_folder(io.attention_plot, ATTENTION_PLOTS, f"--attention-plot {io.attention_plot}")
    if io.results_path:
        claim_folder(io.results_path, RESULTS_FOLDER, f"--results-path {io.results_path}")


def _check_folder_input(task_cfg, gen: GenerationConfig, io: GenerateIOConfig) -> None:
    """A model folder without a data-bin has no binarized split to translate: it needs --input."""
    from nmt_toolkit.model_folder import data_folder_of

    if not task_cfg.data and not io.input and data_folder_of(gen.path):
        raise UsageError(f"--path {gen.path}: a model folder holds no binarized splits; give --input FILE (raw "
                         f"text), or a data-bin built with nmt-preprocess --model-folder as DATA")


def _check_attention_plot(io: GenerateIOConfig, translator) -> None:
    """A wrong layer or head is reported before decoding, not after."""
    from nmt_toolkit.generation.attention_maps import attention_module

    heads = attention_module(translator.models[0], io.attention_plot_kind, io.attention_plot_layer).num_heads
    if io.attention_plot_head >= heads:
        raise UsageError(f"--attention-plot-head {io.attention_plot_head}: the model has {heads} heads "
                         f"(0..{heads - 1}, or -1 for their mean)")


def _dataset(io: GenerateIOConfig, translator, terms):
    """The sentences to translate (a binarized split, or --input lines checked against the limits), the raw
    input lines (or None), the subset's name, the batch iterator and, when something constrains the output
    (``terms``: --constraints, --glossary, --keep), each sentence's target phrases as ids and as text."""
    task = translator.task
    raw_sources = constraints = None
    _check_constraint_inputs(io, terms)
    if io.input:
        from nmt_toolkit.data.lines import read_lines

        what = f"--input {io.input}"
        raw_sources, phrases = terms.split(read_lines(io.input, what), what)
        encoded = translator.encode(raw_sources, what)
        if phrases is not None:
            constraints = translator.encode_constraints(phrases, encoded, what), phrases
        dataset = task.build_dataset_for_inference(encoded)
        subset = os.path.basename(io.input) if io.input != "-" else "stdin"
    else:
        dataset = task.load_dataset(io.gen_subset)
        subset = io.gen_subset
        if io.constraints_file:
            constraints = _split_constraints(dataset, io.constraints_file, translator)
    itr = translator.batches(dataset, num_shards=io.num_shards, shard_id=io.shard_id)
    return dataset, raw_sources, subset, (_WithoutFillers(itr) if io.num_shards > 1 else itr), constraints


def _check_constraint_inputs(io: GenerateIOConfig, terms) -> None:
    """Where the phrases come from must be given, and only once."""
    if io.constraints_file and (not terms.explicit or io.input):
        raise UsageError("--constraints-file gives the phrases of a binarized split's sentences: use it with "
                         "--constraints and without --input (whose lines carry their own phrases after TABs)")
    if terms.explicit and not (io.input or io.constraints_file):
        raise UsageError("--constraints needs the phrases: --input FILE (each line the source, then its phrases "
                         "after TABs) or, on a binarized split, --constraints-file FILE")
    if (terms.glossary is not None or terms.keep is not None) and not io.input:
        raise UsageError("--glossary and --keep look for terms in the source text: give --input FILE")


def _split_constraints(dataset, path: str, translator) -> tuple:
    """``(phrase ids, phrase texts)`` of a binarized split's sentences from --constraints-file."""
    from nmt_toolkit.data.lines import read_lines
    from nmt_toolkit.generation.source_text import phrases_of

    what = f"--constraints-file {path}"
    lines = read_lines(path, what)
    if len(lines) != len(dataset):
        raise DataError(f"{what}: {len(lines)} lines for the {len(dataset)} sentences of the split")
    phrases = [phrases_of(line.split("\t"), f"{what} line {i + 1}") if line else [] for i, line in enumerate(lines)]
    return translator.encode_constraints(phrases, list(dataset.src_sizes), what), phrases


def text_route(configs: dict) -> Optional[dict]:
    """The export's record when this run is raw text through a CTranslate2 export of one language pair on
    the CPU, which :mod:`nmt_toolkit.cli.generate_text` decodes without loading torch; else None (the
    Translator's route: a data-bin, a checkpoint, a multilingual export, shards, a GPU …)."""
    from nmt_toolkit.export_record import read_export

    gen, io, task_cfg = configs["generation"], configs["io"], configs["task"]
    named_task = configs["components"].task if "components" in configs else None
    if io.engine != "ctranslate2" or not io.input or not gen.path or ":" in gen.path or task_cfg.data or \
            gen.constraints != "off" or io.format == "html":
        return None
    if io.num_shards > 1 or io.attention_plot or io.print_alignment or io.fp16 or io.bf16 or io.device == "cuda" or \
            gen.prefix_size or gen.score_reference or named_task not in (None, "translation"):
        return None
    record = read_export(gen.path)
    if record is None or record.get("task") is not None or not _on_the_cpu(io):
        return None
    for given, own in ((task_cfg.source_lang, record.get("source_lang")), (task_cfg.target_lang,
                                                                           record.get("target_lang"))):
        if given is not None and given != own:
            return None  # the Translator's route says what the export translates
    return record


def _ct2_replicas(configs: dict) -> int:
    """CTranslate2 on the CPU: one replica of one thread per decode worker (--decode-workers, else one per
    thread, at most 4), as the torch engine lays out its workers; 1 otherwise."""
    from nmt_toolkit.cli.decoding import decode_threads
    from nmt_toolkit.generation.parallel import AUTO_MAX_WORKERS, auto_workers

    io, gen = configs["io"], configs["generation"]
    if io.engine != "ctranslate2" or gen.sampling or not _on_the_cpu(io):
        return 1
    return io.decode_workers or auto_workers(AUTO_MAX_WORKERS, decode_threads(io))


def _on_the_cpu(io: GenerateIOConfig) -> bool:
    """Whether this run decodes on the CPU: --cpu, --device cpu, or no GPU CTranslate2 can use."""
    if io.cpu or io.device == "cpu":
        return True
    from nmt_toolkit.export.ctranslate2 import require_ctranslate2

    return require_ctranslate2(specs=False).get_cuda_device_count() == 0


class _Collected:
    """What a run keeps of each translated sentence besides its printed lines: the best hypothesis and the
    reference (for BLEU), counts for the speed line, and the sentences to plot."""

    def __init__(self, translator, io: GenerateIOConfig, raw_sources, printer, phrases=None):
        self.translator, self.io, self.raw_sources, self.printer = translator, io, raw_sources, printer
        self.phrases = phrases  # each line's constraints as text (C- lines, as fairseq-interactive prints them)
        self.h_bpe = h_bpe_symbol(io, translator.task)
        self.hyps_by_id, self.refs_by_id, self.plots = {}, {}, []
        self.sentences = self.tokens = 0

    def add(self, sample: dict, results: list) -> None:
        from nmt_toolkit.generation.output import printable

        task, detok = self.translator.task, self.translator.detokenize
        src_tokens = sample["net_input"]["src_tokens"]
        for i, sid in enumerate(sample["id"].tolist()):
            lines, ref = self._sentence_lines(sid, i, sample, results[i])
            if sample.get("target") is not None:
                self.refs_by_id[sid] = ref
            best = results[i][0]["tokens"]
            self.hyps_by_id[sid] = detok(task.tgt_dict.string(best))
            if self.io.plain:
                lines = [printable(self.hyps_by_id[sid])]
            self.printer.add(sid, lines)
            self.sentences += 1
            self.tokens += len(best)
            if self.io.attention_plot and len(self.plots) < self.io.attention_plot_max:
                self.plots.append((sid, src_tokens[i][src_tokens[i] != task.src_dict.pad()], best))

    def _sentence_lines(self, sid: int, i: int, sample, hyps) -> tuple[list[str], str]:
        """The S-/T-/H-/D-/P-(/A-) lines of one sentence, and its detokenized reference ('' without one)."""
        from nmt_toolkit.generation.output import hypothesis_lines, printable

        task, detok = self.translator.task, self.translator.detokenize
        target = sample.get("target")
        if self.raw_sources is not None:
            src_text = self.raw_sources[sid]
        else:
            src_text = self.translator.source_text(sample["net_input"]["src_tokens"][i])
        lines = [f"S-{sid}\t{printable(src_text)}"]
        lines += [f"C-{sid}\t{printable(c)}" for c in (self.phrases[sid] if self.phrases else ())]
        ref = ""
        if target is not None:
            ref = detok(task.tgt_dict.string(target[i]))
            lines.append(f"T-{sid}\t{printable(ref)}")
        lines += hypothesis_lines(sid, hyps, task.tgt_dict, detok, self.h_bpe, self.io.print_alignment)
        return lines, ref


def _decode(translator, io: GenerateIOConfig, itr, subset: str, collected: _Collected, constraints=None) -> None:
    """Every batch of ``itr`` through the translator, several at once on the CPU (--decode-workers)."""
    import torch
    from tqdm import tqdm

    from nmt_toolkit.generation.translator import decode_workers

    workers = decode_workers(io.decode_workers, translator.gen, translator.engine, len(itr))
    if workers > 1:
        logger.info("decoding %d batches at once, %d thread(s) each (--decode-workers)", workers,
                    max(1, torch.get_num_threads() // workers))
    batches = translator.decode(itr, need_attn=io.print_alignment, workers=workers, constraints=constraints)
    for sample, results in tqdm(batches, total=len(itr), desc=f"generate {subset}", file=sys.stderr, disable=None,
                                leave=False):
        collected.add(sample, results)


def generate(configs: dict) -> int:
    from nmt_toolkit.generation.output import OrderedPrinter

    gen: GenerationConfig = configs["generation"]
    io: GenerateIOConfig = configs["io"]
    _check_before_setup(io)
    refuse_with_html(io, gen, configs["terminology"])
    _check_folder_input(configs["task"], gen, io)
    record = text_route(configs)
    if record is not None:
        from nmt_toolkit.cli.generate_text import generate_text

        return generate_text(configs, record)
    html = io.format == "html"
    translator = load_translator(configs, need_attn=bool(io.print_alignment or io.attention_plot or html),
                                 scores=not (io.quiet or io.plain), replicas=_ct2_replicas(configs))
    if html:
        from nmt_toolkit.cli.generate_html import generate_html

        return generate_html(translator, io)
    if io.attention_plot:
        _check_attention_plot(io, translator)
    translator, terms = constrained_translator(translator, gen, configs["terminology"])
    dataset, raw_sources, subset, itr, constraints = _dataset(io, translator, terms)
    out = open_output(io, subset)
    printer = OrderedPrinter(None if io.quiet else out)
    collected = _Collected(translator, io, raw_sources, printer, constraints and constraints[1])
    start = time.perf_counter()
    _decode(translator, io, itr, subset, collected, constraints and constraints[0])
    printer.close()
    elapsed = time.perf_counter() - start
    n_sent, n_tok = collected.sentences, collected.tokens
    logger.info("translated %d sentences (%d tokens) in %.1fs (%.2f sentences/s, %.2f tokens/s)", n_sent, n_tok,
                elapsed, n_sent / max(elapsed, 1e-9), n_tok / max(elapsed, 1e-9))
    if n_sent == 0 and len(dataset) and io.num_shards == 1:  # a shard of a short split may be empty
        out.discard()
        raise DataError(f"{subset}: none of its {len(dataset)} sentences was translated: each is longer than "
                        f"--max-source-positions, --max-target-positions or --max-tokens allow (see the warning)")
    if collected.plots:
        from nmt_toolkit.generation.output import plot_attention

        task = translator.task
        plot_attention(translator.models[0], collected.plots, task.src_dict, task.tgt_dict, io.attention_plot,
                       io.attention_plot_kind, io.attention_plot_layer, io.attention_plot_head)
    _report_bleu(io, gen, subset, collected.hyps_by_id, collected.refs_by_id, out)
    out.close()
    return 0


def _report_bleu(io: GenerateIOConfig, gen: GenerationConfig, subset: str, hyps_by_id: dict, refs_by_id: dict,
                 out) -> None:
    if refs_by_id and io.num_shards > 1:  # a shard's BLEU is not the test set's: score the merged output
        logger.info("shard %d of %d: no BLEU printed; merge the shards (grep ^D- | sort -V) and run nmt-score",
                    io.shard_id, io.num_shards)
    elif refs_by_id:
        from nmt_toolkit.scoring.bleu import corpus_scores

        ids = sorted(refs_by_id)
        res, sig = corpus_scores([hyps_by_id[i] for i in ids], [[refs_by_id[i] for i in ids]], ["bleu"])[0]
        line = f"Generate {subset} with beam={gen.beam}: {res.format(2, False, sig)}"
        if io.plain:  # stdout holds the translations alone
            logger.info("%s", line)
        else:
            out.write(line + "\n")


class _WithoutFillers:
    """A shard's batches without the empty fillers that even out the shards' lengths (training needs them
    so that every rank joins each all-reduce; decoding has nothing to join)."""

    def __init__(self, itr):
        self.itr = itr

    def __iter__(self):
        return (sample for sample in self.itr if sample)

    def __len__(self) -> int:
        return len(self.itr)


def _shard_from_torchrun(io: GenerateIOConfig) -> None:
    """Check --num-shards/--shard-id; under torchrun (WORLD_SIZE > 1) each rank is a shard and decodes on
    its own GPU (LOCAL_RANK), unless the shards were given explicitly."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and io.num_shards == 1:
        import torch

        io.num_shards, io.shard_id = world, int(os.environ.get("RANK", "0"))
        if torch.cuda.is_available() and not io.cpu and io.device != "cpu":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not 0 <= io.shard_id < io.num_shards:
        raise UsageError(f"--shard-id {io.shard_id} is out of range for --num-shards {io.num_shards} "
                         f"(0 .. {io.num_shards - 1})")


def groups(argv: Sequence[str] = ()):
    return [Group("common", CommonConfig), *task_groups(argv),
            Group("generation", GenerationConfig, "generation options"),
            Group("terminology", TerminologyConfig, "terminology options"), Group("io", GenerateIOConfig, "output options")]


def run(argv=None, prog: str = "nmt-generate") -> int:
    from nmt_toolkit.cli.common import load_plugins, run_cli

    def make(args):
        load_plugins(args)
        return build_command(prog, groups(args), generate, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
