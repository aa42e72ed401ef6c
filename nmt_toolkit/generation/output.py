"""fairseq's output lines, so that ``grep ^H | cut -f3-`` pipelines keep working::

    S-<id>\\t<source text>
    T-<id>\\t<reference text>              (detokenized: equals the raw reference)
    H-<id>\\t<score>\\t<hypothesis tokens>  (subword tokens; --remove-bpe undoes the segmentation here too)
    D-<id>\\t<score>\\t<detokenized text>
    P-<id>\\t<per-token scores>            (EOS included)
    A-<id>\\t<src>-<tgt> …                 (--print-alignment: argmax of the encoder–decoder attention)

With ``--format html`` (:func:`html_lines`) H- and D- hold a line's HTML translated, P- its sentences'
per-token scores one after another and A- word pairs (docs/generation-and-scoring.md).

Scores are base 2 (natural-log scores divided by ln 2), as fairseq prints them; the H-/D- score is the
length-penalised score used for ranking, P- the per-token log-probabilities.

Text in S-/T-/H-/D- lines (and nmt-interactive's --plain lines) goes through :func:`printable`: control
characters other than tab are written as ``\\x1b``-style escapes, so an input cannot drive the terminal
(ANSI escape sequences) or split one output line into two (vertical tab, form feed, U+2028…).
"""
from __future__ import annotations

import heapq
import math
import re
from typing import IO, Optional

from nmt_toolkit.data.dictionary import remove_bpe
from nmt_toolkit.outputs import OutputKind

LN2 = math.log(2.0)
#: what nmt-generate writes into --results-path and --attention-plot
RESULTS_FOLDER = OutputKind("a results folder of nmt-generate", markers=("generate-*.txt",))
ATTENTION_PLOTS = OutputKind("a folder of attention plots", markers=("attention-*.png",))


class Detokenizer:
    """Subword pieces → text, through the data-bin's subword model (or ``--remove-bpe`` symbol, or nothing)."""

    def __init__(self, codec=None, bpe_symbol: Optional[str] = None):
        self.codec = codec
        self.bpe_symbol = bpe_symbol

    def __call__(self, pieces: str) -> str:
        if self.codec is not None:
            return self.codec.decode(pieces)
        return remove_bpe(pieces, self.bpe_symbol) if self.bpe_symbol else pieces


