"""nmt-score: sacreBLEU BLEU and chrF (the ``sacrebleu`` command's numbers), the paper's tokenized BLEU,
paired bootstrap significance, PARSEVAL F1.

\b
    nmt-score --sys hyp.txt --ref ref.txt                   # BLEU + chrF with signatures
    nmt-score --sys hyp.txt --ref ref.txt --tokenized-bleu --compound-split   # the paper's way
    nmt-score --sys base.txt --sys new.txt --ref ref.txt --paired-bootstrap
    nmt-generate … | grep ^D | cut -f3- | nmt-score --sys - --ref ref.txt
    nmt-score --metric parseval --sys parsed.txt --ref gold.mrg [--evalb-params COLLINS.prm]
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Optional

from nmt_toolkit.config import CommonConfig, Group, build_command, option
from nmt_toolkit.errors import UsageError


@dataclass
class ScoreConfig:
    sys: list[str] = option([], "system output file (repeat for several systems; '-' reads stdin)",
                            multiple=True, metavar="FILE")
    ref: list[str] = option([], "reference file (repeat for several references)", multiple=True, metavar="FILE")
    metric: list[str] = option([], "bleu, chrf or parseval (repeatable) [default: bleu and chrf]", multiple=True,
                               choices=("bleu", "chrf", "parseval"))
    tokenized_bleu: bool = option(False, "BLEU on Moses-tokenized text, as multi-bleu.perl (the paper's numbers)")
    compound_split: bool = option(False, "with --tokenized-bleu: split compounds as rich ##AT##-##AT## text")
    lang: str = option("de", "language of the outputs for the Moses tokenizer of --tokenized-bleu")
    paired_bootstrap: bool = option(False, "paired bootstrap resampling: the first --sys is the baseline")
    bootstrap_samples: int = option(1000, "resamples for --paired-bootstrap", low=1)
    evalb_params: Optional[str] = option(None, "EVALB parameter file (COLLINS.prm) for --metric parseval",
                                         metavar="FILE")
    width: int = option(1, "decimals of the printed scores (sacrebleu's --width; its default is 1)", low=0, high=16)
    score_only: bool = option(False, "print only the score numbers (sacrebleu's -b)")
    json: bool = option(False, "print results as JSON (one object per metric, in a list)")


def _parseval(cfg: ScoreConfig, refs_paths: list[str]) -> int:
    from nmt_toolkit.scoring import parseval

    if len(refs_paths) != 1 or len(cfg.sys) != 1:
        raise UsageError("--metric parseval takes one --sys and one --ref (gold trees)")
    params = parseval.load_params(cfg.evalb_params) if cfg.evalb_params else None
    gold = parseval.read_trees(refs_paths[0])
    test = parseval.read_trees(sys.stdin if cfg.sys[0] == "-" else cfg.sys[0])
    kwargs = {"params": params} if params is not None else {}
    result = parseval.evaluate(gold, test, **kwargs)
    if cfg.json:
        print(json.dumps({"name": "PARSEVAL", "f1": result.f1}))
    else:
        print(result.summary_text())
    return 0


def _metrics(cfg: ScoreConfig) -> list[str]:
    """The checked --sys/--ref/--metric choices: the metrics to compute, in the order given."""
    if not cfg.sys:
        raise UsageError("--sys is required (a file, or - for stdin)")
    if not cfg.ref:
        raise UsageError("--ref is required")
    if sum(1 for s in cfg.sys if s == "-") > 1:
        raise UsageError("--sys - (stdin) can be given only once")
    metrics = list(dict.fromkeys(cfg.metric)) or ["bleu", "chrf"]
    if "parseval" in metrics and len(metrics) > 1:
        raise UsageError("--metric parseval cannot be combined with bleu/chrf")
    return metrics


def score(configs: dict) -> int:
    cfg: ScoreConfig = configs["score"]
    metrics = _metrics(cfg)
    if metrics == ["parseval"]:
        return _parseval(cfg, cfg.ref)

    from nmt_toolkit.data.lines import read_lines
    from nmt_toolkit.scoring import bleu as B

    refs = [read_lines(p) for p in cfg.ref]
    systems = [(("stdin" if p == "-" else p), read_lines(p)) for p in cfg.sys]
    B.check_lengths([(p, r) for p, r in zip(cfg.ref, refs)] + systems)
    if cfg.paired_bootstrap:
        return _paired_bootstrap(cfg, systems, refs, metrics)
    return _score_systems(cfg, systems, refs, metrics)


def _paired_bootstrap(cfg: ScoreConfig, systems: list, refs: list, metrics: list[str]) -> int:
    """Each system against the first (the baseline), sacreBLEU's paired bootstrap resampling."""
    from nmt_toolkit.scoring import bleu as B

    if len(systems) < 2:
        raise UsageError("--paired-bootstrap needs at least two --sys files (the first is the baseline)")
    sigs, table = B.paired_bootstrap(systems, refs, metrics, cfg.bootstrap_samples)
    names = table.pop("System")
    out = []
    for metric, results in table.items():
        for i, (name, res) in enumerate(zip(names, results)):
            row = {"name": metric, "system": name, "baseline": i == 0, "score": round(res.score, cfg.width),
                   "mean": res.mean, "ci": res.ci, "p_value": res.p_value, "signature": sigs[metric]}
            out.append(row)
            if not cfg.json:
                tag = "Baseline" if i == 0 else "System"
                p = "" if res.p_value is None else f" (p = {res.p_value:.4f}){' *' if res.p_value < 0.05 else ''}"
                ci = f" ({res.mean:.2f} ± {res.ci:.2f})" if res.mean is not None else ""
                print(f"{metric}|{sigs[metric]} {tag} {name}: {res.score:.{cfg.width}f}{ci}{p}")
    if cfg.json:
        print(json.dumps(out, indent=1))
    return 0


