"""C and C++ programs linked against acl_mem's fake libascendcl (the engine in C), with
no Python in the process: the core memory surface (tests/c/core_memory.c), the thread's
last error and its text, threads on two devices, fork() from a busy multithreaded
program, and a C++ global freeing memory after main returns.

The programs are compiled against the real headers when ACL_MEM_HEADERS_DIR is set,
else against the headers installed with acl_mem (tests/conftest.py). Skipped without a C compiler.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from acl_mem._fake.library import RELEASE_DIRS, library_dir
from acl_mem._fake.versions import DEFAULT_CANN

ROOT = Path(__file__).resolve().parent.parent
C_DIR = ROOT / "tests" / "c"
PROGRAMS = ["core_memory.c", "last_error.c", "threads.c", "fork_threads.c",
            "global_owner.cpp", "streams.c", "raii_streams.cpp", "host_guard.c",
            "threads_mixed.c", "leak_at_exit.c", "leak_site.c", "vmm.c", "asan_vmm.c",
            "overwrite.c", "engine_edges.c", "share_ipc.c", "sample_memory.c", "unsupported.c",
            "toolkit_libraries.c", "data_buffer.c", "teardown_errors.c", "init_defaults.c",
            "arenas.c", "capture_threads.c"]
#: Programs linked with other libraries than libascendcl.so and libacl_dvpp.so.
LIBRARIES = {"toolkit_libraries": ("-lascendcl", "-lmsprofiler", "-lacl_op_compiler",
                                   "-lacl_cblas", "-lacl_tdt_channel", "-lacl_tdt_queue")}
#: What an unsupported call returning aclError returns: ACL_ERROR_FEATURE_UNSUPPORTED.
UNSUPPORTED = 200006


def _compiler(cxx: bool) -> str | None:
    names = ("c++", "g++", "clang++") if cxx else ("cc", "gcc", "clang")
    env = os.environ.get("CXX" if cxx else "CC")
    return env or next((found for n in names if (found := shutil.which(n))), None)


@pytest.fixture(scope="module")
def libdir() -> Path:
    # The newest release's library whatever ACL_MEM_FAKE_CANN says: the programs run
    # without acl_mem's variables, and some call what CANN 8.5.0's library lacks.
    return library_dir(DEFAULT_CANN)


@pytest.fixture(scope="module")
def programs(libdir: Path, headers: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("engine_programs")
    built = {}
    for name in PROGRAMS:
        source = C_DIR / name
        cxx = source.suffix == ".cpp"
        compiler = _compiler(cxx)
        if compiler is None:
            continue
        binary = out / source.stem
        # ACL_MEM_ENGINE_CFLAGS: the flags the libraries were built with (a sanitizer
        # build's programs carry its runtime).
        # -rdynamic: the leak report names the program's exported functions.
        command = [compiler, "-std=c++17" if cxx else "-std=c11", "-Wall", "-Werror",
                   "-pthread", "-rdynamic",
                   *shlex.split(os.environ.get("ACL_MEM_ENGINE_CFLAGS", "")),
                   f"-I{headers}", f"-I{C_DIR}", str(source), f"-L{libdir}",
                   *LIBRARIES.get(source.stem, ("-lascendcl", "-lacl_dvpp")),
                   f"-Wl,-rpath,{libdir}", "-o", str(binary)]
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        built[source.stem] = binary
    if not built:
        pytest.skip("no C compiler")
    return built


def _run(binary: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # Nothing of Python reaches the program: no PYTHONPATH, no virtual environment.
    clean = {key: value for key, value in os.environ.items()
             if not key.startswith(("PYTHON", "VIRTUAL_ENV", "ACL_MEM_", "LD_PRELOAD"))}
    return subprocess.run([str(binary), *args], env={**clean, **env}, capture_output=True,
                          text=True, timeout=120)


def _ok(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")], done.stdout
    return lines


def _value(lines: list[str], key: str) -> str:
    return next(line[len(key) + 1:] for line in lines if line.startswith(key + " "))


def test_the_core_memory_surface_from_c(programs):
    lines = _ok(_run(programs["core_memory"]))
    assert lines[-1] == "done"
    assert "ok padding takes two pages" in lines and "ok integer pointer" in lines


def test_no_python_is_in_the_process(programs, libdir):
    """The library needs nothing but the C library: no libpython, no interpreter."""
    for name in ("libascendcl.so", "libacl_dvpp.so", "libacl_dvpp_mpi.so"):
        done = subprocess.run(["ldd", str(libdir / name)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "python" not in done.stdout.lower(), done.stdout


def test_the_last_error_and_its_text(programs):
    lines = _ok(_run(programs["last_error"]))
    texts = [line for line in lines if line.startswith("recent ")]
    assert len(texts) == 2 and texts[0] == texts[1]
    assert "ok acl refusals are not kept" in lines


def test_threads_on_two_devices(programs):
    lines = _ok(_run(programs["threads"]))
    assert sorted(line for line in lines if line.startswith("thread ")) == [
        f"thread {i} device {i % 2} ok" for i in range(4)]


def test_threads_sharing_one_device(programs):
    """More threads than arenas on one device: blocks used, copied and freed across
    arenas, the free memory exact at every point, and an arena's reserve of the pool
    taken back when another thread needs the pool whole."""
    lines = _ok(_run(programs["arenas"]))
    assert lines[-1] == "done"
    assert "ok the whole pool beside another arena's reserve" in lines
    assert "ok the reserve went back to the pool" in lines
    assert "ok resets beside busy threads" in lines


def test_threads_on_fast_paths_beside_whole_engine_calls(programs):
    """Allocation and copies on each thread's own device (its arenas' locks) while other
    threads use pinned memory, streams, events and contexts (the engine lock)."""
    lines = _ok(_run(programs["threads_mixed"]))
    assert lines[-1] == "done"
    assert len([line for line in lines if line.endswith(" ok")]) in (2, 4)


def test_threads_captured_while_another_takes_the_records(programs):
    """The capture acl_mem's recorder reads: every record of four threads once and whole,
    fast paths and engine alike, none for quiet calls or after it stops, and a forked
    child starting with none of the parent's."""
    lines = _ok(_run(programs["capture_threads"]))
    assert lines == ["ok every record once", "ok fork", "ok stopped",
                     "ok switched while busy", "done"]


