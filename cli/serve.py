"""nmt-serve: translate over HTTP, with dynamic batching, LibreTranslate's API and a web page.

\b
    nmt-serve data-bin/m30k --path ck/averaged.pt --cpu --threads 2           # http://127.0.0.1:8000/
    nmt-serve data-bin/m30k --path exported-ct2/ --engine ctranslate2 --port 5000
    nmt-serve --path m30k-model                                   # a model folder needs no data-bin
    nmt-serve --path en-de-model --also en-fr-model               # several pairs, one model folder each
    nmt-serve data-bin/multi --path ck/multi.pt                   # a multilingual model: every direction
    curl -s localhost:8000/translate -H 'Content-Type: application/json' \\
         -d '{"q": "A dog runs on the beach.", "source": "en", "target": "de"}'

The model loads as nmt-generate loads it (a checkpoint with its data-bin, an ensemble a.pt:b.pt, a model
folder, or an nmt-export CTranslate2 folder with --engine ctranslate2); a multilingual model serves every
direction between its languages (no --source-lang/--target-lang needed), each request naming source and
target. Its generation options are the server's defaults, which /v1/translate requests may override. Requests that arrive together are decoded in one batch (up to
--max-batch-tokens, waiting at most --max-wait-ms). The server listens on 127.0.0.1 unless --host says
otherwise, and on SIGTERM answers the requests in flight, then exits 0. See docs/serving.md.
"""
from __future__ import annotations

import logging
import os
import sys

from nmt_toolkit.cli.decoding import DecodeDeviceConfig, load_translator
from nmt_toolkit.config import CommonConfig, Group, build_command
from nmt_toolkit.documents import DocumentConfig
from nmt_toolkit.generation.config import GenerationConfig
from nmt_toolkit.generation.terminology import TerminologyConfig
from nmt_toolkit.serving.config import ServeConfig

logger = logging.getLogger("nmt_toolkit.serve")


def serve_command(configs: dict) -> int:
    import dataclasses

    from nmt_toolkit.errors import UsageError
    from nmt_toolkit.generation.terminology import load_terminology
    from nmt_toolkit.serving.config import read_api_keys
    from nmt_toolkit.serving.server import bind, build_service, serve

    gen: GenerationConfig = configs["generation"]
    cfg: ServeConfig = configs["serve"]
    cfg.validate()
    if gen.score_reference or gen.prefix_size:
        raise UsageError("--score-reference and --prefix-size need references; nmt-serve translates raw text")
    if gen.constraints != "off":
        raise UsageError("--constraints: a request's text carries no TAB-separated phrases; its phrases come from "
                         "--glossary, --keep or the request's own glossary (/v1/translate)")
    glossary, keep = load_terminology(configs["terminology"])
    keys = read_api_keys(cfg.api_keys) if cfg.api_keys else None
    suggestions = _suggestion_store(cfg.suggestions)
    sock = bind(cfg.host, cfg.port)  # a taken port is an error now, not after the model loaded
    try:
        cfg = dataclasses.replace(cfg, decode_workers=_decode_workers(configs))
        models = _load_models({**configs, "serve": cfg})
        for model in models:
            if (glossary is not None or keep is not None) and model.translator.models is None:
                raise UsageError("--glossary and --keep need a constrained search, which the CTranslate2 engine "
                                 "has not; use --engine torch")
            model.translator.check_glossary(glossary)
        translator = models[0].translator
        service, metrics = build_service(models, cfg, keys, _thread_setup(cfg, translator), glossary, keep,
                                         suggestions, configs["documents"])
        serve(service, metrics, sock)
    finally:
        sock.close()
    return 0


def _suggestion_store(path):
    """The database /suggest appends to (None without --suggestions), opened and checked before the port and
    the model: a folder, a file that is not an SQLite database or a place that cannot be written is one
    error line now, not a 500 at the first suggestion. An existing database keeps its rows."""
    if not path:
        return None
    from nmt_toolkit.data.suggestions import SuggestionStore
    from nmt_toolkit.outputs import check_writable_place

    check_writable_place(os.path.realpath(path), f"--suggestions {path}")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    return SuggestionStore(path)


