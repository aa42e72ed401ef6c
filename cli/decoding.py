"""What nmt-generate, nmt-interactive and nmt-serve share: the device options, fairseq-generate's ``--task`` with
the selected task's options, and loading a Translator from them.

Process-wide settings (torch's thread count, its random seed) are made here, by the programs: the library
(:class:`~nmt_toolkit.generation.translator.Translator`) never changes them for its caller.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from nmt_toolkit.config import Group, option
from nmt_toolkit.errors import UsageError
from nmt_toolkit.model_folder import data_folder_of


@dataclass
class DecodeDeviceConfig:
    """Where and in which precision the models decode; shared by nmt-generate and nmt-interactive."""

    cpu: bool = option(False, "decode on the CPU even when a GPU is available")
    fp16: bool = option(False, "decode in float16 (GPU only)")
    bf16: bool = option(False, "decode in bfloat16 (GPU only; for models trained with --bf16)")
    engine: str = option("torch", "torch: our beam search; ctranslate2: CTranslate2 (the [ct2] extra) on a folder "
                                  "written by nmt-export, or on a --path checkpoint exported on the fly; see "
                                  "docs/deployment.md for the options it maps and those it lacks",
                         choices=("torch", "ctranslate2"))
    device: Optional[str] = option(None, "cpu or cuda [default: cuda when available, unless --cpu]",
                                   choices=("cpu", "cuda"))
    threads: Optional[int] = option(None, "intra-op threads (torch.set_num_threads / CTranslate2's intra_threads) "
                                          "[default: torch's count]", metavar="N", low=1)


@dataclass
class InputFormatConfig:
    """How nmt-generate --input and nmt-interactive read a line; shared by both."""

    format: str = option("text", "text: each line is plain text; html: each line is an HTML text (a fragment or a "
                                 "document) whose sentences are translated and whose markup is kept, inline tags "
                                 "put around the words their words became (by the alignment); H-/D- lines hold "
                                 "the rendered HTML and A- lines align words (docs/generation-and-scoring.md)",
                         choices=("text", "html"))


def refuse_with_html(io, gen, terminology) -> None:
    """What --format html needs and cannot be combined with, in one line, before any model is loaded: lxml
    and sentencex (the [serve] extra); no --constraints, --glossary or --keep, whose phrases are found in a
    line's plain text, which html reads as markup."""
    if io.format != "html":
        return
    if gen.constraints != "off" or terminology.glossary or terminology.keep or terminology.keep_defaults:
        raise UsageError("--format html takes no --constraints, --glossary or --keep (their phrases are found in "
                         "plain text lines); use --format text")
    try:
        import lxml.html  # noqa: F401
        import sentencex  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"--format html needs lxml and sentencex ({exc.name} is not installed): "
                         f"pip install 'nmt_toolkit[serve]'") from None


def choose_device(io: DecodeDeviceConfig):
    import torch

    if io.device == "cuda" and (io.cpu or not torch.cuda.is_available()):
        raise UsageError("--device cuda: " + ("--cpu says otherwise" if io.cpu else "no GPU is available"))
    if io.device is not None:
        return torch.device(io.device)
    if not io.cpu and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def task_groups(argv: Sequence[str]) -> list[Group]:
    """``--task`` and the options of the task it names (the translation task's data options by default), so
    that fairseq-generate's command line for a multilingual model, which repeats the training run's
    ``--task translation_multi_simple_epoch --lang-pairs … --encoder-langtok src --decoder-langtok``, is
    accepted; :func:`~nmt_toolkit.loading.model_task` checks them against the model's own."""
    from nmt_toolkit.config import peek_options
    from nmt_toolkit.registry import TASKS

    named = peek_options(argv, ["task"])["task"] or "translation"
    title = "data options" if named == "translation" else f"data and task options ({named})"
    return [Group("task", TASKS.get(named).config, title), Group("components", _task_choice(TASKS.names()), "task")]


def _task_choice(names: list[str]) -> type:
    """The ``--task`` option; its choices are the tasks registered now (plugins included)."""

    @dataclass
    class TaskChoice:
        task: Optional[str] = option(None, "the task the model was trained with (translation, "
                                           "translation_multi_simple_epoch or a plugin's), as fairseq-generate "
                                           "takes it [default: the model's own]; its options (--lang-pairs, "
                                           "--encoder-langtok, …) must agree with what the model records",
                                     choices=names)

    TaskChoice.__qualname__ = "TaskChoice"
    return TaskChoice


def load_translator(configs: dict, need_attn: bool, scores: bool = True, direction: str = "named",
                    replicas: int = 1):
    """The task and models of the parsed options as a Translator, after setting torch's thread count; the
    first model of --path is read once (:func:`~nmt_toolkit.loading.open_model`) and chooses the task
    (``direction``: see :func:`~nmt_toolkit.loading.model_task`). ``replicas``: CTranslate2 copies sharing
    the threads, one per caller decoding at once. The random seed is set last, right before decoding, so
    that --sampling draws a stream nothing else used."""
    import torch

    from nmt_toolkit.generation.translator import Engine, Translator
    from nmt_toolkit.loading import model_task, open_model

    gen, io, seed = configs["generation"], configs["io"], configs["common"].seed
    if not gen.path:
        raise UsageError("--path is required (a checkpoint, or several separated by ':')")
    if not configs["task"].data and data_folder_of(gen.path):  # the folder holds dictionaries and subword models
        configs["task"].data = data_folder_of(gen.path)
    opened = open_model(gen.path.split(":")[0])
    named = configs["components"].task if "components" in configs else None
    task = model_task(configs["task"], opened, direction, named)  # a multilingual model gets its own task
    device = choose_device(io)
    if io.threads is not None:
        torch.set_num_threads(io.threads)
    if io.fp16 and io.bf16 and io.engine == "torch":
        raise UsageError("--fp16 and --bf16 exclude each other")
    precision = "fp16" if io.fp16 else "bf16" if io.bf16 else None
    threads = io.threads or (decode_threads(io) if replicas > 1 else 0)
    engine = Engine(io.engine, device, precision, ct2_threads=threads, seed=seed, ct2_replicas=replicas)
    translator = Translator.from_task(task, gen, engine, need_attn=need_attn, scores=scores, opened=opened)
    torch.manual_seed(seed)
    return translator


def decode_threads(io: DecodeDeviceConfig) -> int:
    """The CPU threads a decode uses in all: --threads, else torch's count (the machine's cores)."""
    import torch

    return io.threads or torch.get_num_threads()


def h_bpe_symbol(io, task) -> Optional[str]:
    """The subword marker to remove from H- lines (--remove-bpe; 'auto': the data-bin's), or None."""
    if not io.remove_bpe:
        return None
    if io.remove_bpe == "auto":
        return task.bpe_symbol() or "@@ "
    return io.remove_bpe


def constrained_translator(translator, gen, terminology_cfg):
    """The translator and what constrains its input (--constraints, --glossary, --keep: an
    :class:`~nmt_toolkit.generation.terminology.InputConstraints`). The glossary's target terms are checked
    against the target dictionary now; phrases from the glossary and keep patterns alone are searched in any
    order."""
    from nmt_toolkit.generation.terminology import InputConstraints

    terms = InputConstraints.of(gen.constraints, terminology_cfg)
    if terms.active and translator.models is None:
        raise UsageError("--constraints, --glossary and --keep need a constrained search, which the CTranslate2 "
                         "engine has not; use --engine torch")
    translator.check_glossary(terms.glossary)
    if terms.active and translator.gen.constraints != terms.kind:
        translator = translator.with_options(constraints=terms.kind)
    return translator, terms
