"""Lexically constrained beam search: every output contains each of its sentence's target phrases.

The algorithm is fairseq 0.12's (``--constraints``), the vectorised dynamic beam allocation of Hu et al.
(2019) after Post & Vilar (2018), so that the same model decodes to the same hypotheses in both toolkits.
Each hypothesis carries a *constraint state*: how many constraint tokens it has produced so far, its *bank*.
A step's candidates are the usual best ``2k`` over beam × V, plus each hypothesis' single best token, plus
every token that would advance a hypothesis' constraints. The candidates are sorted by bank, then score,
and the beam is dealt out round-robin across the banks, fullest first, so that hypotheses that have met
more constraints keep places in the beam although the model scores them lower. A hypothesis may end only
once its constraints are all met.

``ordered``: the phrases must appear in the given order, anything between them. ``unordered``: in any order;
progress is tracked in a trie of the phrases. A phrase listed twice must appear twice.

This is a strategy of the one dynamic search (generation/beam_search.py) like generation/strategies.py's:
it answers ``candidates``, ``continuing`` and ``survivors``, and keeps one state per hypothesis in step with
the search's rows. It runs the per-sentence bookkeeping in Python, as fairseq does: a step costs a few
hundred small tensor operations per sentence, so constrained decoding is several times slower than plain
beam search (docs/generation-and-scoring.md measures it).

A sentence none of whose hypotheses has met its constraints by its length limit finishes nothing: fairseq
stops there with an assertion error; here the search (beam_search.py) translates such sentences again
without their constraints and says so (the programs refuse beforehand constraints longer than the limit).
The search's habit of placing a continuing hypothesis in its parent's row (a cheaper decoder-cache reorder)
is not used, so that the rows, and with them the order of ties, are fairseq's.
"""
from __future__ import annotations

from collections import Counter
from typing import Optional, Sequence

import torch

from nmt_toolkit.generation.search_steps import NEG_INF
from nmt_toolkit.generation.strategies import BeamStrategy

#: fairseq's sort key puts banks this far apart (bank × -100 + score): exact only while cumulative scores stay
#: above -100, and kept as it is so that ties and crossings fall as they do there
BANK_SPACING = -100


class OrderedState:
    """Progress through the phrases, in order: ``pos`` is the index of the last constraint token produced
    (-1: none). A token that breaks a phrase midway starts over (from its first token if it is one)."""

    def __init__(self, tokens: tuple, ends: tuple, pos: int = -1):
        self.tokens, self.ends, self.pos = tokens, ends, pos

    @staticmethod
    def create(phrases: Sequence[Sequence[int]]) -> "OrderedState":
        tokens = tuple(int(t) for p in phrases for t in p)
        ends = tuple(i == len(p) - 1 for p in phrases for i in range(len(p)))
        return OrderedState(tokens, ends)

    @property
    def bank(self) -> int:
        return self.pos + 1

    @property
    def finished(self) -> bool:
        return self.pos + 1 == len(self.tokens)

    def distinct_tokens(self) -> int:
        return len(set(self.tokens))

    def next_tokens(self) -> set:
        following = set()
        if self.pos > 0:
            following.add(self.tokens[0])
        if not self.finished:
            following.add(self.tokens[self.pos + 1])
        return following

    def advance(self, token: int) -> "OrderedState":
        if self.finished:
            return self
        if self.tokens[self.pos + 1] == token:
            return OrderedState(self.tokens, self.ends, self.pos + 1)
        if self.ends[self.pos]:  # between phrases (or before the first: ends[-1] is the last phrase's end)
            return self
        return OrderedState(self.tokens, self.ends, 0 if token == self.tokens[0] else -1)


