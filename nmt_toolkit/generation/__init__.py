"""Generation: batched beam search, sampling and teacher-forced scoring over the incremental-decoding model
contract (beam_search.py), ensembles (ensemble.py), fairseq's output lines (output.py),
the search options (config.py)."""
from nmt_toolkit.generation.beam_search import SequenceGenerator, length_penalty  # noqa: F401
from nmt_toolkit.generation.config import GenerationConfig  # noqa: F401
from nmt_toolkit.generation.ensemble import EnsembleModel  # noqa: F401
