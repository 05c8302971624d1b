"""acl_mem.pyacl runs pyACL programs unchanged (docs/pyacl.md).

The programs below are written the way pyACL programs are: ``import acl``, constants of
their own, ``ptr, ret = ...`` and a check of every ``ret``. Each runs in a child process
through ``python -m acl_mem.pyacl`` and through ``acl-mem run`` on the fake, and prints
what the test then compares (return codes as ints). Behaviour the two backends must share
is checked in acl_mem/conformance/checks/test_pyacl.py.
"""

from __future__ import annotations

import json
import mmap
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, clean_env, native_is_installed

import acl_mem
from acl_mem import pyacl
from acl_mem.pyacl import UnsupportedError

LAUNCHERS = {
    "python -m acl_mem.pyacl": ["-m", "acl_mem.pyacl"],
    "acl-mem run": ["-c", "import sys; from acl_mem.cli import main; sys.exit(main())", "run"],
}

# -- pyACL programs --------------------------------------------------------------------------------

PRELUDE = """\
import json
import sys

import acl
import numpy as np

ACL_SUCCESS = 0
ACL_HOST = 1
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEM_MALLOC_NORMAL_ONLY = 2
ACL_MEMCPY_HOST_TO_HOST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_MEMCPY_DEVICE_TO_DEVICE = 3
ACL_HBM_MEM = 1
DEVICE_ID = 0
RESULTS = {}


def check_ret(message, ret):
    if ret != ACL_SUCCESS:
        raise Exception("{} failed ret={}".format(message, ret))
"""

RESOURCES_AND_ROUND_TRIP = """\
class Resource:
    def __init__(self, device_id):
        self.device_id = device_id
        ret = acl.init()
        check_ret("acl.init", ret)
        ret = acl.rt.set_device(device_id)
        check_ret("acl.rt.set_device", ret)
        self.stream, ret = acl.rt.create_stream()
        check_ret("acl.rt.create_stream", ret)
        self.run_mode, ret = acl.rt.get_run_mode()
        check_ret("acl.rt.get_run_mode", ret)

    def release(self):
        check_ret("acl.rt.destroy_stream", acl.rt.destroy_stream(self.stream))
        check_ret("acl.rt.reset_device", acl.rt.reset_device(self.device_id))
        check_ret("acl.finalize", acl.finalize())


resource = Resource(DEVICE_ID)
RESULTS["run_mode"] = resource.run_mode
RESULTS["device"] = acl.rt.get_device()
free_before, total, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
check_ret("acl.rt.get_mem_info", ret)

image = np.arange(3 * 224 * 224, dtype=np.float32).reshape(1, 3, 224, 224)
size = image.size * image.itemsize
dev_ptr, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
check_ret("acl.rt.malloc", ret)
free_after, _, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
RESULTS["used"] = free_before - free_after

if "bytes_to_ptr" in dir(acl.util):
    image_bytes = image.tobytes()
    host_ptr = acl.util.bytes_to_ptr(image_bytes)
else:
    host_ptr = acl.util.numpy_to_ptr(image)
check_ret("acl.rt.memcpy", acl.rt.memcpy(dev_ptr, size, host_ptr, size,
                                         ACL_MEMCPY_HOST_TO_DEVICE))

# device -> host into bytes: visible through np.frombuffer
out = np.zeros(image.size, dtype=np.float32).tobytes()
out_ptr = acl.util.bytes_to_ptr(out)
check_ret("acl.rt.memcpy", acl.rt.memcpy(out_ptr, size, dev_ptr, size,
                                         ACL_MEMCPY_DEVICE_TO_HOST))
back = np.frombuffer(out, dtype=np.float32).reshape(image.shape)
RESULTS["bytes_round_trip"] = bool(np.array_equal(back, image))

# device -> pinned host, read with ptr_to_numpy and ptr_to_bytes
host_buf, ret = acl.rt.malloc_host(size)
check_ret("acl.rt.malloc_host", ret)
check_ret("acl.rt.memcpy", acl.rt.memcpy(host_buf, size, dev_ptr, size,
                                         ACL_MEMCPY_DEVICE_TO_HOST))
NPY_FLOAT32 = 11
view = acl.util.ptr_to_numpy(host_buf, image.shape, NPY_FLOAT32)
RESULTS["numpy_view"] = bool(np.array_equal(view, image))
RESULTS["bytes_copy"] = acl.util.ptr_to_bytes(host_buf, size) == image.tobytes()
view[0, 0, 0, 0] = 42.0          # a view, not a copy
RESULTS["view_writes"] = float(np.frombuffer(acl.util.ptr_to_bytes(host_buf, 4), np.float32)[0])

# device -> device, memset
dev2, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_NORMAL_ONLY)
check_ret("acl.rt.malloc", ret)
check_ret("acl.rt.memcpy", acl.rt.memcpy(dev2, size, dev_ptr, size,
                                         ACL_MEMCPY_DEVICE_TO_DEVICE))
check_ret("acl.rt.memset", acl.rt.memset(dev_ptr, size, 0, size))
check_ret("acl.rt.memcpy", acl.rt.memcpy(host_buf, size, dev2, size,
                                         ACL_MEMCPY_DEVICE_TO_HOST))
RESULTS["d2d"] = acl.util.ptr_to_bytes(host_buf, size) == image.tobytes()
check_ret("acl.rt.memcpy", acl.rt.memcpy(host_buf, size, dev_ptr, size,
                                         ACL_MEMCPY_DEVICE_TO_HOST))
RESULTS["memset"] = acl.util.ptr_to_bytes(host_buf, size) == bytes(size)

del view
RESULTS["frees"] = [acl.rt.free(dev_ptr), acl.rt.free(dev2), acl.rt.free_host(host_buf)]
free_end, _, _ = acl.rt.get_mem_info(ACL_HBM_MEM)
RESULTS["all_returned"] = free_end == free_before
resource.release()
print(json.dumps(RESULTS))
"""

