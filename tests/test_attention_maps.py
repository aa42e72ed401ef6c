"""Attention maps for plots: any layer, head and kind, equal to what the model computes while decoding."""
from __future__ import annotations

import pytest
import torch

from nmt_toolkit.errors import UsageError
from nmt_toolkit.generation.attention_maps import attention_probs, select_heads
from nmt_toolkit.models.summary import build_for_dry_run
from nmt_toolkit.models.transformer import TransformerConfig
from nmt_toolkit.registry import ARCHITECTURES, import_builtin_components


@pytest.fixture(scope="module")
def model():
    import_builtin_components()
    cfg = TransformerConfig()
    ARCHITECTURES.get("transformer_tiny").obj(cfg)
    torch.manual_seed(3)
    return build_for_dry_run("transformer", cfg, 40, device="cpu").eval()


SRC = torch.tensor([5, 9, 12, 7, 2])
HYP = torch.tensor([6, 8, 11, 2])


def test_encoder_decoder_map_of_the_last_layer_equals_the_decoding_attention(model):
    probs = attention_probs(model, SRC, HYP, eos=2, kind="encoder-decoder", layer=-1)
    assert probs.shape == (4, 4, 5)  # heads, output positions, source positions
    with torch.inference_mode():
        enc = model.forward_encoder(SRC.view(1, -1), torch.tensor([5]))
        prev = torch.tensor([[2, 6, 8, 11]])
        _, attn = model.forward_decoder(prev, enc, need_attn=True)
    torch.testing.assert_close(select_heads(probs, -1), attn[0].float(), atol=1e-5, rtol=0)


def test_encoder_and_decoder_self_attention_maps(model):
    enc = attention_probs(model, SRC, HYP, eos=2, kind="encoder", layer=0)
    assert enc.shape == (4, 5, 5)
    torch.testing.assert_close(enc.sum(-1), torch.ones(4, 5))
    dec = attention_probs(model, SRC, HYP, eos=2, kind="decoder", layer=1)
    assert dec.shape == (4, 4, 4)
    assert torch.all(dec.triu(diagonal=1) == 0), "decoder self-attention must not see future positions"
    torch.testing.assert_close(dec.sum(-1), torch.ones(4, 4))
    first, last = (attention_probs(model, SRC, HYP, eos=2, kind="encoder", layer=k) for k in (0, 1))
    assert not torch.allclose(first, last), "layers must be told apart"


def test_bad_layer_or_head_is_a_usage_error(model):
    with pytest.raises(UsageError, match="layers"):
        attention_probs(model, SRC, HYP, eos=2, kind="encoder", layer=7)
    with pytest.raises(UsageError, match="heads"):
        select_heads(torch.zeros(4, 2, 2), 4)
    assert select_heads(torch.arange(8.0).view(2, 2, 2), 1).tolist() == [[4.0, 5.0], [6.0, 7.0]]
