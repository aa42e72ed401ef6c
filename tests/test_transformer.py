"""The model: causality, padding invariance, incremental decoding, sharing, dtypes, Table 3 counts."""
import re

import pytest
import torch

from nmt_toolkit.errors import UsageError
from nmt_toolkit.models.summary import SizedDictionary, build_for_dry_run, model_summary
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel
from nmt_toolkit.registry import ARCHITECTURES

PAD, EOS = 1, 2


def _cfg(**kw):
    cfg = TransformerConfig()
    ARCHITECTURES.get("transformer_tiny").obj(cfg)
    cfg.embed_dim, cfg.ffn_embed_dim = 32, 64
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def _model(vocab=40, **kw):
    torch.manual_seed(0)
    d = SizedDictionary(vocab)
    return TransformerModel.build_model(_cfg(**kw), d, d).eval()


def _tokens(b, n, vocab=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (b, n), generator=g)


def test_future_target_tokens_do_not_change_earlier_outputs():
    model = _model()
    src, prev = _tokens(2, 6), _tokens(2, 8, seed=2)
    out = model(src, None, prev)
    prev2 = prev.clone()
    prev2[:, 5:] = _tokens(2, 3, seed=3)
    out2 = model(src, None, prev2)
    assert torch.allclose(out[:, :5], out2[:, :5], atol=1e-6)
    assert not torch.allclose(out[:, 5:], out2[:, 5:], atol=1e-3)


@pytest.mark.parametrize("normalize_before", [False, True])
def test_padding_leaves_real_positions_unchanged(normalize_before):
    model = _model(normalize_before=normalize_before)
    src, prev = _tokens(1, 5), _tokens(1, 4, seed=2)
    alone = model(src, None, prev)
    src_pad = torch.cat([src, torch.full((1, 3), PAD)], 1)
    prev_pad = torch.cat([prev, torch.full((1, 2), PAD)], 1)
    other_src, other_prev = _tokens(1, 8, seed=5), _tokens(1, 6, seed=6)
    batch = model(torch.cat([src_pad, other_src]), None, torch.cat([prev_pad, other_prev]))
    assert (batch[0, :4] - alone[0]).abs().max() <= 1e-5


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_incremental_decoding_equals_full_forward_also_after_reorder(positions):
    model = _model(positional_embeddings=positions, key_dim=6, value_dim=10)
    src = torch.cat([_tokens(3, 7), torch.full((3, 2), PAD)], 1)
    src[1, 3:] = PAD
    prev = torch.cat([torch.full((3, 1), EOS), _tokens(3, 19, seed=2)], 1)  # 20 steps: the cache grows
    enc = model.forward_encoder(src, None)
    full, full_attn = model.forward_decoder(prev, enc, need_attn=True)
    state = model.make_decoder_state(capacity=4)  # 20 steps: the caches grow
    steps, attns = [], []
    for t in range(1, 21):
        logits, attn = model.forward_decoder(prev[:, :t], enc, incremental_state=state, need_attn=True)
        assert logits.shape == (3, 1, 40)
        steps.append(logits)
        attns.append(attn)
    assert (torch.cat(steps, 1) - full).abs().max() <= 1e-5
    assert (torch.cat(attns, 1) - full_attn).abs().max() <= 1e-5
    assert torch.all(full_attn[1, :, 3:] == 0)
    # beam-style reorder after 8 steps, then continue
    order = torch.tensor([1, 1, 0])
    state = model.make_decoder_state()
    for t in range(1, 9):
        model.forward_decoder(prev[:, :t], enc, incremental_state=state)
    model.reorder_incremental_state(state, order)
    enc_r = model.reorder_encoder_out(enc, order)
    prev_r = prev.index_select(0, order)
    full_r, _ = model.forward_decoder(prev_r, enc_r)
    steps = [model.forward_decoder(prev_r[:, :t], enc_r, incremental_state=state)[0] for t in range(9, 21)]
    assert (torch.cat(steps, 1) - full_r[:, 8:]).abs().max() <= 1e-5


