"""The fake under an address-space limit (``ulimit -v``, RLIMIT_AS): docs/fidelity.md row 76.

The fake's device memory is a sparse host mapping of about twice the capacity, which
costs no RAM but counts against RLIMIT_AS. Under a limit too small for it the device
does not open (207001 with a hint naming the limit), never a bare OSError from mmap
in some later copy; a device small enough for the limit works.

Each case runs in a fresh interpreter whose limit is set before acl_mem is imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from helpers import clean_env

GiB = 1 << 30
#: Under the default profile's 64 GiB device (128 GiB of heap window, 16 GiB of DVPP
#: window), well above what the interpreter and a small device need.
LIMIT = 40 * GiB

_SCRIPT = """
import json, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
import acl_mem
from acl_mem import raw
acl_mem.use_backend("fake")
hbm = int(sys.argv[2])
if hbm:
    acl_mem.fake.configure(hbm_bytes=hbm)
steps = []
try:
    raw.aclrtSetDevice(0)
    ptr = raw.aclrtMalloc(1 << 20)
    raw.aclrtMemset(ptr, 1 << 20, 7, 1 << 20)
    raw.aclrtFree(ptr)
    steps.append({"ok": True})
except acl_mem.AclError as exc:
    steps.append({"class": type(exc).__name__, "code": exc.code, "hint": exc.hint})
except BaseException as exc:
    steps.append({"class": type(exc).__name__, "code": None, "hint": ""})
print(json.dumps(steps[0]))
"""


def run(limit: int, hbm_bytes: int = 0) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_SCRIPT), str(limit),
                           str(hbm_bytes)], capture_output=True, text=True, timeout=120,
                          env=clean_env())
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.fake_only("the fake's host mappings; hardware memory is not host address space")
def test_device_too_big_for_the_limit_fails_to_open_with_207001():
    result = run(LIMIT)
    assert result["class"] == "MemoryAllocationError"
    assert result["code"] == 207001
    # The way out is named: the limit and a smaller fake device.
    hint = str(result["hint"])
    assert "RLIMIT_AS" in hint and "hbm_bytes" in hint and "ACL_MEM_FAKE_PROFILE" in hint


@pytest.mark.fake_only("the fake's host mappings; hardware memory is not host address space")
def test_device_that_fits_the_limit_works():
    assert run(LIMIT, hbm_bytes=4 * GiB) == {"ok": True}
