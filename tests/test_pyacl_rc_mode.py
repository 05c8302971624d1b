"""RC mode: a pyACL program on an Atlas 200 DK's control CPU (the fake's ``atlas-200dk``
profile, docs/runtime-model.md §3.16): get_run_mode says ACL_DEVICE, the program copies
with DEVICE_TO_DEVICE where an EP program says HOST_TO_DEVICE, and reads device memory
directly through acl.util, as the board's samples do. On both backends (native: acl_mem's
fake library playing the same profile)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT, clean_env
from test_pyacl import LAUNCHERS, PRELUDE, results

from acl_mem import raw
from acl_mem._fake.profiles import DEFAULT_PROFILE, resolve_profile
from acl_mem.conformance.providers import brief, native_provider

RC_PROGRAM = """
RESULTS = {}
ACL_DEVICE = 0
RESULTS["mode_before_init"] = list(acl.rt.get_run_mode())
assert acl.init() == 0
assert acl.rt.set_device(0) == 0
context, ret = acl.rt.create_context(0)
mode, ret = acl.rt.get_run_mode()
kind = ACL_MEMCPY_DEVICE_TO_DEVICE if mode == ACL_DEVICE else ACL_MEMCPY_HOST_TO_DEVICE
data = np.arange(256, dtype=np.uint8).tobytes()
dev, ret = acl.rt.malloc(256, ACL_MEM_MALLOC_HUGE_FIRST)
RESULTS["copy_in"] = acl.rt.memcpy(dev, 256, acl.util.bytes_to_ptr(data), 256, kind)
# The control CPU reads device memory directly.
RESULTS["read"] = acl.util.ptr_to_bytes(dev, 256) == data
view = acl.util.ptr_to_numpy(dev, (256,), 2)   # NPY_UINT8
view[:4] = 7
back = bytes(4)
RESULTS["written"] = [acl.rt.memcpy(acl.util.bytes_to_ptr(back), 4, dev, 4,
                                    ACL_MEMCPY_DEVICE_TO_DEVICE), back == bytes([7]) * 4]
del view
# Reads that would reach past the block or into freed memory are refused.
def refused(read):
    try:
        read()
    except ValueError:
        return True
    return False
other, ret = acl.rt.malloc(256, ACL_MEM_MALLOC_HUGE_FIRST)
RESULTS["refused"] = [refused(lambda: acl.util.ptr_to_bytes(dev, 8192)),  # into other
                      refused(lambda: acl.util.ptr_to_numpy(dev, (8192,), 2))]
acl.rt.free(other)
RESULTS["refused"].append(refused(lambda: acl.util.ptr_to_bytes(other, 8)))
# Host kinds run as device-to-device: an asynchronous HOST_TO_HOST copy is accepted.
stream, ret = acl.rt.create_stream()
a, ret = acl.rt.malloc_host(64)
b, ret = acl.rt.malloc_host(64)
RESULTS["async_h2h"] = acl.rt.memcpy_async(b, 64, a, 64, ACL_MEMCPY_HOST_TO_HOST, stream)
RESULTS["sync"] = acl.rt.synchronize_stream(stream)
RESULTS["release"] = [acl.rt.free_host(a), acl.rt.free_host(b), acl.rt.free(dev),
                      acl.rt.destroy_stream(stream), acl.rt.destroy_context(context),
                      acl.rt.reset_device(0), acl.finalize()]
RESULTS["mode"] = mode
print(json.dumps(RESULTS))
"""


def _run(backend_name: str, launcher: str, tmp_path: Path,
         profile: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(PRELUDE + "\n" + textwrap.dedent(RC_PROGRAM))
    if backend_name == "fake":
        command = [sys.executable, *LAUNCHERS[launcher]]
        env = clean_env(ACL_MEM_BACKEND="fake", ACL_MEM_FAKE_PROFILE=profile)
    else:
        provider = native_provider()
        native, why = provider.load()
        if native is None:
            pytest.skip(f"native backend unavailable: {brief(why)}")
        entry = {"python -m acl_mem.pyacl": ("from acl_mem.pyacl.__main__ import main", []),
                 "acl-mem run": ("from acl_mem.cli import main", ["run"])}[launcher]
        code = f"{provider.subprocess_prelude}\nimport sys\n{entry[0]}\nsys.exit(main())\n"
        command = [sys.executable, "-c", code, *entry[1], "--backend", "native"]
        env = {k: v for k, v in os.environ.items() if k != "ACL_MEM_BACKEND"}
        env["ACL_MEM_FAKE_PROFILE"] = profile  # what acl_mem's library plays
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH"))
                                            if p)
    return subprocess.run([*command, str(script)], env=env, capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
@pytest.mark.parametrize("backend_name", ["fake", "native"])
def test_an_rc_program_runs_on_the_board_profile(backend_name, launcher, tmp_path):
    got = results(_run(backend_name, launcher, tmp_path, "atlas-200dk"))
    assert got["mode_before_init"] == [0, 0]
    assert got["mode"] == 0
    assert got["copy_in"] == 0
    assert got["read"] is True
    assert got["written"] == [0, True]
    assert got["refused"] == [True, True, True]
    assert got["async_h2h"] == 0 and got["sync"] == 0
    assert got["release"] == [0] * 7


@pytest.mark.parametrize("backend_name", ["fake", "native"])
def test_the_same_program_in_ep_mode_stops_at_the_device_read(backend_name, tmp_path):
    """EP mode: the program takes the HOST_TO_DEVICE branch, and reading device memory from
    the host is refused with ValueError (pyACL would crash)."""
    proc = _run(backend_name, "acl-mem run", tmp_path, "atlas-a2")
    assert proc.returncode != 0
    assert "ValueError" in proc.stderr


def test_run_mode_on_every_backend(backend):
    """aclrtGetRunMode needs no aclInit or device: ACL_HOST for the EP profiles, ACL_DEVICE
    for the RC one (atlas-200dk) when ACL_MEM_FAKE_PROFILE picks it (acl_mem's library under
    the native backend plays the same profile)."""
    profile = resolve_profile(os.environ.get("ACL_MEM_FAKE_PROFILE") or DEFAULT_PROFILE)
    assert raw.aclrtGetRunMode() == profile.run_mode
