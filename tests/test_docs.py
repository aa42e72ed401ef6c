"""The documentation stays true: the CLI reference matches the programs' --help, links resolve."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_cli_reference_is_current():
    result = subprocess.run([sys.executable, str(REPO / "docs" / "make_cli_reference.py"), "--check"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr


def test_readme_links_into_docs_and_every_link_resolves():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    docs_linked = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    expected = {"docs/getting-started.md", "docs/cli.md", "docs/architecture.md", "docs/file-formats.md",
                "docs/training.md", "docs/generation-and-scoring.md", "docs/plugins.md",
                "docs/reproducing-the-paper.md", "docs/troubleshooting.md"}
    assert expected <= docs_linked
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_readme_has_exactly_the_two_setup_commands():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.+?)\n```", setup, flags=re.S)
    assert len(commands) == 2
    assert "examples/quickstart/run.sh" in commands[0]
    assert "pytest" in commands[1]
    extras = re.search(r'pip install -e "(\.\[[^"]+\])"', commands[1]).group(1)
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "pytest" in ci and f'pip install -q -e "{extras}"' in ci, "CI installs other extras than the README"