PINNED_STAGING_AND_STREAMS = """\
check_ret("acl.init", acl.init())
check_ret("acl.rt.set_device", acl.rt.set_device(DEVICE_ID))
stream, ret = acl.rt.create_stream()
check_ret("acl.rt.create_stream", ret)

frame = np.random.default_rng(7).integers(0, 255, 1280 * 720 * 3 // 2, dtype=np.uint8)
size = frame.nbytes
staging, ret = acl.rt.malloc_host(size)
check_ret("acl.rt.malloc_host", ret)
# fill the pinned staging buffer on the host (memset, then a host -> host copy)
check_ret("acl.rt.memset", acl.rt.memset(staging, size, 0, size))
frame_bytes = frame.tobytes()
check_ret("acl.rt.memcpy", acl.rt.memcpy(staging, size, acl.util.bytes_to_ptr(frame_bytes), size,
                                         ACL_MEMCPY_HOST_TO_HOST))
dev, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
check_ret("acl.rt.malloc", ret)
check_ret("acl.rt.memcpy_async", acl.rt.memcpy_async(dev, size, staging, size,
                                                     ACL_MEMCPY_HOST_TO_DEVICE, stream))
check_ret("acl.rt.memset_async", acl.rt.memset_async(staging, size, 0, size, stream))
result, ret = acl.rt.malloc_host(size)
check_ret("acl.rt.malloc_host", ret)
check_ret("acl.rt.memcpy_async", acl.rt.memcpy_async(result, size, dev, size,
                                                     ACL_MEMCPY_DEVICE_TO_HOST, stream))
check_ret("acl.rt.synchronize_stream", acl.rt.synchronize_stream(stream))
RESULTS["async_round_trip"] = acl.util.ptr_to_bytes(result, size) == frame.tobytes()
RESULTS["staging_cleared"] = acl.util.ptr_to_bytes(staging, 16) == bytes(16)
# some programs pass the stream to synchronize_device: pyACL ignores it
RESULTS["synchronize_device"] = acl.rt.synchronize_device(stream)
RESULTS["default_stream"] = acl.rt.synchronize_stream(0)
RESULTS["codes"] = [acl.rt.free(dev), acl.rt.free_host(staging), acl.rt.free_host(result),
                    acl.rt.destroy_stream(stream), acl.rt.reset_device(DEVICE_ID),
                    acl.finalize()]
print(json.dumps(RESULTS))
"""

DVPP_BUFFERS = """\
check_ret("acl.init", acl.init())
check_ret("acl.rt.set_device", acl.rt.set_device(DEVICE_ID))
picture = np.full(1920 * 1080 * 3 // 2, 0x5A, dtype=np.uint8)
size = picture.nbytes
payload = picture.tobytes()
out = []
for allocate, release in (
        (lambda n: acl.media.dvpp_malloc(n), acl.media.dvpp_free),
        (lambda n: acl.himpi.dvpp_malloc(DEVICE_ID, n), acl.himpi.dvpp_free)):
    dvpp, ret = allocate(size)
    check_ret("dvpp_malloc", ret)
    check_ret("acl.rt.memcpy", acl.rt.memcpy(dvpp, size, acl.util.bytes_to_ptr(payload), size,
                                             ACL_MEMCPY_HOST_TO_DEVICE))
    back = bytes(size)
    check_ret("acl.rt.memcpy", acl.rt.memcpy(acl.util.bytes_to_ptr(back), size, dvpp, size,
                                             ACL_MEMCPY_DEVICE_TO_HOST))
    out.append([dvpp % 128, back == payload, release(dvpp)])
RESULTS["dvpp"] = out
check_ret("acl.rt.reset_device", acl.rt.reset_device(DEVICE_ID))
check_ret("acl.finalize", acl.finalize())
print(json.dumps(RESULTS))
"""

