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


def _require_cpu_kernels():
    """The built C kernels of modules/cpu_kernels.py: required where a C compiler exists (a broken build fails
    instead of quietly testing the fallback), skipped where none does."""
    import shutil

    from nmt_toolkit.modules import cpu_kernels

    lib = cpu_kernels.library()
    if lib is None:
        if shutil.which(os.environ.get("CC", "cc")) and os.environ.get(cpu_kernels.ENV, "1") != "0":
            pytest.fail("a C compiler is here but the decoding kernels did not build (see the debug log of "
                        "nmt_toolkit.cpu_kernels)")
        pytest.skip("no C compiler: the decoding kernels are not built here")
    return lib


@pytest.fixture
def cpu_kernels_lib():
    return _require_cpu_kernels()


@pytest.fixture(params=["c-kernels", "c-kernels-2-threads", "torch"])
def decode_kernels(request, monkeypatch):
    """Runs a decoding test three ways: with the C kernels of modules/cpu_kernels.py on one thread, with them
    sharing two OpenMP threads (where the build has OpenMP), and with torch's code path."""
    from nmt_toolkit.modules import cpu_kernels

    if request.param == "torch":
        monkeypatch.setattr(cpu_kernels, "_library", None)
        monkeypatch.setattr(cpu_kernels, "_tried", True)
    else:
        lib = _require_cpu_kernels()
        import torch

        threads = 2 if request.param.endswith("2-threads") else 1
        if threads > 1 and not lib.nmt_openmp():
            pytest.skip("the decoding kernels were built without OpenMP: one thread only")
        torch.set_num_threads(threads)  # restored by _few_threads
    return request.param
