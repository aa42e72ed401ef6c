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
from typing import Optional

from nmt_toolkit.config import CommonConfig, Group, build_command, option
from nmt_toolkit.errors import DataError, UsageError
from nmt_toolkit.generation.config import GenerationConfig

logger = logging.getLogger("nmt_toolkit.generate")


@dataclass
class DecodeDeviceConfig:
    """Where and in which precision the models decode; shared by nmt-generate and nmt-interactive."""

    cpu: bool = option(False, "decode on the CPU even when a GPU is available")
    fp16: bool = option(False, "decode in float16 (GPU only)")
    bf16: bool = option(False, "decode in bfloat16 (GPU only; for models trained with --bf16)")
    engine: str = option("torch", "torch: our beam search; ctranslate2: CTranslate2 (the [ct2] extra) on a folder "
                                  "written by nmt-export, or on a --path checkpoint exported on the fly; see "
                                  "docs/deployment.md for the options it maps and those it lacks",
                         choices=("torch", "ctranslate2"))
    device: Optional[str] = option(None, "cpu or cuda [default: cuda when available, unless --cpu]",
                                   choices=("cpu", "cuda"))
    threads: Optional[int] = option(None, "intra-op threads (torch.set_num_threads / CTranslate2's intra_threads) "
                                          "[default: torch's count]", metavar="N", low=1)


@dataclass
class GenerateIOConfig(DecodeDeviceConfig):
    gen_subset: str = option("test", "binarized split to translate (ignored with --input)")
    input: Optional[str] = option(None, "translate this raw text file instead ('-': stdin), encoded with the "
                                        "data-bin's subword model", metavar="FILE")
    results_path: Optional[str] = option(None, "write the lines to FOLDER/generate-<subset>.txt instead of stdout",
                                         metavar="FOLDER")
    quiet: bool = option(False, "print only the final score line")
    num_shards: int = option(1, "decode only every N-th batch (with --shard-id): one process per shard, e.g. per GPU; "
                                "under torchrun the ranks are the shards. Merge: cat the outputs, grep ^D- | sort -V",
                             low=1)
    shard_id: int = option(0, "which of the --num-shards shards this process decodes (0 .. N-1)", low=0)
    remove_bpe: Optional[str] = option(None, "undo subword segmentation in H- lines too: '@@ ', 'sentencepiece' "
                                             "or 'auto' (D- lines are always detokenized)", metavar="SYMBOL")
    print_alignment: bool = option(False, "print A- lines: for each target token the most attended source token")
    decode_workers: Optional[int] = option(None, "CPU: decode this many batches at once, each on its share of "
                                                 "torch's threads (CTranslate2's inter_threads). Default: one per "
                                                 "intra-op thread, at most 4, with at least 4 batches each; GPU "
                                                 "decoding and --sampling use 1", metavar="N", low=1)
    attention_plot: Optional[str] = option(None, "write one PNG attention heatmap per sentence to this folder, as "
                                                 "in the paper's Figures 3-5 (needs matplotlib: the [viz] extra)",
                                           metavar="DIR")
    attention_plot_max: int = option(20, "plot at most this many sentences", low=0)
    attention_plot_kind: str = option("encoder-decoder", "which attention to plot",
                                      choices=("encoder", "decoder", "encoder-decoder"))
    attention_plot_layer: int = option(-1, "which layer to plot (0 = first, -1 = last)", low=-1)
    attention_plot_head: int = option(-1, "which head to plot (-1 = the mean of all heads)", low=-1)


def _device(cfg: GenerateIOConfig):
    import torch

    if cfg.device == "cuda" and (cfg.cpu or not torch.cuda.is_available()):
        raise UsageError("--device cuda: " + ("--cpu says otherwise" if cfg.cpu else "no GPU is available"))
    if cfg.device is not None:
        return torch.device(cfg.device)
    if not cfg.cpu and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def _ctranslate2_setup(configs: dict, task, device):
    """The CTranslate2 engine (nmt_toolkit/generation/ct2_engine.py), after refusing what it lacks."""
    from nmt_toolkit.generation.ct2_engine import CTranslate2Generator, unsupported_options

    gen, io = configs["generation"], configs["io"]
    extra = tuple(flag for flag, on in (("--fp16", io.fp16), ("--bf16", io.bf16)) if on)
    lacking = unsupported_options(gen, bool(getattr(io, "print_alignment", False) or getattr(io, "attention_plot", None)),
                                  extra)
    if lacking:
        raise UsageError("--engine ctranslate2 has no " + "; ".join(lacking))
    generator = CTranslate2Generator(gen.path, task, gen, device.type, io.threads or 0, seed=configs["common"].seed,
                                     scores=not getattr(io, "quiet", False))
    gen.check_model_limit(generator.model.max_positions()[1])
    return generator


