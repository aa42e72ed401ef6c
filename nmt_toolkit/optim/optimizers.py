"""Adam (the paper: β1=0.9, β2=0.98, ε=1e-9) on torch.optim, fused kernels where the build has them."""
from __future__ import annotations

import ast
from dataclasses import dataclass

import torch

from nmt_toolkit.config import option
from nmt_toolkit.errors import UsageError
from nmt_toolkit.registry import register_optimizer


def parse_betas(text) -> tuple[float, float]:
    """``0.9,0.98``, ``(0.9, 0.98)`` (fairseq's spelling) or a sequence → a pair of floats."""
    if isinstance(text, (list, tuple)):
        values = list(text)
    else:
        raw = str(text).strip()
        try:
            values = list(ast.literal_eval(raw if raw.startswith(("(", "[")) else f"({raw},)"))
        except (ValueError, SyntaxError):
            values = None
    if not values or len(values) != 2:
        raise UsageError(f"--adam-betas {text!r}: expected two numbers such as 0.9,0.98")
    b1, b2 = (float(v) for v in values)
    if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
        raise UsageError(f"--adam-betas {text!r}: each beta must lie in [0, 1)")
    return b1, b2


@dataclass
class AdamConfig:
    adam_betas: str = option("0.9,0.98", "Adam β1,β2 (the paper: 0.9,0.98; fairseq's '(0.9, 0.98)' also works)")
    adam_eps: float = option(1e-9, "Adam ε (the paper: 1e-9)", low=0, low_open=True)
    weight_decay: float = option(0.0, "decoupled weight decay (AdamW); 0 = plain Adam", low=0)
    adam_impl: str = option("auto", "kernel: fused (one kernel for all tensors), foreach, or plain loop; "
                            "auto = fused when the build supports it", choices=["auto", "fused", "foreach", "loop"])

    def validate(self) -> None:
        parse_betas(self.adam_betas)


def _kernel_kwargs(impl: str, params: list) -> dict:
    if impl == "loop":
        return {"foreach": False}
    if impl == "foreach":
        return {"foreach": True}
    devices = {p.device.type for p in params}
    fused_ok = all(d in ("cuda", "cpu", "mps", "xpu") for d in devices) and all(
        p.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64) for p in params)
    if impl == "fused" or fused_ok:
        return {"fused": True}
    return {"foreach": True}


@register_optimizer("adam", AdamConfig)
def build_adam(cfg: AdamConfig | None, params, lr: float) -> torch.optim.Optimizer:
    cfg = cfg or AdamConfig()
    params = [p for p in params if p.requires_grad]
    cls = torch.optim.AdamW if cfg.weight_decay > 0 else torch.optim.Adam
    kwargs = dict(lr=lr, betas=parse_betas(cfg.adam_betas), eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
    try:
        return cls(params, **kwargs, **_kernel_kwargs(cfg.adam_impl, params))
    except (RuntimeError, TypeError) as exc:
        if cfg.adam_impl == "fused":
            raise UsageError(f"--adam-impl fused: not supported here ({exc})") from None
        return cls(params, **kwargs, foreach=True)


@dataclass
class SGDConfig:
    momentum: float = option(0.0, "SGD momentum", low=0, high=1, high_open=True)


@register_optimizer("sgd", SGDConfig)
def build_sgd(cfg: SGDConfig | None, params, lr: float) -> torch.optim.Optimizer:
    cfg = cfg or SGDConfig()
    return torch.optim.SGD([p for p in params if p.requires_grad], lr=lr, momentum=cfg.momentum)
