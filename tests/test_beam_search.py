"""SequenceGenerator against independent references: exhaustive search, a plain greedy loop, one sentence at a
time, teacher-forced scoring, a single model versus an ensemble of it with itself, an ensemble of two different
models against the mixture of their probabilities worked out from each alone, and sampling's draws against the
truncated distribution computed from a plain decoder pass (exact support, chi-square on many seeded draws).

The models are tiny Transformers with random weights whose output layer is scaled up (×6) so that the next-token
distributions are peaked like a trained model's; a flat random model makes beam search and exhaustive search
disagree for reasons that have nothing to do with the code (beam search is not exact in general).
"""
from __future__ import annotations

import functools
import itertools
import math

import pytest
import torch

from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.errors import UsageError
from nmt_toolkit.generation.beam_search import SequenceGenerator, length_penalty
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel


def make_dict(n_words: int) -> Dictionary:
    d = Dictionary()
    for i in range(n_words):
        d.add_symbol(f"w{i}")
    return d


def make_model(d: Dictionary, seed: int, peak: float = 6.0) -> TransformerModel:
    torch.manual_seed(seed)
    cfg = TransformerConfig(encoder_layers=2, decoder_layers=2, embed_dim=32, ffn_embed_dim=64, attention_heads=4,
                            dropout=0.0)
    model = TransformerModel.build_model(cfg, d, d).eval()
    with torch.no_grad():
        model.decoder.output_weight().mul_(peak)
    return model


def make_batch(d: Dictionary, lengths, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), d.pad(), dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, : n - 1] = torch.randint(4, len(d), (n - 1,), generator=g)
        src[i, n - 1] = d.eos()
    return src, torch.tensor(lengths)


def pad_targets(seqs, pad):
    return torch.nn.utils.rnn.pad_sequence(list(seqs), batch_first=True, padding_value=pad)


def test_length_penalty_formulas():
    assert length_penalty(10.0, 0.6) == pytest.approx(((5 + 10) / 6) ** 0.6)
    assert length_penalty(10.0, 0.6, "fairseq") == pytest.approx(10 ** 0.6)
    assert length_penalty(7.0, 0.0) == 1.0


@pytest.mark.parametrize("seed,alpha,style", [(1, 0.6, "gnmt"), (2, 0.6, "gnmt"), (3, 1.0, "fairseq"), (4, 0.0, "gnmt")])
def test_beam_equals_exhaustive_search(seed, alpha, style):
    """Max 3 tokens over 6 words: the best hypothesis is the best of all 258 possible outputs. The beam (64)
    holds every 2-token prefix (36), so the search is exact whatever the model (a beam of |V| = 8 is not:
    it passed only while the initialisation happened to make the best prefixes the likeliest)."""
    d = make_dict(4)  # 8 symbols: <s> <pad> </s> <unk> w0..w3
    model = make_model(d, seed)
    src, lengths = make_batch(d, [5, 3], seed)
    gen = SequenceGenerator([model], d, GenerationConfig(beam=64, max_len_a=0, max_len_b=3, lenpen=alpha,
                                                         lenpen_style=style, nbest=1))
    best = gen.generate(src, lengths)
    inner = [t for t in range(len(d)) if t not in (d.pad(), d.eos())]
    for i in range(len(lengths)):
        cands = [torch.tensor(list(p) + [d.eos()]) for n in (1, 2, 3) for p in itertools.product(inner, repeat=n)]
        tgt = pad_targets(cands, d.pad())
        scored = gen.score_reference(src[i : i + 1].expand(len(cands), -1), lengths[i : i + 1].expand(len(cands)), tgt)
        scores = torch.tensor([h[0]["score"] for h in scored])
        j = int(scores.argmax())
        assert best[i][0]["score"] == pytest.approx(float(scores[j]), abs=1e-4)
        assert best[i][0]["tokens"].tolist() == cands[j].tolist()


def greedy_reference(model, d, src, lengths, max_len):
    """A plain greedy loop with full (non-incremental) decoder passes: argmax until EOS."""
    enc = model.forward_encoder(src, lengths)
    prev = torch.full((1, 1), d.eos(), dtype=torch.long)
    total = 0.0
    for step in range(max_len + 1):
        logits, _ = model.forward_decoder(prev, enc)
        lp = torch.log_softmax(logits[0, -1].float(), -1)
        lp[d.pad()] = -math.inf
        if step == 0:
            lp[d.eos()] = -math.inf  # min_len 1: the output has at least one token before EOS
        if step == max_len:
            tok = d.eos()
        else:
            tok = int(lp.argmax())
        total += float(lp[tok])
        prev = torch.cat([prev, torch.tensor([[tok]])], dim=1)
        if tok == d.eos():
            break
    return prev[0, 1:].tolist(), total


