"""``nmt-train --dry-run``: the model's summary (parameters per component, FLOPs per token) without training.

The model is built on the meta device, so no weight memory is taken: with ``--vocab-size V`` from the options
alone, else with the dictionaries of the data folder (nothing else of it is read).
"""
from __future__ import annotations

from typing import Any

from nmt_toolkit.errors import UsageError


def dry_run_summary(configs: dict[str, Any]) -> str:
    """The lines nmt-train --dry-run prints: the architecture, then :func:`model_summary`'s table."""
    from nmt_toolkit import registry
    from nmt_toolkit.models.summary import build_for_dry_run, model_summary

    comp, lg = configs["components"], configs["logging"]
    if lg.vocab_size:
        model = build_for_dry_run(comp.model, configs["model"], lg.vocab_size)
    else:
        task_cfg = configs.get("task")
        if task_cfg is None or not getattr(task_cfg, "data", None):
            raise UsageError("--dry-run needs a data folder or --vocab-size V")
        import torch

        from nmt_toolkit.models import build_model
        task = registry.TASKS.get(comp.task).obj.setup_task(task_cfg)
        with torch.device("meta"):
            model = build_model(comp.model, configs["model"], task.source_dictionary, task.target_dictionary)
    return f"arch {comp.arch} (model {comp.model})\n{model_summary(model, configs['model'])}"