def test_fork_from_a_busy_multithreaded_program(programs):
    """Children forked while other threads allocate: each child starts with no devices
    and the parent's pointers are unknown there (107000)."""
    lines = _ok(_run(programs["fork_threads"]))
    assert "forks 20 ok" in lines
    assert _value(lines, "parent-pointer") == "107000 107000"
    assert int(_value(lines, "workers").split()[0]) > 0


def test_streams_defer_work_and_events_order_them(programs):
    """Queued work lands at the synchronisation, an event orders two streams, a forced
    destroy drops work, and work on memory freed since is skipped: in count mode
    nothing is said and every call succeeds."""
    done = _run(programs["streams"], ACL_MEM_HAZARDS="count")
    lines = _ok(done)
    assert lines[-1] == "done"
    assert "ok stale work skipped" in lines and "ok ordered by the event" in lines
    assert [_value(lines, key) for key in ("hazard-rc", "skipped-rc", "reset-rc")] == [
        "0", "0", "0"]
    assert done.stderr == ""


def test_hazards_are_said_on_stderr_by_default(programs):
    done = _run(programs["streams"])
    _ok(done)
    kinds = [line.split()[2].rstrip(":") for line in done.stderr.splitlines()]
    assert kinds == ["free-while-queued", "queued-work-on-freed-memory",
                     "reset-with-pending-work"]


def test_hazards_in_raise_mode_fail_the_call_after_its_effect(programs):
    """A C program has no exception: the call that found the hazard returns 507000 with
    its effect done (the free freed: the next malloc gets the same address)."""
    lines = _ok(_run(programs["streams"], ACL_MEM_HAZARDS="raise"))
    assert [_value(lines, key) for key in ("hazard-rc", "skipped-rc", "reset-rc")] == [
        "507000", "507000", "507000"]
    assert "ok same address" in lines


def test_an_unknown_hazard_mode_fails_every_call(programs):
    done = _run(programs["streams"], ACL_MEM_HAZARDS="loud")
    assert done.returncode != 0
    assert done.stderr.count("ACL_MEM_HAZARDS") == 1


