"""Run with fairseq 0.12.3's Python: a translation_multi_simple_epoch checkpoint's validation nll (base 2, per
target token, as fairseq logs nll_loss) on each direction of a data-bin's valid split, computed by fairseq's
own task, model and criterion in evaluation mode. fairseq-train logs only the loss over all directions
together; multilingual_parity.sh needs it per direction.

Usage: python fairseq_direction_nll.py DATA_BIN CHECKPOINT   (prints one JSON object: {"en-de": nll, ...})
"""
import json
import math
import sys

import torch
from fairseq import checkpoint_utils, utils


def main(data: str, path: str) -> None:
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    model = models[0].eval()
    criterion = task.build_criterion(cfg.criterion)
    criterion.eval()
    task.load_dataset("valid", epoch=1)
    out = {}
    for pair, dataset in zip(cfg.task.lang_pairs, task.datasets["valid"].datasets):
        batches = task.get_batch_iterator(dataset, max_tokens=4096, max_positions=utils.resolve_max_positions(
            task.max_positions(), model.max_positions()), seed=1, num_workers=0).next_epoch_itr(shuffle=False)
        nll, tokens = 0.0, 0
        with torch.no_grad():
            for sample in batches:
                _, _, log = criterion(model, sample)
                nll += float(log["nll_loss"])
                tokens += int(log["ntokens"])
        out[pair] = nll / tokens / math.log(2)
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:3])
