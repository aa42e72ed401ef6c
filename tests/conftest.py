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
