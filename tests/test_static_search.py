"""The static-shape beam search (generation/static_search.py) against the dynamic SequenceGenerator, its eager
reference: the same hypotheses (tokens identical, scores to 1e-5) on a model trained here for a few seconds to
reverse and respell its input, over beam sizes, length penalties, early-stop rules, length limits and batches
whose sentences end at very different steps; bucketing bounds the step shapes of a whole split; unsupported
options fall back or are named; nmt-generate prints the same lines either way. The CUDA-graph replay is
compared with the eager static step where a GPU is present."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from test_generate_cli import setup_dir  # noqa: F401  (its data-bin and random-weight model)

from nmt_toolkit.data.batching import batch_by_size
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.errors import UsageError
from nmt_toolkit.generation import static_search
from nmt_toolkit.generation.beam_search import SequenceGenerator
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel

N_WORDS = 16


def _pairs(rng: random.Random, n: int, d: Dictionary, longest: int = 14):
    """Sources of 1..``longest`` words w*, targets the reversed words respelled v*."""
    out = []
    for _ in range(n):
        src = [rng.randrange(4, 4 + N_WORDS) for _ in range(rng.randint(1, longest))]
        out.append((src + [d.eos()], [w + N_WORDS for w in reversed(src)] + [d.eos()]))
    return out


def _collate(pairs, d: Dictionary):
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s, _ in pairs], True, d.pad())
    tgt = torch.nn.utils.rnn.pad_sequence([torch.tensor(t) for _, t in pairs], True, d.pad())
    prev = torch.cat([torch.full((len(pairs), 1), d.eos()), tgt[:, :-1]], dim=1)
    prev = prev.masked_fill(prev == d.pad(), d.pad())
    return src, torch.tensor([len(s) for s, _ in pairs]), prev, tgt


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny products: more threads only wait for each other (and spin while other jobs hold the cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained():
    """A 1-layer Transformer trained for 400 small updates (about 3 s of one core) on the reversal task."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train()
    finally:
        torch.set_num_threads(threads)


def _train():
    d = Dictionary()
    for prefix in "wv":
        for i in range(N_WORDS):
            d.add_symbol(f"{prefix}{i}")
    torch.manual_seed(0)
    cfg = TransformerConfig(encoder_layers=1, decoder_layers=1, embed_dim=48, ffn_embed_dim=96, attention_heads=4,
                            dropout=0.0, share_all_embeddings=True)
    model = TransformerModel.build_model(cfg, d, d)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    rng = random.Random(0)
    for _ in range(400):
        src, lengths, prev, tgt = _collate(_pairs(rng, 32, d, longest=10), d)
        logits = model(src, lengths, prev)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1), ignore_index=d.pad())
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    test = _pairs(random.Random(1), 24, d, longest=10)
    src, lengths, _, _ = _collate(test, d)
    out = SequenceGenerator([model], d, GenerationConfig(beam=1, static_search="off")).generate(src, lengths)
    right = sum(h[0]["tokens"].tolist() == t for h, (_, t) in zip(out, test))
    assert right >= 12, f"the model did not learn the task ({right}/24 reversed exactly)"
    return model, d


def _batch(d: Dictionary, lengths, seed: int):
    """Sources of the given lengths (EOS included), of random words w*."""
    rng = random.Random(seed)
    pairs = [([rng.randrange(4, 4 + N_WORDS) for _ in range(n - 1)] + [d.eos()], None) for n in lengths]
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s, _ in pairs], True, d.pad())
    return src, torch.tensor(lengths)


def _same(dynamic, static, tol=1e-5):
    """Tokens identical; scores within ``tol`` (absolute and relative: a trained model's logits reach tens,
    and the static step's products and masked attention round differently — in float64 they are equal)."""
    assert len(dynamic) == len(static)
    for a_hyps, b_hyps in zip(dynamic, static):
        assert [h["tokens"].tolist() for h in a_hyps] == [h["tokens"].tolist() for h in b_hyps]
        assert [h["score"] for h in a_hyps] == pytest.approx([h["score"] for h in b_hyps], abs=tol, rel=tol)
        for a, b in zip(a_hyps, b_hyps):
            torch.testing.assert_close(a["positional_scores"], b["positional_scores"], atol=tol, rtol=tol)