def test_host_memory_unmapped_or_protected_after_a_copy_is_refused(programs):
    """Host ranges copied once are copied without a system call afterwards, under a fault
    guard: memory the program protects or unmaps since is 107000, not a crash, and the
    program's own SIGSEGV handler sees only the program's faults."""
    lines = _ok(_run(programs["host_guard"]))
    assert lines[-1] == "done"
    assert "ok the fake's faults stayed the fake's" in lines


def _leak_entries(report: str) -> dict[int, str]:
    """The report's entries by address: the entry's first line and its caller line."""
    entries: dict[int, str] = {}
    lines = report.splitlines()
    for number, line in enumerate(lines):
        found = re.match(r"  \S+ (0x[0-9a-f]+) \(", line)
        if found:
            entries[int(found.group(1), 16)] = "\n".join(lines[number:number + 2])
    return entries


def test_the_leak_report_at_exit_lists_what_was_never_freed(programs):
    done = _run(programs["leak_at_exit"], ACL_MEM_LEAK_REPORT="1")
    lines = _ok(done)
    report = done.stderr
    assert "acl_mem: 3 allocation(s) never freed:" in report, report
    entries = _leak_entries(report)
    for line in lines:
        if line.startswith("leak "):
            _, address, size = line.split()
            assert f"({size} bytes" in entries[int(address, 16)]
    assert int(_value(lines, "freed"), 16) not in entries
    assert "never freed" not in _run(programs["leak_at_exit"]).stderr


@pytest.mark.parametrize("checking", ["0", "1"], ids=["no-checker", "checker"])
def test_the_leak_report_names_the_allocating_c_function(programs, checking):
    """By its exported name (the program is linked with -rdynamic), or by its offset in
    the program when it is static; with the checker on or off."""
    done = _run(programs["leak_site"], ACL_MEM_LEAK_REPORT="yes", ACL_MEM_CHECK=checking)
    lines = _ok(done)
    entries = _leak_entries(done.stderr)
    binary = re.escape(str(programs["leak_site"]))
    found = 0
    for line in lines:
        if line.startswith("leak "):
            _, address, function = line.split()
            entry = entries[int(address, 16)]
            found += 1
            if function == "leak_here":
                assert re.search(rf'File "{binary}", line 0, in leak_here\+0x[0-9a-f]+$',
                                 entry, re.M), entry
            else:
                assert re.search(rf'File "{binary}", line 0, in \+0x[0-9a-f]+ \(no exported',
                                 entry), entry
    assert found == 2


def test_a_leak_report_setting_that_is_not_yes_or_no_fails_every_call(programs):
    done = _run(programs["leak_at_exit"], ACL_MEM_LEAK_REPORT="maybe")
    assert done.returncode != 0
    assert "ACL_MEM_LEAK_REPORT" in done.stdout + done.stderr


def test_virtual_memory_from_c(programs):
    """Reserve, map two handles back to back, copy across the seam, free while mapped,
    the pools' accounting, and an unmap racing with a queued memset (a hazard)."""
    done = _run(programs["vmm"], ACL_MEM_HAZARDS="count")
    lines = _ok(done)
    assert lines[-1] == "done" and _value(lines, "hazard-rc") == "0"
    assert "ok pools whole again" in lines


def test_a_mapping_at_a_fixed_address_of_the_window(programs):
    """The window's start is where AddressSanitizer keeps its shadow memory: the fake never
    maps the reserved addresses themselves (the CI's sanitizer leg builds it so)."""
    assert _ok(_run(programs["asan_vmm"]))[-1] == "ok"


