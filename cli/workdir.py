"""The work folder of an example script: ``python3 -m nmt_toolkit.cli.workdir DIR --owner NAME --entries A,B``.

The example scripts (examples/*/run.sh, ci.sh) write everything under one folder the user may name. This makes
it theirs before anything is written, through ``nmt_toolkit/outputs.py``: a new or empty folder is marked as
the script's; a folder the same script marked before is reused, the --entries it writes removed first
(unless --keep); a non-empty folder of anyone else's, the working folder, one of its parents, the home folder
or a mount point is refused in one line. A script never removes a folder the user named.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from nmt_toolkit.config import Group, build_command, option


@dataclass
class WorkdirConfig:
    """Which folder, whose, and what the script writes in it."""

    workdir: str = option("", "the work folder", positional=True, metavar="DIR", output="folder")
    entries: list[str] = option([], "the names (or patterns: test.*) the script writes inside it, comma-separated "
                                    "(removed on a new run)",
                                metavar="NAMES")
    owner: str = option("an example script", "the script's name, recorded in the folder's marker")
    flag: str = option("--workdir", "how the script's user named the folder, for the messages")
    keep: bool = option(False, "keep what an earlier run of the same script left")


def claim(configs: dict) -> int:
    from nmt_toolkit.outputs import claim_workdir

    cfg: WorkdirConfig = configs["workdir"]
    claim_workdir(cfg.workdir, cfg.owner, cfg.entries, cfg.keep, f"{cfg.flag} {cfg.workdir}")
    return 0


def run(argv=None, prog: str = "") -> int:
    """Errors are printed under the script's name (``--owner``), as the script's own."""
    from nmt_toolkit.cli.common import run_cli
    from nmt_toolkit.config import peek_options

    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or peek_options(argv, ["owner"])["owner"] or "workdir"

    def make(args):
        return build_command(prog, [Group("workdir", WorkdirConfig)], claim, help=__doc__)

    return run_cli(prog, make, argv)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
