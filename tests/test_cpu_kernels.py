"""modules/cpu_kernels.py: the C kernels against torch references, their build, cache and fallbacks.

Decoding with and without the kernels is compared in test_beam_search.py and test_transformer.py (the
``decode_kernels`` fixture runs those tests both ways)."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from nmt_toolkit.modules import cpu_kernels


@pytest.fixture
def lib(cpu_kernels_lib):
    return cpu_kernels_lib


def _self_reference(qkv, kc, vc, anc, sents, w, pos, scaling):
    """Row (s, b), head h attends to the keys/values of its ancestry line at positions 0..pos."""
    _, heads, _, beam, dk = kc.shape
    dv = vc.size(-1)
    hk = heads * dk
    out = torch.zeros(sents * w, heads * dv, dtype=torch.float64)
    for s in range(sents):
        for b in range(w):
            row = qkv[s * w + b].double()
            slots = [b if p == pos else (int(anc[s, b, p]) if anc is not None else 0) for p in range(pos + 1)]
            for h in range(heads):
                q = row[h * dk:(h + 1) * dk]
                keys = torch.stack([kc[s, h, p, slots[p]] for p in range(pos)] + [row[hk + h * dk: hk + (h + 1) * dk]])
                values = torch.stack([vc[s, h, p, slots[p]] for p in range(pos)]
                                     + [row[2 * hk + h * dv: 2 * hk + (h + 1) * dv]])
                probs = torch.softmax(keys.double() @ q * scaling, dim=0)
                out[s * w + b, h * dv:(h + 1) * dv] = probs @ values.double()
    return out.float()


@pytest.mark.parametrize("beam,w,dk,dv", [(4, 4, 64, 64), (4, 1, 64, 64), (3, 3, 6, 10), (1, 1, 16, 16)])
def test_self_step_equals_attention_over_the_ancestry_lines(lib, beam, w, dk, dv):
    g = torch.Generator().manual_seed(beam * 100 + dk)
    heads, cap, pos = 4, 9, 6
    sents = 3
    kc = torch.randn(sents, heads, cap, beam, dk, generator=g)
    vc = torch.randn(sents, heads, cap, beam, dv, generator=g)
    qkv = torch.randn(sents * w, 2 * heads * dk + heads * dv, generator=g) * 2
    anc = torch.randint(0, beam, (sents, beam, cap + 2), generator=g) if beam > 1 else None
    if anc is not None:
        anc[:, :w, pos] = torch.arange(w)
    expected = _self_reference(qkv, kc, vc, anc, sents, w, pos, 0.3)
    with torch.inference_mode():
        out = cpu_kernels.self_step(qkv, kc, vc, anc, sents, w, pos, 0.3)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-5)
    hk = heads * dk
    for b in range(w):  # this step's keys and values were written into the caches
        torch.testing.assert_close(kc[:, :, pos, b], qkv[b::w, hk:2 * hk].view(sents, heads, dk), atol=0, rtol=0)
        torch.testing.assert_close(vc[:, :, pos, b], qkv[b::w, 2 * hk:].view(sents, heads, dv), atol=0, rtol=0)


@pytest.mark.parametrize("w,dk,dv,padded", [(4, 64, 64, True), (1, 64, 64, False), (3, 6, 10, True)])
def test_cross_step_equals_sdpa(lib, w, dk, dv, padded):
    g = torch.Generator().manual_seed(w * 10 + dk)
    heads, src_len = 4, 11
    sents = 5
    k = torch.randn(sents, heads, src_len, dk, generator=g)
    v = torch.randn(sents, heads, src_len, dv, generator=g)
    q = torch.randn(sents * w, heads * dk, generator=g)
    blocked = torch.zeros(sents, src_len, dtype=torch.bool)
    if padded:
        for s in range(sents):
            blocked[s, src_len - (s % 4):] = True
    bias = torch.zeros(sents, src_len).masked_fill_(blocked, float("-inf")) if padded else None
    qh = q.view(sents, w, heads, dk).transpose(1, 2)
    mask = ~blocked[:, None, None, :]
    ref = torch.nn.functional.scaled_dot_product_attention(qh, k, v, attn_mask=mask, scale=0.25)
    expected = ref.transpose(1, 2).reshape(sents * w, heads * dv)
    with torch.inference_mode():
        out = cpu_kernels.cross_step(q, k, v, bias, w, 0.25)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("width", [1, 15, 16, 513, 8008])
@pytest.mark.parametrize("scale", [0.5, 30.0])
def test_row_logsumexp_equals_torch(lib, width, scale):
    g = torch.Generator().manual_seed(width)
    x = torch.randn(70, width, generator=g) * scale
    x[3, :] = float("-inf")  # a row of -inf only
    x[4, :: 2] = float("-inf")
    x[5, 0] = 200.0  # a dominant logit
    out = cpu_kernels.row_logsumexp(x)
    expected = torch.logsumexp(x.double(), dim=1).float()
    assert out[3] == float("-inf")
    finite = torch.isfinite(expected)
    torch.testing.assert_close(out[finite], expected[finite], atol=2e-6 * max(1.0, scale), rtol=2e-7)


@pytest.mark.parametrize("width,kk", [(8008, 8), (100, 1), (7, 7), (2048, 8)])
def test_row_topk_equals_torch_topk(lib, width, kk):
    g = torch.Generator().manual_seed(width + kk)
    x = torch.randn(130, width, generator=g)
    x[1, :] = float("-inf")
    x[1, width // 2] = 0.0  # one finite value: -inf fills the rest, from the lowest columns
    values, index = cpu_kernels.row_topk(x, kk)
    ref_values, ref_index = x.topk(kk, dim=1)
    torch.testing.assert_close(values, ref_values, atol=0, rtol=0)
    assert torch.equal(index[[0] + list(range(2, 130))], ref_index[[0] + list(range(2, 130))])
    assert index[1, 0] == width // 2
    assert index[1, 1:].tolist() == [c for c in range(width) if c != width // 2][: kk - 1]


def test_row_topk_breaks_ties_by_the_lower_column(lib):
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]])
    values, index = cpu_kernels.row_topk(x, 4)
    assert values.tolist() == [[3.0, 3.0, 3.0, 2.0]] and index.tolist() == [[1, 2, 4, 3]]


def test_kernels_serve_inference_on_float32_cpu_tensors(lib):
    x = torch.zeros(2, 3)
    torch.set_num_threads(1)
    assert not cpu_kernels.usable(x)  # outside inference mode
    with torch.inference_mode():
        assert cpu_kernels.usable(x)
        assert not cpu_kernels.usable(x.double())
        torch.set_num_threads(2)  # several intra-op threads: only a build that shares them through OpenMP
        assert cpu_kernels.usable(x) == bool(lib.nmt_openmp())


def test_the_openmp_build_is_chosen_where_the_compiler_has_it(lib):
    """The first flags tried are the OpenMP ones; a compiler here that links -fopenmp must have produced them."""
    import shutil

    probe = subprocess.run([shutil.which(os.environ.get("CC", "cc")) or "cc", "-fopenmp", "-x", "c", "-shared", "-fPIC",
                            "-o", os.devnull, "-"], input=b"int f(void){return 0;}", capture_output=True)
    if probe.returncode != 0:
        pytest.skip("this compiler does not link -fopenmp")
    assert lib.nmt_openmp() == 1


@pytest.mark.parametrize("sents", [3, 8, 13])
def test_threaded_kernels_equal_the_one_thread_results_bit_for_bit(lib, sents):
    """Each sentence (row) is computed by one thread as in a serial call: the thread count changes nothing,
    including below the size where a call stays on one thread."""
    if not lib.nmt_openmp():
        pytest.skip("built without OpenMP")
    g = torch.Generator().manual_seed(sents)
    heads, cap, beam, dk, pos, src = 4, 12, 4, 64, 9, 7
    kc, vc = torch.randn(sents, heads, cap, beam, dk, generator=g), torch.randn(sents, heads, cap, beam, dk, generator=g)
    qkv = torch.randn(sents * beam, 3 * heads * dk, generator=g)
    anc = torch.randint(0, beam, (sents, beam, cap), generator=g)
    anc[:, :, pos] = torch.arange(beam)
    k, v = torch.randn(sents, heads, src, dk, generator=g), torch.randn(sents, heads, src, dk, generator=g)
    bias = torch.zeros(sents, src)
    bias[0, -2:] = float("-inf")
    q = torch.randn(sents * beam, heads * dk, generator=g)
    logits = torch.randn(sents * 40, 3000, generator=g) * 3
    results = []
    with torch.inference_mode():
        for threads in (1, 2):
            torch.set_num_threads(threads)
            caches = (kc.clone(), vc.clone())
            results.append([cpu_kernels.self_step(qkv, *caches, anc, sents, beam, pos, 0.125), *caches,
                            cpu_kernels.cross_step(q, k, v, bias, beam, 0.125), cpu_kernels.row_logsumexp(logits),
                            *cpu_kernels.row_topk(logits, 8)])
    for one, two in zip(*results):
        assert torch.equal(one, two)


def test_kernels_reject_layouts_they_cannot_read(lib):
    with pytest.raises(ValueError, match="row-major"):
        cpu_kernels.row_topk(torch.randn(8, 5).t(), 2)
    with pytest.raises(ValueError, match="contiguous"):
        kc = torch.randn(1, 1, 4, 8, 2).transpose(-1, -2)  # [1, 1, 4, 2, 8] with its last two dims swapped
        cpu_kernels.self_step(torch.randn(2, 24), kc, torch.randn(1, 1, 4, 2, 8), None, 1, 2, 0, 1.0)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_beam_search_runs_every_kernel(lib, monkeypatch, threads):
    """A beam search on one thread (a decode worker), or on two with an OpenMP build, takes the attention
    and candidate kernels; its result equals torch's path (the decoding tests of test_beam_search.py compare
    the two in detail)."""
    if threads > 1 and not lib.nmt_openmp():
        pytest.skip("built without OpenMP")
    from nmt_toolkit.data.dictionary import Dictionary
    from nmt_toolkit.generation.beam_search import SequenceGenerator
    from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel

    d = Dictionary()
    for i in range(1100):  # a vocabulary where the candidate kernels apply
        d.add_symbol(f"w{i}")
    torch.manual_seed(0)
    cfg = TransformerConfig(encoder_layers=1, decoder_layers=2, embed_dim=32, ffn_embed_dim=64, attention_heads=4,
                            dropout=0.0)
    model = TransformerModel.build_model(cfg, d, d).eval()
    src = torch.randint(4, len(d), (9, 6))  # enough sentences for two threads to share them
    src[:, -1] = d.eos()
    src[2, 3:] = d.pad()
    lengths = torch.tensor([6, 6, 3] + [6] * 6)
    gen = SequenceGenerator([model], d, beam_size=4, max_len_b=5)
    calls = {}
    for name in ("self_step", "cross_step", "row_logsumexp", "row_topk"):
        real = getattr(cpu_kernels, name)
        monkeypatch.setattr(cpu_kernels, name, lambda *a, _real=real, _name=name: (
            calls.__setitem__(_name, calls.get(_name, 0) + 1), _real(*a))[1])
    torch.set_num_threads(threads)
    fast = gen.generate(src, lengths)
    assert set(calls) == {"self_step", "cross_step", "row_logsumexp", "row_topk"}
    monkeypatch.setattr(cpu_kernels, "_library", None)
    slow = gen.generate(src, lengths)
    for a, b in zip(fast, slow):
        assert a[0]["tokens"].tolist() == b[0]["tokens"].tolist()
        assert a[0]["score"] == pytest.approx(b[0]["score"], abs=1e-5)


_PROBE = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    from nmt_toolkit.modules import cpu_kernels
    print("built" if cpu_kernels.library() is not None else "none")
""")


