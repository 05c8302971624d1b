"""Memory shared between a Python process on the fake backend and one binding acl_mem's
library natively (docs/fidelity.md row 52): both keep the same records in the same
directory, so either imports what the other exported, sees its bytes, and gives it back
on free.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from engine_provider import SUBPROCESS_PRELUDE
from helpers import clean_env
from share_support import FAKE_ONLY, HUGE, handles, huge_free, physical, records, share_dir

from acl_mem import raw
from acl_mem._fake.library import library_dir

__all__ = ["handles", "share_dir"]  # fixtures, used by name

#: On acl_mem's C library: with argv[1] "export", exports 2 MiB holding a pattern and
#: prints the handle; otherwise imports argv[1], prints the digest of its bytes and
#: writes a stamp into it. Then waits for a line and frees.
_PEER = SUBPROCESS_PRELUDE + textwrap.dedent("""
    import ctypes, hashlib, json, sys
    import acl_mem
    from acl_mem import raw
    acl_mem.use_backend("native")
    raw.aclrtSetDevice(0)
    SIZE = 2 << 20

    def copy(dst, src, kind):
        raw.aclrtMemcpy(dst, SIZE, src, SIZE, kind)

    buf = bytearray(SIZE)
    host = ctypes.addressof((ctypes.c_char * SIZE).from_buffer(buf))
    base = raw.aclrtReserveMemAddress(SIZE, 0, 0, 0)
    if sys.argv[1] == "export":
        prop = raw.aclrtPhysicalMemProp(0, 0, 4, raw.aclrtMemLocation(0, 1), 0)
        handle = raw.aclrtMallocPhysical(SIZE, prop)
        raw.aclrtMapMem(base, SIZE, 0, handle, 0)
        buf[:] = bytes(range(256)) * (SIZE // 256)
        copy(base, host, 1)
        print(json.dumps({"shareable": raw.aclrtMemExportToShareableHandle(handle, 0, 1)}),
              flush=True)
    else:
        handle = raw.aclrtMemImportFromShareableHandle(int(sys.argv[1]), 0)
        raw.aclrtMapMem(base, SIZE, 0, handle, 0)
        copy(host, base, 2)
        seen = hashlib.sha256(buf).hexdigest()
        buf[:16] = b"from-the-c-peer!"
        copy(base, host, 1)
        print(json.dumps({"seen": seen}), flush=True)
    sys.stdin.readline()
    raw.aclrtUnmapMem(base)
    raw.aclrtFreePhysical(handle)
    raw.aclrtReleaseMemAddress(base)
    print(json.dumps({"freed": True}), flush=True)
""")


def _peer(directory: Path, *args: str) -> subprocess.Popen[str]:
    if not (library_dir() / "libascendcl.so").is_file():
        pytest.skip("acl_mem's C library is not built")
    env = clean_env(ACL_MEM_FAKE_SHARE_DIR=str(directory))
    return subprocess.Popen([sys.executable, "-c", _PEER, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _receive(proc: subprocess.Popen[str]) -> dict[str, object]:
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise AssertionError(f"the C peer ended early:\n{proc.stderr.read()}")
    message: dict[str, object] = json.loads(line)
    return message


def _finish(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert _receive(proc) == {"freed": True}
    proc.communicate(timeout=30)
    assert proc.returncode == 0


def _address(buffer: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))


def _read(va: int) -> bytes:
    out = bytearray(HUGE)
    raw.aclrtMemcpy(_address(out), HUGE, va, HUGE, 2)
    return bytes(out)


@pytest.mark.fake_only(FAKE_ONLY)
def test_the_fake_imports_what_a_native_binding_exported(fake, dev, share_dir, handles):
    proc = _peer(share_dir, "export")
    try:
        shareable = _receive(proc)["shareable"]
        assert isinstance(shareable, int)
        imported = raw.aclrtMemImportFromShareableHandle(shareable, 0)
        base = raw.aclrtReserveMemAddress(HUGE, 0, 0, 0)
        raw.aclrtMapMem(base, HUGE, 0, imported, 0)
        assert _read(base) == bytes(range(256)) * (HUGE // 256)
        raw.aclrtUnmapMem(base)
        raw.aclrtReleaseMemAddress(base)
        raw.aclrtFreePhysical(imported)
        _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert records(share_dir) == []


@pytest.mark.fake_only(FAKE_ONLY)
def test_a_native_binding_imports_what_the_fake_exported(fake, dev, share_dir, handles):
    before = huge_free()
    handle = physical(handles)
    base = raw.aclrtReserveMemAddress(HUGE, 0, 0, 0)
    raw.aclrtMapMem(base, HUGE, 0, handle, 0)
    data = bytes(reversed(range(256))) * (HUGE // 256)
    raw.aclrtMemcpy(base, HUGE, _address(bytearray(data)), HUGE, 1)
    shareable = raw.aclrtMemExportToShareableHandle(handle, 0, 1)
    proc = _peer(share_dir, str(shareable))
    try:
        assert _receive(proc) == {"seen": hashlib.sha256(data).hexdigest()}
        assert _read(base)[:16] == b"from-the-c-peer!"
        # Freed by the exporter while the C peer holds it: still taken until it lets go.
        raw.aclrtUnmapMem(base)
        raw.aclrtFreePhysical(handles.pop())
        assert huge_free() == before - HUGE
        _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    raw.aclrtReleaseMemAddress(base)
    assert huge_free() == before
    assert records(share_dir) == []