def test_the_leak_report_lists_virtual_memory_still_held(programs, libdir, headers,
                                                          tmp_path):
    source = tmp_path / "vmm_leak.c"
    source.write_text(_VMM_LEAK)
    binary = tmp_path / "vmm_leak"
    compiler = _compiler(False)
    assert compiler is not None
    subprocess.run([compiler, "-std=c11", f"-I{headers}", f"-I{C_DIR}", str(source),
                    *shlex.split(os.environ.get("ACL_MEM_ENGINE_CFLAGS", "")),
                    f"-L{libdir}", "-lascendcl", f"-Wl,-rpath,{libdir}", "-o", str(binary)],
                   check=True)
    done = _run(binary, ACL_MEM_LEAK_REPORT="1")
    lines = _ok(done)
    assert "acl_mem: 3 allocation(s) never freed:" in done.stderr, done.stderr
    reserved, handle = (int(_value(lines, key), 16) for key in ("reserved", "handle"))
    held = re.findall(r"^  (\w+) (0x[0-9a-f]+) \((\d+) bytes, device (\w+)\)$", done.stderr,
                      re.M)
    assert [(api, int(address, 16), size, device) for api, address, size, device in held] == [
        ("aclrtReserveMemAddress", reserved, str(2 << 20), "None"),
        ("aclrtMallocPhysical", handle, str(2 << 20), "0"),
        ("aclrtMapMem", reserved, str(2 << 20), "0")]


_VMM_LEAK = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"
int main(void)
{
    void *base = NULL;
    aclrtDrvMemHandle handle = NULL;
    aclrtPhysicalMemProp prop;
    memset(&prop, 0, sizeof prop);
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    if (aclrtSetDevice(0) || aclrtReserveMemAddress(&base, 2 << 20, 0, NULL, 0)
            || aclrtMallocPhysical(&handle, 2 << 20, &prop, 0)
            || aclrtMapMem(base, 2 << 20, 0, handle, 0))
        return 1;
    printf("reserved %p%c", base, 10);
    printf("handle %p%c", (void *)handle, 10);
    return 0;
}
"""


_RELEASE_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
major, minor, patch = ctypes.c_int32(), ctypes.c_int32(), ctypes.c_int32()
print(lib.aclrtGetVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch)),
      major.value, minor.value, patch.value)
print(hasattr(lib, "aclrtMemGetAddressRange"), hasattr(lib, "aclrtPointerGetAttributes"))
"""


def _naming(stderr: str, word: str) -> int:
    return sum(word in line for line in stderr.splitlines())


def test_an_ascend_style_sample(programs):
    """Init, device, stream, malloc, copies both ways, memset, mem info, bad input,
    teardown; its one unsupported call says so once."""
    done = _run(programs["sample_memory"])
    assert _ok(done)[-1] == "done"
    assert _naming(done.stderr, "aclmdlLoadFromFile") == 1


def test_unsupported_calls_fail_loudly_once_per_function(programs):
    """aclError -> 200006, pointer -> NULL, other values -> 0; one stderr line each."""
    done = _run(programs["unsupported"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines.count(f"aclmdlLoadFromFile {UNSUPPORTED}") == 2
    assert "aclmdlCreateDesc NULL" in lines and "aclGetTensorDescSize 0" in lines
    for name in ("aclmdlLoadFromFile", "aclmdlCreateDesc", "aclGetTensorDescSize"):
        assert _naming(done.stderr, name) == 1, done.stderr
    assert len(done.stderr.splitlines()) == 3


def test_the_abort_switch_aborts_on_the_first_unsupported_call(programs):
    done = _run(programs["unsupported"], ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED="yes")
    assert done.returncode == -signal.SIGABRT
    assert done.stdout == ""
    assert _naming(done.stderr, "aclmdlLoadFromFile") == 1


def test_programs_linking_the_other_toolkit_libraries(programs):
    """libmsprofiler.so and the companions exist: memory works, profiling and operator
    compiling fail loudly."""
    done = _run(programs["toolkit_libraries"])
    assert done.returncode == 0, done.stderr
    values = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert values["aclrtMalloc"] == "0" and values["aclrtFree"] == "0"
    assert values["aclprofInit"] == values["aclopSetCompileFlag"] == str(UNSUPPORTED)
    assert _naming(done.stderr, "aclprofInit") == 1
    assert _naming(done.stderr, "aclopSetCompileFlag") == 1


def test_data_buffers_and_type_sizes(programs):
    lines = _ok(_run(programs["data_buffer"]))
    assert "ok empty buffer" in lines and "ok big size truncated" in lines
    assert _value(lines, "recent").startswith("aclDestroyDataBuffer")


def test_force_reset_finalize_reference_and_tgid(programs):
    done = _run(programs["teardown_errors"])
    lines = _ok(done)
    assert lines[-1] == "done"
    assert _naming(done.stderr, "aclmdlCreateDesc is not supported") == 1


def test_init_config_run_mode_and_default_stream(programs, tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"dump": {"dump_list": []}}))
    from acl_mem._fake.profiles import DEFAULT_PROFILE, resolve_profile

    for path in (str(config), ""):  # "": the acllite helpers' empty configuration
        lines = _ok(_run(programs["init_defaults"], path))
        assert int(_value(lines, "runMode")) == resolve_profile(DEFAULT_PROFILE).run_mode
        assert _value(lines, "device") == "0"
        assert "ok default stream round trip" in lines