def source_limit(task, max_src: int, budget: bool) -> tuple[int, str]:
    """The longest source line (tokens, its EOS included) that can be translated, and what sets it: the
    model's positions, --max-source-positions, and for nmt-generate's batches (``budget``) --max-tokens."""
    limits = [(max_src, "the model's source positions"), (task.cfg.max_source_positions, "--max-source-positions")]
    if budget and task.cfg.max_tokens:
        limits.append((task.cfg.max_tokens, "--max-tokens"))
    return min(limits, key=lambda limit: limit[0])


def encode_lines(lines, task, codec, limit: tuple[int, str], what: str = "input", first_line: int = 1):
    """Raw lines → source id arrays (subword-encoded, unknowns → <unk>). A line longer than ``limit`` (see
    :func:`source_limit`) is an error naming it: translating a cut line, or dropping it, would print a
    wrong or missing translation with exit status 0."""
    size, reason = limit
    pieces = codec.encode_pieces_batch(lines) if codec is not None else [line.split() for line in lines]
    out = []
    for i, p in enumerate(pieces):
        ids = task.src_dict.encode_tokens(p)
        if len(ids) > size:
            hint = "" if reason.startswith("the model") else f" or raise {reason}"
            raise DataError(f"{what} line {first_line + i}: {len(ids)} tokens (with its EOS), more than the {size} "
                            f"of {reason}; split the line{hint}")
        out.append(ids)
    return out


def setup(configs: dict):
    """Task, models, generator and detokenizer shared by nmt-generate and nmt-interactive."""
    import torch

    from nmt_toolkit.generation.beam_search import SequenceGenerator
    from nmt_toolkit.generation.ensemble import load_ensemble
    from nmt_toolkit.generation.output import Detokenizer
    from nmt_toolkit.registry import TASKS

    gen: GenerationConfig = configs["generation"]
    io = configs["io"]
    if not gen.path:
        raise UsageError("--path is required (a checkpoint, or several separated by ':')")
    task_cfg = configs["task"]
    task = TASKS.get("translation").obj.setup_task(task_cfg)
    device = _device(io)
    if io.threads is not None:
        torch.set_num_threads(io.threads)
    codec = task.subword()
    detok = Detokenizer(codec, task.bpe_symbol() if codec is None else None)
    if io.engine == "ctranslate2":
        return task, _ctranslate2_setup(configs, task, device), detok, device
    dict_files = [os.path.join(task_cfg.data, f"dict.{task_cfg.source_lang}.txt"),
                  os.path.join(task_cfg.data, f"dict.{task_cfg.target_lang}.txt")]
    models, _ = load_ensemble(gen.path.split(":"), task.src_dict, task.tgt_dict, dict_files, device,
                              langs=(task_cfg.source_lang, task_cfg.target_lang))
    if io.fp16 and io.bf16:
        raise UsageError("--fp16 and --bf16 exclude each other")
    if io.fp16 or io.bf16:
        flag = "--fp16" if io.fp16 else "--bf16"
        if device.type != "cuda":
            raise UsageError(f"{flag} needs a GPU (drop {flag} or --cpu)")
        # log-probabilities, attention softmaxes and scores stay in float32 (see ensemble.py)
        models = [m.to(torch.float16 if io.fp16 else torch.bfloat16) for m in models]
    if device.type == "cpu" and gen.cpu_packed_linear:
        from nmt_toolkit.generation.cpu import optimize_for_cpu

        for model in models:
            optimize_for_cpu(model)
    generator = SequenceGenerator(models, task.tgt_dict, gen, seed=configs["common"].seed)
    gen.check_model_limit(generator.model.max_positions()[1])
    torch.manual_seed(configs["common"].seed)
    return task, generator, detok, device


def _h_bpe_symbol(io, task) -> Optional[str]:
    if not io.remove_bpe:
        return None
    if io.remove_bpe == "auto":
        return task.bpe_symbol() or "@@ "
    return io.remove_bpe


def _decode_workers(io: GenerateIOConfig, gen: GenerationConfig, device, num_batches: int) -> int:
    """--decode-workers, checked: batches decode concurrently on the CPU only, and sampling draws from one
    seeded random stream, which concurrent batches would consume in an unpredictable order. Unset, a CPU
    decode takes :func:`~nmt_toolkit.generation.parallel.auto_workers` workers: a beam step is hundreds of
    small operations on which intra-op threads mostly wait for each other, so one-thread workers on
    batches of their own keep the cores busier."""
    if io.engine == "ctranslate2":  # CTranslate2 spreads a batch over its own intra_threads
        return 1
    if io.decode_workers is None:
        if device.type != "cpu" or gen.sampling:
            return 1
        import torch

        from nmt_toolkit.generation.parallel import auto_workers

        return auto_workers(num_batches, torch.get_num_threads())
    if io.decode_workers > 1 and (device.type != "cpu" or gen.sampling):
        logger.warning("--decode-workers %d ignored: %s decodes one batch at a time", io.decode_workers,
                       "--sampling" if gen.sampling else "GPU decoding")
        return 1
    return io.decode_workers