@torch.no_grad()
def test_beam_one_is_greedy():
    d = make_dict(20)
    model = make_model(d, 5, peak=2.0)
    src, lengths = make_batch(d, [6, 9, 4], 5)
    gen = SequenceGenerator([model], d, GenerationConfig(beam=1, max_len_a=1, max_len_b=5, lenpen=0.6))
    out = gen.generate(src, lengths)
    for i in range(3):
        n = int(lengths[i])
        toks, total = greedy_reference(model, d, src[i : i + 1, :n], lengths[i : i + 1], n + 5)
        assert out[i][0]["tokens"].tolist() == toks
        assert out[i][0]["score"] == pytest.approx(total / length_penalty(float(len(toks)), 0.6), abs=1e-4)


def test_batched_equals_one_at_a_time_and_scores_equal_score_reference():
    d = make_dict(24)
    model = make_model(d, 7, peak=3.0)
    src, lengths = make_batch(d, [7, 3, 11, 5, 9], 7)
    gen = SequenceGenerator([model], d, GenerationConfig(beam=4, nbest=2, max_len_b=8))
    batched = gen.generate(src, lengths)
    for i in range(len(lengths)):
        n = int(lengths[i])
        single = gen.generate(src[i : i + 1, :n], lengths[i : i + 1])[0]
        for a, b in zip(batched[i], single):
            assert a["tokens"].tolist() == b["tokens"].tolist()
            assert a["score"] == pytest.approx(b["score"], abs=1e-4)
            torch.testing.assert_close(a["positional_scores"], b["positional_scores"], atol=1e-4, rtol=0)
        assert batched[i][0]["score"] >= batched[i][1]["score"]  # n-best sorted
    # H- scores == --score-reference of the same outputs
    tgt = pad_targets([h[0]["tokens"] for h in batched], d.pad())
    ref = gen.score_reference(src, lengths, tgt)
    for h, r in zip(batched, ref):
        assert h[0]["score"] == pytest.approx(r[0]["score"], abs=1e-4)
        torch.testing.assert_close(h[0]["positional_scores"], r[0]["positional_scores"], atol=1e-4, rtol=0)


def test_ensemble_of_a_model_with_itself_equals_the_model():
    d = make_dict(16)
    model = make_model(d, 9, peak=3.0)
    src, lengths = make_batch(d, [5, 8], 9)
    one = SequenceGenerator([model], d, GenerationConfig(beam=4, max_len_b=6)).generate(src, lengths)
    two = SequenceGenerator([model, model], d, GenerationConfig(beam=4, max_len_b=6)).generate(src, lengths)
    for a, b in zip(one, two):
        assert a[0]["tokens"].tolist() == b[0]["tokens"].tolist()
        assert a[0]["score"] == pytest.approx(b[0]["score"], abs=1e-5)