# C0 controls but tab, DEL, C1 controls, and the separators str.splitlines breaks lines at
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with control characters other than tab escaped (ESC → ``\\x1b``), one line whatever it holds."""
    return _CONTROL.sub(_escape, text)


def format_score(x: float) -> str:
    """A base-2 score as fairseq prints it (Python's shortest repr of the float)."""
    return repr(float(x) / LN2) if math.isfinite(x) else str(float(x))


def hypothesis_lines(sample_id: int, hyps: list[dict], tgt_dict, detok: Detokenizer,
                     h_bpe_symbol: Optional[str] = None, print_alignment: bool = False) -> list[str]:
    """The H-/D-/P-(/A-) lines of one sentence's hypotheses (best first)."""
    lines = []
    for hyp in hyps:
        pieces = tgt_dict.string(hyp["tokens"])
        h_text = remove_bpe(pieces, h_bpe_symbol) if h_bpe_symbol else pieces
        score = format_score(hyp["score"])
        lines.append(f"H-{sample_id}\t{score}\t{printable(h_text)}")
        lines.append(f"D-{sample_id}\t{score}\t{printable(detok(pieces))}")
        pos = " ".join(f"{float(p) / LN2:.4f}" for p in hyp["positional_scores"].tolist())
        lines.append(f"P-{sample_id}\t{pos}")
        if print_alignment:
            align = hyp.get("alignment")
            text = "" if align is None else " ".join(f"{s}-{t}" for t, s in enumerate(align.tolist()))
            lines.append(f"A-{sample_id}\t{text}")
    return lines


def html_lines(sample_id: int, hyps, print_alignment: bool = False) -> list[str]:
    """The H-/D-/P-(/A-) lines of one ``--format html`` line's hypotheses (``HtmlHypothesis``, best first): H-
    and D- hold the rendered HTML (there are no subword pieces to show for a whole text), P- the per-token
    scores of its sentences one after another, A- its word alignment (``<source word>-<target word>``)."""
    lines = []
    for hyp in hyps:
        score = format_score(hyp.score)
        lines.append(f"H-{sample_id}\t{score}\t{printable(hyp.html)}")
        lines.append(f"D-{sample_id}\t{score}\t{printable(hyp.html)}")
        lines.append(f"P-{sample_id}\t" + " ".join(f"{p / LN2:.4f}" for p in hyp.positional_scores))
        if print_alignment:
            lines.append(f"A-{sample_id}\t" + " ".join(f"{s}-{t}" for s, t in hyp.pairs))
    return lines


class OrderedPrinter:
    """Prints each sentence's block as soon as every smaller id has been printed (input order)."""

    def __init__(self, out: Optional[IO[str]], first_id: int = 0):
        self.out = out
        self.next_id = first_id
        self.pending: list[tuple[int, list[str]]] = []

    def add(self, sample_id: int, lines: list[str]) -> None:
        heapq.heappush(self.pending, (sample_id, lines))
        self._flush()

    def _flush(self) -> None:
        chunks = []
        while self.pending and self.pending[0][0] <= self.next_id:
            sid, lines = heapq.heappop(self.pending)
            chunks.extend(lines)
            self.next_id = max(self.next_id, sid + 1)
        if chunks and self.out is not None:
            self.out.write("\n".join(chunks) + "\n")

    def close(self) -> None:
        """Print whatever is left (ids that were skipped, e.g. filtered by size), in id order."""
        rest = []
        while self.pending:
            rest.extend(heapq.heappop(self.pending)[1])
        if rest and self.out is not None:
            self.out.write("\n".join(rest) + "\n")
        if self.out is not None:
            self.out.flush()


def plot_attention(model, items, src_dict, tgt_dict, folder: str, kind: str = "encoder-decoder", layer: int = -1,
                   head: int = -1) -> list[str]:
    """One PNG heatmap per sentence, like the paper's Figures 3–5. ``items``: ``(id, source tokens without
    padding, hypothesis tokens)``; ``kind`` / ``layer`` / ``head`` choose the attention (head -1: the mean of
    the heads). The probabilities come from a teacher-forced pass on the hypothesis
    (:func:`nmt_toolkit.generation.attention_maps.attention_probs`).
    """
    import functools
    import os

    from nmt_toolkit.generation.attention_maps import attention_probs, select_heads
    from nmt_toolkit.outputs import replace_file

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from nmt_toolkit.errors import UsageError

        raise UsageError("--attention-plot needs matplotlib: pip install 'nmt_toolkit[viz]' (or matplotlib)") from None
    written = []
    device = next(model.parameters()).device
    for sid, src_tokens, hyp_tokens in items:
        start = model.decoder_start(tgt_dict) if callable(getattr(model, "decoder_start", None)) else tgt_dict.eos()
        probs = attention_probs(model, src_tokens.to(device), hyp_tokens.to(device), start, kind, layer)
        attn = select_heads(probs, head).numpy()
        src = [src_dict[i] for i in src_tokens.tolist()]
        out = [tgt_dict[i] for i in hyp_tokens.tolist()]
        rows, cols = {"encoder": (src, src), "decoder": (out, [tgt_dict[start]] + out[:-1]),
                      "encoder-decoder": (out, src)}[kind]
        fig, ax = plt.subplots(figsize=(max(4, 0.35 * len(cols) + 2), max(3, 0.35 * len(rows) + 1.5)))
        ax.imshow(attn, cmap="Greys", aspect="auto", vmin=0.0)
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=8)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_xlabel("attended position")
        ax.set_ylabel("attending position")
        which = "mean of heads" if head < 0 else f"head {head}"
        title = {"encoder": "encoder self-attention", "decoder": "decoder self-attention"}.get(kind, f"{kind} attention")
        ax.set_title(f"sentence {sid}: {title}, layer {layer}, {which}", fontsize=9)
        fig.tight_layout()
        path = os.path.join(folder, f"attention-{sid}.png")
        replace_file(path, functools.partial(fig.savefig, format="png", dpi=100), "the attention plot")
        plt.close(fig)
        written.append(path)
    return written
