"""nmt-train: train a model on a data-bin/ folder (fairseq-train's flags), or ``--dry-run`` its summary.

The selected components (``--task --arch --criterion --optimizer --lr-scheduler``) are read first, so
their own options appear in ``--help`` and in ``--config`` YAML. ``--distributed-world-size N`` spawns
N local processes, each of which runs this program again with the same arguments (one path for them and for
torchrun's ranks: :mod:`nmt_toolkit.training.launch`); under ``torchrun`` the rank layout comes from the
environment.
"""
from __future__ import annotations

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
                                          PrecisionConfig)
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


def train_main(configs: dict[str, Any], argv: list[str]) -> int:
    from nmt_toolkit.allocator import keep_freed_memory
    from nmt_toolkit.training.launch import check_run, launch

    if configs["logging"].dry_run:
        from nmt_toolkit.training.dry_run import dry_run_summary

        click.echo(dry_run_summary(configs))
        return 0
    check_run(configs)
    keep_freed_memory()  # every rank's process calls this (spawned ranks come back through here)
    return launch(configs, _spawned_worker, (argv,))


def _spawned_worker(argv: list[str]) -> int:
    return run(argv, prog="nmt-train")


def run(argv: Optional[Sequence[str]] = None, prog: str = "nmt-train") -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run_cli(prog, lambda a: make_command(a, prog), args)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