def test_ensemble_of_two_models_is_the_mixture_of_their_probabilities():
    """Two different models (a model with itself passes whatever the combination rule): every token of the
    ensemble's output scores log((p1 + p2) / 2), worked out from each model's own teacher-forced scores, and the
    output is the best of all 258 outputs under that mixture (the beam of 64 is exact here, as above). Averaged
    log-probabilities, the max or the first model alone give other numbers, which the last check makes sure of."""
    d = make_dict(4)
    models = make_model(d, 21, peak=3.0), make_model(d, 22, peak=3.0)
    src, lengths = make_batch(d, [5, 3], 21)
    gen = SequenceGenerator(list(models), d, GenerationConfig(beam=64, max_len_a=0, max_len_b=3, lenpen=0.6, nbest=1))
    best = gen.generate(src, lengths)
    alone = [SequenceGenerator([m], d, GenerationConfig(beam=1, max_len_a=0, max_len_b=3, lenpen=0.6)) for m in models]
    inner = [t for t in range(len(d)) if t not in (d.pad(), d.eos())]
    cands = [torch.tensor(list(p) + [d.eos()]) for n in (1, 2, 3) for p in itertools.product(inner, repeat=n)]
    tgt = pad_targets(cands, d.pad())
    rule_matters = 0.0
    for i in range(len(lengths)):
        rows = (src[i : i + 1].expand(len(cands), -1), lengths[i : i + 1].expand(len(cands)))
        own = [[h[0]["positional_scores"].double() for h in g.score_reference(*rows, tgt)] for g in alone]
        mixed = [torch.logaddexp(a, b) - math.log(2) for a, b in zip(*own)]
        totals = torch.tensor([float(m.sum()) / length_penalty(float(len(m)), 0.6) for m in mixed])
        j = int(totals.argmax())
        assert best[i][0]["tokens"].tolist() == cands[j].tolist()
        assert best[i][0]["score"] == pytest.approx(float(totals[j]), abs=1e-4)
        torch.testing.assert_close(best[i][0]["positional_scores"].double(), mixed[j], atol=1e-4, rtol=0)
        ens_ref = gen.score_reference(*rows, tgt)  # teacher-forced through the ensemble: the same mixture
        for h, m in zip(ens_ref, mixed):
            torch.testing.assert_close(h[0]["positional_scores"].double(), m, atol=1e-4, rtol=0)
        for a, b, m in zip(*own, mixed):
            rule_matters = max(rule_matters, float((m - (a + b) / 2).abs().max()), float((m - a).abs().max()),
                               float((m - torch.maximum(a, b)).abs().max()))
    assert rule_matters > 0.05  # the two models differ enough for a wrong rule to fail the checks above


def test_constraints_min_len_max_len_prefix_no_repeat_unkpen():
    d = make_dict(12)
    model = make_model(d, 11, peak=1.0)
    src, lengths = make_batch(d, [6, 4], 11)
    out = SequenceGenerator([model], d, GenerationConfig(beam=3, max_len_a=0, max_len_b=4, min_len=3)).generate(
        src, lengths)
    for hyps in out:
        assert 4 <= len(hyps[0]["tokens"]) <= 5 and hyps[0]["tokens"][-1] == d.eos()
        assert d.eos() not in hyps[0]["tokens"][:-1].tolist()
    prefix = torch.tensor([[5, 6], [7, d.pad()]])
    out = SequenceGenerator([model], d, GenerationConfig(beam=3, max_len_b=6)).generate(src, lengths,
                                                                                         prefix_tokens=prefix)
    assert out[0][0]["tokens"][:2].tolist() == [5, 6] and out[1][0]["tokens"][0] == 7
    gen = SequenceGenerator([model], d, GenerationConfig(beam=3, max_len_a=0, max_len_b=12, min_len=12,
                                                         no_repeat_ngram_size=2))
    for hyps in gen.generate(src, lengths):
        toks = [d.eos()] + hyps[0]["tokens"].tolist()  # the start symbol (EOS) counts, as in fairseq
        bigrams = list(zip(toks, toks[1:]))
        assert len(bigrams) == len(set(bigrams))
    gen = SequenceGenerator([model], d, GenerationConfig(beam=3, max_len_b=6, unkpen=1e4))
    for hyps in gen.generate(src, lengths):
        assert d.unk() not in hyps[0]["tokens"].tolist()


def test_sampling_is_seeded():
    d = make_dict(30)
    model = make_model(d, 13, peak=1.0)
    src, lengths = make_batch(d, [6, 4, 5], 13)
    cfg = GenerationConfig(beam=2, max_len_b=6, sampling=True, sampling_topk=3)
    a = SequenceGenerator([model], d, cfg, seed=5).generate(src, lengths)
    b = SequenceGenerator([model], d, cfg, seed=5).generate(src, lengths)
    assert [h[0]["tokens"].tolist() for h in a] == [h[0]["tokens"].tolist() for h in b]
    c = SequenceGenerator([model], d, GenerationConfig(beam=2, max_len_b=6, sampling=True, sampling_topp=0.5,
                                                       temperature=0.7), seed=1).generate(src, lengths)
    assert all(len(h[0]["tokens"]) >= 1 for h in c)


SAMPLING_CASES = [(-1, -1.0, 1.0), (3, -1.0, 1.0), (-1, 0.6, 1.0), (-1, -1.0, 0.7), (4, 0.8, 1.5)]


