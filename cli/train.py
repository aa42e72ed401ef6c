"""nmt-train: train a model on a data-bin/ folder (fairseq-train's flags), or ``--dry-run`` its summary.

The selected components (``--task --arch --criterion --optimizer --lr-scheduler``) are read first, so
their own options appear in ``--help`` and in ``--config`` YAML. ``--distributed-world-size N`` spawns
N local processes; under ``torchrun`` the rank layout comes from the environment.
"""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import click

from nmt_toolkit import registry
from nmt_toolkit.cli.common import load_plugins, run_cli
from nmt_toolkit.config import CommonConfig, Group, build_command, load_yaml, option, peek_options
from nmt_toolkit.data.corpora import CorpusSamplingConfig
from nmt_toolkit.errors import UsageError
from nmt_toolkit.training.options import (CheckpointConfig, DistributedConfig, LoggingConfig, OptimizationConfig,
                                          PrecisionConfig, check_together)
from nmt_toolkit.training.valid_bleu import EvalBleuConfig

SELECTORS = ["task", "arch", "criterion", "optimizer", "lr_scheduler", "user_dir"]
DEFAULTS = {"task": "translation", "arch": "transformer_base", "criterion": "label_smoothed_cross_entropy",
            "optimizer": "adam", "lr_scheduler": "inverse_sqrt"}


def _components_config(choices: dict[str, list[str]]) -> type:
    """The selector group; its choices list what is registered now (plugins included)."""

    @dataclass
    class ComponentsConfig:
        task: str = option(DEFAULTS["task"], "task (data + dictionaries)", choices=choices["task"])
        arch: str = option(DEFAULTS["arch"], "model architecture preset; explicit model flags override it",
                           choices=choices["arch"])
        criterion: str = option(DEFAULTS["criterion"], "training criterion", choices=choices["criterion"])
        optimizer: str = option(DEFAULTS["optimizer"], "optimizer", choices=choices["optimizer"])
        lr_scheduler: str = option(DEFAULTS["lr_scheduler"], "learning-rate schedule", choices=choices["lr_scheduler"])
        model: Optional[str] = option(None, "the registered model of --arch (derived)", cli=False)

    ComponentsConfig.__qualname__ = "ComponentsConfig"
    return ComponentsConfig


def _peek(argv: Sequence[str]) -> dict[str, str]:
    found = peek_options(argv, SELECTORS)
    cfg_path = peek_options(argv, ["config"])["config"]
    if cfg_path:  # a dumped config.yaml nests the selectors under "components"
        data = load_yaml(cfg_path) or {}
        nested = data.get("components") if isinstance(data, dict) else None
        if isinstance(nested, dict):
            for k in SELECTORS:
                if found.get(k) is None and nested.get(k) is not None:
                    found[k] = str(nested[k])
    return {k: (found.get(k) or DEFAULTS.get(k)) for k in SELECTORS}


