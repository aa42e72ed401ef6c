"""Record fairseq 0.12.3's translation_multi_simple_epoch on a tiny multilingual data-bin made by OUR
nmt-preprocess --lang-pairs (see make_fixtures.sh, which runs the three steps, and README.md):

    python make_multilingual_fixtures.py --write-raw RAW        # any Python: the synthetic corpus
    nmt-preprocess --lang-pairs en-de,de-en,en-fr --trainpref RAW/train ... --destdir OUT/bin
    FAIRSEQ_PYTHON make_multilingual_fixtures.py --out OUT      # fairseq's Python: the records

The corpus is synthetic (so no corpus is copied into the repository): line-parallel "languages" en, de, fr
whose words are e<n>, d<n>, f<n> for the same n, the de and fr lines in reversed order. fairseq's own task
reads OUR data-bin with ``--encoder-langtok src --decoder-langtok`` and builds a 2+2 d=32 transformer (seed 1,
dropout 0, shared embeddings); ``OUT/records.pt`` holds, as plain tensors and numbers:

- ``dict_size`` and ``lang_tokens`` (``__de__`` → id): the joint dictionary with fairseq's language tokens;
- ``items``: for each direction, the training items 0..3 as fairseq's task builds them (source, target ids);
- ``batches``: BATCHES batches of items taken across the directions (``picks``: direction, index) collated by
  fairseq's collater (``src_tokens``, ``prev_output_tokens``, ``target``, ``order``);
- ``init``: the model's initial weights; ``steps``: BATCHES updates of fairseq's Trainer (Adam, inverse_sqrt),
  one batch each: the lr each used, the summed loss and nll and the sample size; ``after_first``: the
  weights after the first update;
- ``checkpoint.pt``: fairseq's checkpoint after MORE_UPDATES more updates (without the optimizer's state), and
  ``generate.<pair>.txt`` the hypotheses fairseq-generate decodes from it on the valid split (make_fixtures.sh).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys

PAIRS = "en-de,de-en,en-fr"
BATCHES = 3
MORE_UPDATES = 120
ARGS = ["--task", "translation_multi_simple_epoch", "--lang-pairs", PAIRS, "--encoder-langtok", "src",
        "--decoder-langtok", "--sampling-method", "temperature", "--sampling-temperature", "1.5",
        "--arch", "transformer", "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
        "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--share-all-embeddings",
        "--dropout", "0", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-8", "--lr", "3e-3",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--criterion", "label_smoothed_cross_entropy",
        "--label-smoothing", "0.1", "--cpu", "--seed", "1", "--max-tokens", "4096", "--num-workers", "0"]


def write_raw(folder: pathlib.Path) -> None:
    """train (40 lines) and valid (16) of the three synthetic languages, Zipf-like words, lengths 2-12."""
    rng = random.Random(11)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 40), ("valid", 16)):
        lines = [rng.choices(range(60), [1 / (i + 1) for i in range(60)], k=rng.randint(2, 12)) for _ in range(n)]
        for lang, prefix, flip in (("en", "e", False), ("de", "d", True), ("fr", "f", True)):
            text = [" ".join(f"{prefix}{w}" for w in (reversed(line) if flip else line)) for line in lines]
            (folder / f"{split}.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")


def picks_of(batch: int) -> list[tuple[int, int]]:
    """(direction, item) pairs of batch ``batch``: four items of each direction, different per batch."""
    return [(d, (4 * batch + k + d) % 40) for d in range(3) for k in range(4)]


def record(out: pathlib.Path) -> None:
    import fairseq
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    argv = [str(out / "bin")] + ARGS
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    torch.manual_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train", epoch=1)
    datasets = task.datasets["train"].datasets  # one LanguagePairDataset per direction, in --lang-pairs order
    d = task.source_dictionary
    rec = {"dict_size": len(d), "lang_tokens": {f"__{x}__": d.index(f"__{x}__") for x in ("de", "en", "fr")},
           "items": {pair: [[datasets[i][k]["source"].tolist(), datasets[i][k]["target"].tolist()] for k in range(4)]
                     for i, pair in enumerate(PAIRS.split(","))}}
    samples = []
    for b in range(BATCHES):
        items = []
        for n, (direction, k) in enumerate(picks_of(b)):
            item = dict(datasets[direction][k])
            item["id"] = n
            items.append(item)
        samples.append(datasets[0].collater(items))
    rec["batches"] = [{"picks": picks_of(b), "order": s["id"].clone(), "src_tokens": s["net_input"]["src_tokens"],
                       "prev_output_tokens": s["net_input"]["prev_output_tokens"], "target": s["target"]}
                      for b, s in enumerate(samples)]
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    rec["init"] = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(cfg, task, model, criterion)
    trainer.lr_step_update()
    steps = {"lr": [], "loss": [], "nll_loss": [], "sample_size": []}
    inner = task.train_step

    def recording_train_step(*a, **kw):
        loss, sample_size, log = inner(*a, **kw)
        steps["loss"].append(float(log["loss"]))
        steps["nll_loss"].append(float(log["nll_loss"]))
        steps["sample_size"].append(int(sample_size))
        return loss, sample_size, log

    task.train_step = recording_train_step
    for b, sample in enumerate(samples):
        steps["lr"].append(trainer.get_lr())
        trainer.train_step([sample])
        if b == 0:
            rec["after_first"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    rec["steps"] = steps
    task.train_step = inner
    torch.save(rec, out / "records.pt")
    for n in range(MORE_UPDATES):  # a model that translates something, for fairseq-generate's hypotheses
        items = [dict(datasets[d][k], id=i) for i, (d, k) in enumerate(
            (d, (12 * n + j) % 40) for d in range(3) for j in range(12))]
        trainer.train_step([datasets[0].collater(items)])
    trainer.consolidate_optimizer()  # what checkpoint_utils.save_checkpoint does first
    state = trainer.state_dict()
    del state["last_optimizer_state"]  # decoding needs none of it; the fixture stays small
    torch.save(state, out / "checkpoint.pt")
    versions = {"fairseq": fairseq.__version__, "torch": torch.__version__, "python": sys.version.split()[0]}
    (out / "fairseq_args.json").write_text(json.dumps({"argv": ARGS, **versions}, indent=1))
    print(f"multilingual: dictionary {len(d)} with {rec['lang_tokens']}; losses {steps['loss']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-raw", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path)
    args = ap.parse_args()
    if args.write_raw:
        write_raw(args.write_raw)
    if args.out:
        record(args.out)


if __name__ == "__main__":
    main()