class TrieNode:
    """A node of the phrases' trie: ``terminal`` phrases end here, ``below`` phrases end here or deeper."""

    def __init__(self, token: Optional[int] = None, parent: Optional["TrieNode"] = None):
        self.token, self.parent = token, parent
        self.children: dict[int, TrieNode] = {}
        self.terminal = 0
        self.below = 0

    def add(self, phrase: Sequence[int]) -> None:
        node = self
        for token in phrase:
            node = node.children.setdefault(int(token), TrieNode(int(token), node))
        node.terminal += 1
        while node is not None:
            node.below += 1
            node = node.parent

    def tokens(self) -> set:
        found, stack = set(), list(self.children.values())
        while stack:
            node = stack.pop()
            found.add(node.token)
            stack += node.children.values()
        return found


class UnorderedState:
    """Progress through the phrases in any order: the trie node reached, how often each node lies on the
    hypothesis' path (``generated``; its sum is the bank) and how often each phrase end was completed."""

    def __init__(self, node: TrieNode, root: TrieNode, generated: Counter, completed: Counter):
        self.node, self.root, self.generated, self.completed = node, root, generated, completed

    @staticmethod
    def create(phrases: Sequence[Sequence[int]]) -> "UnorderedState":
        root = TrieNode()
        for phrase in phrases:
            root.add(phrase)
        return UnorderedState(root, root, Counter(), Counter())

    def _to(self, node: TrieNode) -> "UnorderedState":
        """A copy of this state moved to ``node`` (counted as produced unless it is the root)."""
        moved = UnorderedState(node, self.root, Counter(self.generated), Counter(self.completed))
        if node is not self.root:
            moved.generated[node] += 1
        return moved

    @property
    def bank(self) -> int:
        return sum(self.generated.values())

    @property
    def finished(self) -> bool:
        pending = self.node.terminal and self.completed[self.node] < self.node.terminal
        return self.root.below == sum(self.completed.values()) + bool(pending)

    def distinct_tokens(self) -> int:
        return len(self.root.tokens())

    def next_tokens(self) -> set:
        if self.node is not self.root:
            return set(self.root.children).union(set(self.node.children))
        return set(self.root.children)

    def _open(self, node: Optional[TrieNode]) -> bool:
        """A trie edge may be taken while fewer phrases through it were produced than end below it."""
        return node is not None and self.generated[node] < node.below

    def advance(self, token: int) -> "UnorderedState":
        child = self.node.children.get(token)
        if self._open(child):
            return self._to(child)
        first = self.root.children.get(token)
        moved = self._to(first if self._open(first) else self.root)
        self._unwind(moved)
        return moved

    def _unwind(self, moved: "UnorderedState") -> None:
        """Falling off the trie: the deepest phrase end on the current path is completed; the nodes below it
        are no longer produced."""
        node = self.node
        while node is not self.root:
            if node.terminal and self.completed[node] < node.terminal:
                moved.completed[node] += 1
                return
            moved.generated[node] -= 1
            node = node.parent


STATES = {"ordered": OrderedState, "unordered": UnorderedState}


def stripes(banks: list[int], distinct: int) -> torch.Tensor:
    """Round-robin ranks over candidates sorted by bank (fullest first), as fairseq computes them: the
    ``i``-th candidate of a bank ranks after every bank's ``i-1``-th."""
    spacing = len(banks) + 1
    out, count, current = [], -1, banks[0]
    for bank in banks:
        count = 0 if bank != current else count + 1
        current = bank
        out.append(distinct - bank + count * spacing)
    return torch.tensor(out, dtype=torch.long)