def make_command(argv: Sequence[str], prog: str = "nmt-train") -> click.Command:
    load_plugins(argv)
    sel = _peek(argv)
    folder = _finetune_folder(argv, sel)
    task_entry = registry.TASKS.get(sel["task"])
    arch_entry = registry.ARCHITECTURES.get(sel["arch"])
    model_entry = registry.MODELS.get(arch_entry.parent)
    crit_entry = registry.CRITERIA.get(sel["criterion"])
    optim_entry = registry.OPTIMIZERS.get(sel["optimizer"])
    sched_entry = registry.LR_SCHEDULERS.get(sel["lr_scheduler"])
    components = _components_config({
        "task": registry.TASKS.names(), "arch": registry.ARCHITECTURES.names(),
        "criterion": registry.CRITERIA.names(), "optimizer": registry.OPTIMIZERS.names(),
        "lr_scheduler": registry.LR_SCHEDULERS.names()})
    groups = [Group("common", CommonConfig, "common options"), Group("components", components, "components")]
    if task_entry.config is not None:
        groups.append(Group("task", task_entry.config, f"task options ({sel['task']})"))
    groups.append(Group("model", model_entry.config, f"model options ({arch_entry.parent}, preset {sel['arch']})"))
    for name, entry in (("criterion", crit_entry), ("optimizer", optim_entry), ("lr_scheduler", sched_entry)):
        if entry.config is not None:
            groups.append(Group(name, entry.config, f"{name.replace('_', ' ')} options ({sel[name]})"))
    groups += [Group("optimization", OptimizationConfig), Group("corpora", CorpusSamplingConfig, "training corpora"),
               Group("eval_bleu", EvalBleuConfig, "validation BLEU"),
               Group("checkpoint", CheckpointConfig),
               Group("distributed", DistributedConfig), Group("precision", PrecisionConfig),
               Group("logging", LoggingConfig, "logging and dry-run options")]

    def preset(configs: dict[str, Any]) -> None:
        arch_entry.obj(configs["model"])
        if folder is not None:
            from nmt_toolkit.training.finetune import apply_folder_model

            configs["components"].arch = sel["arch"]  # the folder's, in place of the default
            apply_folder_model(configs["model"], folder)

    def run(configs: dict[str, Any]) -> int:
        comp = configs["components"]
        comp.model = registry.ARCHITECTURES.get(comp.arch).parent
        if comp.arch != sel["arch"] or comp.task != sel["task"]:
            raise UsageError("--arch/--task changed between option discovery and parsing; give them on the "
                             "command line")
        if folder is not None:
            from nmt_toolkit.training.finetune import check_model_options

            check_model_options(configs["model"], folder)
        return train_main(configs, list(argv))

    return build_command(prog, groups, run, help=__doc__.split("\n\n")[0], preset=preset)


def _finetune_folder(argv: Sequence[str], sel: dict[str, str]):
    """The model folder of ``--finetune-from-model`` (``None`` without it); its arch becomes ``sel["arch"]``."""
    from nmt_toolkit.errors import DataError
    from nmt_toolkit.model_folder import read_model_folder
    from nmt_toolkit.training.finetune import folder_arch

    path = peek_options(argv, ["finetune_from_model"])["finetune_from_model"]
    if not path:
        return None
    try:
        folder = read_model_folder(path)
    except DataError as exc:
        raise DataError(f"--finetune-from-model {exc}") from None
    sel["arch"] = folder_arch(folder, peek_options(argv, ["arch"])["arch"])
    return folder


def dry_run(configs: dict[str, Any]) -> int:
    from nmt_toolkit.models.summary import build_for_dry_run, model_summary

    comp, lg = configs["components"], configs["logging"]
    if lg.vocab_size:
        model = build_for_dry_run(comp.model, configs["model"], lg.vocab_size)
    else:
        task_cfg = configs.get("task")
        if task_cfg is None or not getattr(task_cfg, "data", None):
            raise UsageError("--dry-run needs a data folder or --vocab-size V")
        from nmt_toolkit.models import build_model
        import torch
        task = registry.TASKS.get(comp.task).obj.setup_task(task_cfg)
        with torch.device("meta"):
            model = build_model(comp.model, configs["model"], task.source_dictionary, task.target_dictionary)
    click.echo(f"arch {comp.arch} (model {comp.model})")
    click.echo(model_summary(model, configs["model"]))
    return 0


def train_main(configs: dict[str, Any], argv: list[str]) -> int:
    from nmt_toolkit.allocator import keep_freed_memory
    from nmt_toolkit.training import distributed
    from nmt_toolkit.training.components import uses_cuda
    from nmt_toolkit.training.train_loop import run_training

    if configs["logging"].dry_run:
        return dry_run(configs)
    task_cfg = configs.get("task")
    if task_cfg is not None and hasattr(task_cfg, "data") and not task_cfg.data:
        raise UsageError("missing the data folder (nmt-train DATA-BIN ...), or use --dry-run --vocab-size V")
    check_together(configs["optimization"], configs["checkpoint"], configs["eval_bleu"].eval_bleu)
    keep_freed_memory()  # every rank's process calls this (spawned ranks come back through here)
    info = distributed.env_info()
    world = configs["distributed"].distributed_world_size
    check_outputs(configs)
    with save_dir_lock(configs["checkpoint"], info):
        if info is None and world > 1:
            if uses_cuda(configs["optimization"]):
                distributed.check_local_gpus(world)  # before any process starts
            code = distributed.spawn(_spawned_worker, world, (argv,))
        else:
            code = run_training(configs, info)
    spawned = os.environ.get(LOCK_HELD_ENV) is not None  # a rank this program spawned: its parent writes it
    if code == 0 and configs["checkpoint"].save_model_folder and (info is None or info.is_master) and not spawned:
        save_model_folder(configs)
    return code


