"""benchmarks/shared_machine.py on the session's small model: one JSON line per load level, both commands run
as whole processes (their hypotheses compared), and the busy processes it started gone when it ends."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "shared_machine.py"


@pytest.mark.slow
def test_one_line_per_level_and_no_busy_process_left(trained_translation, tmp_path):
    marker = f"# busy loop of {tmp_path}"  # names this test's busy processes, to look for them afterwards
    busy = f"{sys.executable} -c 'while True: pass  {marker}'"
    done = subprocess.run([sys.executable, str(SCRIPT), str(trained_translation.data), "--path",
                           str(trained_translation.first), "--loads", "0,1", "--pairs", "1", "--common", "--beam 2",
                           "--busy-command", busy, "--busy-warm-up", "0.2", "--label", "tiny"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert [x["busy_processes"] for x in lines] == [0, 1]
    for x in lines:
        assert x["a"].endswith("--beam 2") and x["b"].endswith("--beam 2 --batch-size 64")
        assert len(x["runs"]["a"]) == len(x["runs"]["b"]) == 1 and x["a_wall_s"] > 0 and x["b_cpu_s"] > 0
        # one pair: the ratio is that pair's (the printed runs are rounded to 0.01 s)
        assert x["a_over_b_wall"] == pytest.approx(x["runs"]["a"][0][0] / x["runs"]["b"][0][0], abs=0.02)
        assert x["same_hypotheses"] in (True, False) and x["busy_command"].endswith(f"{marker}'")
    assert not [cmdline for cmdline in _command_lines() if marker in cmdline]


def _command_lines() -> list[str]:
    """Every process's command line, from /proc (what pgrep -f reads)."""
    lines = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace"))
        except OSError:  # not a process, or one that has just ended
            continue
    return lines
