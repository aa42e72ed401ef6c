"""Options of the search (beam, length penalty, sampling…), shared by nmt-generate and nmt-interactive."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from nmt_toolkit.config import check_ranges, option
from nmt_toolkit.errors import UsageError


#: |--lenpen| at most this: the length penalty of the longest outputs (thousands of tokens) stays within
#: float32's range, so that no hypothesis' score overflows to an infinity
LENPEN_BOUND = 5.0
#: |--max-len-b|, --min-len and the other counts of tokens at most this: far beyond any model's positions (the
#: search caps the length limit there anyway), a * S + b stays an exact integer, and no count overflows the
#: C integers of torch and CTranslate2
LENGTH_BOUND = 1_000_000
#: --beam and --nbest at most this (each step considers 2 * beam candidates per sentence)
BEAM_BOUND = 1000


#: what ``auto`` (None for a number) means for each engine: the torch engine searches as the paper did (GNMT's
#: length penalty, the exact stopping bound); CTranslate2 has one rule of each, fairseq's. CPU batches: 64
#: sentences for the torch engine; 16 for CTranslate2, whose per-step buffers for 64 sentences of long outputs
#: outgrow the C allocator's heap (each step then maps and faults in fresh pages: on 1,000 Multi30k sentences
#: with outputs up to 256 tokens, 20.3 s against 11.2 s, and 520 MB against 290 MB; as fast on short outputs)
ENGINE_RULES = {"torch": {"lenpen_style": "gnmt", "early_stop": "bound", "cpu_batch_size": 64},
                "ctranslate2": {"lenpen_style": "fairseq", "early_stop": "beam", "cpu_batch_size": 16}}


@dataclass
class GenerationConfig:
    """How hypotheses are searched and scored (fairseq's flag names)."""

    path: Optional[str] = option(None, "checkpoint(s) to decode with; several separated by ':' form an ensemble",
                                 metavar="FILE[:FILE…]")
    beam: int = option(4, "beam size (the paper: 4; 1 = greedy decoding)", low=1, high=BEAM_BOUND)
    nbest: int = option(1, "number of hypotheses to output per sentence (<= beam)", low=1, high=BEAM_BOUND)
    lenpen: float = option(0.6, "length penalty alpha (the paper: 0.6); 0 disables length normalisation, "
                                "< 0 favours shorter outputs (as in fairseq)", low=-LENPEN_BOUND, high=LENPEN_BOUND)
    lenpen_style: str = option("auto", "gnmt: lp(Y)=((5+|Y|)/6)^alpha (the paper's); fairseq: |Y|^alpha; auto: gnmt "
                                       "with the torch engine, fairseq with CTranslate2 (the one it has)",
                               choices=("auto", "gnmt", "fairseq"))
    max_len_a: float = option(1.0, "maximum output length = a * source length + b (the paper: input + 50); the "
                                   "model's target positions cap it, as in fairseq", low=0, high=1000)
    max_len_b: int = option(50, "see --max-len-a (parsing uses 300)", low=-LENGTH_BOUND, high=LENGTH_BOUND)
    max_len_source: str = option("sentence", "the source length in --max-len-a: each sentence's own, or the "
                                             "longest of its batch (fairseq-generate's rule; with --lenpen-style "
                                             "fairseq --early-stop beam it reproduces fairseq's hypotheses)",
                                 choices=("sentence", "batch"))
    min_len: int = option(1, "minimum output length (EOS excluded)", low=0, high=LENGTH_BOUND)
    unkpen: float = option(0.0, "penalty subtracted from the log-probability of <unk> (>0 discourages it; a "
                                "bonus beyond 1000 would make <unk> certain)", low=-1000)
    no_repeat_ngram_size: int = option(0, "forbid repeating any n-gram of this size in a hypothesis (0: off)", low=0,
                                       high=LENGTH_BOUND)
    prefix_size: int = option(0, "force the first N tokens of the reference as the output prefix", low=0,
                              high=LENGTH_BOUND)
    forced_prefix_score: str = option(
        "model", "what a forced output token (a multilingual model's target-language token, --prefix-size) adds to "
                 "its hypothesis' score: model = its log-probability (fairseq's); zero = nothing, as Hugging Face "
                 "generate(forced_bos_token_id) and CTranslate2's target_prefix count it (with a length penalty "
                 "the two rank hypotheses of different lengths otherwise)",
        choices=("model", "zero"))
    early_stop: str = option(
        "auto", "bound: a sentence stops when no active hypothesis can beat the finished ones it outputs "
                "(T2T's rule, exact); beam: as soon as it has --beam finished hypotheses (fairseq's); never: "
                "search every sentence to its maximum length; auto: bound with the torch engine, beam with "
                "CTranslate2 (the one it has)",
        choices=("auto", "bound", "beam", "never"))
    target_lang_tag: Optional[str] = option(None, "a target-language token (e.g. >>fra<<) put before every raw "
                                                  "source sentence: multilingual Marian (OPUS-MT) models "
                                                  "[default: the model folder's]", metavar="TAG")
    constraints: str = option("off", "lexically constrained decoding (fairseq's): each input line is the source, "
                                     "then after a TAB each target phrase its translation must contain; ordered: "
                                     "the phrases appear in the order given, unordered: in any order",
                              choices=("off", "ordered", "unordered"))
    sampling: bool = option(False, "sample instead of beam search")
    sampling_topk: int = option(-1, "sample only among the K most likely tokens (-1: all)", low=1,
                                high=LENGTH_BOUND, also=(-1,))
    sampling_topp: float = option(-1.0, "nucleus sampling: among the smallest token set with mass >= P (-1: off)",
                                  low=0, high=1, low_open=True, also=(-1.0,))
    temperature: float = option(1.0, "divide the logits by this before the softmax", low=0.001, high=1000)
    score_reference: bool = option(False, "score the references (teacher forced) instead of searching")
    static_search: str = option("auto", "the static-shape beam search, whose step runs as one CUDA graph "
                                        "(generation/static_search.py): auto = on for CUDA when the options allow "
                                        "it (not --sampling, --prefix-size, --no-repeat-ngram-size, "
                                        "--print-alignment), else the dynamic search; on = always, and an error "
                                        "naming an option it lacks; off = never",
                                choices=("auto", "on", "off"))
    static_check_interval: int = option(4, "static-shape search: ask the device whether every sentence of the "
                                           "batch has finished every N steps (each ask waits for it)", metavar="N",
                                        low=1, high=LENGTH_BOUND)
    cpu_batch_size: Optional[int] = option(
        None, "CPU decoding without --batch-size: at most this many sentences per batch, so that a long input makes "
              "enough batches for every core to decode its own on one thread (a batch split over several threads "
              "stalls at each step whenever another process takes one of its cores); 0: batches by --max-tokens "
              "only [default: 64 for the torch engine, 16 for CTranslate2]", metavar="N", low=0, high=LENGTH_BOUND)
    cpu_packed_linear: bool = option(True, "CPU float32 decoding: linear layers through oneDNN with their weights "
                                           "packed once (a ReLU fused into its product) and each step's attention "
                                           "as two batched products (generation/cpu.py; checked against F.linear "
                                           "on a probe at start, torch's kernels where it does not hold)")

    def for_engine(self, engine: str) -> "GenerationConfig":
        """This config with each ``auto`` (or unset number) replaced by the engine's own rule (:data:`ENGINE_RULES`): what a search
        runs under. The defaults are thus a search each engine has, and a value named explicitly is kept (and
        refused by name where the engine lacks it)."""
        chosen = {name: rule for name, rule in ENGINE_RULES[engine].items() if getattr(self, name) in ("auto", None)}
        return dataclasses.replace(self, **chosen) if chosen else self

    def validate(self) -> None:
        check_ranges(self)
        if self.nbest > self.beam:
            raise UsageError(f"--nbest must be between 1 and --beam ({self.beam}), got {self.nbest}")
        self._check_length_limits()

    def _check_length_limits(self) -> None:
        """The limits must leave every source a legal output length: ``min_len <= a * S + b`` for S = 1.

        A sentence's limit is ``a * S + b`` tokens (S: source tokens with its EOS, so S >= 1, the bound
        grows with S when a >= 0); the search forbids EOS before ``--min-len`` and forces it at the limit.
        Limits that contradict each other are an error rather than resolved silently (whichever is chosen,
        ``--min-len 500 --max-len-b 3`` would not give what either option says)."""
        shortest = int(self.max_len_a * 1 + self.max_len_b)  # the search truncates a * S + b the same way
        needed = max(self.min_len, 1)
        if shortest < needed:
            what = f"the {needed} of --min-len" if self.min_len > 1 else "one token"
            raise UsageError(f"--max-len-a {self.max_len_a:g} --max-len-b {self.max_len_b} contradict: an empty source "
                             f"(1 token, its EOS) may get at most {shortest} output tokens, fewer than {what}; raise "
                             f"--max-len-b" + (" or lower --min-len" if self.min_len > 1 else ""))

    def check_model_limit(self, max_target_positions: int) -> None:
        """``--min-len`` must fit in the model too: its outputs end by ``max_target_positions - 1`` tokens."""
        if self.min_len > max_target_positions - 1:
            raise UsageError(f"--min-len {self.min_len}: the model has {max_target_positions} target positions, so "
                             f"its outputs end by {max_target_positions - 1} tokens; lower --min-len")
