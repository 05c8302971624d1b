"""A copy or memset into pageable host memory that the fake refuses (107000: part of the
range cannot be written) writes nothing at all (docs/runtime-model.md §8.10, fidelity row
63): the kernel would stop at the first bad page, after writing every page before it."""

from __future__ import annotations

import ctypes
import mmap
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from acl_mem import raw
from acl_mem.errors import AclError

PAGE = mmap.PAGESIZE
PAGES = 8
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int


@pytest.fixture(params=["unreadable", "read-only"])
def spoiled(request: pytest.FixtureRequest) -> Iterator[tuple[mmap.mmap, int]]:
    """Eight fresh pages of host memory whose last one cannot be written."""
    memory = mmap.mmap(-1, PAGES * PAGE)
    memory.write(bytes(range(256)) * (PAGES * PAGE // 256))
    view = (ctypes.c_char * (PAGES * PAGE)).from_buffer(memory)
    base = ctypes.addressof(view)
    protection = 0 if request.param == "unreadable" else mmap.PROT_READ
    assert _libc.mprotect(base + (PAGES - 1) * PAGE, PAGE, protection) == 0
    yield memory, base
    assert _libc.mprotect(base + (PAGES - 1) * PAGE, PAGE,
                          mmap.PROT_READ | mmap.PROT_WRITE) == 0
    del view
    memory.close()


def _refused(call: Any) -> None:
    with pytest.raises(AclError) as caught:
        call()
    assert caught.value.code == 107000


def test_a_refused_memset_writes_nothing(dev: Any, spoiled: tuple[mmap.mmap, int]) -> None:
    memory, base = spoiled
    before = memory[:(PAGES - 1) * PAGE]
    _refused(lambda: raw.aclrtMemset(base, PAGES * PAGE, 0x77, PAGES * PAGE))
    assert memory[:(PAGES - 1) * PAGE] == before


@pytest.mark.parametrize("source", ["device", "host"])
def test_a_refused_copy_writes_nothing(dev: Any, spoiled: tuple[mmap.mmap, int],
                                       source: str) -> None:
    memory, base = spoiled
    before = memory[:(PAGES - 1) * PAGE]
    size = PAGES * PAGE
    if source == "device":
        src = dev.malloc(size)
        src.memset(0x66)
        address, kind = src.ptr, 2
    else:
        data = ctypes.create_string_buffer(b"\x55" * size, size)
        address, kind = ctypes.addressof(data), 0
    _refused(lambda: raw.aclrtMemcpy(base, size, address, size, kind))
    assert memory[:(PAGES - 1) * PAGE] == before
    # The pages before the bad one are usable as ever.
    raw.aclrtMemcpy(base, size - PAGE, address, size - PAGE, kind)
    assert memory[:PAGE] == (b"\x66" if source == "device" else b"\x55") * PAGE
    if source == "device":
        src.free()


def test_a_memset_far_past_a_small_object_fails_cleanly(backend: Any) -> None:
    """A count of 2**40 from the start of a 100-byte bytes object: the range runs off the
    interpreter's heap into unmapped memory. 107000, and the process lives on (it used to
    zero the heap up to the first unmapped page and crash)."""
    script = textwrap.dedent("""
        import ctypes, acl_mem
        from acl_mem import raw
        from acl_mem.errors import AclError
        data = bytes(range(100))
        address = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
        with acl_mem.Device(0):
            try:
                raw.aclrtMemset(address, 2**64 - 1, 0, 2**40)
            except AclError as exc:
                assert exc.code == 107000, exc.code
            else:
                raise SystemExit("not refused")
        assert data == bytes(range(100))
        print("alive")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "alive"