def test_sentence_level_state_equals_per_row_state_through_reorders_and_shrinking():
    """The beam search's layout (encoder output and encoder-decoder keys once per sentence, its beams as one
    query block; sentences leaving the batch) against one encoder row per decoder row."""
    from nmt_toolkit.generation.strategies import compacting_order as _compacting_order

    model = _model(key_dim=6, value_dim=10)
    k, n = 3, 5
    src = _tokens(n, 7)
    src[2, 4:] = PAD
    enc_sent = model.forward_encoder(src, None)  # one row per sentence
    enc_rows = enc_sent  # one row per decoder row
    sent_state = model.make_decoder_state(beam=k, sentences=n, capacity=3)  # a small capacity: the caches grow
    row_state = model.make_decoder_state(capacity=3)
    gen = torch.Generator().manual_seed(3)
    tokens = torch.full((n, 1), EOS)
    width, live, shrunk = 1, n, 0
    with torch.inference_mode():
        for step in range(9):
            a = model.forward_decoder(tokens, enc_sent, sent_state)[0].clone()
            b = model.forward_decoder(tokens, enc_rows, row_state)[0]
            assert (a - b).abs().max() <= 1e-5, step
            parents = torch.randint(0, width, (live, k), generator=gen)
            keep = None
            if step in (3, 6):  # sentence 1 (and later another) leaves the batch
                done = torch.zeros(live, dtype=torch.bool)
                done[1] = True
                keep = _compacting_order(done)
                parents = parents[keep]
                shrunk += 1
            sent = keep if keep is not None else torch.arange(live)
            new_order = (sent.unsqueeze(1) * width + parents).view(-1)
            model.reorder_incremental_state(sent_state, new_order, sentence_order=keep, per_sentence=True)
            model.reorder_incremental_state(row_state, new_order)
            if keep is not None:
                enc_sent = model.reorder_encoder_out(enc_sent, keep)
            enc_rows = model.reorder_encoder_out(enc_rows, new_order)
            live, width = sent.numel(), k
            tokens = torch.cat([tokens.index_select(0, new_order),
                                torch.randint(3, 40, (live * k, 1), generator=gen)], 1)
    assert shrunk == 2 and live == n - 2 and sent_state.sentences == n - 2
    assert sent_state.self_attn[0].k.size(2) > 3 and sent_state.cross_attn[0].k.size(0) == n - 2


def test_incremental_state_is_a_typed_decoder_state():
    model = _model()
    enc = model.forward_encoder(_tokens(2, 5), None)
    with pytest.raises(TypeError, match="DecoderState"):
        model.forward_decoder(torch.full((2, 1), EOS), enc, incremental_state={})


#: words that mean a device or back-end choice; the model and its modules never make one (the trainer and the
#: search apply nmt_toolkit/device_policy.py and generation/cpu.py from outside)
DEVICE_WORDS = ("cuda", "device.type", "is_available", "mkldnn", "cudnn", "mps", "xpu", "sdpa_kernel", "SDPBackend",
                "torch.backends", "packed_linear", "cpu_kernels", "_weight_t_cache", "ctypes",
                "nmt_toolkit.generation", "nmt_toolkit.device_policy")