def _both(models, d, src, lengths, **kw):
    dynamic = SequenceGenerator(models, d, GenerationConfig(static_search="off", **kw)).generate(src, lengths)
    gen = SequenceGenerator(models, d, GenerationConfig(static_search="on", **kw))
    return dynamic, gen.generate(src, lengths), gen


# sources of 2 to 30 tokens (the model saw up to 15): outputs end at very different steps, long ones ramble
LENGTHS = [2, 30, 6, 15, 3, 11, 9, 24, 4]


@pytest.mark.parametrize("kw", [
    dict(beam=1),
    dict(beam=4),
    dict(beam=5, nbest=5),
    dict(beam=4, nbest=2, lenpen=1.0, lenpen_style="fairseq"),
    dict(beam=4, nbest=4, lenpen=1.2, early_stop="beam"),  # later hypotheses of a done sentence must not enter
    dict(beam=4, nbest=2, lenpen=-0.5),  # a penalty that falls with length: the bound takes the next length's
    dict(beam=5, nbest=3, lenpen=0.0, early_stop="never"),
    dict(beam=4, min_len=8),
    dict(beam=4, max_len_a=0, max_len_b=5),  # tight: most sentences end at the limit
    dict(beam=4, max_len_a=0.5, max_len_b=2, max_len_source="batch", unkpen=2.0, lenpen=2.0),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.slow
def test_static_search_gives_the_dynamic_hypotheses(trained, kw):
    model, d = trained
    src, lengths = _batch(d, LENGTHS, 3)
    dynamic, static, gen = _both([model], d, src, lengths, **kw)
    _same(dynamic, static)
    ends = {len(h[0]["tokens"]) for h in dynamic}
    assert len(ends) >= 3, ends  # the sentences finished at different steps
    assert gen._static.shapes  # it did run


@pytest.mark.parametrize("rule", ["beam", "bound", "never"])
def test_models_whose_hypotheses_end_at_every_length(rule):
    """test_beam_search's peaked random models with a boosted EOS: hypotheses finish at every step, so the
    finished sets change late (a done sentence that took in later hypotheses would show here)."""
    from test_beam_search import make_batch, make_dict, make_model

    d = make_dict(30)
    src, lengths = make_batch(d, [7, 3, 11, 5, 9, 6, 8, 4], 11)
    for seed in (11, 12, 13):
        model = make_model(d, seed, peak=4.0)
        with torch.no_grad():
            model.decoder.output_weight()[d.eos()].mul_(2.0)
        for nbest, alpha in ((1, 0.6), (4, 1.0), (2, -0.5), (3, 0.0)):
            dynamic, static, _ = _both([model], d, src, lengths, beam=4, nbest=nbest, max_len_b=12,
                                       lenpen=alpha, early_stop=rule)
            _same(dynamic, static)


@pytest.mark.parametrize("kw", [dict(beam=5, nbest=5, lenpen=0.0, early_stop="never"),
                                dict(beam=4, nbest=2, lenpen=1.0, lenpen_style="fairseq", min_len=3)])
def test_in_float64_the_scores_are_equal(trained, kw):
    """With the model in float64 the rounding of the step's products stays below float32's: the two searches
    then agree to the last bit of their (float32) scores — the same search, not merely a close one."""
    model, d = trained
    double = TransformerModel.build_model(model.cfg, d, d)
    double.load_state_dict(model.state_dict())
    double = double.double().eval()
    src, lengths = _batch(d, LENGTHS, 4)
    dynamic, static, _ = _both([double], d, src, lengths, **kw)
    _same(dynamic, static, tol=0.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_models_decode_with_float32_scores(trained, dtype):
    """--bf16/--fp16 cast the model; the static step keeps its caches in that precision and its scores in
    float32. Half precision rounds the two searches' different products differently, so they agree on most
    sentences rather than on all (float32 above is the exact comparison)."""
    model, d = trained
    half = TransformerModel.build_model(model.cfg, d, d)
    half.load_state_dict(model.state_dict())
    half = half.to(dtype).eval()
    src, lengths = _batch(d, LENGTHS, 3)
    dynamic, static, gen = _both([half], d, src, lengths, beam=4)
    state = next(iter(gen._static.plans.values())).states[0]
    assert state.self_attn[0].k.dtype == dtype and state.cross_attn[0].k.dtype == dtype
    assert all(h[0]["positional_scores"].dtype == torch.float32 for h in static)
    same = [a[0]["tokens"].tolist() == b[0]["tokens"].tolist() for a, b in zip(dynamic, static)]
    assert sum(same) >= len(same) - 2, same
    for a, b, equal in zip(dynamic, static, same):
        if equal:
            assert a[0]["score"] == pytest.approx(b[0]["score"], abs=0.05)


def test_ensembles_and_batches_of_one(trained):
    model, d = trained
    src, lengths = _batch(d, [7, 12, 3], 5)
    dynamic, static, _ = _both([model, model], d, src, lengths, beam=4, nbest=2)
    _same(dynamic, static)
    dynamic, static, _ = _both([model], d, src[1:2, :12], lengths[1:2], beam=4)
    _same(dynamic, static)


def test_learned_positions_to_the_end_of_their_table(trained):
    """The output limit reaches the last learned position: the capacity is clamped to the table, not rounded."""
    model, d = trained
    cfg = TransformerConfig(**{**vars(model.cfg), "positional_embeddings": "learned", "max_positions": 20})
    torch.manual_seed(1)
    learned = TransformerModel.build_model(cfg, d, d)
    state = {k: v for k, v in model.state_dict().items() if "embed_positions" not in k}
    learned.load_state_dict(state, strict=False)
    learned.eval()
    src, lengths = _batch(d, [5, 18, 9], 7)
    dynamic, static, gen = _both([learned], d, src, lengths, beam=3, early_stop="never", max_len_b=40)
    _same(dynamic, static)
    assert max(len(h[0]["tokens"]) for h in static) == 20  # 19 tokens and the forced EOS
    assert {w for _, _, w in gen._static.shapes} == {16, 20}


def test_a_step_never_reads_a_device_value_on_the_host(trained, monkeypatch):
    """What a CUDA graph cannot record (and what would stall the GPU each step): every way a tensor's value
    reaches Python raises inside the steps after the first; the search still completes."""
    model, d = trained
    gen = SequenceGenerator([model], d, GenerationConfig(beam=4, nbest=2, static_search="on"))
    search = gen._static_for()
    real_step = search._step
    steps = []

    def guarded(plan, encoder_outs):
        if not steps:  # the first step of a batch projects the encoder output: never recorded
            steps.append(0)
            return real_step(plan, encoder_outs)

        def refuse(*args, **kwargs):
            raise AssertionError("a step read a device value on the host")

        with monkeypatch.context() as m:
            for name in ("item", "tolist", "cpu", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__"):
                m.setattr(torch.Tensor, name, refuse)
            m.setattr(torch, "nonzero", refuse)
            real_step(plan, encoder_outs)
        steps.append(1)

    search._step = guarded
    src, lengths = _batch(d, LENGTHS, 3)
    out = gen.generate(src, lengths)
    assert len(steps) > 5 and all(h[0]["tokens"][-1] == d.eos() for h in out)


class _Recorder:
    """Stands in for generation/cuda_graphs.py's StepGraphs on the CPU: runs each step eagerly, noting its key."""

    def __init__(self):
        self.keys = []

    def run(self, key, step):
        self.keys.append(key)
        step()


def test_recorded_steps_are_dropped_when_the_model_tensors_move(trained):
    """A recorded step reads the weights where they were at capture: when one moves (here the positional
    table, which a batch longer than any before regrows), the plans record anew."""
    model, d = trained
    gen = SequenceGenerator([model], d, GenerationConfig(beam=2, static_search="on", max_len_b=10))
    search = gen._static_for()
    made = []
    search.make_graphs = lambda dev: made.append(_Recorder()) or made[-1]
    src, lengths = _batch(d, [5, 6], 1)
    first = gen.generate(src, lengths)
    gen.generate(src, lengths)
    assert len(made) == 1 and made[0].keys  # one plan, its recorder kept across batches
    table = model.decoder.embed.embed_positions.table
    model.decoder.embed.embed_positions.reserve(table.size(0) + 1)  # a new tensor, same values
    _same(first, gen.generate(src, lengths), tol=0.0)
    assert len(made) == 2 and made[1].keys and search.plans[next(iter(search.plans))].graphs is made[1]


def test_sentence_bucket_pads_at_most_a_third():
    for n in range(1, 5000):
        b = static_search.sentence_bucket(n)
        assert b >= n and (n <= 8 or b <= 1.5 * n)
    assert len({static_search.sentence_bucket(n) for n in range(1, 1025)}) == 15


def test_bucketing_bounds_the_step_shapes_of_a_split():
    """3,000 newstest-like sentences (lengths ~ gamma, mean 27) batched by --max-tokens 4000 as nmt-generate
    batches them (sorted by length): a few dozen step shapes instead of thousands."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.gamma(3.0, 9.0, 3000).round().astype(int), 2, 200)
    order = np.argsort(lengths, kind="stable")
    batches = batch_by_size(order, lengths, max_tokens=4000)
    raw, shapes, plans = set(), set(), set()
    for idx in batches:
        width = int(lengths[idx].max())
        steps = width + 50  # --max-len-a 1 --max-len-b 50
        n, w, capacity, windows = static_search.step_shapes(len(idx), width, steps, (1024, 1024))
        raw.update((len(idx), width, t) for t in range(steps + 1))
        shapes.update((n, w, win) for win in windows)
        plans.add((n, w, capacity))
    assert len(batches) > 20 and len(raw) > 1500
    assert len(shapes) <= 60 and len(plans) <= 10, (len(shapes), len(plans))


def test_recorded_shapes_are_the_predicted_ones(trained):
    model, d = trained
    gen = SequenceGenerator([model], d, GenerationConfig(beam=2, static_search="on", max_len_b=20))
    predicted = set()
    for seed, lengths in enumerate(([3, 4, 4, 5], [9, 10, 12], [20, 21, 25, 27, 30])):
        src, lens = _batch(d, lengths, seed)
        gen.generate(src, lens)
        n, w, _, windows = static_search.step_shapes(len(lengths), src.size(1), max(lengths) + 20, (10**6, 10**6),
                                                     1.0, 20)
        predicted.update((n * 2, w, win) for win in windows)
    assert gen._static.shapes <= predicted and len(gen._static.plans) <= static_search.MAX_PLANS


def test_selection_and_what_falls_back(trained, caplog):
    model, d = trained
    src, lengths = _batch(d, [5, 7], 2)
    auto = SequenceGenerator([model], d, GenerationConfig(beam=2))
    assert auto._static_for(torch.device("cpu")) is None  # auto: the dynamic search on the CPU
    assert auto._static_for(torch.device("cuda")) is not None  # and the static one on CUDA (nothing runs here)
    caplog.set_level("DEBUG", logger="nmt_toolkit.generation")
    assert auto._static_for(torch.device("cuda"), need_attn=True) is None
    assert "--print-alignment" in caplog.text
    no_repeat = SequenceGenerator([model], d, GenerationConfig(beam=2, no_repeat_ngram_size=2))
    assert no_repeat._static_for(torch.device("cuda")) is None
    for kw, name in ((dict(sampling=True), "--sampling"), (dict(no_repeat_ngram_size=2), "--no-repeat-ngram-size")):
        with pytest.raises(UsageError, match=name):
            SequenceGenerator([model], d, GenerationConfig(beam=2, static_search="on", **kw))
    on = SequenceGenerator([model], d, GenerationConfig(beam=2, static_search="on"))
    with pytest.raises(UsageError, match="--prefix-size"):
        on.generate(src, lengths, prefix_tokens=src[:, :1])
    with pytest.raises(UsageError, match="--print-alignment"):
        on.generate(src, lengths, need_attn=True)
    on.generate(src, lengths)
    assert on._static.plans
    on.release()
    assert not on._static.plans


def test_nmt_generate_prints_the_same_lines(setup_dir, capsys):  # noqa: F811
    """End to end on the CPU: --static-search on prints the D-, H- and P- lines of --static-search off, also with
    two decode workers running batches at once (each thread has its own buffers)."""
    from nmt_toolkit.cli import generate as gen_cli

    root, data, ck = setup_dir
    outs = {}
    for mode, workers in (("off", "1"), ("on", "2")):
        rc = gen_cli.run([str(data), "--path", str(ck), "--beam", "4", "--max-len-b", "6", "--max-tokens", "120",
                          "--static-search", mode, "--cpu", "--threads", "1", "--decode-workers", workers])
        out, err = capsys.readouterr()
        assert rc == 0, err
        outs[mode] = [line.split("\t") for line in out.splitlines() if line[:2] in ("H-", "D-", "P-")]
    assert len(outs["on"]) == 3 * 23
    for a, b in zip(outs["off"], outs["on"]):
        if a[0].startswith("P-"):
            assert [float(x) for x in a[1].split()] == pytest.approx([float(x) for x in b[1].split()], abs=2e-4)
        else:  # the same text; the score printed in full (base 2) agrees to float32 rounding
            assert a[0] == b[0] and a[2] == b[2] and float(a[1]) == pytest.approx(float(b[1]), rel=1e-5, abs=1e-5)
    rc = gen_cli.run([str(data), "--path", str(ck), "--static-search", "on", "--print-alignment", "--cpu",
                      "--threads", "1"])
    out, err = capsys.readouterr()
    assert rc == 2 and "--static-search on" in err and "--print-alignment" in err and "Traceback" not in err


@pytest.mark.slow
def test_gpu_generate_benchmark_runs_tiny_on_the_cpu():
    """benchmarks/gpu_generate.py: --help, and one small run printing one JSON line with both searches."""
    import json
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_generate.py"
    assert "--max-tokens" in subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                                            check=True).stdout
    out = subprocess.run([sys.executable, str(script), "--device", "cpu", "--arch", "transformer_tiny", "--vocab",
                          "500", "--sentences", "24", "--max-tokens", "300", "--repeats", "1", "--threads", "1"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    record = json.loads(out[-1])
    assert len(out) == 1 and record["benchmark"] == "gpu_generate" and record["sentences"] == 24
    assert {(r["search"], r["precision"]) for r in record["results"]} == {("static", "fp32"), ("dynamic", "fp32")}
    assert all(r["sentences_per_s"] > 0 for r in record["results"]) and "fp32" in record["same_hypotheses"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_graph_replay_equals_the_eager_static_step(trained, dtype):
    model, d = trained
    dev = torch.device("cuda")
    gpu = TransformerModel.build_model(model.cfg, d, d)
    gpu.load_state_dict(model.state_dict())
    gpu = gpu.to(dev, dtype).eval()
    src, lengths = _batch(d, LENGTHS, 3)
    src, lengths = src.to(dev), lengths.to(dev)
    replayed = SequenceGenerator([gpu], d, GenerationConfig(beam=4, nbest=2, static_search="on"))
    eager = SequenceGenerator([gpu], d, GenerationConfig(beam=4, nbest=2, static_search="on"))
    for _ in range(3):  # warm-up, capture, replay of the same shapes
        graph_out = replayed.generate(src, lengths)
    plan = next(iter(replayed._static.plans.values()))
    assert plan.graphs.captures >= 1 and plan.graphs.warm
    eager._static_for(dev)
    eager._static._plan = _without_graphs(eager._static._plan)
    eager_out = eager.generate(src, lengths)
    _same(eager_out, graph_out, tol=1e-6)
    if dtype == torch.float32:  # and both are the dynamic search's
        dynamic = SequenceGenerator([gpu], d, GenerationConfig(beam=4, nbest=2, static_search="off"))
        dynamic = dynamic.generate(src, lengths)
        _same(dynamic, graph_out)


def _without_graphs(make_plan):
    def plan(*args):
        p = make_plan(*args)
        p.graphs = None
        return p
    return plan

