"""A checkpoint's weights against the model its config builds: every tensor present with that model's name and
shape, every value a finite float. The loader checks what it reads (``loading.py``), the importers what they
converted before writing anything, so a file that decodes garbage never gets as far as a program's output."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from nmt_toolkit.errors import DataError
from nmt_toolkit.models import build_model_from_config_dict


def check_state_dict(path: str, config: dict, weights: dict, src_dict, tgt_dict) -> None:
    """What :func:`nmt_toolkit.loading.load_models` checks of a checkpoint's weights, for a checkpoint about to be written (the
    importers check what they converted before writing anything): the config builds a model (on the meta
    device: no memory, however large it says the model is), every tensor has that model's name and shape, and
    every value is a finite float. ``path`` names the source in the messages."""
    with torch.device("meta"):
        expected = build_model_from_config_dict(config, src_dict, tgt_dict, what=path).state_dict()
    check_shapes(path, expected, weights, config, src_dict, tgt_dict, ())
    check_values(path, expected, weights)


@dataclass
class ShapeDifferences:
    """How a file's tensors differ from a model's: ``differing`` lists, in the model's order, each tensor the
    file lacks (its shape there None) or holds with another shape, as ``(name, shape in the file, shape the
    model needs)``; ``unexpected`` the file's tensors the model does not have."""

    differing: list[tuple[str, Optional[tuple], tuple]]
    unexpected: list[str]

    def __bool__(self) -> bool:
        return bool(self.differing or self.unexpected)


def shape_differences(expected: dict, found: dict) -> ShapeDifferences:
    """The one comparison of a state dict with the model's (``expected``): loading a checkpoint to decode or
    export, and restoring one into a training run, read the same answer."""
    differing = [(key, tuple(found[key].shape) if key in found else None, tuple(tensor.shape))
                 for key, tensor in expected.items()
                 if key not in found or tuple(found[key].shape) != tuple(tensor.shape)]
    return ShapeDifferences(differing, [k for k in found if k not in expected])


def check_shapes(path: str, expected: dict, weights: dict, config: dict, src_dict, tgt_dict,
                 dict_files: Sequence[str]) -> None:
    """The file's tensors against the model its config builds; a vocabulary-sized difference is a wrong
    dictionary, any other an edited or mixed file."""
    differences = shape_differences(expected, weights)
    if differences.differing:
        key, got, want = differences.differing[0]
        if got is None:
            raise DataError(f"{path}: tensor {key!r} is missing from the checkpoint")
        differ = [w for g, w in zip(got, want) if g != w] if len(got) == len(want) else [None]
        if all(w in (len(src_dict), len(tgt_dict)) for w in differ):  # only vocabulary-sized dims differ
            files = " and ".join(dict_files) or "the data-bin dictionaries"
            raise DataError(
                f"{path}: wrong dictionary: tensor {key!r} has shape {got} but the model built from {files} "
                f"({len(src_dict)} source / {len(tgt_dict)} target symbols) needs {want}; decode with the "
                f"data-bin folder the model was trained on")
        raise DataError(f"{path}: tensor {key!r} has shape {got} but the configuration stored with it builds "
                        f"{want}: the file's weights and configuration disagree (edited or mixed by hand?)")
    if differences.unexpected:
        raise DataError(f"{path}: unexpected tensor {differences.unexpected[0]!r} for a "
                        f"{config['components']['model']} model")


def check_values(path: str, expected: dict, weights: dict) -> None:
    """A weight of the model that the file holds as integers or booleans (``load_state_dict`` would copy
    them in as numbers: garbage decoded with exit 0), or a NaN or infinite weight (a diverged run, a damaged
    file: decoding prints ``-inf`` hypotheses and exits 0), is an error at load."""
    for key, tensor in expected.items():
        if tensor.is_floating_point() and not weights[key].is_floating_point():
            raise DataError(f"{path}: tensor {key!r} is {str(weights[key].dtype).replace('torch.', '')}, not "
                            f"floating point: an edited or damaged file")
    check_finite(path, weights)


def check_finite(path: str, weights: dict) -> None:
    for key, tensor in weights.items():
        # a NaN or inf makes the sum NaN or inf, so a finite sum clears the tensor in one cheap pass (a sum
        # that overflows is checked element by element)
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor.sum())) \
                and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise DataError(f"{path}: tensor {key!r} holds {bad} non-finite values (NaN or inf) of "
                            f"{tensor.numel()}: the training diverged or the file is damaged; decode with an "
                            f"earlier checkpoint")