def _probe(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PROBE], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=300)


def test_build_is_cached_and_reused(lib, tmp_path):
    first = _probe({cpu_kernels.CACHE_ENV: str(tmp_path)})
    assert first.stdout.strip() == "built", first.stderr
    built = list(tmp_path.glob("step_attention-*.so"))
    assert len(built) == 1 and not list(tmp_path.glob("*.tmp*"))
    stamp = built[0].stat().st_mtime_ns
    second = _probe({cpu_kernels.CACHE_ENV: str(tmp_path), "CC": "/nonexistent/cc"})
    # a cached build needs no compiler, but without one the kernels are not looked for at all
    assert second.stdout.strip() == "none" and "no C compiler" in second.stderr
    third = _probe({cpu_kernels.CACHE_ENV: str(tmp_path)})
    assert third.stdout.strip() == "built" and built[0].stat().st_mtime_ns == stamp


def test_switched_off_or_failing_builds_fall_back_to_torch(tmp_path):
    off = _probe({cpu_kernels.ENV: "0", cpu_kernels.CACHE_ENV: str(tmp_path)})
    assert off.stdout.strip() == "none" and "off" in off.stderr
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'cc: internal error' >&2\nexit 1\n")
    broken.chmod(0o755)
    failed = _probe({"CC": str(broken), cpu_kernels.CACHE_ENV: str(tmp_path / "cache")})
    assert failed.stdout.strip() == "none" and "failed" in failed.stderr
    assert not list((tmp_path / "cache").glob("*"))  # no half-written library left behind


def test_a_compiler_without_openmp_builds_the_one_thread_kernels(tmp_path):
    """-fopenmp refused (no libgomp to link): the next flags build kernels that serve one-thread decoding."""
    import shutil

    real = shutil.which(os.environ.get("CC", "cc"))
    if real is None:
        pytest.skip("no C compiler")
    cc = tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && {{ echo "no libgomp" >&2; exit 1; }}; done\n'
                  f'exec {real} "$@"\n')
    cc.chmod(0o755)
    probe = textwrap.dedent("""
        import torch
        from nmt_toolkit.modules import cpu_kernels
        lib = cpu_kernels.library()
        torch.set_num_threads(2)
        with torch.inference_mode():
            print(lib is not None, lib.nmt_openmp(), cpu_kernels.usable(torch.zeros(1)))
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CC": str(cc), cpu_kernels.CACHE_ENV: str(tmp_path / "cache")})
    assert out.stdout.split() == ["True", "0", "False"], out.stderr
