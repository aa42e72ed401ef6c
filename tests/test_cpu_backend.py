"""generation/cpu.py: oneDNN products with packed weights at inference, swapped in from outside the model;
F.linear elsewhere, and the whole back end off where the private ops are missing or disagree."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from nmt_toolkit.generation import cpu
from nmt_toolkit.generation.cpu import PackedLinear, optimize_for_cpu

needs_onednn = pytest.mark.skipif(not cpu.packing_works(), reason="this torch build has no oneDNN linear")


class _Ops(TorchDispatchMode):
    """Records the names of the operators that run."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def _packed_ran(fn) -> tuple:
    with _Ops() as ops:
        out = fn()
    return out, any("_linear_pointwise" in name for name in ops.names)


@needs_onednn
@pytest.mark.parametrize("shape", [(4, 256), (37, 256), (3, 5, 256), (0, 256)])
@pytest.mark.parametrize("bias", [True, False])
def test_inference_equals_the_module_and_takes_the_packed_path(shape, bias):
    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 1024, bias=bias)
    x = torch.randn(*shape)
    expected = layer(x).detach()
    with torch.inference_mode():
        out, packed = _packed_ran(lambda: PackedLinear.of(layer)(x))
    assert packed == (x.numel() > 0)  # no rows: nothing worth packing
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@needs_onednn
@pytest.mark.parametrize("rows, features, packed", [(1, (256, 768), False), (4, (256, 768), True),
                                                    (1, (256, 8008), True), (255, (256, 256), False),
                                                    (256, (256, 256), True), (64, (128, 512), False)])
def test_small_products_stay_on_torchs_kernel(rows, features, packed):
    """Below about 0.8 M multiply-adds (or under 256 rows for a small weight) oneDNN's call overhead loses."""
    layer = torch.nn.Linear(*features)
    with torch.inference_mode():
        _, ran = _packed_ran(lambda: PackedLinear.of(layer)(torch.randn(rows, features[0])))
    assert ran == packed


def test_training_and_no_grad_call_the_module():
    layer = PackedLinear.of(torch.nn.Linear(256, 1024))
    x = torch.randn(300, 256, requires_grad=True)
    y, packed = _packed_ran(lambda: layer(x))
    assert not packed
    y.sum().backward()
    assert layer.weight.grad is not None and x.grad is not None
    with torch.no_grad():
        _, packed = _packed_ran(lambda: layer(x))
    assert not packed  # validation under no_grad keeps torch's own kernel


@needs_onednn
def test_a_weight_updated_in_place_is_packed_again():
    torch.manual_seed(0)
    layer = PackedLinear.of(torch.nn.Linear(256, 768))
    x = torch.randn(10, 256)
    with torch.inference_mode():
        before = layer(x)
    with torch.no_grad():  # an optimizer step: same storage, new values
        layer.weight.mul_(-2.0).add_(0.5)
    with torch.inference_mode():
        after = layer(x)
    torch.testing.assert_close(after, torch.nn.functional.linear(x, layer.weight, layer.bias).detach(), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(before, after)


def test_hooked_and_plugin_layers_are_not_swapped_and_state_dict_names_stay():
    class LoRALinear(torch.nn.Linear):  # a plugin's replacement layer: its own forward must run
        def forward(self, x):
            return super().forward(x) + 1.0

    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), LoRALinear(1024, 256), torch.nn.Linear(256, 8))
    seen = []
    model[2].register_forward_hook(lambda module, inputs, output: seen.append(output.shape))
    names = list(model.state_dict())
    x = torch.randn(300, 256)
    expected = model(x).detach()
    assert optimize_for_cpu(model) == cpu.packing_works()
    assert list(model.state_dict()) == names
    assert type(model[1]) is LoRALinear and type(model[2]) is torch.nn.Linear
    with torch.inference_mode():
        torch.testing.assert_close(model(x), expected, atol=1e-4, rtol=1e-5)
        with torch.backends.mkldnn.flags(enabled=False):
            _, packed = _packed_ran(lambda: model(x))
        assert not packed
        _, packed = _packed_ran(lambda: PackedLinear.of(torch.nn.Linear(256, 1024).double())(x.double()))
    assert not packed and len(seen) == 3  # float32 only; the hook ran every time


