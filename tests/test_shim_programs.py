"""C and C++ programs on the drop-in libascendcl.so beyond plain memory calls: data
buffers, teardown, the recent error text, start-up defaults, threads on two devices,
RAII in C++, the leak report at exit, fork() from a busy multithreaded program, two
processes sharing VMM memory, and allocation sites that name the C caller
(acl_mem/shim/_extra.py has the choices).

The programs in tests/c/ are compiled against the real headers when
ACL_MEM_HEADERS_DIR is set, else against the minimal acl/acl.h the shim generates; the
libraries are built once for this module into a fresh cache. Skipped, with the reason,
where there is no C compiler or no shared libpython.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from shim_support import skip_without_a_build

from acl_mem.shim import _build
from acl_mem.shim._csource import load_surface, unsupported_names
from acl_mem.shim._decls import function_names
from acl_mem.shim._extra import ENGINE, FRONT_C, supported_names

ROOT = Path(__file__).resolve().parent.parent
C_DIR = ROOT / "tests" / "c"
PROGRAMS = ["data_buffer.c", "teardown_errors.c", "init_defaults.c", "threads.c",
            "leak_at_exit.c", "raii_streams.cpp", "fork_threads.c", "share_ipc.c",
            "leak_site.c", "overwrite.c", "last_error.c", "global_owner.cpp"]

skip_without_a_build()


def _cxx() -> list[str] | None:
    found = next((shutil.which(n) for n in ("c++", "g++", "clang++") if shutil.which(n)), None)
    return [found] if found else None


@pytest.fixture(scope="module")
def libdir(shim_libdir: Path) -> Path:
    return shim_libdir


@pytest.fixture(scope="module")
def include(headers: Path) -> Path:
    return headers


@pytest.fixture(scope="module")
def programs(libdir, include, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("programs")
    built = {}
    for name in PROGRAMS:
        source = C_DIR / name
        if source.suffix == ".cpp":
            cxx = _cxx()
            if cxx is None:
                continue  # the C++ test skips itself
            command = [*cxx, "-std=c++17"]
        else:
            command = [*_build.compiler(), "-std=c11"]
        binary = out / source.stem
        # -rdynamic: the program's functions get dynamic symbols, so that the checker's
        # stacks can name them (leak_site.c; acl_mem/shim/_extra.py, "Sites").
        command += ["-Wall", "-Werror", "-pthread", "-rdynamic", f"-I{include}", str(source),
                    f"-L{libdir}", "-lascendcl", "-o", str(binary)]
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        built[source.stem] = binary
    return built


def _run(binary: Path, libdir: Path, cwd: Path, *args: str,
         **extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    for name in ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", "ACL_MEM_LEAK_REPORT",
                 "ACL_MEM_FAKE_PROFILE", "ACL_MEM_CHECK"):
        env.pop(name, None)
    env.update(extra)
    return subprocess.run([str(binary), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _ok(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")], done.stdout
    assert lines[-1] == "done", done.stdout
    return lines


def _value(lines: list[str], key: str) -> str:
    found = [line.split(" ", 1)[1] for line in lines if line.startswith(key + " ")]
    assert len(found) == 1, (key, lines)
    return found[0]


def test_supported_set_is_the_bound_functions_and_the_shims_own():
    """63 bound + 9 in C in the front + 1 in the engine; every other export fails loudly."""
    surface = {f["name"]: f for f in load_surface()["functions"]}
    supported = supported_names()
    assert len(function_names()) == 63 and len(FRONT_C) == 9 and len(ENGINE) == 1
    assert len(supported) == len(set(supported)) == 73
    assert set(supported) <= set(surface)
    assert set(unsupported_names()) == set(surface) - set(supported)
    for name, (ret, params) in ENGINE.items():  # the engine's header-free prototypes
        assert (surface[name]["ret"], surface[name]["params"]) == (ret, params)


def test_data_buffers_and_type_sizes(programs, libdir, tmp_path):
    lines = _ok(_run(programs["data_buffer"], libdir, tmp_path))
    assert "ok empty buffer" in lines and "ok big size truncated" in lines
    recent = _value(lines, "recent")
    assert recent.startswith("aclDestroyDataBuffer(dataBuffer=NULL): ACL_ERROR_INVALID_PARAM")


def test_force_reset_finalize_reference_recent_error_and_tgid(programs, libdir, tmp_path):
    done = _run(programs["teardown_errors"], libdir, tmp_path)
    lines = _ok(done)
    # The text of a failed call: the call and its arguments, the code, acl_mem's hint.
    oom = _value(lines, "oom")
    assert oom.startswith("aclrtMalloc(size=1099511627776, policy=0x0): "
                          "ACL_ERROR_RT_MEMORY_ALLOCATION (207001). Asked for 1024 GiB")
    assert re.match(r"aclrtFree\(devPtr=0x[0-9a-f]+\): ACL_ERROR_RT_PARAM_INVALID \(107000\)"
                    r"\. The pointer is not a live allocation", _value(lines, "free"))
    assert done.stderr.count("aclmdlCreateDesc is not supported") == 1


def test_init_config_run_mode_default_context_and_default_stream(programs, libdir, tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"dump": {"dump_list": []}}))
    from acl_mem._fake.profiles import DEFAULT_PROFILE, resolve_profile

    for path in (str(config), ""):  # "": the acllite helpers' empty configuration
        lines = _ok(_run(programs["init_defaults"], libdir, tmp_path, path))
        assert int(_value(lines, "runMode")) == resolve_profile(DEFAULT_PROFILE).run_mode
        assert _value(lines, "device") == "0"
        assert "ok default stream round trip" in lines


def test_four_threads_on_two_devices(programs, libdir, tmp_path):
    lines = _ok(_run(programs["threads"], libdir, tmp_path))
    assert sorted(line for line in lines if line.startswith("thread ")) == [
        f"thread {i} device {i % 2} ok" for i in range(4)]


def test_cxx_raii_wrappers_and_a_vector_of_streams(programs, libdir, tmp_path):
    if "raii_streams" not in programs:
        pytest.skip("no C++ compiler")
    lines = _ok(_run(programs["raii_streams"], libdir, tmp_path))
    assert "ok 4 streams" in lines and "ok round trips" in lines
    assert "207001" in _value(lines, "ok exception")


def test_leak_report_at_exit(programs, libdir, tmp_path):
    done = _run(programs["leak_at_exit"], libdir, tmp_path, ACL_MEM_LEAK_REPORT="1")
    lines = _ok(done)
    leaks = [line.split()[1:] for line in lines if line.startswith("leak ")]
    report = done.stderr
    assert "acl_mem: 3 allocation(s) never freed:" in report, report
    for address, size in leaks:
        assert re.search(rf"{int(address, 16):#x} \({size} bytes", report), (address, report)
    assert _value(lines, "freed") not in report
    assert report.count("never freed") == 1
    # Without the switch: nothing at exit.
    quiet = _run(programs["leak_at_exit"], libdir, tmp_path)
    _ok(quiet)
    assert "never freed" not in quiet.stderr


_CTYPES_EXIT = """
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
p = ctypes.c_void_p()
assert lib.aclrtSetDevice(0) == 0
assert lib.aclrtMalloc(ctypes.byref(p), 4096, 0) == 0
print("leaked", hex(p.value))
"""


def test_leak_report_once_in_a_python_program_and_no_crash_after_finalize(libdir, tmp_path):
    """A Python program that loads the library: Python's own atexit reports (acl_mem.fake
    imported with the switch set), the C hook must neither report again nor touch the
    finalized interpreter."""
    env = dict(os.environ, ACL_MEM_BACKEND="fake", ACL_MEM_LEAK_REPORT="1")
    code = "import acl_mem.fake\n" + _CTYPES_EXIT
    done = subprocess.run([sys.executable, "-c", code, str(libdir / "libascendcl.so")],
                          env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("never freed") == 1, done.stderr
    # Without acl_mem.fake imported before exit: no report (Python finalized first), no crash.
    done = subprocess.run([sys.executable, "-c", _CTYPES_EXIT, str(libdir / "libascendcl.so")],
                          env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "leaked 0x" in done.stdout


def test_fork_while_threads_are_busy_in_the_fake(programs, libdir, tmp_path):
    """20 forks while 4 threads allocate and free: every child sets its device, allocates
    and frees in time (the program kills a child after 10 s and fails); the parent's
    block freed in a child gives 107000, before and after aclrtSetDevice, as in a child
    forked by a Python program (tests/test_fork.py)."""
    lines = _ok(_run(programs["fork_threads"], libdir, tmp_path))
    assert "forks 20 ok" in lines
    assert _value(lines, "parent-pointer") == "107000 107000"
    assert int(_value(lines, "workers").split()[0]) > 0


def test_fork_while_another_thread_starts_the_fake(programs, libdir, tmp_path):
    """A child forked during the start cannot finish it: its calls return 500000 (and say
    why) instead of waiting for a thread it does not have; later children work."""
    done = _run(programs["fork_threads"], libdir, tmp_path, "during-start")
    lines = _ok(done)
    codes = [line.split()[2] for line in lines if line.startswith("child ")]
    assert len(codes) == 5 and set(codes) <= {"0", "500000"}, lines
    if "500000" in codes:
        assert "forked while another thread was starting it" in done.stderr


_CTYPES_FORK = """
import ctypes, os, sys, threading, time
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
libc = ctypes.CDLL(None)
assert lib.aclrtSetDevice(0) == 0  # the fake runs before the threads and the forks
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
for how in ("os.fork", "fork through ctypes") * 3:
    pid = os.fork() if how == "os.fork" else libc.fork()
    if pid == 0:
        p = ctypes.c_void_p()
        ok = (lib.aclrtSetDevice(0) == 0 and lib.aclrtMalloc(ctypes.byref(p), 4096, 0) == 0
              and lib.aclrtFree(p) == 0)
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 10
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            results.append(how + " hung")
            break
        time.sleep(0.01)
    else:
        results.append(how)