DATA_BUFFERS = """\
check_ret("acl.init", acl.init())
check_ret("acl.rt.set_device", acl.rt.set_device(DEVICE_ID))
outputs, allocations = [], []
for size in (4000, 1000 * 4):
    buf, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_NORMAL_ONLY)
    check_ret("acl.rt.malloc", ret)
    allocations.append(buf)
    outputs.append(acl.create_data_buffer(buf, size))
RESULTS["handles_are_ints"] = all(isinstance(h, int) and h != 0 for h in outputs)
RESULTS["distinct"] = len(set(outputs)) == len(outputs)
logits = np.linspace(-1, 1, 1000, dtype=np.float32)
data = acl.get_data_buffer_addr(outputs[0])
size = int(acl.get_data_buffer_size(outputs[0]))
RESULTS["size"] = [size, acl.get_data_buffer_size_v2(outputs[0])]
logits_bytes = logits.tobytes()
check_ret("acl.rt.memcpy", acl.rt.memcpy(data, size, acl.util.bytes_to_ptr(logits_bytes), size,
                                         ACL_MEMCPY_HOST_TO_DEVICE))
host = np.zeros(1000, dtype=np.float32).tobytes()
check_ret("acl.rt.memcpy", acl.rt.memcpy(acl.util.bytes_to_ptr(host), len(host), data, size,
                                         ACL_MEMCPY_DEVICE_TO_HOST))
RESULTS["through_buffer"] = bool(np.array_equal(np.frombuffer(host, np.float32), logits))
# update: the buffer now describes the second allocation
second = acl.get_data_buffer_addr(outputs[1])
RESULTS["update"] = acl.update_data_buffer(outputs[0], second, 16)
RESULTS["updated"] = [acl.get_data_buffer_addr(outputs[0]) == second,
                      acl.get_data_buffer_size_v2(outputs[0])]
big = acl.create_data_buffer(0, (5 << 32) + 7)
RESULTS["big"] = [acl.get_data_buffer_size(big), acl.get_data_buffer_size_v2(big)]
RESULTS["destroy"] = [acl.destroy_data_buffer(big), acl.destroy_data_buffer(big),
                      acl.destroy_data_buffer(0)]
RESULTS["null"] = [acl.get_data_buffer_addr(0), acl.get_data_buffer_size_v2(0),
                   acl.update_data_buffer(0, 1, 1)]
for handle in outputs:
    check_ret("acl.destroy_data_buffer", acl.destroy_data_buffer(handle))
for buf in allocations:                 # destroying a data buffer frees nothing
    check_ret("acl.rt.free", acl.rt.free(buf))
check_ret("acl.rt.reset_device", acl.rt.reset_device(DEVICE_ID))
check_ret("acl.finalize", acl.finalize())
print(json.dumps(RESULTS))
"""

ERROR_CODES = """\
RESULTS["before_set_device"] = [acl.rt.get_device(), acl.rt.create_stream(),
                                acl.rt.malloc(64, 0)]
RESULTS["run_mode_before_init"] = acl.rt.get_run_mode()
RESULTS["init"] = [acl.init(), acl.init()]
RESULTS["bad_device"] = acl.rt.set_device(99)
check_ret("acl.rt.set_device", acl.rt.set_device(DEVICE_ID))
RESULTS["size_zero"] = [acl.rt.malloc(0, ACL_MEM_MALLOC_HUGE_FIRST), acl.rt.malloc_host(0)]
RESULTS["mem_info"] = acl.rt.get_mem_info(99)
RESULTS["free_null"] = acl.rt.free(0)
ptr, ret = acl.rt.malloc(64, ACL_MEM_MALLOC_HUGE_FIRST)
RESULTS["double_free"] = [acl.rt.free(ptr), acl.rt.free(ptr)]
RESULTS["destroy_default_stream"] = acl.rt.destroy_stream(0)
RESULTS["memcpy_count_over_dest_max"] = acl.rt.memcpy(ptr, 8, ptr + 64, 16,
                                                       ACL_MEMCPY_DEVICE_TO_DEVICE)
RESULTS["ret_types"] = sorted({type(v).__name__ for v in (acl.rt.free(ptr), acl.init())})
RESULTS["finalize"] = [acl.rt.reset_device(DEVICE_ID), acl.finalize(), acl.finalize()]
print(json.dumps(RESULTS))
"""

DEVICE_MEMORY_READ = """\
check_ret("acl.init", acl.init())
check_ret("acl.rt.set_device", acl.rt.set_device(DEVICE_ID))
dev, ret = acl.rt.malloc(4096, ACL_MEM_MALLOC_HUGE_FIRST)
check_ret("acl.rt.malloc", ret)
caught = []
for read in (lambda: acl.util.ptr_to_bytes(dev, 16),
             lambda: acl.util.ptr_to_numpy(dev, (16,), 2)):
    try:
        read()
    except ValueError:
        caught.append("ValueError")
RESULTS["caught"] = caught
RESULTS["free"] = acl.rt.free(dev)
print(json.dumps(RESULTS))
"""

