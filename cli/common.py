"""What every program shares: error mapping, plugin loading, one-line messages.

A user's mistake (:class:`~nmt_toolkit.errors.NmtError`, a click usage error) becomes one line on stderr
and an exit status (2 usage, 1 data); ``--debug`` adds the traceback. A closed stdout (``| head``) ends
the program quietly, as Unix tools do. What programs write goes through ``nmt_toolkit/outputs.py``.
"""
from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Callable, Optional, Sequence

import click

from nmt_toolkit.errors import NmtError


def setup_logging(debug: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
        force=True,
    )


def load_plugins(argv: Sequence[str]) -> None:
    """Import installed entry-point plugins and any ``--user-dir`` before options are built (the built-in
    components are imported by their registries, each when first asked)."""
    from nmt_toolkit import registry

    registry.load_entry_point_plugins()
    import_user_dir_of(argv)


def import_user_dir_of(argv: Sequence[str]) -> None:
    """Import the ``--user-dir`` of ``argv`` (or of its ``--config`` YAML), if any.

    Programs that use no registered component (nmt-preprocess, nmt-score, nmt-average-checkpoints) call
    only this: they accept the option like every program, so it must do what it says — a plugin that
    does not import is an error there too, never silently ignored."""
    from nmt_toolkit.config import peek_options
    from nmt_toolkit.registry import import_user_dir

    user_dir = peek_options(argv, ["user_dir"])["user_dir"]
    if user_dir:
        import_user_dir(user_dir)


def spread_values(args: Sequence[str], flag: str) -> list[str]:
    """``--flag a b c`` (argparse's nargs='+', as fairseq's scripts take it) → ``--flag a --flag b --flag c``.

    click options take one value each; this keeps the fairseq spelling working for repeatable options.
    Values run until the next token that starts with ``-``."""
    out: list[str] = []
    in_flag = has_value = False
    for token in args:
        if token.startswith("-"):
            in_flag, has_value = token == flag, False
        elif in_flag:
            if has_value:
                out.append(flag)
            has_value = True
        out.append(token)
    return out


def run_cli(prog: str, make_command: Callable[[list[str]], click.Command], argv: Optional[Sequence[str]] = None) -> int:
    """Build the program's command for ``argv`` and run it, turning user errors into one line."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("NMT_DEBUG") == "1"
    setup_logging(debug)
    try:
        command = make_command(args)
        result = command.main(args=args, prog_name=prog, standalone_mode=False)
        if isinstance(result, int):
            return result
        return 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help(), err=True)
        return 2
    except click.ClickException as exc:
        if debug:
            traceback.print_exc()
        message = " ".join(exc.format_message().split())
        print(f"{prog}: error: {message} (see {prog} --help)", file=sys.stderr)
        return exc.exit_code if exc.exit_code else 2
    except click.exceptions.Abort:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except NmtError as exc:
        if debug:
            traceback.print_exc()
        message = " ".join(str(exc).split())
        print(f"{prog}: error: {message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly, as Unix tools do
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 0
