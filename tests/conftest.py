"""Shared test fixtures: where the real corpora live, and deterministic torch settings."""
from __future__ import annotations

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def shared_data_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("NMT_TOOLKIT_TEST_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    """The real corpora of ../shared/data; missing data skips, or fails under NMT_TOOLKIT_REQUIRE_DATA=1."""
    path = shared_data_dir()
    if not (path / "multi30k").is_dir():
        if os.environ.get("NMT_TOOLKIT_REQUIRE_DATA") == "1":
            pytest.fail(f"real test data not found at {path} (set NMT_TOOLKIT_TEST_DATA)")
        pytest.skip(f"real test data not found at {path}")
    return path


@pytest.fixture(scope="session")
def data_path():
    """``data_path("ptb-sample/mrg")``: one file or folder of the real corpora, with the same skip/fail rule."""

    def find(relative: str) -> pathlib.Path:
        path = shared_data_dir() / relative
        if not path.exists():
            if os.environ.get("NMT_TOOLKIT_REQUIRE_DATA") == "1":
                pytest.fail(f"test data {path} is missing (NMT_TOOLKIT_REQUIRE_DATA=1)")
            pytest.skip(f"test data {path} not found; set NMT_TOOLKIT_TEST_DATA")
        return path

    return find


@pytest.fixture(autouse=True)
def _few_threads():
    """Tests run on 2-core CI machines: keep torch from oversubscribing."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(min(2, before))
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def trained_translation(tmp_path_factory):
    """Two small models that learned to upper-case sentences (tests/trained_model.py), trained once a session:
    ``.root`` (raw text), ``.data`` (data-bin), ``.first`` and ``.second`` (checkpoints of two seeds)."""
    from trained_model import train_models

    return train_models(tmp_path_factory.mktemp("trained"))


@pytest.fixture(scope="session")
def multi30k_learning_run(data_dir, tmp_path_factory):
    """tests/multi30k_tiny.py's run (the parity learning recipe on real Multi30k), trained once a session."""
    from multi30k_tiny import train_learning_run

    return train_learning_run(data_dir, tmp_path_factory.mktemp("learning"))


# --------------------------------------------------------------------------- the fast inner loop

def library_modules() -> list[str]:
    """Every module of the library and the programs, by the name it is imported under."""
    names = []
    for base, package in ((REPO / "nmt_toolkit", "nmt_toolkit"), (REPO / "cli", "nmt_toolkit.cli")):
        for path in sorted(base.rglob("*.py")):
            parts = [package, *path.relative_to(base).with_suffix("").parts]
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _is_the_whole_fast_loop(config) -> bool:
    """``pytest -m "not slow"`` over the whole suite (no paths, no -k): the run that must reach every module."""
    return (config.option.markexpr == "not slow" and not config.option.keyword
            and config.args_source == pytest.Config.ArgsSource.TESTPATHS)


#: modules whose code runs only on hardware this machine may lack, and why; on such a machine no test, fast or
#: slow, runs them (their tests are skipped), so the fast loop is not asked to import them
NEEDS_CUDA = {"nmt_toolkit.generation.cuda_graphs": "CUDA graphs are recorded and replayed on a GPU only"}


def _unreachable_here() -> set[str]:
    import torch

    return set() if torch.cuda.is_available() else set(NEEDS_CUDA)


def pytest_sessionfinish(session, exitstatus):
    """The fast loop leaves out the slow tests, not the modules: each module must be imported by a test it
    runs (in this process: a module only a subprocess imports is named here too, so that a fast test reaches
    it in-process). A module no fast test imports fails the run, naming it."""
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) or \
            not _is_the_whole_fast_loop(session.config):
        return
    import sys

    missing = [name for name in library_modules() if name not in sys.modules and name not in _unreachable_here()]
    if missing:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write_line(f"the fast loop imports no test of these modules: {', '.join(missing)}; keep a test "
                            f"that reaches each of them out of the slow ones", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def trained_ct2_export(trained_translation, tmp_path_factory):
    """The session's first small model exported by nmt-export --format ctranslate2 (float32): its folder."""
    pytest.importorskip("ctranslate2", reason="the [ct2] extra is not installed")
    from nmt_toolkit.cli.export import run as export

    folder = tmp_path_factory.mktemp("ct2-export") / "ct2"
    assert export([str(trained_translation.data), "--path", str(trained_translation.first), "--format", "ctranslate2",
                   "--output-dir", str(folder)]) == 0
    return folder
