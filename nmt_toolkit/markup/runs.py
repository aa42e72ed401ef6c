"""A paragraph made of formatted runs (a word processor's or a slide's: bold, italic, a link, another font),
translated as one text and given back run by run.

A paragraph's runs are written as an HTML fragment with one inline element per run
(``<span data-r="0">A </span><span data-r="1">bold</span><span data-r="2"> word.</span>``) and translated by
:class:`~nmt_toolkit.markup.html.HtmlText`: its sentences are the paragraph's sentences, whole, whatever runs
they cross, so the model reads them in context, and each span is put back around the target words aligned to
its run's words (:mod:`~nmt_toolkit.markup.placement`). The rendered fragment is then read back into one
text per run:

- the text inside a run's span is that run's;
- text outside every span (the spaces between spans, target words aligned to no run) joins the run before
  it (the first run's span that comes back, for text before any);
- runs stay where they are in the paragraph (their formatting belongs to them), so where the translation
  puts the spans in another order, the longest sequence of spans still in the runs' order keeps its text and
  the other spans' text joins the run before them: the paragraph's text, runs joined, is the translation;
- a run whose span came back empty (its words aligned nowhere) becomes empty; a run without text is left
  out of the fragment and stays empty.

``\\n`` in a run (a line break inside it) is a ``<br>`` in the fragment and comes back as ``\\n``.
"""
from __future__ import annotations

import html as html_escape
from typing import Optional, Sequence

from nmt_toolkit.markup.html import HtmlText
from nmt_toolkit.markup.placement import Aligned

#: the attribute that numbers a run's span
RUN = "data-r"


def runs_fragment(runs: Sequence[str]) -> str:
    """The runs' texts as an HTML fragment of one span each (runs without text left out)."""
    return "".join(f'<span {RUN}="{k}">' + "<br>".join(html_escape.escape(line, quote=False)
                                                      for line in text.split("\n")) + "</span>"
                   for k, text in enumerate(runs) if text)


class RunsText:
    """A paragraph's runs (their texts, in order) to translate: :attr:`sentences`, then :meth:`render` with a
    translation of each, which gives each run its new text."""

    def __init__(self, runs: Sequence[str], language: str):
        self.runs = list(runs)
        self.html = HtmlText(runs_fragment(self.runs), language)
        self.sentences = self.html.sentences

    def render(self, translations: Sequence[Optional[Aligned]]) -> list[str]:
        """Each run's text in the translation (see the module docstring)."""
        return run_texts(self.html.render(translations), len(self.runs))


def run_texts(fragment: str, count: int) -> list[str]:
    """The texts of ``count`` runs from a rendered fragment of :func:`runs_fragment`'s spans."""
    segments = _segments(fragment, count)
    texts = [""] * count
    owners = _owners([run for run, _ in segments])
    for (_, text), owner in zip(segments, owners):
        if owner is not None:
            texts[owner] += text
    return texts


def _segments(fragment: str, count: int) -> list[tuple[Optional[int], str]]:
    """The fragment's text in order, each stretch with the run whose span holds it (None: outside spans);
    empty stretches are left out."""
    import lxml.html

    root = lxml.html.fragment_fromstring(fragment, create_parent="div") if fragment.strip() else None
    if root is None:
        return [(None, fragment)] if fragment else []
    found: list[tuple[Optional[int], str]] = [(None, root.text or "")]
    for child in root:
        number = child.get(RUN, "")
        run = int(number) if number.isdigit() and int(number) < count else None
        found.append((run, _text_of(child)))
        found.append((None, child.tail or ""))
    return [(run, text) for run, text in found if text]  # an empty span owns nothing, not even the space after it


def _text_of(element) -> str:
    """An element's text with ``<br>`` as ``\\n``."""
    parts = [element.text or ""]
    for child in element:
        parts.append("\n" if isinstance(child.tag, str) and child.tag.lower() == "br" else _text_of(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _owners(runs: Sequence[Optional[int]]) -> list[Optional[int]]:
    """The run each stretch goes to: the spans kept are a non-decreasing sequence of runs (the longest, by
    count of spans, the earliest on a tie); every other stretch goes to the run of the kept span before it
    (before the first kept span: to that span's run)."""
    spans = [k for k, run in enumerate(runs) if run is not None]
    best: list[list[int]] = []
    for i, k in enumerate(spans):
        before = [best[j] for j in range(i) if runs[spans[j]] <= runs[k]]
        best.append(max(before, key=len, default=[]) + [k])
    kept = set(max(best, key=len, default=[]))
    owners: list[Optional[int]] = []
    current = next((runs[k] for k in spans if k in kept), None)
    for k, run in enumerate(runs):
        if k in kept:
            current = run
        owners.append(current)
    return owners