class ConstrainedBeamStrategy(BeamStrategy):
    """Beam search with lexical constraints (the module docstring): ``phrases[i]`` the target phrases (token
    ids) of the batch's sentence ``i``, ``kind`` "ordered" or "unordered"."""

    def __init__(self, beam: int, early_stop: str, phrases: Sequence[Sequence[Sequence[int]]], kind: str,
                 eos: int):
        super().__init__(beam, early_stop)
        self.eos = eos
        self.states = [[STATES[kind].create(p)] for p in phrases]  # one per row of each active sentence
        self._cand_states: list = []

    def candidates(self, lprobs: torch.Tensor, prev: Optional[torch.Tensor], n: int, width: int):
        vocab = lprobs.size(-1)
        if prev is not None:  # fairseq's first step lets every hypothesis end (--min-len forbids it there)
            lprobs = self._forbid_early_eos(lprobs)
        cum = lprobs if prev is None else lprobs + prev.unsqueeze(1)
        cum = cum.view(n, width, vocab)
        ncand = min(2 * self.beam, width * vocab - 1)
        top_scores, top_index = cum.view(n, -1).topk(ncand, dim=1)
        beams, tokens = top_index // vocab, top_index.fmod(vocab)
        if prev is not None:  # and each hypothesis' own best token
            row_scores, row_tokens = cum.topk(1, dim=2)
            top_scores = torch.cat((top_scores, row_scores.view(n, -1)), dim=1)
            tokens = torch.cat((tokens, row_tokens.view(n, -1)), dim=1)
            beams = torch.cat((beams, torch.arange(width, device=beams.device).repeat(n, 1)), dim=1)
        out = [self._sentence(i, cum[i], top_scores[i], tokens[i], beams[i], ncand) for i in range(n)]
        self._cand_states = [states for *_, states in out]
        return tuple(torch.stack([o[j] for o in out]) for j in range(3))

    def _forbid_early_eos(self, lprobs: torch.Tensor) -> torch.Tensor:
        """EOS is no candidate for a hypothesis with constraints left (at its length limit, where EOS is the
        only token allowed, it then has no candidate at all)."""
        rows = [r for r, state in enumerate(s for sent in self.states for s in sent) if not state.finished]
        if not rows:
            return lprobs
        rows = torch.tensor(rows, device=lprobs.device)
        lprobs = lprobs.clone()
        lprobs[rows, self.eos] = NEG_INF
        return lprobs

    def _sentence(self, i: int, cum: torch.Tensor, scores, tokens, beams, ncand: int):
        """One sentence's ``ncand`` candidates ``(scores, beams, tokens, states)``: the search's, those that
        advance a constraint, sorted by (bank, score), duplicates dropped, dealt round-robin over banks."""
        states = self.states[i]
        for beam, state in enumerate(states):
            following = torch.tensor(list(state.next_tokens()), dtype=torch.long, device=tokens.device)
            if following.numel():
                tokens = torch.cat((tokens, following))
                beams = torch.cat((beams, torch.full_like(following, beam)))
                scores = torch.cat((scores, cum[beam].take(following)))
        advanced = [states[b].advance(t) for b, t in zip(beams.tolist(), tokens.tolist())]
        banks = torch.tensor([s.bank for s in advanced], dtype=torch.long, device=tokens.device)
        distinct = states[-1].distinct_tokens()
        order = ((distinct - banks) * BANK_SPACING + scores).sort(dim=0, descending=True).indices
        scores, tokens, beams, banks = scores[order], tokens[order], beams[order], banks[order]
        advanced = [advanced[j] for j in order.tolist()]
        keys = beams * (cum.size(-1) + 1) + tokens
        unique = torch.roll(keys, 1) != keys  # a duplicate follows its twin once sorted
        scores, tokens, beams, banks = scores[unique], tokens[unique], beams[unique], banks[unique]
        advanced = [advanced[0]] + [s for s, u in zip(advanced[1:], unique[1:].tolist()) if u]  # fairseq's
        order = stripes(banks.tolist(), distinct).sort(dim=0).indices
        advanced = [advanced[j] for j in order.tolist()]
        return scores[order][:ncand], beams[order][:ncand], tokens[order][:ncand], advanced

    def continuing(self, scores, beams, eos_mask, in_parent_rows: bool = False):
        act_scores, active = super().continuing(scores, beams, eos_mask, in_parent_rows=False)
        self.states = [[cands[j] for j in row] for cands, row in zip(self._cand_states, active.tolist())]
        return act_scores, active

    def survivors(self, done: torch.Tensor) -> torch.Tensor:
        keep = super().survivors(done)
        self.states = [self.states[j] for j in keep.tolist()]
        return keep