UNSUPPORTED = """\
check_ret("acl.init", acl.init())
check_ret("acl.rt.set_device", acl.rt.set_device(DEVICE_ID))
print("before", flush=True)
model_id, ret = acl.mdl.load_from_file("resnet50.om")
print("after", flush=True)
"""

SURFACE = """\
import acl.rt
from acl import media, rt, util
RESULTS["same_modules"] = [acl.rt is rt, acl.util is util, acl.media is media,
                           sys.modules["acl.himpi"] is acl.himpi]
RESULTS["util_names"] = sorted(n for n in ("bytes_to_ptr", "ptr_to_bytes", "numpy_to_ptr",
                                           "ptr_to_numpy", "numpy_contiguous_to_ptr")
                               if n in dir(acl.util))
RESULTS["no_constants"] = [hasattr(acl, n) for n in ("ACL_HOST", "ACL_SUCCESS",
                                                     "ACL_MEMCPY_HOST_TO_DEVICE")]
RESULTS["no_rt_soc_name"] = hasattr(acl.rt, "get_soc_name")
RESULTS["stubs_exist"] = [callable(acl.rt.get_event_id), callable(acl.mdl.execute),
                          callable(acl.op.execute), callable(acl.prof.init)]
RESULTS["soc"] = isinstance(acl.get_soc_name(), str)
RESULTS["argv"] = sys.argv[1:]
print(json.dumps(RESULTS))
"""


def run_program(launcher: str, tmp_path: Path, body: str, *args: str,
                **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(PRELUDE + "\n" + textwrap.dedent(body))
    command = [sys.executable, *LAUNCHERS[launcher], str(script), *args]
    return subprocess.run(command, env=clean_env(ACL_MEM_BACKEND="fake", **env),
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path))