def translate_batch(generator, sample, gen: GenerationConfig, device, need_attn: bool):
    src = sample["net_input"]["src_tokens"].to(device)
    lengths = sample["net_input"]["src_lengths"].to(device)
    target = sample.get("target")
    if gen.score_reference:
        if target is None:
            raise UsageError("--score-reference needs references (a binarized split, not --input)")
        return generator.score_reference(src, lengths, target.to(device), need_attn=need_attn)
    prefix = None
    if gen.prefix_size > 0:
        if target is None:
            raise UsageError("--prefix-size needs references (a binarized split, not --input)")
        prefix = target[:, : gen.prefix_size].to(device)
        prefix = prefix.masked_fill(prefix == generator.eos, generator.pad)
    return generator.generate(src, lengths, prefix_tokens=prefix, need_attn=need_attn)


def _check_before_setup(io: GenerateIOConfig) -> None:
    """What can be refused before any model is loaded: the shards, matplotlib, the results folder."""
    _shard_from_torchrun(io)
    if io.attention_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--attention-plot needs matplotlib: pip install 'nmt_toolkit[viz]'") from None
    if io.results_path:
        from nmt_toolkit.cli.common import check_output_folder

        check_output_folder(io.results_path, "--results-path")


def _check_attention_plot(io: GenerateIOConfig, generator) -> None:
    """A wrong layer or head is reported before decoding, not after."""
    from nmt_toolkit.generation.attention_maps import attention_module

    heads = attention_module(generator.model.models[0], io.attention_plot_kind, io.attention_plot_layer).num_heads
    if io.attention_plot_head >= heads:
        raise UsageError(f"--attention-plot-head {io.attention_plot_head}: the model has {heads} heads "
                         f"(0..{heads - 1}, or -1 for their mean)")


def _dataset(io: GenerateIOConfig, task, generator):
    """The sentences to translate (a binarized split, or --input lines checked against the limits), the raw
    input lines (or None), the subset's name, and the batch iterator."""
    limit = source_limit(task, generator.model.max_positions()[0], budget=True)
    raw_sources = None
    if io.input:
        from nmt_toolkit.data.lines import read_lines

        raw_sources = read_lines(io.input, f"--input {io.input}")
        ids = encode_lines(raw_sources, task, task.subword(), limit, f"--input {io.input}")
        dataset = task.build_dataset_for_inference(ids)
        subset = os.path.basename(io.input) if io.input != "-" else "stdin"
    else:
        dataset = task.load_dataset(io.gen_subset)
        subset = io.gen_subset
    itr = task.get_batch_iterator(dataset, required_batch_size_multiple=1, max_positions=(limit[0], None),
                                  shuffle=False, num_shards=io.num_shards,
                                  shard_id=io.shard_id).next_epoch_itr(shuffle=False)
    return dataset, raw_sources, subset, (_WithoutFillers(itr) if io.num_shards > 1 else itr)


def _output(io: GenerateIOConfig, subset: str) -> "_Output":
    if not io.results_path:
        return _Output(sys.stdout, "stdout")
    from nmt_toolkit.cli.common import ReplacingFile

    name = f"generate-{subset}.txt" if io.num_shards == 1 else \
        f"generate-{subset}.shard{io.shard_id}-of-{io.num_shards}.txt"
    path = os.path.join(io.results_path, name)
    return _Output(ReplacingFile(path), f"--results-path {path}")  # an earlier file is kept on error


