"""The fake under AddressSanitizer: its address-space reservation makes room for ASan's
shadow memory, and a C program built with -fsanitize=address (and no sanitizer in the
library) runs against the drop-in."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux address layout")
def test_the_reservation_starts_after_memory_already_taken_at_the_window_start():
    """ASan's high shadow ends 2 GiB - 32 KiB into the VMM window (x86-64); with that
    taken before the library starts, it still reserves its device space and the VMM
    window's mirror, so no host allocation lands on a device address."""
    script = textwrap.dedent("""
        import mmap
        import sys
        sys.path.insert(0, sys.argv[1])
        import host_pages as hostmem
        from acl_mem._fake.library import EngineLibrary
        from acl_mem.sizes import GiB, TiB
        # What ASan's shadow occupies: the first 2 GiB of [16 TiB, 24 TiB).
        assert hostmem.reserve_address_space(16 * TiB, 2 * GiB)
        print("reserved", EngineLibrary.get().describe().address_space_reserved)
        # The device space (24 TiB) and the mirror (56 TiB) are the library's.
        print("free after", [hostmem.reserve_address_space(a, mmap.PAGESIZE)
                             for a in (24 * TiB, 40 * TiB, 56 * TiB)])
    """)
    done = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["reserved True", "free after [False, False, False]"]


def test_a_program_built_with_address_sanitizer_runs_on_the_shim(tmp_path, request):
    from shim_support import compiler as c_compiler

    compiler = c_compiler()
    probe = subprocess.run([*compiler, "-fsanitize=address", "-x", "c", "-", "-o",
                            str(tmp_path / "probe")], input="int main(void){return 0;}",
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("the C compiler cannot build with -fsanitize=address (no libasan)")
    lib = request.getfixturevalue("shim_libdir")
    include = request.getfixturevalue("headers")
    env = dict(os.environ)
    binary = tmp_path / "asan_vmm"
    built = subprocess.run([*compiler, "-fsanitize=address", "-g", "-Wall", "-Werror",
                            f"-I{include}", str(ROOT / "tests" / "c" / "asan_vmm.c"),
                            f"-L{lib}", "-lascendcl", "-o", str(binary)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    # LeakSanitizer on: the library leaves nothing behind at exit either.
    run = subprocess.run([str(binary)], env=dict(env, LD_LIBRARY_PATH=str(lib)),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == "ok"