def results(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    data: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


@pytest.fixture(params=list(LAUNCHERS))
def launcher(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- programs through both launchers ---------------------------------------------------------------


def test_resources_and_round_trips(launcher, tmp_path):
    """Set-up, H2D from bytes_to_ptr, D2H into bytes (seen by np.frombuffer), D2H into pinned
    memory read with ptr_to_numpy (a writable view) and ptr_to_bytes, D2D, memset, frees."""
    got = results(run_program(launcher, tmp_path, RESOURCES_AND_ROUND_TRIP))
    assert got["run_mode"] == 1
    assert got["device"] == [0, 0]
    assert got["used"] > 0
    for key in ("bytes_round_trip", "numpy_view", "bytes_copy", "d2d", "memset",
                "all_returned"):
        assert got[key] is True, key
    assert got["view_writes"] == 42.0
    assert got["frees"] == [0, 0, 0]


def test_pinned_staging_and_streams(launcher, tmp_path):
    """memcpy_async / memset_async on a stream, then synchronize_stream; synchronize_device
    tolerates the stream argument some programs pass."""
    got = results(run_program(launcher, tmp_path, PINNED_STAGING_AND_STREAMS))
    assert got["async_round_trip"] is True
    assert got["staging_cleared"] is True
    assert got["synchronize_device"] == 0
    assert got["default_stream"] == 0
    assert got["codes"] == [0, 0, 0, 0, 0, 0]


def test_dvpp_buffers(launcher, tmp_path):
    """acl.media and acl.himpi dvpp_malloc: 128-byte aligned device memory, round trip, free."""
    got = results(run_program(launcher, tmp_path, DVPP_BUFFERS))
    assert got["dvpp"] == [[0, True, 0], [0, True, 0]]


def test_data_buffers(launcher, tmp_path):
    """create/get/update/destroy_data_buffer: int handles over device memory; the deprecated
    size is cut to 32 bits; NULL and destroyed handles give 0 / 100000."""
    got = results(run_program(launcher, tmp_path, DATA_BUFFERS))
    assert got["handles_are_ints"] is True and got["distinct"] is True
    assert got["size"] == [4000, 4000]
    assert got["through_buffer"] is True
    assert got["update"] == 0
    assert got["updated"] == [True, 16]
    assert got["big"] == [7, (5 << 32) + 7]
    assert got["destroy"] == [0, 100000, 100000]
    assert got["null"] == [0, 0, 100000]


def test_error_codes_are_returned_not_raised(launcher, tmp_path):
    """Failures come back as ret (ints), in the shapes pyACL returns them."""
    got = results(run_program(launcher, tmp_path, ERROR_CODES))
    assert got["before_set_device"] == [[0, 107002], [0, 107002], [0, 107002]]
    assert got["run_mode_before_init"] == [1, 0]
    assert got["init"] == [0, 100002]
    assert got["bad_device"] == 107001
    assert got["size_zero"] == [[0, 100000], [0, 100000]]
    assert got["mem_info"] == [0, 0, 107016]
    assert got["free_null"] == 100000
    assert got["double_free"] == [0, 107000]
    assert got["destroy_default_stream"] == 100000
    assert got["memcpy_count_over_dest_max"] == 107000
    assert got["ret_types"] == ["int"]
    assert got["finalize"] == [0, 0, 100037]


def test_reading_device_memory_fails_clearly(launcher, tmp_path):
    """ptr_to_bytes / ptr_to_numpy of device memory raise ValueError; the process lives."""
    got = results(run_program(launcher, tmp_path, DEVICE_MEMORY_READ))
    assert got["caught"] == ["ValueError", "ValueError"]
    assert got["free"] == 0


def test_unsupported_call_stops_the_program(launcher, tmp_path):
    """A model call raises UnsupportedError: the program stops there with status 1."""
    proc = run_program(launcher, tmp_path, UNSUPPORTED)
    assert proc.returncode == 1
    assert proc.stdout.split() == ["before"]
    assert "acl_mem.pyacl.UnsupportedError" in proc.stderr.strip().splitlines()[-1]


def test_surface_and_arguments(launcher, tmp_path):
    """import acl.rt / from acl import util give the registered modules; no constants;
    the script's own arguments (options included) reach sys.argv."""
    got = results(run_program(launcher, tmp_path, SURFACE, "--force", "-x", "file"))
    assert got["same_modules"] == [True, True, True, True]
    assert got["util_names"] == ["bytes_to_ptr", "numpy_contiguous_to_ptr", "numpy_to_ptr",
                                 "ptr_to_bytes", "ptr_to_numpy"]
    assert got["no_constants"] == [False, False, False]
    assert got["no_rt_soc_name"] is False
    assert got["stubs_exist"] == [True, True, True, True]
    assert got["soc"] is True
    assert got["argv"] == ["--force", "-x", "file"]


# -- launching -------------------------------------------------------------------------------------


def _fake_real_acl(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "acl.py").write_text("REAL = True\n")
    return site


def test_real_acl_is_not_shadowed_without_force(launcher, tmp_path):
    """A real acl on the path: exit 2, the script does not run; with --force it runs with
    acl_mem.pyacl as acl."""
    site = _fake_real_acl(tmp_path)
    script = tmp_path / "which.py"
    script.write_text("import acl\nprint(acl.__name__, hasattr(acl, 'REAL'))\n")
    env = clean_env(ACL_MEM_BACKEND="fake")
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    base = [sys.executable, *LAUNCHERS[launcher]]
    refused = subprocess.run([*base, str(script)], env=env, capture_output=True, text=True,
                             timeout=60, cwd=str(tmp_path))
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert str(site / "acl.py") in refused.stderr
    forced = subprocess.run([*base, "--force", str(script)], env=env, capture_output=True,
                            text=True, timeout=60, cwd=str(tmp_path))
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.split() == ["acl_mem.pyacl", "False"]


@pytest.mark.parametrize(("body", "status"), [
    ("import sys\nsys.exit(3)\n", 3),
    ("raise RuntimeError('boom')\n", 1),
    ("import sys\nsys.exit('message')\n", 1),
    ("print('done')\n", 0),
])
def test_exit_status_is_the_scripts(launcher, tmp_path, body, status):
    script = tmp_path / "status.py"
    script.write_text(body)
    proc = subprocess.run([sys.executable, *LAUNCHERS[launcher], str(script)],
                          env=clean_env(ACL_MEM_BACKEND="fake"), capture_output=True,
                          text=True, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == status, proc.stderr
    if status == 1 and "boom" in body:
        assert proc.stderr.strip().splitlines()[-1] == "RuntimeError: boom"
        assert "runpy" not in proc.stderr


def test_missing_script_is_status_2(launcher, tmp_path):
    proc = subprocess.run([sys.executable, *LAUNCHERS[launcher], str(tmp_path / "nope.py")],
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "nope.py" in proc.stderr


def test_backend_option(launcher, tmp_path):
    """--backend fake works anywhere; --backend native without libascendcl: status 2."""
    script = tmp_path / "backend.py"
    script.write_text("import acl, acl_mem\nacl.rt.get_device_count()\n"
                      "print(acl_mem.backend_name())\n")
    base = [sys.executable, *LAUNCHERS[launcher]]
    proc = subprocess.run([*base, "--backend", "fake", str(script)], env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "fake"
    if native_is_installed():
        return
    proc = subprocess.run([*base, "--backend", "native", str(script)], env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""


def test_install_refuses_a_real_acl_in_process(tmp_path):
    """install() raises ShadowingRefusedError when a real acl is importable; force=True
    installs, uninstall() removes it again."""
    site = _fake_real_acl(tmp_path)
    code = textwrap.dedent("""\
        import sys
        from acl_mem import pyacl
        try:
            pyacl.install()
        except pyacl.ShadowingRefusedError:
            print("refused")
        pyacl.install(force=True)
        import acl, acl.rt
        print(acl is pyacl, acl.rt is pyacl.rt)
        pyacl.uninstall()
        import acl
        print(hasattr(acl, "REAL"), "acl.rt" in sys.modules)
    """)
    env = clean_env()
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["refused", "True", "True", "True", "False"]


def test_install_without_a_real_acl(tmp_path):
    proc = subprocess.run([sys.executable, "-c",
                           "from acl_mem import pyacl\npyacl.install()\npyacl.install()\n"
                           "import acl.util\nprint(acl.util.bytes_to_ptr(b'xy') > 0)\n"],
                          env=clean_env(ACL_MEM_BACKEND="fake"), capture_output=True,
                          text=True, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_help(launcher):
    proc = subprocess.run([sys.executable, *LAUNCHERS[launcher], "--help"], env=clean_env(),
                          capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 0
    assert "--force" in proc.stdout and "exit status" in proc.stdout


# -- in-process details ----------------------------------------------------------------------------


@pytest.fixture
def fake_backend():
    with acl_mem.using_backend("fake") as backend:
        yield backend


@pytest.fixture
def device(fake_backend):
    assert pyacl.rt.set_device(0) == 0
    try:
        yield 0
    finally:
        pyacl.rt.reset_device(0)


@pytest.mark.parametrize(("call", "args"), [
    (pyacl.rt.malloc, ("64", 0)),
    (pyacl.rt.malloc, (64.0, 0)),
    (pyacl.rt.malloc, (np.int64(64), 0)),   # format k: numpy integers are refused
    (pyacl.rt.malloc, (64, 0.0)),
    (pyacl.rt.malloc, (64, 1 << 31)),        # format i: outside the C int range
    (pyacl.rt.malloc, (64,)),
    (pyacl.rt.free, (None,)),
    (pyacl.rt.memcpy, (0, 1, 0, 1)),
    (pyacl.rt.memcpy_async, (0, 1, 0, 1, 1)),   # the stream is required
    (pyacl.rt.synchronize_stream, ()),
    (pyacl.rt.set_device, ("0",)),
    (pyacl.init, (None,)),                   # format s: None is refused
    (pyacl.init, ("a", "b")),
    (pyacl.get_version_str, (None,)),
    (pyacl.create_data_buffer, (np.uint64(1), 1)),
    (pyacl.himpi.dvpp_malloc, (0,)),
])
def test_bad_argument_types_raise_type_error(call, args):
    with pytest.raises(TypeError):
        call(*args)


def test_keyword_arguments_are_refused():
    with pytest.raises(TypeError):
        pyacl.rt.malloc(size=64, policy=0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        pyacl.rt.get_run_mode(mode=1)


def test_index_and_wrapping_rules(device):
    """Format i takes numpy integers; format k wraps negative numbers to 64 bits."""
    ptr, ret = pyacl.rt.malloc(64, np.int32(0))
    assert ret == 0
    assert pyacl.rt.memset(ptr, 64, np.int8(1), 64) == 0
    assert pyacl.rt.free(ptr) == 0
    assert pyacl.rt.malloc(-1, 0) == (0, 100000)   # 2**64 - 1 bytes
    handle = pyacl.create_data_buffer(-1, True)
    assert pyacl.get_data_buffer_addr(handle) == (1 << 64) - 1
    assert pyacl.get_data_buffer_size_v2(handle) == 1
    assert pyacl.destroy_data_buffer(handle) == 0


def test_argumentless_calls_ignore_arguments(device):
    assert pyacl.rt.get_run_mode(0, "x") == (1, 0)
    assert pyacl.rt.get_device(5) == (0, 0)
    assert pyacl.rt.synchronize_device(123) == 0
    assert pyacl.finalize("ignored") == 0


def test_unsupported_names_raise():
    for function in (pyacl.rt.ctx_get_current_default_stream, pyacl.rt.get_event_id,
                     pyacl.rt.synchronize_event_with_timeout, pyacl.mdl.load_from_file,
                     pyacl.op.execute, pyacl.media.dvpp_vpc_resize_async, pyacl.prof.init,
                     pyacl.himpi.vpc_resize, pyacl.util.start_thread, pyacl.create_tensor_desc,
                     pyacl.rt.reserve_mem_address, pyacl.blas.gemm_ex, pyacl.fv.search):
        with pytest.raises(UnsupportedError) as caught:
            function(0)
        assert caught.value.function.startswith("acl.")
        assert isinstance(caught.value, NotImplementedError)


def test_bytes_to_ptr_is_the_objects_storage(fake_backend):
    data = b"abcdefgh" * 4
    address = pyacl.util.bytes_to_ptr(data)
    assert pyacl.util.ptr_to_bytes(address, len(data)) == data
    for wrong in (bytearray(b"ab"), "ab", memoryview(b"ab"), None):
        with pytest.raises(ValueError):
            pyacl.util.bytes_to_ptr(wrong)  # type: ignore[arg-type]


def test_ptr_to_bytes_edges(fake_backend):
    assert pyacl.util.ptr_to_bytes(0, 3) == bytes(3)
    assert pyacl.util.ptr_to_bytes(12345, 0) == b""
    with pytest.raises(ValueError):
        pyacl.util.ptr_to_bytes(16, 4)          # unmapped: no crash
    with pytest.raises(ValueError):
        pyacl.util.ptr_to_bytes(pyacl.util.bytes_to_ptr(b"xy"), -1)


def test_sizes_past_the_memory_are_refused_before_anything_is_allocated(fake_backend):
    """A size far past the host block: ValueError, as for any unreadable range; never a
    MemoryError from a buffer the size asked for, nor a raw OverflowError (the output is
    made only once the range is proven)."""
    host = pyacl.util.bytes_to_ptr(b"x" * 64)
    for size in (1 << 40, (1 << 63) - 1):
        with pytest.raises(ValueError):
            pyacl.util.ptr_to_bytes(host, size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for shape in ((1 << 40,), (1 << 62, 1 << 62), (1 << 64,), (1 << 61, 16)):
            with pytest.raises(ValueError):
                pyacl.util.ptr_to_numpy(host, shape, 2)
        view = pyacl.util.ptr_to_numpy(host, (True, 4), 2)  # True is 1, as in pyACL
        assert view.shape == (1, 4) and view.tobytes() == b"xxxx"


def test_ptr_to_numpy_of_read_only_memory_is_a_read_only_view(fake_backend):
    """Writing through it would kill the process: numpy refuses instead."""
    memory = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ)
    address = np.frombuffer(memory, dtype=np.uint8).__array_interface__["data"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        view = pyacl.util.ptr_to_numpy(address, (16,), 2)
    assert not view.flags.writeable and not view.any()
    with pytest.raises(ValueError):
        view[0] = 1


def test_numpy_helpers():
    array = np.arange(12, dtype=np.int32).reshape(3, 4)
    with pytest.warns(Warning):
        ptr = pyacl.util.numpy_to_ptr(array)
    assert ptr == array.ctypes.data
    strided = array[:, ::2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pyacl.util.numpy_to_ptr(strided)
    assert len(caught) == 2                     # deprecation, then discontiguous
    with pytest.warns(Warning):
        ptr, contiguous = pyacl.util.numpy_contiguous_to_ptr(strided)
    assert contiguous.flags.c_contiguous and np.array_equal(contiguous, strided)
    assert ptr == contiguous.ctypes.data
    with pytest.warns(Warning):
        same_ptr, same = pyacl.util.numpy_contiguous_to_ptr(array)
    assert same is array and same_ptr == array.ctypes.data
    with pytest.raises(ValueError), pytest.warns(Warning):
        pyacl.util.numpy_to_ptr([1, 2])


def test_ptr_to_numpy_arguments(fake_backend):
    array = np.arange(6, dtype=np.float16)
    ptr = array.ctypes.data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        view = pyacl.util.ptr_to_numpy(ptr, (2, 3), 23)          # NPY_HALF
        assert view.dtype == np.float16 and np.array_equal(view.ravel(), array)
        view[0, 0] = 9
        assert array[0] == 9
        with pytest.raises(ValueError):
            pyacl.util.ptr_to_numpy(ptr, [2, 3], 23)              # a list, not a tuple
        with pytest.raises(TypeError):
            pyacl.util.ptr_to_numpy(ptr, (2.0, 3), 23)
        with pytest.raises(ValueError):
            pyacl.util.ptr_to_numpy(ptr, (2,), 17)                # NPY_OBJECT
        zeros = pyacl.util.ptr_to_numpy(0, (2, 2), 11)
        assert zeros.dtype == np.float32 and not zeros.any()
        with pytest.raises(ValueError):
            pyacl.util.ptr_to_numpy(16, (4,), 2)
    with pytest.warns(Warning):
        pyacl.util.ptr_to_numpy(ptr, (1,), 23)


def test_reading_pinned_memory_before_synchronize_is_a_hazard(device):
    """On the fake, ptr_to_bytes of pinned memory a queued copy still writes is reported."""
    stream, ret = pyacl.rt.create_stream()
    assert ret == 0
    host, _ = pyacl.rt.malloc_host(64)
    dev, _ = pyacl.rt.malloc(64, 0)
    assert pyacl.rt.memset(dev, 64, 7, 64) == 0
    assert pyacl.rt.memcpy_async(host, 64, dev, 64, 2, stream) == 0
    with pytest.warns(acl_mem.HazardWarning):
        pyacl.util.ptr_to_bytes(host, 64)
    assert pyacl.rt.synchronize_stream(stream) == 0
    assert pyacl.util.ptr_to_bytes(host, 4) == b"\7" * 4
    assert [pyacl.rt.destroy_stream(stream), pyacl.rt.free(dev),
            pyacl.rt.free_host(host)] == [0, 0, 0]


def test_runtime_errors_become_codes_but_hazard_errors_raise(device):
    """AclError becomes ret; the fake's HazardError (raise mode) is a diagnostic and raises."""
    from acl_mem import fake

    fake.configure(hazards="raise")
    try:
        stream, _ = pyacl.rt.create_stream()
        host, _ = pyacl.rt.malloc_host(64)
        dev, _ = pyacl.rt.malloc(64, 0)
        assert pyacl.rt.memcpy_async(host, 64, dev, 64, 2, stream) == 0
        with pytest.raises(acl_mem.HazardError):
            pyacl.util.ptr_to_bytes(host, 64)
        assert pyacl.rt.synchronize_stream(stream) == 0
        assert [pyacl.rt.destroy_stream(stream), pyacl.rt.free(dev),
                pyacl.rt.free_host(host)] == [0, 0, 0]
    finally:
        fake.configure(hazards="warn")


def test_error_getters_report_the_failure_asked_about(device):
    """acl.get_recent_err_msg names the thread's last failed call, "" before any; the
    last-error getters return its code; none of them, nor a refusal of theirs, changes
    either."""
    import threading

    seen: list[object] = []
    worker = threading.Thread(target=lambda: seen.append(pyacl.get_recent_err_msg()))
    worker.start()
    worker.join()
    assert seen == [""]
    assert pyacl.rt.free(0x1000) == 107000
    text = pyacl.get_recent_err_msg()
    assert "aclrtFree" in text
    assert pyacl.rt.peek_at_last_error(0) == 107000
    assert pyacl.rt.get_last_error(5) == 100000
    assert pyacl.get_recent_err_msg() == text
    assert pyacl.rt.get_last_error(0) == 107000
    assert pyacl.rt.get_last_error(0) == 0
    assert pyacl.get_recent_err_msg() == text


def test_himpi_codes_are_unsigned(device):
    """hi_mpi results are returned as unsigned 32-bit ints (Py_BuildValue "I")."""
    assert pyacl.himpi.dvpp_free(12345) == 107000
    ptr, ret = pyacl.himpi.dvpp_malloc(-1, 64)          # dev_id is reserved
    assert ret in (0, 207000)                           # 207000: no DVPP memory (Ascend950)
    assert not ptr or pyacl.himpi.dvpp_free(ptr) == 0


def test_version_queries(device):
    major, minor, _patch, ret = pyacl.get_version()
    assert ret == 0 and (major, minor) >= (1, 16)
    version, ret = pyacl.get_version_str("runtime")
    assert ret == 0 and version.count(".") == 2
    assert pyacl.get_version_str("no-such-package") == ("", 500000)


def test_an_acl_module_next_to_the_script_counts(launcher, tmp_path):
    """`python script.py` would import an acl.py beside the script: that one is not shadowed
    silently either."""
    (tmp_path / "acl.py").write_text("")
    script = tmp_path / "program.py"
    script.write_text("import acl\nprint(acl.__name__)\n")
    proc = subprocess.run([sys.executable, *LAUNCHERS[launcher], str(script)],
                          env=clean_env(ACL_MEM_BACKEND="fake"), capture_output=True,
                          text=True, timeout=60, cwd="/")
    assert proc.returncode == 2
    assert str(tmp_path / "acl.py") in proc.stderr


def _cpython_parse(unit: str, value: object) -> int | str | None:
    """What CPython's own PyArg_ParseTuple makes of ``value`` for one format unit: the C
    value, or None when it refuses."""
    import ctypes

    parse = ctypes.pythonapi.PyArg_ParseTuple
    parse.restype = ctypes.c_int
    out: ctypes._SimpleCData[int] = {"k": ctypes.c_ulong, "i": ctypes.c_int,
                                     "I": ctypes.c_uint,
                                     "s": ctypes.c_char_p}[unit]()  # type: ignore[assignment]
    parse.argtypes = [ctypes.py_object, ctypes.c_char_p, ctypes.c_void_p]
    try:
        parse((value,), unit.encode(), ctypes.addressof(out))
    except (TypeError, ValueError, OverflowError):
        return None
    result = out.value
    return result.decode() if isinstance(result, bytes) else result


@pytest.mark.parametrize("value", [0, 5, -1, 2**64 + 3, 2**70, True, np.int64(5),
                                   np.uint32(7), 5.0, "5", None, 2**31, -(2**31) - 1,
                                   "path", "nul\0", "é"])
def test_argument_rules_match_cpythons_pyarg_parsetuple(value):
    """The k, i, I and s rules of acl_mem.pyacl are CPython's (docs/pyacl.md, Conventions)."""
    from acl_mem.pyacl import _common

    rules = {"k": _common.as_ulong, "i": _common.as_int, "I": _common.as_uint32,
             "s": _common.as_str}
    for unit, rule in rules.items():
        expected = _cpython_parse(unit, value)
        try:
            got: int | str | None = rule(value, "acl.test", "value")
        except TypeError:
            got = None
        assert got == expected, (unit, value)