class _Output:
    """Where the lines go. A failed write (a full disk) is one error naming the place, and a results file
    is discarded then, never left half-written beside the earlier one."""

    def __init__(self, handle, name: str):
        self.handle, self.name = handle, name

    def _do(self, method: str, *args):
        try:
            return getattr(self.handle, method)(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.discard()
            raise DataError(f"{self.name}: writing failed: {exc.strerror or exc}") from None

    def discard(self) -> None:
        if hasattr(self.handle, "discard"):
            self.handle.discard()

    def write(self, text: str) -> int:
        return self._do("write", text)

    def flush(self) -> None:
        self._do("flush")

    def close(self) -> None:
        self._do("flush" if self.handle is sys.stdout else "close")


def _sentence_lines(sid: int, i: int, sample, hyps, raw_sources, task, detok, h_bpe, io) -> tuple[list[str], str]:
    """The S-/T-/H-/D-/P-(/A-) lines of one sentence, and its detokenized reference ('' without one)."""
    from nmt_toolkit.generation.output import hypothesis_lines, printable

    target = sample.get("target")
    if raw_sources is not None:
        src_text = raw_sources[sid]
    else:
        src_text = detok(task.src_dict.string(sample["net_input"]["src_tokens"][i]))
    lines = [f"S-{sid}\t{printable(src_text)}"]
    ref = ""
    if target is not None:
        ref = detok(task.tgt_dict.string(target[i]))
        lines.append(f"T-{sid}\t{printable(ref)}")
    lines += hypothesis_lines(sid, hyps, task.tgt_dict, detok, h_bpe, io.print_alignment)
    return lines, ref


def generate(configs: dict) -> int:
    import torch
    from tqdm import tqdm

    from nmt_toolkit.generation.output import OrderedPrinter
    from nmt_toolkit.generation.parallel import decode_batches

    gen: GenerationConfig = configs["generation"]
    io: GenerateIOConfig = configs["io"]
    _check_before_setup(io)
    task, generator, detok, device = setup(configs)
    if io.attention_plot:
        _check_attention_plot(io, generator)
    dataset, raw_sources, subset, itr = _dataset(io, task, generator)
    out = _output(io, subset)
    printer = OrderedPrinter(None if io.quiet else out)
    h_bpe = _h_bpe_symbol(io, task)
    hyps_by_id, refs_by_id, plots = {}, {}, []
    n_sent = n_tok = 0
    start = time.perf_counter()
    workers = _decode_workers(io, gen, device, len(itr))
    if workers > 1:
        logger.info("decoding %d batches at once, %d thread(s) each (--decode-workers)", workers,
                    max(1, torch.get_num_threads() // workers))
    batches = decode_batches(itr, lambda sample: translate_batch(generator, sample, gen, device, io.print_alignment),
                             workers)
    progress = tqdm(batches, total=len(itr), desc=f"generate {subset}", file=sys.stderr, disable=None, leave=False)
    with torch.inference_mode():
        for sample, results in progress:
            src_tokens = sample["net_input"]["src_tokens"]
            for i, sid in enumerate(sample["id"].tolist()):
                lines, ref = _sentence_lines(sid, i, sample, results[i], raw_sources, task, detok, h_bpe, io)
                if sample.get("target") is not None:
                    refs_by_id[sid] = ref
                hyps_by_id[sid] = detok(task.tgt_dict.string(results[i][0]["tokens"]))
                printer.add(sid, lines)
                n_sent += 1
                n_tok += len(results[i][0]["tokens"])
                if io.attention_plot and len(plots) < io.attention_plot_max:
                    plots.append((sid, src_tokens[i][src_tokens[i] != task.src_dict.pad()], results[i][0]["tokens"]))
    printer.close()
    elapsed = time.perf_counter() - start
    logger.info("translated %d sentences (%d tokens) in %.1fs (%.2f sentences/s, %.2f tokens/s)", n_sent, n_tok,
                elapsed, n_sent / max(elapsed, 1e-9), n_tok / max(elapsed, 1e-9))
    if n_sent == 0 and len(dataset) and io.num_shards == 1:  # a shard of a short split may be empty
        out.discard()
        raise DataError(f"{subset}: none of its {len(dataset)} sentences was translated: each is longer than "
                        f"--max-source-positions, --max-target-positions or --max-tokens allow (see the warning)")
    if plots:
        from nmt_toolkit.generation.output import plot_attention

        plot_attention(generator.model.models[0], plots, task.src_dict, task.tgt_dict, io.attention_plot,
                       io.attention_plot_kind, io.attention_plot_layer, io.attention_plot_head)
    _report_bleu(io, gen, subset, hyps_by_id, refs_by_id, out)
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
        out.write(f"Generate {subset} with beam={gen.beam}: {res.format(2, False, sig)}\n")


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
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and io.num_shards == 1:
        io.num_shards, io.shard_id = world, int(os.environ.get("RANK", "0"))
        if torch.cuda.is_available() and not io.cpu and io.device != "cpu":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not 0 <= io.shard_id < io.num_shards:
        raise UsageError(f"--shard-id {io.shard_id} is out of range for --num-shards {io.num_shards} "
                         f"(0 .. {io.num_shards - 1})")


def task_max(task, side: int) -> int:
    return task.max_positions()[side]


def groups():
    from nmt_toolkit.registry import TASKS

    return [Group("common", CommonConfig), Group("task", TASKS.get("translation").config, "data options"),
            Group("generation", GenerationConfig, "generation options"), Group("io", GenerateIOConfig, "output options")]


def run(argv=None, prog: str = "nmt-generate") -> int:
    from nmt_toolkit.cli.common import load_plugins, run_cli

    def make(args):
        load_plugins(args)
        return build_command(prog, groups(), generate, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