def test_a_program_linked_with_libacl_rt_alone(libdir, headers, tmp_path):
    """libacl_rt.so exports the runtime's part of the surface under its own name (a
    filter of libascendcl.so): a program linked with it alone links and runs on the one
    engine."""
    compiler = _compiler(False)
    if compiler is None:
        pytest.skip("no C compiler")
    binary = tmp_path / "rt_only"
    done = subprocess.run([compiler, "-std=c11", "-Wall", "-Werror",
                           *shlex.split(os.environ.get("ACL_MEM_ENGINE_CFLAGS", "")),
                           f"-I{headers}", str(C_DIR / "last_error.c"), f"-L{libdir}",
                           "-lacl_rt", f"-Wl,-rpath,{libdir}", "-o", str(binary)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    needed = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True)
    assert "libacl_rt.so" in needed.stdout and "libascendcl.so" not in needed.stdout
    assert "ok acl refusals are not kept" in _ok(_run(binary))


def test_every_surface_function_is_exported_by_its_library(libdir):
    """Each library exports its part of the surface (acl_mem/shim/surface.json;
    libacl_rt.so the part acl_mem/shim/acl_rt_exports.txt names), and no other."""
    from acl_mem.shim._surface import LIBRARIES, library_functions, load_surface

    every = {f["name"] for f in load_surface()["functions"]}
    for number, soname in LIBRARIES.items():
        done = subprocess.run(["nm", "-D", "--defined-only", str(libdir / soname)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        exported = {line.split()[-1] for line in done.stdout.splitlines() if " T " in line}
        mine = {f["name"] for f in library_functions(number)}
        assert mine and exported & every == mine, (soname, sorted(mine ^ (exported & every)))


def test_a_c_program_records_a_trace_every_tool_reads(programs, tmp_path):
    """ACL_MEM_TRACE in a C program: every call of its four threads, the end line at exit,
    in the format acl-mem's trace tools read (no problem found, nothing left live)."""
    from acl_mem.trace import read_trace, summarize

    path = tmp_path / "threads.jsonl"
    _ok(_run(programs["threads"], ACL_MEM_TRACE=str(path), ACL_MEM_TRACE_STACK="2"))
    trace = read_trace(path)
    assert trace.end is not None and trace.problem_count == 0
    assert trace.header["backend"] == "fake" and trace.header["stack_depth"] == 2
    calls = [e for e in trace.events if "call" in e]
    assert trace.end["calls"] == len(calls) and trace.end["lost"] == 0
    assert min(e["t"] for e in calls) >= 0
    freed = [e for e in calls if e["call"] == "aclrtFree" and e["rc"] == 0]
    mallocs = [e for e in calls if e["call"] == "aclrtMalloc"]
    assert len(mallocs) == len(freed) > 0
    assert all(e["rc"] == 0 and e["ptr"] > 0 and e["dev"] in (0, 1) for e in mallocs)
    assert {e["th"] for e in mallocs} == {2, 3, 4, 5}
    refused = [e for e in calls if e["call"] == "aclrtFree" and e["rc"] != 0]
    assert refused and all(e["rc"] == 107000 for e in refused)
    assert calls[-1]["call"] == "aclFinalize"
    assert summarize(path).never_freed == []


def test_a_forked_child_records_into_a_file_of_its_own(programs, tmp_path):
    path = tmp_path / "fork.jsonl"
    _ok(_run(programs["fork_threads"], ACL_MEM_TRACE=str(path)))
    from acl_mem.trace import read_trace

    parent = read_trace(path)
    children = sorted(tmp_path.glob("fork.jsonl.*"))
    assert children, "the child wrote no file"
    recorded = 0
    for child in children:
        trace = read_trace(child)
        assert trace.problem_count == 0
        assert trace.header["parent_pid"] == parent.header["pid"]
        assert trace.header["run"] == parent.header["run"]
        # Children leave with _exit: every record is in the file all the same.
        recorded += sum(e.get("call") == "aclrtMalloc" for e in trace.events)
    assert recorded > 0


def test_a_trace_path_that_is_a_symlink_is_not_followed(programs, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "trace.jsonl").symlink_to(victim)
    done = _run(programs["core_memory"], ACL_MEM_TRACE=str(tmp_path / "trace.jsonl"))
    assert _ok(done)[-1] == "done"
    assert victim.read_text() == "precious"
    assert _naming(done.stderr, "not recording") == 1


def test_a_trace_path_that_is_a_fifo_neither_blocks_nor_is_written(programs, tmp_path):
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    done = _run(programs["core_memory"], ACL_MEM_TRACE=str(fifo))
    assert _ok(done)[-1] == "done"
    assert _naming(done.stderr, "not recording") == 1


def test_global_destructors_run_before_the_end_of_the_trace(programs, tmp_path):
    """A C++ global freeing device memory after main returns: the end line comes after
    it, so the trace sees the block freed."""
    if "global_owner" not in programs:
        pytest.skip("no C++ compiler")
    from acl_mem.trace import read_trace, summarize

    path = tmp_path / "global.jsonl"
    _ok(_run(programs["global_owner"], ACL_MEM_TRACE=str(path)))
    assert read_trace(path).end is not None
    assert summarize(path).never_freed == []


def test_two_processes_share_device_memory(programs, tmp_path):
    """A exports with pid validation and allows B's pid (aclrtDeviceGetBareTgid); B
    imports, maps and writes; A reads the bytes back. An export B is not allowed is
    refused with 107000, and every record goes with its handle."""
    share = tmp_path / "share"
    lines = _ok(_run(programs["share_ipc"], ACL_MEM_FAKE_SHARE_DIR=str(share)))
    assert _value(lines, "refused") == "107000"
    assert "read back ok" in lines and "B done" in lines
    assert [p.name for p in share.iterdir()] == [".acl_mem_fake.lock"]
    assert (share.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("cann", sorted(RELEASE_DIRS))
def test_a_release_library_exports_what_that_release_does(libdir, cann):
    """CANN 8.5.0's library (lib64/cann-8.5.0) has no aclrtMemGetAddressRange, plays 8.5.0
    by default and refuses to play another release."""
    path = libdir / RELEASE_DIRS[cann] / "libascendcl.so"
    # LD_PRELOAD stays: a sanitizer build of the library needs its runtime preloaded.
    env = {key: value for key, value in os.environ.items() if not key.startswith("ACL_MEM_")}
    done = subprocess.run([sys.executable, "-c", _RELEASE_PROBE, str(path)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    version, symbols = done.stdout.splitlines()
    assert version == "0 1 16 0"  # 8.5.0's aclrtGetVersion
    assert symbols == "False True"
    newer = subprocess.run([sys.executable, "-c", _RELEASE_PROBE, str(path)],
                           env={**env, "ACL_MEM_FAKE_CANN": "9.1.0"}, capture_output=True,
                           text=True, timeout=60)
    assert newer.stdout.split()[0] == "507000" and "cann-8.5.0" in newer.stderr


def test_the_checker_catches_an_overwrite_from_c(programs):
    """A copy past the requested bytes succeeds (it lands in the runtime's padding, as on
    hardware); with ACL_MEM_CHECK=1 the copy and the damaged canaries at the free are
    reported, naming the C function that allocated the block."""
    checked = _run(programs["overwrite"], ACL_MEM_CHECK="1")
    lines = _ok(checked)
    assert _value(lines, "aclrtMemcpy") == "0" and _value(lines, "aclrtFree") == "0"
    kinds = re.findall(r"^acl_mem: memory check ([a-z-]+):", checked.stderr, re.M)
    assert kinds == ["boundary-crossed", "canary-overwritten"], checked.stderr
    assert "offsets 100..127" in checked.stderr
    binary = re.escape(str(programs["overwrite"]))
    assert re.search(rf'File "{binary}", line 0, in fill_past_the_end\+0x', checked.stderr)
    plain = _run(programs["overwrite"])
    assert _ok(plain) == lines and "memory check" not in plain.stderr
    raised = _run(programs["overwrite"], ACL_MEM_CHECK="yes", ACL_MEM_HAZARDS="raise")
    assert [_value(_ok(raised), call) for call in ("aclrtMemcpy", "aclrtFree")] == [
        "507000", "507000"]


def test_a_sent_sigsegv_still_kills_once_the_fault_guard_is_installed(programs):
    """The library's handler takes only faults of its own guarded copies; raise(SIGSEGV)
    goes to the disposition that was there (default: the process dies)."""
    done = _run(programs["engine_edges"], "raise")
    assert done.returncode != 0 and "still alive" not in done.stdout, done.stdout


@pytest.mark.parametrize("edge", ["chain", "fd0", "wrap", "contexts", "resethand"])
def test_edges_found_by_review(programs, edge):
    """A chain of 3000 cross-stream waits synchronised on a 256 KiB thread stack; physical
    memory when a memfd is descriptor 0; host ranges wrapping the address space; more
    contexts made and destroyed than there are slots, and stale handles stay dead; the
    guard after a program's SA_RESETHAND handler took a signal."""
    assert _ok(_run(programs["engine_edges"], edge))[-1] == "done"


def test_an_export_leaves_the_programs_strtok_alone(programs, tmp_path):
    """The share code reads /proc/<pid>/stat without strtok, whose state is the
    program's: a strtok loop around an export goes on where it was."""
    lines = _ok(_run(programs["engine_edges"], "strtok",
                     ACL_MEM_FAKE_SHARE_DIR=str(tmp_path / "share")))
    assert "ok strtok goes on" in lines and lines[-1] == "done"


def test_a_refused_call_with_a_wild_pointer_is_traced_without_reading_it(programs,
                                                                        tmp_path):
    from acl_mem.trace import read_trace

    path = tmp_path / "wild.jsonl"
    assert _ok(_run(programs["engine_edges"], "traceprop", ACL_MEM_TRACE=str(path)))[-1] == \
        "done"
    calls = [e for e in read_trace(path).events if e.get("call") == "aclrtMallocPhysical"]
    assert [(e["rc"], e["prop"]) for e in calls] == [(100000, None), (100000, None)]


def test_cpp_owners_of_streams_and_memory(programs):
    if "raii_streams" not in programs:
        pytest.skip("no C++ compiler")
    assert _ok(_run(programs["raii_streams"]))[-1] == "done"


def test_a_global_freeing_memory_after_main_returns(programs):
    """The leak report runs after the C++ global's destructor freed its block."""
    if "global_owner" not in programs:
        pytest.skip("no C++ compiler")
    done = _run(programs["global_owner"], ACL_MEM_LEAK_REPORT="1")
    _ok(done)
    assert "freed 0" in done.stderr and "never freed" not in done.stderr


@pytest.mark.parametrize("setting", ["ACL_MEM_FAKE_PROFILE=no-such-chip",
                                     "ACL_MEM_FAKE_CANN=7.0"])
def test_an_unusable_setting_fails_every_call_and_says_why(programs, setting):
    name, value = setting.split("=")
    done = _run(programs["last_error"], **{name: value})
    assert done.returncode != 0
    assert name in done.stdout  # the text of the failed call
    assert done.stderr.count(name) == 1  # said once, at the start


def test_the_readme_block_builds_and_runs_a_program_on_the_c_library(request, tmp_path):
    """The README's shell block under "The fake library in C", run as written from the
    repository root: it prints what the README shows below it."""
    import re
    import sys

    if os.environ.get("ACL_MEM_FAKE_LIBRARY_DIR"):
        pytest.skip("the README's block uses the installed library, not another build")
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The fake library in C"):]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    expected = re.search(r"```text\n(.*?)```", section, flags=re.S)
    assert block is not None and expected is not None
    env = {key: value for key, value in os.environ.items()
           if key not in ("ACL_MEM_FAKE_PROFILE", "ACL_MEM_FAKE_CANN", "LD_PRELOAD")}
    env.update(TMPDIR=str(tmp_path),
               PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    done = subprocess.run(["bash", "-e", "-c", block[1]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected[1].splitlines()
