"""nmt-serve's options and start-up refusals: every number has a range and a value outside it is one error line
with status 2; an unreadable or empty key file and a taken port are one line each, before any model loads."""
from __future__ import annotations

import dataclasses
import socket
from typing import Optional

import pytest

pytest.importorskip("fastapi", reason="nmt-serve needs the [serve] extra (pip install -e '.[serve]')")

from nmt_toolkit import config  # noqa: E402
from nmt_toolkit.serving.config import ServeConfig  # noqa: E402

NUMBERS = [f for f in dataclasses.fields(ServeConfig)
           if config._resolved_hints(ServeConfig)[f.name] in (int, float, Optional[int], Optional[float])]


def _run(capsys, *args) -> tuple[int, list[str]]:
    from nmt_toolkit.cli.serve import run

    capsys.readouterr()
    status = run([str(a) for a in args])
    return status, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize("field", NUMBERS, ids=lambda f: f.name)
def test_every_number_has_a_range_and_refuses_a_value_outside_it(field, capsys, tmp_path):
    bounds = config._field_range(field)
    assert bounds.low is not None and bounds.high is not None, f"--{field.name} needs low= and high="
    outside = bounds.high + 1 if config._resolved_hints(ServeConfig)[field.name] in (int, Optional[int]) \
        else bounds.high * 2
    status, lines = _run(capsys, tmp_path, "--path", tmp_path / "ck.pt", config.flag_name(field), outside)
    assert status == 2
    assert len(lines) == 1 and lines[0].startswith("nmt-serve: error:") and config.flag_name(field) in lines[0]


def test_a_bad_key_file_is_one_line_before_loading(capsys, tmp_path):
    empty = tmp_path / "keys"
    empty.write_text("# nothing but a comment\n\n")
    for path, words in ((empty, "no key in it"), (tmp_path / "missing", "cannot read it")):
        status, lines = _run(capsys, tmp_path, "--path", tmp_path / "absent.pt", "--api-keys", path)
        assert status == 1 and len(lines) == 1 and f"--api-keys {path}: {words}" in lines[0]


@pytest.mark.parametrize("flag, low", [("--req-limit", 0), ("--batch-limit", 0), ("--cache-size", 0)])
def test_the_limit_and_cache_flags_refuse_a_negative_number(flag, low, capsys, tmp_path):
    """0 is their "off"; below it is one error line naming the flag and its range."""
    bounds = config._field_range(next(f for f in dataclasses.fields(ServeConfig) if config.flag_name(f) == flag))
    assert bounds.low == low and bounds.high is not None
    status, lines = _run(capsys, tmp_path, "--path", tmp_path / "ck.pt", flag, low - 1)
    assert status == 2 and len(lines) == 1 and lines[0].startswith("nmt-serve: error:") and flag in lines[0]


def test_the_key_file_takes_an_optional_requests_per_minute(tmp_path):
    from nmt_toolkit.serving.config import read_api_keys

    keys = tmp_path / "keys"
    keys.write_text("# key [requests per minute]\nalpha 2\n  beta\t60  \ngamma\n\ndelta 0\n")
    assert read_api_keys(str(keys)) == {"alpha": 2, "beta": 60, "gamma": None, "delta": 0}


@pytest.mark.parametrize("text, words", [("alpha two\n", "line 1: expected a key, optionally followed by its "
                                                             "requests per minute"),
                                         ("alpha 2 3\n", "line 1: expected a key"),
                                         ("beta\nalpha -1\n", "line 2: expected a key"),
                                         ("alpha\nalpha 5\n", "line 2: the key is listed twice")])
def test_a_bad_key_line_is_one_line_naming_it(capsys, tmp_path, text, words):
    keys = tmp_path / "keys"
    keys.write_text(text)
    status, lines = _run(capsys, tmp_path, "--path", tmp_path / "absent.pt", "--api-keys", keys)
    assert status == 1 and len(lines) == 1 and f"--api-keys {keys}: {words}" in lines[0]


def test_a_taken_port_is_one_line_before_loading(capsys, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        status, lines = _run(capsys, tmp_path, "--path", tmp_path / "absent.pt", "--port", port)
    assert status == 2 and len(lines) == 1 and f"--port {port}: cannot listen there" in lines[0]


def test_max_nbest_over_max_beam_is_refused(capsys, tmp_path):
    status, lines = _run(capsys, tmp_path, "--path", tmp_path / "ck.pt", "--max-beam", 2, "--max-nbest", 3)
    assert status == 2 and len(lines) == 1 and "--max-nbest 3" in lines[0]


@pytest.mark.parametrize("host, keys, warned", [("0.0.0.0", None, True), ("::", None, True),
                                                ("0.0.0.0", frozenset({"k"}), False), ("127.0.0.1", None, False),
                                                ("::1", None, False)])
def test_listening_beyond_loopback_without_keys_warns(monkeypatch, caplog, host, keys, warned):
    """Checked on serve() itself with uvicorn's run replaced: the test never listens beyond loopback."""
    import uvicorn

    from nmt_toolkit.serving.batcher import DynamicBatcher
    from nmt_toolkit.serving.metrics import ServerMetrics
    from nmt_toolkit.serving.models import ModelPool
    from nmt_toolkit.serving.server import serve
    from nmt_toolkit.serving.translate import Service

    class Model:
        name, engine = "en-de", "torch"

    class Bound:
        def getsockname(self):
            return (host, 8000)

    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    service = Service(ModelPool([Model()]), DynamicBatcher(lambda *a: []), ServeConfig(), keys)
    with caplog.at_level("WARNING", logger="nmt_toolkit.serve"):
        serve(service, ServerMetrics(), Bound())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert bool(warnings) == warned, warnings
    if warned:
        assert len(warnings) == 1 and "without --api-keys" in warnings[0] and host in warnings[0]


def test_decode_workers_default_to_one_per_thread_on_the_cpu():
    """Unset, the server decodes one batch per CPU thread at once (at most 4); --sampling (one seeded random
    stream) one; a number given is kept."""
    from nmt_toolkit.cli.decoding import DecodeDeviceConfig
    from nmt_toolkit.cli.serve import _decode_workers
    from nmt_toolkit.generation.config import GenerationConfig

    def workers(threads, serve=None, **gen):
        return _decode_workers({"serve": serve or ServeConfig(), "device": DecodeDeviceConfig(cpu=True, threads=threads),
                                "generation": GenerationConfig(**gen)})

    assert [workers(1), workers(2), workers(3), workers(8)] == [1, 2, 3, 4]
    assert workers(2, sampling=True, beam=1) == 1
    assert workers(2, ServeConfig(decode_workers=1)) == 1 and workers(2, ServeConfig(decode_workers=3)) == 3