stop.set()
for t in threads:
    t.join()
print(" / ".join(results))
"""


def test_fork_in_a_python_program_that_loaded_the_library(libdir, tmp_path):
    """os.fork() does Python's fork handling itself (the shim's handlers see it holds the
    GIL and stay out); fork() called through ctypes (GIL released) gets it from them."""
    env = dict(os.environ, ACL_MEM_BACKEND="fake")
    done = subprocess.run([sys.executable, "-c", _CTYPES_FORK, str(libdir / "libascendcl.so")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == " / ".join(["os.fork", "fork through ctypes"] * 3)


def test_two_processes_share_device_memory(programs, libdir, tmp_path):
    """A exports with pid validation and allows B's pid (aclrtDeviceGetBareTgid); B
    imports, maps and writes; A reads the bytes back. An export B is not allowed is
    refused with 107000."""
    share = tmp_path / "share"
    done = _run(programs["share_ipc"], libdir, tmp_path, ACL_MEM_FAKE_SHARE_DIR=str(share))
    lines = _ok(done)
    assert _value(lines, "refused") == "107000"
    assert "read back ok" in lines and "B done" in lines
    # Every record went with its handle; only the lock file stays.
    assert [p.name for p in share.iterdir()] == [".acl_mem_fake.lock"]


def _leak_entries(report: str) -> dict[int, str]:
    """The leak report's entries by address: each entry's header and stack lines."""
    entries: dict[int, list[str]] = {}
    current: list[str] = []
    for line in report.split("never freed:", 1)[1].splitlines():
        header = re.match(r"  \w+ (0x[0-9a-f]+) \(", line)
        if header:
            current = entries.setdefault(int(header.group(1), 16), [])
        current.append(line)
    return {address: "\n".join(lines) for address, lines in entries.items()}


@pytest.mark.parametrize("checking", [True, False], ids=["checker", "no-checker"])
def test_leak_report_names_the_c_caller(programs, libdir, tmp_path, checking):
    """The leak report says which C function allocated each block, with the checker on
    (its allocation stacks) or off (the library notes each block's caller): leak_here
    (exported: -rdynamic) by name, the static one by its offset."""
    env = {"ACL_MEM_LEAK_REPORT": "1"}
    if checking:
        env["ACL_MEM_CHECK"] = "1"
    done = _run(programs["leak_site"], libdir, tmp_path, **env)
    lines = _ok(done)
    report = done.stderr
    binary = str(programs["leak_site"])
    entries = _leak_entries(report)
    found = 0
    for line in lines:
        if line.startswith("leak "):
            _, address, function = line.split()
            entry = entries[int(address, 16)]
            found += 1
            if function == "leak_here":
                assert re.search(rf'File "{re.escape(binary)}", line 0, in leak_here\+0x[0-9a-f]+$',
                                 entry, re.M), entry
            else:
                assert re.search(rf'File "{re.escape(binary)}", line 0, in \+0x[0-9a-f]+ '
                                 r"\(no exported symbol here", entry), entry
    assert found == 2
    assert "marshalling" not in report and "acl_mem" not in report.split("never freed:")[1]
    assert "stack recorded only" not in report


def test_checker_catches_an_overwrite_from_c(programs, libdir, tmp_path):
    """A copy past the requested bytes succeeds (it lands in the runtime's padding), and
    with the checker on both findings are reported, naming the allocating C function."""
    checked = _run(programs["overwrite"], libdir, tmp_path, ACL_MEM_CHECK="1")
    lines = _ok(checked)
    assert _value(lines, "aclrtMemcpy") == "0" and _value(lines, "aclrtFree") == "0"
    kinds = re.findall(r"MemoryCheckWarning: ([a-z-]+):", checked.stderr)
    assert kinds == ["boundary-crossed", "canary-overwritten"], checked.stderr
    binary = re.escape(str(programs["overwrite"]))
    assert re.search(rf'File "{binary}", line 0, in fill_past_the_end\+0x', checked.stderr)
    plain = _run(programs["overwrite"], libdir, tmp_path)
    assert _ok(plain) == lines and "MemoryCheckWarning" not in plain.stderr


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


def test_ld_preload_runs_a_program_built_against_another_library(programs, libdir,
                                                                 tmp_path):
    """A program linked against some other libascendcl.so (here a link stub that fails
    every call) runs on the fake when the shim is preloaded."""
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    (stub_dir / "stub.c").write_text(_LINK_STUB)
    subprocess.run([*_build.compiler(), "-shared", "-fPIC", str(stub_dir / "stub.c"),
                    "-Wl,-soname,libascendcl.so", "-o", str(stub_dir / "libascendcl.so")],
                   check=True)
    binary = tmp_path / "overwrite"
    subprocess.run([*_build.compiler(), "-std=c11", "-rdynamic", f"-I{libdir.parent / 'include'}",
                    str(C_DIR / "overwrite.c"), f"-L{stub_dir}", "-lascendcl", "-o",
                    str(binary)], check=True)
    on_stub = _run(binary, stub_dir, tmp_path)
    assert on_stub.returncode == 1 and on_stub.stdout.splitlines() == ["FAIL setup"]
    preloaded = _run(binary, stub_dir, tmp_path,
                     LD_PRELOAD=str(libdir / "libascendcl.so"))
    lines = _ok(preloaded)
    assert _value(lines, "aclrtMemcpy") == "0" and _value(lines, "aclrtFree") == "0"


def test_error_getters_report_the_failure_asked_about(programs, libdir, tmp_path):
    """aclrtGetLastError / aclrtPeekAtLastError from C: the thread's last runtime failure,
    and a refusal of theirs (a bad level) changes neither it nor aclGetRecentErrMsg."""
    lines = _ok(_run(programs["last_error"], libdir, tmp_path))
    texts = [line for line in lines if line.startswith("recent ")]
    assert len(texts) == 2 and texts[0] == texts[1]
    assert "ok acl refusals are not kept" in lines


def test_a_c_program_with_acl_mem_trace_records_every_call_and_the_end(programs, libdir,
                                                                      tmp_path):
    """ACL_MEM_TRACE in a C program: the recording ends at the program's exit like a Python
    program's (every call, the end line), so the summary sees nothing left live."""
    from acl_mem.trace import read_trace, summarize

    path = tmp_path / "threads.jsonl"
    _ok(_run(programs["threads"], libdir, tmp_path, ACL_MEM_TRACE=str(path)))
    trace = read_trace(path)
    assert trace.end is not None
    assert trace.problem_count == 0
    freed = [e for e in trace.events if e.get("call") == "aclrtFree" and e.get("rc") == 0]
    mallocs = [e for e in trace.events if e.get("call") == "aclrtMalloc"]
    assert len(mallocs) == len(freed) > 0  # each thread's failed free of a bogus pointer aside
    assert [e["call"] for e in trace.events if "call" in e][-1] == "aclFinalize"
    assert summarize(path).never_freed == []


def test_global_destructors_run_before_the_leak_report_and_the_end_of_the_trace(
        programs, libdir, tmp_path):
    """A C++ global freeing device memory in its destructor (after main returns): the
    exit hook runs after it, so the report and the trace see the block freed."""
    if "global_owner" not in programs:
        pytest.skip("no C++ compiler")
    from acl_mem.trace import summarize

    path = tmp_path / "global.jsonl"
    done = _run(programs["global_owner"], libdir, tmp_path, ACL_MEM_LEAK_REPORT="1",
                ACL_MEM_TRACE=str(path))
    _ok(done)
    assert "freed 0" in done.stderr
    assert "never freed" not in done.stderr
    assert summarize(path).never_freed == []