def test_private_ops_that_are_missing_or_disagree_leave_the_model_alone(monkeypatch):
    """optimize_for_cpu checks the private ops on a probe: an op that is gone or computes something else
    (a torch release may change them) means torch's own kernels, not wrong translations."""
    def wrong(x, packed, bias, *args):
        return torch.zeros(x.shape[:-1] + (packed.size(0),))

    def gone(*args):
        raise RuntimeError("No such operator mkldnn::_linear_pointwise")

    for broken in (wrong, gone):
        cpu.packing_works.cache_clear()
        monkeypatch.setattr(cpu, "_packed_product", broken)
        model = torch.nn.Sequential(torch.nn.Linear(256, 1024))
        assert not optimize_for_cpu(model)
        assert type(model[0]) is torch.nn.Linear
    cpu.packing_works.cache_clear()


@needs_onednn
def test_flop_counter_counts_packed_products_like_mm():
    layer = torch.nn.Linear(256, 1024)
    with torch.inference_mode():
        with FlopCounterMode(display=False, custom_mapping=cpu.flop_formulas()) as counter:
            _, packed = _packed_ran(lambda: PackedLinear.of(layer)(torch.randn(5, 7, 256)))
    assert packed and counter.get_total_flops() == 2 * 5 * 7 * 256 * 1024


def test_decoding_with_and_without_packed_weights_agrees():
    """A beam search and the scoring pass give the same hypotheses and scores (≤ 1e-4) either way."""
    from nmt_toolkit.data.dictionary import Dictionary
    from nmt_toolkit.generation.beam_search import SequenceGenerator
    from nmt_toolkit.generation.config import GenerationConfig
    from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel

    d = Dictionary()
    for i in range(600):
        d.add_symbol(f"w{i}")
    cfg = TransformerConfig(encoder_layers=2, decoder_layers=2, embed_dim=256, ffn_embed_dim=1024,
                            attention_heads=4, dropout=0.0, share_all_embeddings=True)
    torch.manual_seed(1)
    model = TransformerModel.build_model(cfg, d, d).eval()
    assert optimize_for_cpu(model) == cpu.packing_works()
    gen = SequenceGenerator([model], d, GenerationConfig(beam=4, max_len_a=1.0, max_len_b=5))
    src = torch.randint(4, len(d), (6, 9))
    src[3, 6:] = d.pad()
    lengths = (src != d.pad()).sum(1)

    def decode():
        hyps = gen.generate(src, lengths)
        target = torch.nn.utils.rnn.pad_sequence([h[0]["tokens"] for h in hyps], batch_first=True,
                                                 padding_value=d.pad())
        return hyps, gen.score_reference(src, lengths, target)

    (packed_hyps, packed_scores), packed = _packed_ran(decode)
    with torch.backends.mkldnn.flags(enabled=False):
        (plain_hyps, plain_scores), plain = _packed_ran(decode)
    assert packed == cpu.packing_works() and not plain
    for a, b in zip(packed_hyps + packed_scores, plain_hyps + plain_scores):
        assert torch.equal(a[0]["tokens"], b[0]["tokens"])
        assert abs(a[0]["score"] - b[0]["score"]) <= 1e-4


def _attention_reference(q, k, v, keep, scale):
    """Eq. 1 in float64: softmax(q k^T * scale, masked) v."""
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v.double()