@functools.lru_cache(maxsize=None)  # the support and frequency tests share one set of draws per case
def _first_token_draws(topk, topp, temperature, draws=4000):
    """``draws`` seeded samples of the first output token (beam 1, one token then EOS) of one sentence, and the
    distribution they must follow, from a plain decoder pass: log_softmax(logits / T), pad and EOS (min_len 1)
    banned, then fairseq's top-k (the k likeliest) and top-p (the smallest prefix of the sorted tokens whose
    mass reaches p), renormalised. Computed in float64 without the search or the sampling module."""
    d = make_dict(6)
    model = make_model(d, 13, peak=1.0)
    src, lengths = make_batch(d, [5], 13)
    gen = SequenceGenerator([model], d, GenerationConfig(beam=1, max_len_a=0, max_len_b=1, min_len=1, sampling=True,
                                                         sampling_topk=topk, sampling_topp=topp,
                                                         temperature=temperature), seed=7)
    out = gen.generate(src.expand(draws, -1).contiguous(), lengths.expand(draws).contiguous())
    counts = torch.bincount(torch.tensor([int(h[0]["tokens"][0]) for h in out]), minlength=len(d)).double()
    return counts, _reference_next_token(model, d, src, lengths, [], topk, topp, temperature, ban_eos=True)


def _reference_next_token(model, d, src, lengths, prefix, topk, topp, temperature, ban_eos):
    """The distribution sampling must draw the token after ``prefix`` from, in float64 from a full (not
    incremental) decoder pass: log_softmax(logits / T), pad (and EOS if ``ban_eos``) banned, then fairseq's
    top-k and top-p as worked out in :func:`_first_token_draws`, renormalised."""
    with torch.no_grad():
        prev = torch.tensor([[d.eos()] + list(prefix)])
        logits, _ = model.forward_decoder(prev, model.forward_encoder(src, lengths))
    lp = torch.log_softmax(logits[0, -1].double() / temperature, -1)
    lp[d.pad()] = -math.inf
    if ban_eos:
        lp[d.eos()] = -math.inf
    keep = torch.isfinite(lp)
    if topk > 0:
        keep &= lp >= lp.topk(topk).values[-1]
    if 0 < topp < 1:
        order = lp.masked_fill(~keep, -math.inf).argsort(descending=True)
        mass = 0.0
        for t in order.tolist():
            if not keep[t]:
                continue
            if mass >= topp:
                keep[t] = False
            mass += math.exp(float(lp[t]))
    p = torch.where(keep, lp.exp(), torch.zeros_like(lp))
    return p / p.sum()


@pytest.mark.parametrize("topk, topp, temperature", SAMPLING_CASES)
def test_sampling_draws_only_from_the_top_k_and_the_nucleus(topk, topp, temperature):
    counts, p = _first_token_draws(topk, topp, temperature)
    assert set(counts.nonzero().flatten().tolist()) <= set(p.nonzero().flatten().tolist())
    assert int((p > 0).sum()) >= 2  # a case with a choice to make


def _chi_square_limit(df: int, z: float = 4.75) -> float:
    """Wilson-Hilferty: the chi-square quantile for a one-sided normal z (4.75: p = 1e-6)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi_square(counts: torch.Tensor, p: torch.Tensor):
    """Pearson's statistic of ``counts`` against the probabilities ``p`` and its p = 1e-6 limit."""
    expected = p * counts.sum()
    cells = expected > 0
    assert float(counts[~cells].sum()) == 0, "draws outside the support"
    stat = float(((counts[cells] - expected[cells]) ** 2 / expected[cells]).sum())
    return stat, _chi_square_limit(int(cells.sum()) - 1)


@pytest.mark.parametrize("topk, topp, temperature", SAMPLING_CASES)
def test_sampling_frequencies_follow_the_truncated_distribution(topk, topp, temperature):
    """Beam 1: the output is one draw (it was the likelier of two draws, a token of p = 0.42 came out 67 % of
    the time: chi-square 1047-1215 against limits of 27-42)."""
    counts, p = _first_token_draws(topk, topp, temperature)
    stat, limit = _chi_square(counts, p)
    assert stat < limit, (stat, counts.tolist(), (p * counts.sum()).tolist())