def test_model_and_modules_make_no_device_or_back_end_choice():
    """The model is plain PyTorch; device policy and back ends (device_policy.py, generation/cpu.py, export/)
    are applied from outside."""
    import pathlib
    import re

    import nmt_toolkit

    root = pathlib.Path(nmt_toolkit.__file__).parent
    for folder in ("models", "modules"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for word in DEVICE_WORDS:
                assert not re.search(rf"(?<![A-Za-z_]){re.escape(word)}(?![A-Za-z_])", text), (path, word)
            assert not re.search(r"""==\s*["']cpu["']|!=\s*["']cpu["']""", text), path
    assert len((root / "modules" / "attention.py").read_text(encoding="utf-8").splitlines()) <= 300


def test_shared_embeddings_are_one_parameter():
    model = _model(share_all_embeddings=True)
    w = model.encoder.embed.embed_tokens.weight
    assert model.decoder.embed.embed_tokens.weight is w
    assert model.decoder.output_weight() is w
    assert model.decoder.output_projection is None
    tied = _model(share_decoder_input_output_embed=True)
    assert tied.decoder.output_weight() is tied.decoder.embed.embed_tokens.weight
    assert tied.encoder.embed.embed_tokens.weight is not tied.decoder.embed.embed_tokens.weight
    assert torch.all(w[PAD] == 0)  # zero padding row


def test_share_all_embeddings_needs_joined_dictionary():
    with pytest.raises(UsageError, match="--share-all-embeddings requires a joined dictionary"):
        TransformerModel.build_model(_cfg(share_all_embeddings=True), SizedDictionary(40), SizedDictionary(48))


def test_bf16_forward_on_cpu():
    model = _model()
    src, prev = _tokens(2, 5), _tokens(2, 4, seed=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(src, None, prev)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
    model = model.to(torch.bfloat16)
    out = model(src, None, prev)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
    state = model.make_decoder_state()
    enc = model.forward_encoder(src, None)
    assert model.forward_decoder(prev[:, :1], enc, incremental_state=state)[0].dtype == torch.bfloat16


def test_training_step_gradients_reach_every_parameter():
    model = _model(share_all_embeddings=True, dropout=0.1).train()
    out = model(_tokens(2, 5), None, _tokens(2, 4, seed=2))
    torch.nn.functional.cross_entropy(out.view(-1, 40), _tokens(2, 4, seed=3).view(-1)).backward()
    assert all(p.grad is not None for p in model.parameters())


TABLE3 = {  # row: (arch, flags, paper's millions)
    "base": ("transformer_base", {}, 65), "B d_k=16": ("transformer_base", {"key_dim": 16}, 58),
    "B d_k=32": ("transformer_base", {"key_dim": 32}, 60),
    "C N=2": ("transformer_base", {"encoder_layers": 2, "decoder_layers": 2}, 36),
    "C N=4": ("transformer_base", {"encoder_layers": 4, "decoder_layers": 4}, 50),
    "C N=8": ("transformer_base", {"encoder_layers": 8, "decoder_layers": 8}, 80),
    "C d_model=256": ("transformer_base", {"embed_dim": 256, "key_dim": 32, "value_dim": 32}, 28),
    "C d_model=1024": ("transformer_base", {"embed_dim": 1024, "key_dim": 128, "value_dim": 128}, 168),
    "C d_ff=1024": ("transformer_base", {"ffn_embed_dim": 1024}, 53),
    "C d_ff=4096": ("transformer_base", {"ffn_embed_dim": 4096}, 90),
    "big": ("transformer_big", {}, 213),
}


def _dry_run(arch, flags):
    cfg = TransformerConfig()
    ARCHITECTURES.get(arch).obj(cfg)
    for k, v in flags.items():
        setattr(cfg, k, v)
    cfg.share_all_embeddings = True
    return cfg, build_for_dry_run("transformer", cfg, 37000)


def test_base_parameter_count_is_63_08m_and_summary_prints_it():
    cfg, model = _dry_run("transformer_base", {})
    assert sum(p.numel() for p in model.parameters()) == 63_082_496
    text = model_summary(model, cfg)
    total = [line for line in text.splitlines() if "total" in line]
    assert total and "63,082,496" in total[0]
    assert re.search(r"FLOPs per target token", text)


@pytest.mark.parametrize("row", list(TABLE3))
def test_table3_rows_within_7_percent(row):
    arch, flags, paper = TABLE3[row]
    _, model = _dry_run(arch, flags)
    n = sum(p.numel() for p in model.parameters()) / 1e6
    assert abs(n - paper) / paper <= 0.07, (row, n, paper)


def test_architectures_fill_the_papers_values():
    def preset(name):
        cfg = TransformerConfig()
        ARCHITECTURES.get(name).obj(cfg)
        return cfg
    big = preset("transformer_big")
    assert (big.embed_dim, big.ffn_embed_dim, big.attention_heads, big.dropout) == (1024, 4096, 16, 0.3)
    assert preset("transformer_big_enfr").dropout == 0.1
    parsing = preset("transformer_parsing")
    assert (parsing.encoder_layers, parsing.decoder_layers, parsing.embed_dim) == (4, 4, 1024)
    iwslt = preset("transformer_iwslt_de_en")
    assert (iwslt.embed_dim, iwslt.ffn_embed_dim, iwslt.attention_heads) == (512, 1024, 4)
    base = preset("transformer_base")
    assert (base.encoder_layers, base.embed_dim, base.ffn_embed_dim, base.attention_heads, base.dropout) == \
        (6, 512, 2048, 8, 0.1)


def test_flops_per_token_matches_a_hand_count_for_base():
    _, model = _dry_run("transformer_base", {})
    d, f, v, s = 512, 2048, 37000, 25
    enc = 6 * (2 * 4 * d * d + 2 * 2 * s * d + 4 * d * f)
    dec = 6 * (2 * 4 * d * d + 2 * 2 * s * d + 2 * 2 * d * d + 2 * 2 * s * d + 2 * 2 * d * d + 4 * d * f)
    assert model.flops_per_target_token(s, s) == pytest.approx(enc + dec + 2 * d * v)
