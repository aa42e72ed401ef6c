"""Several training corpora (``train``, ``train1``, … of a data-bin) drawn into one epoch by weight or
temperature, the same draw for the same seed and epoch (so a resumed run reads the epoch it left).

How many pairs of each corpus an epoch holds (:func:`epoch_counts`), for corpora of ``n_i`` pairs:

- ``concat`` (the default): every pair once, the first corpus ``--upsample-primary`` times (fairseq's
  translation task, which concatenates ``train``, ``train1``, … the same way);
- ``--corpus-weights w_1,w_2,…``: the epoch holds as many pairs as all corpora together (``N = Σ n_i``),
  a share ``w_i / Σ w`` of them from corpus ``i`` (weights are relative: ``1e308,1e308`` is 1:1);
- ``--corpus-sampling temperature --corpus-temperature T``: shares ``∝ n_i^(1/T)`` (T = 1: by size; a
  larger T flattens them towards uniform; as T → 0 the largest corpus takes all), as fairseq's
  multilingual ``--sampling-temperature``.

Shares become whole counts by the largest remainder, so they add up to ``N`` and do not vary from epoch to
epoch. Which pairs a corpus gives (:func:`draw`): all of them ``count // n_i`` times, then ``count mod n_i``
distinct ones drawn with a generator seeded by ``(seed, epoch, corpus)``: an upsampled corpus repeats each
pair as evenly as the count allows, a downsampled one shows different pairs in different epochs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from nmt_toolkit.config import option
from nmt_toolkit.data.pair_dataset import LanguagePairDataset
from nmt_toolkit.errors import UsageError

SAMPLING = ("concat", "temperature")


@dataclass
class CorpusSamplingConfig:
    corpus_weights: Optional[str] = option(
        None, "draw every epoch from the training corpora (train, train1, … of nmt-preprocess --trainpref a,b) "
              "with these comma-separated weights, e.g. 3,1: the epoch holds as many pairs as all corpora, a "
              "share w_i/sum(w) from corpus i", metavar="W1,W2,...")
    upsample_primary: int = option(1, "read the first training corpus this many times per epoch and the others "
                                      "once (fairseq's option)", low=1, high=10_000)
    corpus_sampling: str = option("concat", "how epochs are drawn from several training corpora: concat (every "
                                            "pair once, see --upsample-primary) or temperature (shares "
                                            "proportional to size^(1/T), see --corpus-temperature)",
                                  choices=list(SAMPLING))
    corpus_temperature: float = option(1.0, "the T of --corpus-sampling temperature: 1 draws by size, larger "
                                             "values flatten the shares towards uniform", low=0.0, low_open=True,
                                       high=1000.0)

    def weights(self) -> Optional[list[float]]:
        """``--corpus-weights`` as numbers (None without it); a bad list is one line naming the option."""
        if self.corpus_weights is None:
            return None
        try:
            values = [float(w) for w in self.corpus_weights.split(",")]
        except ValueError:
            values = []
        if not values or not all(math.isfinite(w) and w >= 0 for w in values) or sum(values) <= 0:
            raise UsageError(f"--corpus-weights {self.corpus_weights}: give one number ≥ 0 per training corpus, "
                             f"comma-separated, not all 0 (e.g. 3,1)")
        return values

    def validate(self) -> None:
        """The checks that need no data: the weights' list, and options that set the shares twice."""
        weights = self.weights()
        if weights is not None and self.corpus_sampling != "concat":
            raise UsageError(f"--corpus-weights and --corpus-sampling {self.corpus_sampling} both set the "
                             f"shares; give one")
        if self.upsample_primary > 1 and self.resamples():
            raise UsageError(f"--upsample-primary {self.upsample_primary} goes with --corpus-sampling concat "
                             f"only; with weights or a temperature, set the first corpus's share there")

    def check_corpora(self, names: Sequence[str]) -> None:
        """Check the options against the training corpora found (``names``: train, train1, …)."""
        self.validate()
        weights = self.weights()
        listed = ", ".join(names)
        if weights is not None and len(weights) != len(names):
            raise UsageError(f"--corpus-weights {self.corpus_weights}: {len(weights)} "
                             f"weight{'s' if len(weights) > 1 else ''} for {len(names)} training "
                             f"corpor{'a' if len(names) > 1 else 'us'} ({listed})")
        if self.upsample_primary > 1 and len(names) < 2:
            raise UsageError(f"--upsample-primary {self.upsample_primary}: the data-bin holds one training "
                             f"corpus ({listed}); binarize several with nmt-preprocess --trainpref a,b")

    def resamples(self) -> bool:
        """Whether epochs differ (a draw), rather than reading every pair a fixed number of times."""
        return self.corpus_weights is not None or self.corpus_sampling != "concat"


def _whole_counts(shares: np.ndarray, total: int) -> list[int]:
    """``shares`` (summing to 1) of ``total`` as whole numbers adding up to it: floors, then one more to the
    largest remainders (the earlier corpus first among equal ones)."""
    raw = shares * total
    counts = np.floor(raw).astype(np.int64)
    left = total - int(counts.sum())
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[:left]:
        counts[i] += 1
    return [int(c) for c in counts]