@pytest.mark.parametrize("beam, topk, temperature", [(2, -1, 1.0), (3, 3, 0.7)])
def test_each_beam_is_an_independent_sample_that_ends_at_its_eos(beam, topk, temperature):
    """fairseq's Sampling with a beam: the ``beam`` hypotheses of a sentence are ``beam`` independent samples.
    Outputs of at most 2 tokens (then EOS), EOS allowed after the first: every hypothesis returned (nbest =
    beam) is one of 6 * 7 sequences ``t1 EOS`` or ``t1 t2 EOS``, whose probability p(t1) p(x | t1) is worked out
    from full decoder passes. The pooled sequences of 3000 sentences follow it (chi-square), which fails if a
    beam keeps the best of several draws, draws from another beam's row, or is finalized twice."""
    d = make_dict(6)
    model = make_model(d, 13, peak=1.0)
    src, lengths = make_batch(d, [5], 13)
    sentences = 3000
    gen = SequenceGenerator([model], d, GenerationConfig(beam=beam, nbest=beam, max_len_a=0, max_len_b=2, min_len=1,
                                                         sampling=True, sampling_topk=topk, temperature=temperature),
                            seed=11)
    out = gen.generate(src.expand(sentences, -1).contiguous(), lengths.expand(sentences).contiguous())
    V = len(d)
    counts = torch.zeros(V * V, dtype=torch.float64)
    for hyps in out:
        assert len(hyps) == beam
        for h in hyps:
            toks = h["tokens"].tolist()
            assert toks[-1] == d.eos() and d.eos() not in toks[:-1] and len(toks) in (2, 3), toks
            counts[toks[0] * V + toks[1]] += 1

    def ref(prefix, ban):
        return _reference_next_token(model, d, src, lengths, prefix, topk, -1.0, temperature, ban)

    p0 = ref([], True)
    p = torch.cat([p0[t] * ref([t], False) if p0[t] > 0 else torch.zeros(V, dtype=torch.float64)
                   for t in range(V)])
    assert float(p.sum()) == pytest.approx(1.0)
    assert float(p.view(V, V)[:, d.eos()].sum()) > 0.03  # beams do end at the second step
    stat, limit = _chi_square(counts, p)
    assert stat < limit, stat

def test_row_topk_equals_topk():
    from nmt_toolkit.generation.search_steps import chunked_row_topk

    g = torch.Generator().manual_seed(0)
    for width in (8008, 2048, 1000, 999, 40):
        x = torch.randn(7, width, generator=g)
        x[0, 5:] = float("-inf")  # fewer finite values than asked for
        v, i = chunked_row_topk(x, 8)
        rv, ri = x.topk(8, dim=1)
        assert torch.equal(v, rv)
        assert torch.equal(i[1:], ri[1:]) and torch.equal(i[0, :5], ri[0, :5])
        assert torch.equal(x.gather(1, i), v)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_parent_slots_keep_every_beam_that_can_stay_in_place(k):
    """Against every assignment of k hypotheses to k slots (brute force): the one chosen is a permutation,
    places the first child of each parent in its parent's slot, and so keeps as many hypotheses in their
    parent's slot as the best assignment does; later children take the free slots in increasing order."""
    from nmt_toolkit.generation.strategies import parent_slots

    all_parents = torch.tensor(list(itertools.product(range(k), repeat=k)))  # every [k] of parent slots
    slots = parent_slots(all_parents)
    for parents, got in zip(all_parents.tolist(), slots.tolist()):
        assert sorted(got) == list(range(k))
        best = max(sum(p == s for p, s in zip(parents, perm)) for perm in itertools.permutations(range(k)))
        assert sum(p == s for p, s in zip(parents, got)) == best
        firsts = {p: j for j, p in reversed(list(enumerate(parents)))}
        assert all(got[j] == p for p, j in firsts.items())
        others = [got[j] for j in range(k) if j not in firsts.values()]
        assert others == sorted(set(range(k)) - set(firsts))


