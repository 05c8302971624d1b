"""The drop-in libascendcl.so in other hosts than a C program linked against it: Python
programs that load it with ctypes (the leak report at exit, fork from busy threads), a
program linked against some other libascendcl.so run with LD_PRELOAD, and a fork while
another thread makes the library's first call. The C programs linked against it are
tests/test_engine_programs.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
C_DIR = ROOT / "tests" / "c"


def _compiler() -> str:
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if found is None:
        pytest.skip("no C compiler")
    return found


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACL_MEM_", "LD_"))}
    env.update(extra)
    return env


def _ok(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")], done.stdout
    return lines


def _value(lines: list[str], key: str) -> str:
    found = [line.split(" ", 1)[1] for line in lines if line.startswith(key + " ")]
    assert len(found) == 1, (key, lines)
    return found[0]


_CTYPES_EXIT = """
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
p = ctypes.c_void_p()
assert lib.aclrtSetDevice(0) == 0
assert lib.aclrtMalloc(ctypes.byref(p), 4096, 0) == 0
print("leaked", hex(p.value))
"""


def test_leak_report_once_in_a_python_program(shim_libdir, tmp_path):
    """A Python program that loads the library: the report comes once, at exit, after
    the interpreter has finalized, and names the block."""
    done = subprocess.run([sys.executable, "-c", _CTYPES_EXIT, str(shim_libdir / "libascendcl.so")],
                          env=_env(ACL_MEM_LEAK_REPORT="1"), cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    address = done.stdout.split()[1]
    assert done.stderr.count("never freed") == 1, done.stderr
    assert f"{int(address, 16):#x} (4096 bytes" in done.stderr


_CTYPES_FORK = """
import ctypes, os, sys, threading, time
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
assert lib.aclrtSetDevice(0) == 0
stop = threading.Event()

def busy():
    p = ctypes.c_void_p()
    assert lib.aclrtSetDevice(0) == 0
    while not stop.is_set():
        assert lib.aclrtMalloc(ctypes.byref(p), 4096, 0) == 0
        assert lib.aclrtFree(p) == 0

threads = [threading.Thread(target=busy) for _ in range(2)]
for t in threads:
    t.start()
results = []
for how in ["os.fork"] * 6:
    pid = os.fork()
    if pid == 0:
        p = ctypes.c_void_p()
        ok = (lib.aclrtSetDevice(0) == 0 and lib.aclrtMalloc(ctypes.byref(p), 4096, 0) == 0
              and lib.aclrtFree(p) == 0)
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            results.append(how if status == 0 else f"{how} failed")
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            results.append(how + " hung")
            break
        time.sleep(0.01)
stop.set()
for t in threads:
    t.join()
print(" / ".join(results))
"""


def test_fork_in_a_python_program_that_loaded_the_library(shim_libdir, tmp_path):
    """os.fork() while two threads allocate and free through the library: each child
    allocates and frees in time. (fork() called through ctypes is not tried: it forks
    without the GIL, which another thread may hold, and such a child can hang in Python
    itself, whatever the library does.)"""
    done = subprocess.run([sys.executable, "-c", _CTYPES_FORK,
                           str(shim_libdir / "libascendcl.so")], env=_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == " / ".join(["os.fork"] * 6)


def test_fork_while_another_thread_makes_the_first_call(shim_libdir, headers, tmp_path):
    """Children forked while another thread makes the library's first call all work:
    the library has no start that a fork could cut in half."""
    binary = tmp_path / "fork_threads"
    subprocess.run([_compiler(), "-std=c11", "-pthread", f"-I{headers}",
                    str(C_DIR / "fork_threads.c"), f"-L{shim_libdir}", "-lascendcl", "-o",
                    str(binary)], check=True)
    done = subprocess.run([str(binary), "during-start"],
                          env=_env(LD_LIBRARY_PATH=str(shim_libdir)), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    lines = _ok(done)
    codes = [line.split()[2] for line in lines if line.startswith("child ")]
    assert codes == ["0"] * 5, lines


_LINK_STUB = """
/* What link-only stubs of libascendcl.so do: every call fails with 100039. */
typedef int aclError;
aclError aclInit(const char *config) { (void)config; return 100039; }
aclError aclrtSetDevice(int deviceId) { (void)deviceId; return 100039; }
aclError aclrtMalloc(void **p, unsigned long size, int policy)
{ (void)p; (void)size; (void)policy; return 100039; }
aclError aclrtMemcpy(void *d, unsigned long m, const void *s, unsigned long c, int k)
{ (void)d; (void)m; (void)s; (void)c; (void)k; return 100039; }
aclError aclrtFree(void *p) { (void)p; return 100039; }
"""


def test_ld_preload_runs_a_program_built_against_another_library(shim_libdir, headers,
                                                                 tmp_path):
    """A program linked against some other libascendcl.so (here a link stub that fails
    every call) runs on the fake when the drop-in is preloaded."""
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    (stub_dir / "stub.c").write_text(_LINK_STUB)
    subprocess.run([_compiler(), "-shared", "-fPIC", str(stub_dir / "stub.c"),
                    "-Wl,-soname,libascendcl.so", "-o", str(stub_dir / "libascendcl.so")],
                   check=True)
    binary = tmp_path / "overwrite"
    subprocess.run([_compiler(), "-std=c11", "-rdynamic", f"-I{headers}",
                    str(C_DIR / "overwrite.c"), f"-L{stub_dir}", "-lascendcl", "-o",
                    str(binary)], check=True)
    on_stub = subprocess.run([str(binary)], env=_env(LD_LIBRARY_PATH=str(stub_dir)),
                             capture_output=True, text=True, timeout=60)
    assert on_stub.returncode == 1 and on_stub.stdout.splitlines() == ["FAIL setup"]
    preloaded = subprocess.run(
        [str(binary)], env=_env(LD_LIBRARY_PATH=str(stub_dir),
                                LD_PRELOAD=str(shim_libdir / "libascendcl.so")),
        capture_output=True, text=True, timeout=60)
    lines = _ok(preloaded)
    assert _value(lines, "aclrtMemcpy") == "0" and _value(lines, "aclrtFree") == "0"
