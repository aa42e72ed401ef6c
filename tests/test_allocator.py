"""nmt_toolkit.allocator: glibc keeps freed blocks for the next step, unless the user chose otherwise."""
import os
import subprocess
import sys
import textwrap

import pytest

from nmt_toolkit import allocator

GLIBC = allocator._glibc_mallopt() is not None

# A training step in miniature: allocate, touch and free blocks of 40, 20 and 8 MiB (the largest above
# glibc's largest automatic mmap threshold, 32 MiB), ten times; count the page faults of the last five.
# With glibc's defaults the large blocks are fresh mappings every time (> 10,000 faults a step); with the
# thresholds raised they come back from the heap already mapped once the heap has settled.
_FAULTS = textwrap.dedent("""
    import resource, torch
    from nmt_toolkit.allocator import keep_freed_memory
    applied = keep_freed_memory()
    def step():
        blocks = [torch.empty(n << 20).fill_(1.0) for n in (10, 5, 2)]
        del blocks
    for _ in range(5):
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        step()
    print(int(applied), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(**env_changes):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k not in (allocator.ENV, "GLIBC_TUNABLES", "LD_PRELOAD")}
    env.update(env_changes)
    out = subprocess.run([sys.executable, "-c", _FAULTS], env=env, capture_output=True, text=True, check=True)
    applied, faults = out.stdout.split()
    return applied == "1", int(faults)


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt only")
@pytest.mark.slow
def test_freed_blocks_are_reused_without_page_faults():
    applied, faults = _faults()
    assert applied
    # usually 0; now and then the heap rearranges once (5,120 faults, one 20 MiB block); fresh mappings
    # every step would be > 50,000
    assert faults < 12_000


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt only")
@pytest.mark.slow
def test_system_setting_keeps_glibc_defaults():
    applied, faults = _faults(**{allocator.ENV: "system"})
    assert not applied
    assert faults > 40_000  # the 40 MiB block alone maps and faults 10,240 pages a step


@pytest.mark.parametrize("env, reason", [
    ({"NMT_TOOLKIT_MALLOC": "system"}, "NMT_TOOLKIT_MALLOC=system"),
    ({"MALLOC_TRIM_THRESHOLD_": "100000"}, "MALLOC_TRIM_THRESHOLD_"),
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, "GLIBC_TUNABLES"),
    ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, "LD_PRELOAD jemalloc"),
])
def test_the_users_own_allocator_setting_wins(env, reason):
    assert allocator._user_choice(env) == reason
    assert allocator.keep_freed_memory(env) is False


def test_no_setting_means_keep_and_a_typo_is_reported(caplog):
    assert allocator._user_choice({}) is None
    assert allocator._user_choice({"NMT_TOOLKIT_MALLOC": "keep", "GLIBC_TUNABLES": "glibc.cpu.x=1"}) is None
    assert allocator._user_choice({"NMT_TOOLKIT_MALLOC": "sytem"}) == "NMT_TOOLKIT_MALLOC=sytem"
    assert "neither 'keep' nor 'system'" in caplog.text