def _load_models(configs: dict) -> list:
    """The model of --path (with DATA), then each --also model folder: a bilingual model serves its pair, a
    multilingual one every direction between its languages (one translator, the weights loaded once)."""
    import dataclasses

    from nmt_toolkit.errors import UsageError

    models = [_served(configs)]
    for folder in configs["serve"].also:
        task = dataclasses.replace(configs["task"], data=None, source_lang=None, target_lang=None)
        gen = dataclasses.replace(configs["generation"], path=folder)
        model = _served({**configs, "task": task, "generation": gen})
        twice = [f"{s}-{t}" for s, t in model.pairs() if any(m.serves(s, t) for m in models)]
        if twice:
            raise UsageError(f"--also {folder}: {', '.join(twice[:3])} is served already (one model per pair)")
        models.append(model)
    return models


def _served(configs: dict):
    """The loaded model of ``configs`` as what the server serves (a ServedModel or a MultilingualModel); a
    multilingual model named without a direction loads with its first trained one (it serves every one)."""
    from nmt_toolkit.serving.models import MultilingualModel, ServedModel

    replicas = configs["serve"].decode_workers if configs["device"].engine == "ctranslate2" else 1
    translator = load_translator({**configs, "io": configs["device"]}, need_attn=False, direction="any",
                                 replicas=replicas)
    if translator.task.multilingual:
        return MultilingualModel(translator)
    return ServedModel(translator.task.cfg.source_lang, translator.task.cfg.target_lang, translator)


def _decode_workers(configs: dict) -> int:
    """How many batches the server decodes at once: --decode-workers, else on the CPU one per thread (at most
    4; a batch split over several threads waits at each step for the slowest, and stalls whenever another
    process takes a core), each on its share of the threads (CTranslate2: a replica of its own); on a GPU
    and with --sampling (one seeded random stream), one."""
    from nmt_toolkit.cli.decoding import choose_device, decode_threads
    from nmt_toolkit.generation.parallel import AUTO_MAX_WORKERS, auto_workers

    cfg, io, gen = configs["serve"], configs["device"], configs["generation"]
    serial = choose_device(io).type != "cpu" or gen.sampling
    if cfg.decode_workers is None:
        return 1 if serial else auto_workers(AUTO_MAX_WORKERS, decode_threads(io))
    if cfg.decode_workers > 1 and serial:
        logger.warning("--decode-workers %d ignored: %s decodes one batch at a time", cfg.decode_workers,
                       "--sampling" if gen.sampling else "a GPU")
        return 1
    return cfg.decode_workers


def _thread_setup(cfg: ServeConfig, translator):
    """What each decode thread runs first: its share of torch's intra-op threads (CPU, several workers)."""
    import torch

    if cfg.decode_workers <= 1 or translator.engine.name != "torch":
        return None
    per_worker = max(1, torch.get_num_threads() // cfg.decode_workers)
    return lambda: torch.set_num_threads(per_worker)


def groups():
    from nmt_toolkit.registry import TASKS

    return [Group("common", CommonConfig), Group("task", TASKS.get("translation").config, "data options"),
            Group("generation", GenerationConfig, "generation options (the server's defaults)"),
            Group("terminology", TerminologyConfig, "terminology options (the served glossary and keep patterns)"),
            Group("device", DecodeDeviceConfig, "device options"), Group("serve", ServeConfig, "server options"),
            Group("documents", DocumentConfig, "document limits (/translate_file)")]


def run(argv=None, prog: str = "nmt-serve") -> int:
    from nmt_toolkit.cli.common import load_plugins, run_cli

    def make(args):
        load_plugins(args)
        return build_command(prog, groups(), serve_command, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