def check_outputs(configs: dict[str, Any]) -> None:
    """Every place the run will write, refused now if it must be (nothing is written yet): --save-dir,
    --tensorboard-logdir, --save-model-folder."""
    from nmt_toolkit.outputs import check_folder
    from nmt_toolkit.checkpoints import SAVE_DIR
    from nmt_toolkit.training.progress import TENSORBOARD_LOGS

    ck, logdir = configs["checkpoint"], configs["logging"].tensorboard_logdir
    if not ck.no_save:
        check_folder(ck.save_dir, SAVE_DIR, f"--save-dir {ck.save_dir}")
    if logdir:
        check_folder(logdir, TENSORBOARD_LOGS, f"--tensorboard-logdir {logdir}")
    model_folder_target(ck)


def model_folder_target(ck):
    """``--save-model-folder`` replaces a model folder (an earlier run's) but never another folder's files
    (None without the option)."""
    from nmt_toolkit.model_folder import MODEL_FOLDER
    from nmt_toolkit.outputs import FolderOutput

    out = ck.save_model_folder
    return FolderOutput(out, MODEL_FOLDER, True, f"--save-model-folder {out}") if out else None


def save_model_folder(configs: dict[str, Any]) -> None:
    """``--save-model-folder``: the run's checkpoint_best.pt (checkpoint_last.pt when no validation chose a
    best) with the data-bin's dictionaries and subword models, as a model folder."""
    import logging

    from nmt_toolkit.errors import DataError
    from nmt_toolkit.export.folder import export

    ck = configs["checkpoint"]
    names = [n for n in ("checkpoint_best.pt", "checkpoint_last.pt") if os.path.isfile(os.path.join(ck.save_dir, n))]
    if not names:
        raise DataError(f"--save-model-folder {ck.save_model_folder}: --save-dir {ck.save_dir} holds neither "
                        f"checkpoint_best.pt nor checkpoint_last.pt to write it from")
    checkpoint = os.path.join(ck.save_dir, names[0])
    task = registry.TASKS.get(configs["components"].task).obj.setup_task(configs["task"])
    export(checkpoint, task, model_folder_target(ck), made_by=f"nmt-train --save-model-folder ({names[0]})")
    logging.getLogger("nmt_toolkit.train").info("wrote the model folder %s from %s", ck.save_model_folder, checkpoint)


#: set by a run that holds its --save-dir lock for the ranks it spawns: "<pid>:<save dir>"
LOCK_HELD_ENV = "NMT_TRAIN_SAVE_DIR_LOCKED_BY"


@contextlib.contextmanager
def save_dir_lock(ck, info):
    """Hold ``--save-dir``'s lock for the whole run, so that a second nmt-train on it is refused.

    One run takes it once: a single process, the parent of the ranks it spawns (they see LOCK_HELD_ENV
    naming their parent and skip it), or rank 0 under torchrun (the only rank that writes)."""
    from nmt_toolkit import locking
    from nmt_toolkit.checkpoints import prepare_save_dir

    save_dir = os.path.abspath(ck.save_dir)
    inherited = os.environ.get(LOCK_HELD_ENV) == f"{os.getppid()}:{save_dir}"
    if ck.no_save or inherited or (info is not None and not info.is_master):
        yield
        return
    prepare_save_dir(ck.save_dir)
    with locking.exclusive(os.path.join(save_dir, ".nmt-train.lock"), f"--save-dir {ck.save_dir}", "nmt-train"):
        previous = os.environ.get(LOCK_HELD_ENV)
        os.environ[LOCK_HELD_ENV] = f"{os.getpid()}:{save_dir}"
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(LOCK_HELD_ENV, None)
            else:
                os.environ[LOCK_HELD_ENV] = previous


def _spawned_worker(argv: list[str]) -> int:
    return run(argv, prog="nmt-train")


def run(argv: Optional[Sequence[str]] = None, prog: str = "nmt-train") -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run_cli(prog, lambda a: make_command(a, prog), args)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
