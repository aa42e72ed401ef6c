"""Record real fairseq's numbers for the parity tests (run with fairseq's Python, not ours).

    FAIRSEQ_PYTHON=/path/to/fairseq-venv/bin/python bash tests/parity/make_fixtures.sh

For each configuration in ``CONFIGS`` this builds fairseq's own ``transformer`` model, criterion, optimizer,
learning-rate schedule and ``Trainer`` from fairseq-train's own argument parser, on a synthetic task
(so no corpus is copied into the repository), and records:

- ``init.pt``   fairseq's freshly initialised ``state_dict`` (seed 1), the weights both sides start from;
- ``batch.pt``  one batch through the model in training mode with dropout 0: the encoder output of every
  real source token, the decoder logits, the summed loss and nll, the sample size, and every parameter's
  gradient divided by the sample size (fairseq's normalisation);
- ``steps.pt``  ``STEPS`` updates of fairseq's ``Trainer.train_step`` on the batches of ``batches.json``
  in order: the learning rate each update used, the summed loss and nll, and the sample size (recorded
  unrounded from the criterion), and the parameters after the first update.

Everything is saved as plain tensors and numbers, so the tests load it with ``weights_only=True`` and run
without fairseq installed.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import random
import sys

import torch

STEPS = 50
VOCAB = 300  # synthetic words w0 .. w299, plus fairseq's four special symbols
COMMON = [
    "--task", "translation", "--source-lang", "src", "--target-lang", "tgt", "--arch", "transformer",
    "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
    "--decoder-attention-heads", "4", "--dropout", "0", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
    "--adam-eps", "1e-8", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--cpu", "--seed", "1",
    "--max-tokens", "4096", "--num-workers", "0",
]
CONFIGS = {
    # the paper's model as fairseq builds it: post-norm, sinusoidal positions, one shared embedding matrix
    "postnorm_shared": ["--share-all-embeddings"],
    # pre-norm with final LayerNorms, learned positions, separate encoder and tied decoder embeddings
    "prenorm_learned": ["--encoder-normalize-before", "--decoder-normalize-before", "--encoder-learned-pos",
                        "--decoder-learned-pos", "--share-decoder-input-output-embed",
                        "--max-source-positions", "64", "--max-target-positions", "64"],
}


def synthetic_pairs(n: int, seed: int) -> list[tuple[list[str], list[str]]]:
    """A learnable toy task: the target is the source reversed, each word mapped to its successor mod 300,
    with Zipf-like word frequencies and lengths 3-20 (so batches have real padding)."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(VOCAB)]
    pairs = []
    for _ in range(n):
        src = rng.choices(range(VOCAB), weights, k=rng.randint(3, 20))
        tgt = [(w + 1) % VOCAB for w in reversed(src)]
        pairs.append(([f"w{w}" for w in src], [f"w{w}" for w in tgt]))
    return pairs


def batches_of(pairs, size: int):
    return [pairs[i:i + size] for i in range(0, len(pairs), size)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out_root = pathlib.Path(ap.parse_args().out)

    import fairseq
    from fairseq import options, tasks
    from fairseq.data import Dictionary
    from fairseq.data.language_pair_dataset import collate
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    pairs = synthetic_pairs(16 * 12, seed=7)
    d = Dictionary()
    for src, tgt in pairs:
        for w in src + tgt:
            d.add_symbol(w)
    d.finalize(padding_factor=1)
    work = out_root / "_databin"
    work.mkdir(parents=True, exist_ok=True)
    for lang in ("src", "tgt"):
        d.save(str(work / f"dict.{lang}.txt"))
    out_root.mkdir(parents=True, exist_ok=True)
    d.save(str(out_root / "dict.txt"))
    encoded = [([d.index(w) for w in s] + [d.eos()], [d.index(w) for w in t] + [d.eos()]) for s, t in pairs]
    batches = batches_of(encoded, 16)
    (out_root / "batches.json").write_text(json.dumps([[{"source": s, "target": t} for s, t in b] for b in batches]))

    def fairseq_sample(batch):
        samples = [{"id": i, "source": torch.tensor(s), "target": torch.tensor(t)} for i, (s, t) in enumerate(batch)]
        return collate(samples, d.pad(), d.eos(), left_pad_source=True, left_pad_target=False)

    versions = {"fairseq": fairseq.__version__, "torch": torch.__version__, "python": sys.version.split()[0]}
    for name, extra in CONFIGS.items():
        out = out_root / name
        out.mkdir(parents=True, exist_ok=True)
        argv = [str(work)] + COMMON + extra
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, argv)
        cfg = convert_namespace_to_omegaconf(args)
        torch.manual_seed(cfg.common.seed)
        task = tasks.setup_task(cfg.task)
        model = task.build_model(cfg.model)
        criterion = task.build_criterion(cfg.criterion)
        torch.save({k: v.clone() for k, v in model.state_dict().items()}, out / "init.pt")

        # --- one batch, forward and backward, outside the trainer
        sample = fairseq_sample(batches[0])
        model.train()
        net_input = sample["net_input"]
        enc = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
        enc_out = enc["encoder_out"][0].transpose(0, 1)  # [B, S, C], left-padded
        real = net_input["src_tokens"].ne(d.pad())
        logits = model.decoder(net_input["prev_output_tokens"], encoder_out=enc)[0]
        model.zero_grad()
        loss, sample_size, log = criterion(model, sample)
        loss.backward()
        grads = {n: (p.grad / sample_size).clone()  # every name, a shared matrix under each of its names
                 for n, p in model.named_parameters(remove_duplicate=False) if p.grad is not None}
        torch.save({
            "order": sample["id"].clone(),  # fairseq's collater sorts a batch by source length
            "encoder_out": enc_out[real].detach().clone(),  # real tokens, sentence by sentence
            "logits": logits.detach().clone(),
            "loss": float(log["loss"]), "nll_loss": float(log["nll_loss"]),
            "sample_size": int(sample_size), "ntokens": int(log["ntokens"]),
            "grads": grads,
        }, out / "batch.pt")
        model.zero_grad()

        # --- STEPS updates through fairseq's Trainer (its Adam, lr schedule and gradient normalisation)
        model.load_state_dict(torch.load(out / "init.pt"))
        trainer = Trainer(cfg, task, model, criterion)
        trainer.lr_step_update()  # what fairseq-train does before the first update (via load_checkpoint)
        record = {"lr": [], "loss": [], "nll_loss": [], "sample_size": []}
        inner = task.train_step

        def recording_train_step(*a, _inner=inner, _record=record, **kw):
            loss, sample_size, log = _inner(*a, **kw)
            _record["loss"].append(float(log["loss"]))
            _record["nll_loss"].append(float(log["nll_loss"]))
            _record["sample_size"].append(int(sample_size))
            return loss, sample_size, log

        task.train_step = recording_train_step
        after_first = None
        for step in range(STEPS):
            record["lr"].append(trainer.get_lr())
            trainer.train_step([fairseq_sample(batches[step % len(batches)])])
            if step == 0:
                after_first = {k: v.detach().clone() for k, v in model.state_dict().items()}
        task.train_step = inner
        torch.save({"record": record, "after_first": after_first}, out / "steps.pt")
        (out / "fairseq_args.json").write_text(json.dumps({"argv": argv[1:], **versions}, indent=1))
        print(f"{name}: loss {record['loss'][0] / record['sample_size'][0] / math.log(2):.4f} -> "
              f"{record['loss'][-1] / record['sample_size'][-1] / math.log(2):.4f} bits/token over {STEPS} updates")
    for f in work.iterdir():
        f.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
