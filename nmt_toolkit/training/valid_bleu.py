"""Validation BLEU (``--eval-bleu``, fairseq's flag): decode a validation split during training, score it with sacreBLEU.

The model decodes each validation batch with nmt-generate's search (``--eval-bleu-args``: its options as JSON,
its defaults otherwise); hypotheses and references (the binarized targets) are turned back into text through
the data-bin's subword model, as ``nmt-generate`` writes its ``D-`` lines, and scored with sacreBLEU's defaults
(13a tokenization, exp smoothing), as ``nmt-score``/``sacrebleu`` score them. An ``<unk>`` of a reference never
matches one of a hypothesis (fairseq's rule). Under DDP each rank decodes its shard and the n-gram statistics
(matches, totals, lengths) are summed over ranks before BLEU is computed from them, so the number is the
corpus BLEU of the whole split.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

import torch

from nmt_toolkit.config import from_dict, option
from nmt_toolkit.errors import NmtError, UsageError
from nmt_toolkit.generation.config import GenerationConfig


@dataclass
class EvalBleuConfig:
    eval_bleu: bool = option(False, "also decode the first validation split and report sacreBLEU on the detokenized "
                                    "text (valid_bleu); then --best-checkpoint-metric bleu "
                                    "--maximize-best-checkpoint-metric selects checkpoints by it")
    eval_bleu_args: str = option("{}", "nmt-generate's search options for --eval-bleu as JSON, e.g. "
                                       "'{\"beam\": 4, \"lenpen\": 0.6, \"max_len_b\": 50}' (its defaults otherwise)")
    eval_bleu_print_samples: bool = option(False, "log the first hypothesis and its reference at each validation")

    def generation_config(self) -> GenerationConfig:
        """The search options of ``--eval-bleu-args``, checked like nmt-generate checks its flags."""
        try:
            values = json.loads(self.eval_bleu_args)
        except ValueError as exc:
            raise UsageError(f"--eval-bleu-args: not JSON ({exc})") from None
        if not isinstance(values, dict):
            raise UsageError(f"--eval-bleu-args: expected a JSON object of options, got {self.eval_bleu_args!r}")
        for key in ("path", "score_reference", "nbest", "cpu_packed_linear"):
            if key in values:
                raise UsageError(f"--eval-bleu-args: {key!r} has no meaning for validation BLEU")
        try:
            cfg = from_dict(GenerationConfig, values, "--eval-bleu-args")
        except NmtError as exc:
            raise UsageError(str(exc)) from None
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.eval_bleu:
            self.generation_config()


def bleu_from_stats(stats: torch.Tensor) -> float:
    """sacreBLEU's corpus BLEU from summed statistics ``[4 matches, 4 totals, sys_len, ref_len]``."""
    from sacrebleu.metrics import BLEU

    values = [int(v) for v in stats.tolist()]
    if values[8] == 0:
        return 0.0
    metric = BLEU()  # the command's defaults: exp smoothing, as corpus_score applies them
    return float(metric.compute_bleu(values[:4], values[4:8], values[8], values[9], smooth_method=metric.smooth_method,
                                     smooth_value=metric.smooth_value, effective_order=metric.effective_order,
                                     max_ngram_order=metric.max_ngram_order).score)


class BleuValidator:
    """Decodes validation batches with a :class:`SequenceGenerator` over the training model and collects the
    BLEU statistics; one instance per run (the search options do not change)."""

    def __init__(self, cfg: EvalBleuConfig, task, model: torch.nn.Module, device: torch.device, seed: int):
        from nmt_toolkit.generation.beam_search import SequenceGenerator
        from nmt_toolkit.generation.output import Detokenizer

        self.gen = cfg.generation_config()
        self.print_samples = cfg.eval_bleu_print_samples
        self.tgt_dict = task.target_dictionary
        # a multilingual task's targets start with their language's token: the search is given it as a forced
        # first token, as nmt-generate gives it, and neither hypotheses nor references keep it
        self.tagged_targets = task.targets_tagged()
        codec = task.subword()
        self.detok = Detokenizer(codec, task.bpe_symbol() if codec is None else None)
        self.generator = SequenceGenerator([model], self.tgt_dict, self.gen, seed=seed)
        self.gen.check_model_limit(self.generator.model.max_positions()[1])
        self.device = device
        self.hyps: list[str] = []
        self.refs: list[str] = []

    def start(self) -> None:
        self.hyps, self.refs = [], []

    def add(self, sample: dict) -> None:
        """Decode one (non-empty) validation batch of this rank."""
        if not sample:
            return
        src = sample["net_input"]["src_tokens"].to(self.device)
        lengths = sample["net_input"]["src_lengths"].to(self.device)
        prefix = None
        tag = int(self.tagged_targets)
        if self.gen.prefix_size + tag > 0:
            prefix = sample["target"][:, : self.gen.prefix_size + tag].to(self.device)
            prefix = prefix.masked_fill(prefix == self.generator.eos, self.generator.pad)
        self.generator.model.eval()
        for i, hyps in enumerate(self.generator.generate(src, lengths, prefix_tokens=prefix)):
            tokens = hyps[0]["tokens"][tag:]
            if tag:  # the target language's token is no output wherever the model emits it, as nmt-generate has it
                tokens = tokens[tokens != prefix[i, 0].to(tokens.device)]
            self.hyps.append(self.detok(self.tgt_dict.string(tokens)))
            self.refs.append(self.detok(self.tgt_dict.string(sample["target"][i][tag:], escape_unk=True)))

    def stats(self) -> torch.Tensor:
        """This rank's ``[4 matches, 4 totals, sys_len, ref_len]`` (float64 for the all-reduce); called once per
        validation, after its last batch, so the search's static buffers and CUDA graphs are freed here: training
        needs that memory back until the next validation."""
        from sacrebleu.metrics import BLEU

        self.generator.release()

        if not self.hyps:
            return torch.zeros(10, dtype=torch.float64)
        score = BLEU().corpus_score(self.hyps, [self.refs])
        return torch.tensor([*score.counts, *score.totals, score.sys_len, score.ref_len], dtype=torch.float64)

    def sample_line(self) -> Optional[str]:
        if not (self.print_samples and self.hyps):
            return None
        return f"example hypothesis: {self.hyps[0]} | reference: {self.refs[0]}"