@pytest.mark.parametrize("queries", [1, 4])  # a self-attention step; a sentence's block of beams (cross)
@pytest.mark.parametrize("masked", [False, True])
def test_explicit_attention_equals_a_float64_reference_and_replaces_sdpa(queries, masked):
    gen = torch.Generator().manual_seed(queries)
    cache = torch.randn(96, 4, 40, 16, generator=gen)  # keys in a larger buffer, as the decoding cache keeps them
    q, k, v = torch.randn(96, 4, queries, 16, generator=gen), cache[:, :, :23], cache[:, :, 5:28].flip(-1)
    keep = (torch.rand(96, 1, 1, 23, generator=gen) < 0.7) | (torch.arange(23) == 0) if masked else None
    with torch.inference_mode(), _Ops() as ops:
        got = cpu.explicit_attention(q, k, v, attn_mask=keep, scale=0.3)
    assert not any("scaled_dot_product" in name for name in ops.names)
    torch.testing.assert_close(got.double(), _attention_reference(q, k, v, keep, 0.3), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", ["grad", "dropout", "causal", "small", "float64", "long"])
def test_explicit_attention_leaves_other_calls_to_sdpa(case):
    q, k, v = (torch.randn(96, 4, 1 if case != "causal" else 7, 16) for _ in range(3))
    if case == "small":
        q, k, v = q[:2], k[:2], v[:2]
    if case == "long":  # a long query sequence (an encoder over long sentences)
        q, k, v = (torch.randn(2, 4, 100, 16) for _ in range(3))
    if case == "float64":
        q, k, v = q.double(), k.double(), v.double()
    kwargs = {"dropout_p": 0.1} if case == "dropout" else {"is_causal": True} if case == "causal" else {}
    mode = torch.enable_grad() if case == "grad" else torch.inference_mode()
    with mode, _Ops() as ops:
        cpu.explicit_attention(q, k, v, **kwargs)
    assert any("scaled_dot_product" in name for name in ops.names)


@needs_onednn
def test_a_relu_feed_forward_runs_fused_and_computes_the_same():
    """optimize_for_cpu fuses a FeedForward's ReLU into its first packed product (one oneDNN call) and
    drops the separate ReLU; inference, training and a GELU block (left alone) all equal the plain module."""
    from nmt_toolkit.modules.layers import FeedForward

    torch.manual_seed(0)
    relu, gelu = FeedForward(64, 1024), FeedForward(64, 1024, activation_fn="gelu")
    plain_relu, plain_gelu = FeedForward(64, 1024), FeedForward(64, 1024, activation_fn="gelu")
    plain_relu.load_state_dict(relu.state_dict())
    plain_gelu.load_state_dict(gelu.state_dict())
    container = torch.nn.ModuleList([relu, gelu])
    assert optimize_for_cpu(container)
    assert type(relu.fc1) is cpu.PackedLinearReLU and type(gelu.fc1) is PackedLinear
    assert relu.state_dict().keys() == plain_relu.state_dict().keys()
    x = torch.randn(300, 64)
    with torch.inference_mode():
        with _Ops() as ops:
            got = relu(x)
        assert not any(name in ("aten.relu", "aten.clamp_min") for name in ops.names)
        torch.testing.assert_close(got, plain_relu(x), atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(gelu(x), plain_gelu(x), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(relu(x), plain_relu(x), atol=1e-4, rtol=1e-5)  # gradients on: F.relu(F.linear)
    relu(x).sum().backward()
    assert relu.fc1.weight.grad is not None


def test_optimize_for_cpu_sets_the_attention_kernel_of_every_attention():
    from nmt_toolkit.modules.attention import MultiheadAttention

    model = torch.nn.ModuleList([MultiheadAttention(64, 4), MultiheadAttention(64, 4, self_attention=False)])
    assert model[0].attention_kernel is torch.nn.functional.scaled_dot_product_attention
    if optimize_for_cpu(model):
        assert all(m.attention_kernel is cpu.explicit_attention for m in model)
        assert MultiheadAttention(64, 4).attention_kernel is torch.nn.functional.scaled_dot_product_attention
