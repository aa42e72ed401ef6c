"""nmt-average-checkpoints: average the weights of the last N checkpoints (the paper: 5 for base, 20 for big).

\b
    nmt-average-checkpoints --inputs ck/ --num-update-checkpoints 5 --output ck/averaged.pt
    nmt-average-checkpoints --inputs ck/ --num-epoch-checkpoints 5 --output ck/averaged.pt
    nmt-average-checkpoints --inputs a.pt b.pt c.pt --output averaged.pt   (or a.pt,b.pt,c.pt)

Averaging is done in float64 and stored in the original dtype; the optimizer state is dropped and the
configuration kept, so the output is used directly by nmt-generate.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Optional

from nmt_toolkit.config import CommonConfig, Group, build_command, option
from nmt_toolkit.errors import DataError, UsageError

logger = logging.getLogger("nmt_toolkit.average")


@dataclass
class AverageConfig:
    inputs: list[str] = option([], "checkpoint files (repeat, or comma-separated), or one folder with "
                                   "--num-epoch-checkpoints / --num-update-checkpoints", multiple=True,
                               metavar="PATH")
    output: Optional[str] = option(None, "where to write the averaged checkpoint", metavar="FILE", output="file")
    num_epoch_checkpoints: int = option(0, "average the last N checkpoint<epoch>.pt of the --inputs folder", low=0)
    num_update_checkpoints: int = option(0, "average the last N checkpoint_<epoch>_<updates>.pt of the folder", low=0)
    checkpoint_upper_bound: Optional[int] = option(None, "ignore checkpoints after this epoch / update number", low=0)
    overwrite: bool = option(False, "replace --output if it is a checkpoint (never one of the inputs)")


def average(configs: dict) -> int:
    from nmt_toolkit.outputs import claim_file
    from nmt_toolkit.training.averaging import select_checkpoints, write_average
    from nmt_toolkit.checkpoints import is_checkpoint_file

    cfg: AverageConfig = configs["average"]
    if not cfg.output:
        raise UsageError("--output is required")
    inputs = [p for item in cfg.inputs for p in item.split(",") if p]
    if not inputs:
        raise UsageError("--inputs is required (checkpoint files or a folder)")
    if len(inputs) == 1 and os.path.isdir(inputs[0]):
        paths = select_checkpoints(inputs[0], cfg.num_epoch_checkpoints, cfg.num_update_checkpoints,
                                   cfg.checkpoint_upper_bound)
    else:
        if cfg.num_epoch_checkpoints or cfg.num_update_checkpoints:
            raise UsageError("--num-epoch-checkpoints / --num-update-checkpoints need a folder as --inputs")
        paths = inputs
    for path in paths:
        if _same_file(path, cfg.output):
            raise UsageError(f"--output {cfg.output}: is one of the inputs ({path}); averaging would replace it and "
                             "its optimizer state: write the average to another file")
    claim_file(cfg.output, cfg.overwrite, f"--output {cfg.output}", is_checkpoint_file, "a checkpoint")
    logger.info("averaging %d checkpoints: %s", len(paths), ", ".join(paths))
    try:
        write_average(paths, cfg.output)
    except OSError as exc:  # e.g. the disk filled up: the atomic save leaves an existing --output intact
        raise DataError(f"--output {cfg.output}: cannot write ({exc.strerror})") from None
    logger.info("wrote %s", cfg.output)
    print(cfg.output)
    return 0


def _same_file(a: str, b: str) -> bool:
    """Whether two spellings (relative, ``..``, a symbolic link) name one file."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def run(argv=None, prog: str = "nmt-average-checkpoints") -> int:
    from nmt_toolkit.cli.common import import_user_dir_of, run_cli, spread_values

    argv = spread_values(sys.argv[1:] if argv is None else argv, "--inputs")
    groups = [Group("common", CommonConfig), Group("average", AverageConfig, "averaging options")]

    def make(a):
        import_user_dir_of(a)
        return build_command(prog, groups, average, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