def _score_systems(cfg: ScoreConfig, systems: list, refs: list, metrics: list[str]) -> int:
    """Each system's scores: one system exactly as the sacrebleu command prints them, several prefixed by name."""
    from nmt_toolkit.scoring import bleu as B

    out = []
    for name, hyps in systems:
        prefix = f"{name}: " if len(systems) > 1 and not cfg.json else ""
        if cfg.tokenized_bleu:
            out.append(_tokenized_bleu(cfg, name, hyps, refs, prefix))
            continue
        results = [res.format(cfg.width, cfg.score_only, sig, is_json=cfg.json)
                   for res, sig in B.corpus_scores(hyps, refs, metrics)]
        if len(systems) == 1:  # exactly the sacrebleu command's output (aligned on '=', or its JSON)
            from argparse import Namespace

            from sacrebleu.utils import print_single_results

            print_single_results(results, Namespace(format="json" if cfg.json else "text"))
            return 0
        if cfg.json:
            for text in results:
                item = json.loads(text)
                item["system"] = name
                out.append(item)
        else:
            for text in results:
                print(prefix + text)
    if cfg.json:
        print(json.dumps(out[0] if len(out) == 1 else out, indent=1, ensure_ascii=False))
    return 0


def _tokenized_bleu(cfg: ScoreConfig, name: str, hyps: list, refs: list, prefix: str) -> dict:
    """BLEU on tokenized text (the papers' multi-bleu.perl figure), printed unless --json; its JSON record."""
    from nmt_toolkit.scoring import bleu as B

    res = B.tokenized_bleu(hyps, refs, cfg.lang, cfg.compound_split)
    what = f"tokenized BLEU{' (compound split)' if cfg.compound_split else ''}"
    if cfg.score_only and not cfg.json:
        print(f"{res.score:.{cfg.width}f}")
    elif not cfg.json:
        print(f"{prefix}{what}: {res.format(cfg.width)}")
    return {"name": "BLEU", "system": name, "score": round(res.score, cfg.width), "tokenized": True,
            "compound_split": cfg.compound_split, "verbose_score": str(res).partition(" = ")[2]}


def run(argv=None, prog: str = "nmt-score") -> int:
    from nmt_toolkit.cli.common import import_user_dir_of, run_cli

    def make(a):
        import_user_dir_of(a)
        return build_command(prog, [Group("common", CommonConfig), Group("score", ScoreConfig, "scoring options")],
                             score, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