@pytest.mark.parametrize("need_attn", [False, True])
def test_fast_paths_equal_the_generic_ones(monkeypatch, need_attn):
    """Sentence-level encoder keys/values and the chunked top-k give the generic layout's hypotheses."""
    import nmt_toolkit.generation.search_steps as steps

    d = make_dict(2044)  # 2048 symbols: the chunked top-k runs
    model = make_model(d, 17, peak=3.0)
    src, lengths = make_batch(d, [7, 3, 11, 5, 9, 2], 17)
    gen = SequenceGenerator([model], d, GenerationConfig(beam=4, nbest=4, max_len_b=8))
    fast = gen.generate(src, lengths, need_attn=need_attn)
    monkeypatch.setattr(steps, "CHUNKED_TOPK_MIN_VOCAB", 10**9)
    monkeypatch.setattr(TransformerModel, "supports_sentence_level_encoder_out", False)
    slow = gen.generate(src, lengths, need_attn=need_attn)
    for a, b in zip(fast, slow):
        for x, y in zip(a, b):
            assert x["tokens"].tolist() == y["tokens"].tolist()
            assert x["score"] == pytest.approx(y["score"], abs=1e-5)
            if need_attn:
                torch.testing.assert_close(x["attention"], y["attention"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("nbest,alpha", [(1, 0.6), (2, 0.6), (1, 0.0), (3, 1.0)])
def test_bound_early_stop_returns_what_a_search_to_the_maximum_length_returns(nbest, alpha):
    """The bound rule stops a sentence only when no active hypothesis can still enter its n-best: the output
    equals the search that never stops early, and it takes fewer decoder steps. (A random model almost never
    ends a sentence; its EOS output row is scaled up so that hypotheses end at varied lengths.)"""
    d = make_dict(30)
    src, lengths = make_batch(d, [7, 3, 11, 5, 9, 6, 8, 4], 11)
    steps = {"bound": 0, "never": 0}
    for seed in (11, 12, 13):
        model = make_model(d, seed, peak=4.0)
        with torch.no_grad():
            model.decoder.output_weight()[d.eos()].mul_(2.0)
        outs = {}
        for rule in ("bound", "never"):
            gen = SequenceGenerator([model], d, GenerationConfig(beam=4, nbest=nbest, max_len_b=12, lenpen=alpha,
                                                                 early_stop=rule))
            calls = []
            real = gen.model.log_probs
            gen.model.log_probs = lambda *a, **k: calls.append(a[0].size(0)) or real(*a, **k)  # noqa: B023  (this rule's run)
            outs[rule] = gen.generate(src, lengths)
            steps[rule] += sum(calls)
        for a_hyps, b_hyps in zip(outs["bound"], outs["never"]):
            assert [h["tokens"].tolist() for h in a_hyps] == [h["tokens"].tolist() for h in b_hyps]
            assert [h["score"] for h in a_hyps] == pytest.approx([h["score"] for h in b_hyps], abs=1e-5)
    assert steps["bound"] < steps["never"]  # decoder rows computed over the whole search


def test_generator_rejects_an_nbest_larger_than_the_beam_and_unknown_rules():
    d = make_dict(8)
    model = make_model(d, 1)
    with pytest.raises(ValueError, match="nbest"):
        SequenceGenerator([model], d, GenerationConfig(beam=2, nbest=3))
    with pytest.raises(UsageError, match="^--early-stop sometimes: must be one of auto, bound, beam, never$"):
        SequenceGenerator([model], d, GenerationConfig(early_stop="sometimes"))


def test_a_negative_length_penalty_is_taken_as_fairseq_takes_it(capsys):
    """alpha < 0 favours shorter outputs; the 'bound' early stop then uses the next length's penalty, the
    largest still reachable, so its output equals the exhaustive search's."""
    import torch

    from nmt_toolkit.generation.beam_search import SequenceGenerator
    from nmt_toolkit.generation.config import GenerationConfig
    from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel
    from nmt_toolkit.models.summary import SizedDictionary

    torch.manual_seed(0)
    vocab = SizedDictionary(24)
    model = TransformerModel.build_model(TransformerConfig(embed_dim=16, ffn_embed_dim=32, encoder_layers=1,
                                                           decoder_layers=1, attention_heads=2, dropout=0.0),
                                         vocab, vocab).eval()
    src = torch.randint(4, 24, (3, 6))
    src[:, -1] = 2
    lengths = torch.full((3,), 6)
    outs = {}
    for rule in ("bound", "never"):
        gen = GenerationConfig(beam=4, nbest=2, lenpen=-0.5, early_stop=rule, max_len_a=0.0, max_len_b=8)
        outs[rule] = SequenceGenerator(model, vocab, gen).generate(src, lengths)
    for a, b in zip(outs["bound"], outs["never"]):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
