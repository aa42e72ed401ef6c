"""modules/caches.py: a reorder that copies only the rows that change (``reorder_in_place``) leaves every cache as
a gather of all rows (``index_select``, the reference) would, whatever the indices: repeated parents, a
row that is the source of another and overwritten itself, rows that leave as sentences finish."""
import pytest
import torch

from nmt_toolkit.modules.caches import (CrossAttentionCache, DecoderState, SelfAttentionCache, copy_rows_in_place,
                                        moved_rows)


def _indices(rows: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """Beam-like indices into ``rows`` rows: mostly rows that stay, some repeated parents, some shuffles."""
    idx = torch.arange(n)
    take = torch.rand(n, generator=gen) < 0.4
    idx[take] = torch.randint(0, rows, (int(take.sum()),), generator=gen)
    return idx


@pytest.mark.parametrize("rows,n", [(12, 12), (12, 8), (12, 0), (5, 5)])
@pytest.mark.parametrize("seed", range(5))
def test_moved_rows_reorder_equals_a_gather_of_every_row(rows, n, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        cache = SelfAttentionCache.empty(rows, 2, 3, 4, capacity=8, like=torch.zeros(1))
        for _ in range(3):
            cache.append(torch.randn(rows, 2, 1, 3, generator=gen), torch.randn(rows, 2, 1, 4, generator=gen))
        cross = CrossAttentionCache(torch.randn(rows, 2, 5, 3, generator=gen), torch.randn(rows, 2, 5, 4, generator=gen),
                                    torch.rand(rows, 1, 1, 5, generator=gen) < 0.8)
        idx = _indices(rows, n, gen)
        want = [t.index_select(0, idx) for t in (cache.k[:, :, :3], cache.v[:, :, :3], cross.k, cross.v, cross.keep)]
        moved = moved_rows(idx, rows)
        assert moved is not None and moved.tolist() == [j for j in range(n) if idx[j] != j]
        cache.reorder(idx, moved)
        cross.reorder(idx, moved)
        got = [cache.k[:, :, :cache.length], cache.v[:, :, :cache.length], cross.k, cross.v, cross.keep]
        for g, w in zip(got, want):
            assert torch.equal(g, w)
        if n:  # the cache goes on growing after a reorder that shrank it
            k, v = cache.append(torch.ones(n, 2, 1, 3), torch.ones(n, 2, 1, 4))
            assert torch.equal(k[:, :, :3], want[0]) and bool((k[:, :, 3] == 1).all()) and v.shape == (n, 2, 4, 4)


def test_a_row_that_is_read_and_overwritten_is_read_first():
    """Rows 0 and 1 swap places and row 2 takes row 0's old content: written in index order without the
    gather first, row 2 would receive row 1's content."""
    buf = torch.arange(4.0).view(4, 1)
    idx = torch.tensor([1, 0, 0, 3])
    with torch.no_grad():
        copy_rows_in_place(buf, idx, moved_rows(idx, 4))
    assert buf.view(-1).tolist() == [1.0, 0.0, 0.0, 3.0]


def test_a_whole_gather_where_rows_grow_or_gradients_are_recorded():
    assert moved_rows(torch.arange(6), 3) is None  # the first step: one row per sentence becomes a beam
    with torch.enable_grad():
        assert moved_rows(torch.arange(3), 3) is None
    with torch.no_grad():
        assert moved_rows(torch.tensor([0, 0, 2]), 3).tolist() == [1]


@pytest.mark.parametrize("in_place", [False, True])
def test_decoder_state_reorders_sentence_level_cross_caches_by_the_sentences_kept(in_place):
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        state = DecoderState(beam=2, sentences=3, reorder_in_place=in_place)
        state.self_attn = [SelfAttentionCache.empty(6, 1, 2, 2, 4, torch.zeros(1))]
        state.self_attn[0].append(torch.randn(6, 1, 1, 2, generator=gen), torch.randn(6, 1, 1, 2, generator=gen))
        state.cross_attn = [CrossAttentionCache(torch.randn(3, 1, 5, 2, generator=gen),
                                                torch.randn(3, 1, 5, 2, generator=gen))]
        rows, kept = torch.tensor([4, 5, 2, 2]), torch.tensor([2, 1])  # sentence 0 finished; 2 moves forward
        want_self = state.self_attn[0].k[:, :, :1].index_select(0, rows)
        want_cross = state.cross_attn[0].k.index_select(0, kept)
        state.reorder(rows, sentence_order=kept, per_sentence=True)
        assert torch.equal(state.self_attn[0].k[:, :, :1], want_self)
        assert torch.equal(state.cross_attn[0].k, want_cross) and state.sentences == 2
