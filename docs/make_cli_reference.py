"""Regenerate docs/cli.md from the programs' own ``--help`` (tests/test_docs.py fails when it is stale).

Usage: python docs/make_cli_reference.py [--check]
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

DOCS = pathlib.Path(__file__).resolve().parent
PROGRAMS = [  # (program, module, extra argv shown)
    ("nmt", "main", []),
    ("nmt-preprocess", "preprocess", []),
    ("nmt-train", "train", []),
    ("nmt-generate", "generate", []),
    ("nmt-interactive", "interactive", []),
    ("nmt-average-checkpoints", "average_checkpoints", []),
    ("nmt-score", "score", []),
    ("nmt-export", "export", []),
    ("nmt-convert", "convert", []),
    ("nmt-serve", "serve", []),
    ("nmt-translate-file", "translate_file", []),
]

HEADER = """# Command-line reference

Generated from each program's `--help` by `python docs/make_cli_reference.py`; do not edit by hand.
`nmt-train --help` shows the options of the selected components: add `--arch`, `--criterion`,
`--optimizer`, `--lr-scheduler` (and `--user-dir` for plugins) to see theirs. The pages below use the
defaults.
"""


def help_text(prog: str, module: str, extra: list[str]) -> str:
    code = (
        "import sys\n"
        f"from nmt_toolkit.cli import {module} as m\n"
        f"sys.argv = [{prog!r}] + {extra!r} + ['--help']\n"
        "sys.exit(m.run(sys.argv[1:], prog=%r) if hasattr(m, 'run') else m.main())\n" % prog
    )
    env = dict(os.environ, COLUMNS="100", TERM="dumb")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"{prog} --help failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return out.stdout.rstrip() + "\n"


def render() -> str:
    parts = [HEADER]
    for prog, module, extra in PROGRAMS:
        parts.append(f"\n## {prog}\n\n```text\n{help_text(prog, module, extra)}```\n")
    return "".join(parts)


def main() -> int:
    text = render()
    target = DOCS / "cli.md"
    if "--check" in sys.argv[1:]:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            print("docs/cli.md is stale: run python docs/make_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
