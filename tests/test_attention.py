"""Multi-head attention: probabilities, masks, d_k ≠ d_v, the fast path against the explicit one, caches."""
import torch

from nmt_toolkit.modules.attention import MultiheadAttention


def _padded(b=3, s=7, d=32):
    torch.manual_seed(0)
    x = torch.randn(b, s, d)
    mask = torch.zeros(b, s, dtype=torch.bool)
    mask[1, 5:] = True
    mask[2, 2:] = True
    return x, mask


def test_probabilities_sum_to_one_and_are_zero_on_padded_keys():
    x, mask = _padded()
    attn = MultiheadAttention(32, 4).eval()
    _, probs = attn(x, key_padding_mask=mask, need_weights=True)
    assert probs.shape == (3, 4, 7, 7)
    assert torch.allclose(probs.sum(-1), torch.ones(3, 4, 7), atol=1e-6)
    assert probs.masked_select(mask[:, None, None, :].expand_as(probs)).abs().max() == 0
    assert probs[0].min() > 0  # an unpadded sentence attends everywhere


def test_fast_path_equals_explicit_softmax_path():
    x, mask = _padded()
    attn = MultiheadAttention(32, 4).eval()
    for kwargs in ({}, {"key_padding_mask": mask}, {"causal": True}, {"causal": True, "key_padding_mask": mask}):
        fast, none = attn(x, **kwargs)
        slow, _ = attn(x, need_weights=True, **kwargs)
        assert none is None
        assert torch.allclose(fast, slow, atol=1e-5), kwargs


def test_causal_mask_hides_future_keys():
    x, _ = _padded()
    attn = MultiheadAttention(32, 4).eval()
    out, probs = attn(x, causal=True, need_weights=True)
    assert torch.all(probs.triu(1) == 0)
    x2 = x.clone()
    x2[:, 4:] = torch.randn_like(x2[:, 4:])
    out2, _ = attn(x2, causal=True)
    assert torch.allclose(out[:, :4], out2[:, :4], atol=1e-6)
    assert not torch.allclose(out[:, 4:], out2[:, 4:], atol=1e-3)


def test_key_dim_differs_from_value_dim():
    attn = MultiheadAttention(32, 4, key_dim=16, value_dim=24, self_attention=False)
    assert attn.q_proj.weight.shape == (64, 32)
    assert attn.kv_proj.weight.shape == (64 + 96, 32)
    assert attn.out_proj.weight.shape == (32, 96)
    q, k = torch.randn(2, 5, 32), torch.randn(2, 6, 32)
    out, probs = attn(q, k, need_weights=True)
    assert out.shape == (2, 5, 32) and probs.shape == (2, 4, 5, 6)
    assert attn.scaling == 16 ** -0.5
    out.sum().backward()
    assert attn.kv_proj.weight.grad.abs().sum() > 0


def test_incremental_self_attention_and_reorder():
    x, _ = _padded(b=3, s=20)
    attn = MultiheadAttention(32, 4, key_dim=8, value_dim=12).eval()
    full, _ = attn(x, causal=True)
    cache = attn.empty_cache(3, 5, x)  # 20 steps > capacity 5: the cache grows by doubling
    steps = [attn(x[:, t:t + 1], causal=True, cache=cache)[0] for t in range(20)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    assert cache.length == 20 and cache.k.size(2) >= 20
    # reorder the cache (rows repeat and one disappears), then continue: equals the full pass on reordered inputs
    order = torch.tensor([2, 0, 0])
    cache = attn.empty_cache(3, 16, x)
    for t in range(10):
        attn(x[:, t:t + 1], causal=True, cache=cache)
    for _ in range(2):  # twice: the second reorder writes into the first one's spare buffers
        cache.reorder(torch.arange(3))
    cache.reorder(order)
    xr = x.index_select(0, order)
    fullr, _ = attn(xr, causal=True)
    steps = [attn(xr[:, t:t + 1], causal=True, cache=cache)[0] for t in range(10, 20)]
    assert torch.allclose(torch.cat(steps, 1), fullr[:, 10:], atol=1e-5)


def test_cross_attention_cache_serves_the_rows_of_each_sentence_as_one_block():
    """A cache projected once per sentence, read by the w consecutive rows (beams) of each sentence, equals
    the plain forward with the encoder output repeated per row; the probabilities come back per row."""
    torch.manual_seed(1)
    memory, mask = _padded(b=3, s=7)
    attn = MultiheadAttention(32, 4, key_dim=8, value_dim=8, self_attention=False).eval()
    w = 4
    query = torch.randn(3 * w, 1, 32)
    expected, expected_probs = attn(query, memory.repeat_interleave(w, 0), mask.repeat_interleave(w, 0),
                                    need_weights=True)
    cache = attn.project_memory(memory, mask)
    for need in (False, True):
        out, probs = attn(query, cache=cache, need_weights=need)
        assert torch.allclose(out, expected, atol=1e-5)
    assert probs.shape == (3 * w, 4, 1, 7) and torch.allclose(probs, expected_probs, atol=1e-6)
    assert torch.all(probs[w:2 * w, :, :, 5:] == 0)
    cache.reorder(torch.tensor([2]))  # sentences leave: the cache follows the kept ones
    out, _ = attn(query[2 * w:], cache=cache)
    assert torch.allclose(out, expected[2 * w:], atol=1e-5)


def test_sdpa_backends_leave_out_cudnn_on_cuda_only():
    """cuDNN's attention plans every new shape (token-based batches: a new shape nearly every step); the trainer
    and the generator run SDPA without it on GPUs, and restore torch's switches afterwards."""
    from nmt_toolkit.device_policy import sdpa_backends

    before = (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled(),
              torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled())
    with sdpa_backends(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    with sdpa_backends(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled() == before[0]
    assert (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled(),
            torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()) == before