def epoch_counts(sizes: Sequence[int], cfg: CorpusSamplingConfig, total: Optional[int] = None) -> list[int]:
    """Pairs each corpus gives per epoch (see the module docstring); ``total`` replaces the epoch's length
    ``Σ n_i`` of weights and temperature."""
    sizes_arr = np.asarray(sizes, dtype=np.float64)
    weights = cfg.weights()
    if weights is not None:
        shares = weight_shares(weights)
    elif cfg.corpus_sampling == "temperature":
        shares = temperature_shares(sizes, cfg.corpus_temperature)
    else:
        return [int(n) * (cfg.upsample_primary if i == 0 else 1) for i, n in enumerate(sizes)]
    return _whole_counts(shares, int(sizes_arr.sum()) if total is None else total)


def weight_shares(weights: Sequence[float]) -> np.ndarray:
    """``w_i / Σ w``. Weights are relative, so they are first scaled by the power of two that brings the
    largest into [0.5, 1): exact, so the shares are those of ``w / Σ w`` wherever that sum is finite, and
    weights near the float limit (``1e308,1e308``) cannot sum to inf and make every share 0."""
    values = np.asarray(weights, dtype=np.float64)
    scaled = np.ldexp(values, -int(np.frexp(values.max())[1]))
    return scaled / scaled.sum()


def temperature_shares(sizes: Sequence[int], temperature: float) -> np.ndarray:
    """``n_i^(1/T)``, normalised: the shares of temperature sampling. The powers are fairseq's
    ``(n_i/N)^(1/T)`` (the epoch length of :func:`~nmt_toolkit.tasks.multilingual.fairseq_epoch_size` is
    truncated as fairseq's, so its rounding matters); where even the largest underflows (T near 0: all
    would be 0, the shares 0/0), they are taken relative to the largest, in logs, which gives the limit
    T → 0: the largest corpus takes the whole epoch, equally largest ones share it."""
    sizes_arr = np.asarray(sizes, dtype=np.float64)
    with np.errstate(under="ignore", over="ignore", divide="ignore"):
        powers = (sizes_arr / sizes_arr.sum()) ** (1.0 / temperature)
        if not powers.max() >= np.finfo(np.float64).tiny:
            logs = np.log(sizes_arr)
            powers = np.exp((logs - logs.max()) / temperature)
    return powers / powers.sum()


def draw(sizes: Sequence[int], counts: Sequence[int], seed: int, epoch: int) -> list[np.ndarray]:
    """The pairs (indices within each corpus) an epoch reads, in increasing order within each corpus."""
    picked = []
    for corpus, (n, count) in enumerate(zip(sizes, counts)):
        full, rest = divmod(int(count), int(n))
        parts = [np.arange(n, dtype=np.int64)] * full
        if rest:
            rng = np.random.RandomState([seed % 2 ** 32, epoch % 2 ** 32, corpus])
            parts.append(np.sort(rng.choice(n, rest, replace=False)).astype(np.int64))
        picked.append(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
    return picked


class _Picked:
    """Items of several indexed datasets at ``(corpus, index)`` positions, as one sequence."""

    def __init__(self, parts: Sequence, corpus_of: np.ndarray, index_in: np.ndarray):
        self.parts, self.corpus_of, self.index_in = parts, corpus_of, index_in

    def __len__(self) -> int:
        return len(self.corpus_of)

    def __getitem__(self, i: int):
        return self.parts[int(self.corpus_of[i])][int(self.index_in[i])]


class CorpusMixture(LanguagePairDataset):
    """One epoch's pairs drawn from several corpora (:class:`LanguagePairDataset` s with the same
    dictionaries). Pair ``i`` is pair ``index_in[i]`` of corpus ``corpus_of[i]``; ``names`` and ``counts``
    say which corpora gave how many, for the log."""

    def __init__(self, corpora: Sequence[LanguagePairDataset], names: Sequence[str], picked: Sequence[np.ndarray]):
        self.names = list(names)
        self.sizes_of_corpora = [len(c) for c in corpora]
        self.counts = [len(p) for p in picked]
        self.corpus_of = np.concatenate([np.full(len(p), k, dtype=np.int64) for k, p in enumerate(picked)])
        self.index_in = np.concatenate(list(picked)).astype(np.int64)
        first = corpora[0]
        src = _Picked([c.src for c in corpora], self.corpus_of, self.index_in)
        tgt = _Picked([c.tgt for c in corpora], self.corpus_of, self.index_in)
        src_sizes = np.concatenate([c.src_sizes[p] for c, p in zip(corpora, picked)])
        tgt_sizes = np.concatenate([c.tgt_sizes[p] for c, p in zip(corpora, picked)])
        super().__init__(src, src_sizes, first.src_dict, tgt, tgt_sizes, first.tgt_dict)

    def composition(self) -> str:
        """``train 5625 of 3000 (75.0%), train1 1875 of 1000 (25.0%)``: what the epoch draws."""
        total = max(1, sum(self.counts))
        return ", ".join(f"{name} {count} of {size} ({100 * count / total:.1f}%)"
                         for name, count, size in zip(self.names, self.counts, self.sizes_of_corpora))


def mix(corpora: Sequence[LanguagePairDataset], names: Sequence[str], cfg: CorpusSamplingConfig, seed: int,
        epoch: int, total: Optional[int] = None) -> CorpusMixture:
    """Epoch ``epoch``'s draw from ``corpora`` under ``cfg`` (checked against ``names`` first); ``total``:
    see :func:`epoch_counts`."""
    cfg.check_corpora(names)
    sizes = [len(c) for c in corpora]
    return CorpusMixture(corpora, names, draw(sizes, epoch_counts(sizes, cfg, total), seed, epoch))
