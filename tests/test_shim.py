"""The drop-in libascendcl.so (acl_mem/shim): C programs, ctypes, start-up failures.

The libraries are built once for this module, by two concurrent ``acl-mem shim
--print-libdir`` runs into a fresh cache (they must agree and not corrupt each other).
The C programs in tests/c/ compile against the real headers when ACL_MEM_HEADERS_DIR
is set, else against the minimal acl/acl.h the shim generates (acl_mem/shim/_csource.py).
Skipped, with the reason, where there is no C compiler or no shared libpython.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from shim_support import skip_without_a_build

from acl_mem.shim import _build
from acl_mem.shim._csource import START_FAILED, UNSUPPORTED

ROOT = Path(__file__).resolve().parent.parent
C_DIR = ROOT / "tests" / "c"

skip_without_a_build()


def _cli(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "acl_mem", "shim", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory) -> dict[str, str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg")))
    env.pop("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", None)
    return env


@pytest.fixture(scope="module")
def libdir(cache_env) -> Path:
    runs = [_cli("--print-libdir", env=cache_env) for _ in range(2)]
    outputs = [run.communicate() for run in runs]
    for run, (_, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err
    printed = {out.strip() for out, _ in outputs}
    assert len(printed) == 1, printed  # stdout holds the directory only
    directory = Path(printed.pop())
    assert directory.is_relative_to(cache_env["XDG_CACHE_HOME"])
    return directory


@pytest.fixture(scope="module")
def include(headers: Path) -> Path:
    return headers


#: Programs linked with more of the toolkit's libraries than libascendcl.so.
_EXTRA_LIBRARIES = {"toolkit_libraries": ("-lmsprofiler", "-lacl_op_compiler", "-lacl_cblas",
                                          "-lacl_tdt_channel", "-lacl_tdt_queue"),
                   "core_memory": ("-lacl_dvpp",)}


@pytest.fixture(scope="module")
def programs(libdir, include, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("programs")
    built = {}
    for source in sorted(C_DIR.glob("*.c")):
        binary = out / source.stem
        command = [*_build.compiler(), "-std=c11", "-Wall", "-Werror", f"-I{include}",
                   str(source), f"-L{libdir}", "-lascendcl",
                   *_EXTRA_LIBRARIES.get(source.stem, ()), "-o", str(binary)]
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        built[source.stem] = binary
    return built


def _run(binary: Path, libdir: Path, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    env.pop("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", None)
    env.update(extra)
    # Run from an empty directory: nothing of the checkout is on the embedded sys.path.
    return subprocess.run([str(binary)], env=env, cwd=tmp_path, capture_output=True, text=True)


def _values(stdout: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)


def _fake_double_free_code() -> int:
    """What the fake returns for a second aclrtFree, asked from Python."""
    from acl_mem._fake import FakeBackend
    from acl_mem._fake.config import current_profile

    fake = FakeBackend(current_profile())
    assert fake.aclrtSetDevice(0) == 0
    rc, ptr = fake.aclrtMalloc(64, 0)
    assert rc == 0 and fake.aclrtFree(ptr) == 0
    return fake.aclrtFree(ptr)


def _lines_naming(stderr: str, word: str) -> int:
    return sum(word in line for line in stderr.splitlines())


def test_ascend_style_sample_runs_on_the_fake(programs, libdir, tmp_path):
    """Init, device, stream, malloc, copies both ways, memset, mem info, bad input, teardown."""
    done = _run(programs["sample_memory"], libdir, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout and done.stdout.splitlines()[-1] == "done"
    assert int(_values(done.stdout)["double"].split("=")[1]) == _fake_double_free_code()
    assert _lines_naming(done.stderr, "aclmdlLoadFromFile") == 1


def test_unsupported_calls_fail_loudly_once_per_function(programs, libdir, tmp_path):
    """aclError -> 200006, pointer -> NULL, other values -> 0; one stderr line each."""
    done = _run(programs["unsupported"], libdir, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines.count(f"aclmdlLoadFromFile {UNSUPPORTED}") == 2
    assert "aclmdlCreateDesc NULL" in lines and "aclGetTensorDescSize 0" in lines
    for name in ("aclmdlLoadFromFile", "aclmdlCreateDesc", "aclGetTensorDescSize"):
        assert _lines_naming(done.stderr, name) == 1, done.stderr
    assert len(done.stderr.splitlines()) == 3


def test_programs_linking_the_other_toolkit_libraries_link_and_run(programs, libdir,
                                                                    tmp_path):
    """libmsprofiler.so and the companions of libascendcl.so exist, so a program linked
    with them runs: memory works, profiling and operator compiling fail loudly."""
    done = _run(programs["toolkit_libraries"], libdir, tmp_path)
    assert done.returncode == 0, done.stderr
    values = _values(done.stdout)
    assert values["aclrtMalloc"] == "0" and values["aclrtFree"] == "0"
    assert values["aclprofInit"] == values["aclopSetCompileFlag"] == str(UNSUPPORTED)
    assert _lines_naming(done.stderr, "aclprofInit") == 1
    assert _lines_naming(done.stderr, "aclopSetCompileFlag") == 1


def test_abort_switch_aborts_on_the_first_unsupported_call(programs, libdir, tmp_path):
    done = _run(programs["unsupported"], libdir, tmp_path, ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED="1")
    assert done.returncode == -signal.SIGABRT
    assert done.stdout == ""
    assert _lines_naming(done.stderr, "aclmdlLoadFromFile") == 1


@pytest.mark.parametrize("override", ["ACL_MEM_SHIM_SYS_PATH", "ACL_MEM_SHIM_LIBPYTHON"])
def test_a_failed_start_fails_every_call(programs, libdir, tmp_path, override):
    """Build-time paths pointing nowhere: every call returns 500000, never 0; said once."""
    nowhere = str(tmp_path / "nowhere")
    done = _run(programs["start_failure"], libdir, tmp_path, **{override: nowhere})
    assert done.returncode == 0, done.stderr
    values = _values(done.stdout)
    for call in ("aclInit", "aclrtSetDevice", "aclrtMalloc", "aclrtGetMemInfo", "aclrtFree"):
        assert values[call] == str(START_FAILED), (call, done.stdout)
    assert values["aclrtGetSocName"] == "NULL" and values["devPtr"] == "untouched"
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert nowhere in done.stderr  # the reason names what was missing


_CTYPES_CHECK = """
import ctypes, datetime, os, sys
import acl_mem.fake, acl_mem._backend as backend
# A running program has looked up attributes of the capsule type: cffi's start-up lock
# must still work (acl_mem/shim/_engine.py, acl_mem_shim_start_cffi).
getattr(datetime.datetime_CAPI, "missing", None)
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
pointer = ctypes.c_void_p()
assert lib.aclrtSetDevice(0) == 0
assert lib.aclrtMalloc(ctypes.byref(pointer), 4096, 0) == 0
live = [a.address for a in acl_mem.fake.leaks()]
assert pointer.value in live, (pointer.value, live)
assert backend.get().name == "fake"
assert lib.aclrtFree(pointer) == 0
assert pointer.value not in [a.address for a in acl_mem.fake.leaks()]
assert lib.aclrtFree(pointer) != 0
print("shared")
"""


def test_ctypes_rtld_local_in_a_fresh_python_shares_its_fake(libdir, tmp_path):
    """RTLD_LOCAL: libpython's symbols must still reach _cffi_backend; one fake per process."""
    env = dict(os.environ, ACL_MEM_BACKEND="fake")
    done = subprocess.run([sys.executable, "-c", _CTYPES_CHECK, str(libdir / "libascendcl.so")],
                          env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "shared"


def test_ctypes_in_this_process_shares_the_active_fake(libdir):
    import ctypes

    import acl_mem.fake
    from acl_mem import _backend

    with _backend.using_backend("fake") as fake:
        lib = ctypes.CDLL(str(libdir / "libascendcl.so"), mode=os.RTLD_LOCAL)
        pointer = ctypes.c_void_p()
        assert lib.aclrtSetDevice(0) == 0
        assert lib.aclrtMalloc(ctypes.byref(pointer), 4096, 0) == 0
        assert pointer.value in [a.address for a in acl_mem.fake.leaks()]
        assert any(b.start == pointer.value for b in fake.live_blocks())
        assert lib.aclrtFree(pointer) == 0
        assert lib.aclrtResetDevice(0) == 0


def test_exec_runs_a_program_with_the_libraries(programs, cache_env, libdir, tmp_path):
    done = subprocess.run([sys.executable, "-m", "acl_mem.shim", "exec", "--",
                           str(programs["sample_memory"])], env=cache_env, cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "done"
    missing = subprocess.run([sys.executable, "-m", "acl_mem.shim", "exec", "--",
                              str(tmp_path / "absent")], env=cache_env, capture_output=True,
                             text=True)
    assert missing.returncode == 127


def test_build_out_directory(tmp_path, cache_env):
    done = subprocess.run([sys.executable, "-m", "acl_mem", "shim", "build", "--out",
                           str(tmp_path)], env=cache_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == tmp_path / "lib64"
    names = sorted(p.name for p in (tmp_path / "lib64").iterdir())
    assert names == ["libacl_cblas.so", "libacl_dvpp.so", "libacl_dvpp_mpi.so",
                     "libacl_mem_shim_engine.so", "libacl_op_compiler.so", "libacl_rt.so",
                     "libacl_rt_impl.so", "libacl_tdt_channel.so", "libacl_tdt_queue.so",
                     "libascendcl.so", "libmsprofiler.so"]
    assert (tmp_path / "include" / "acl" / "ops" / "acl_dvpp.h").is_file()
    assert (tmp_path / "set_env.sh").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".build")]


def test_missing_compiler_says_what_to_install(tmp_path, cache_env, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(_build.ShimBuildError) as raised:
        _build.compiler()
    assert raised.value.missing == "compiler"
    env = dict(cache_env, CC=str(tmp_path / "no-such-cc"), XDG_CACHE_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "acl_mem", "shim", "--print-libdir"],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == ""


def test_missing_libpython_says_what_to_install(monkeypatch):
    monkeypatch.setattr(_build.sysconfig, "get_config_var", lambda name: None)
    with pytest.raises(_build.ShimBuildError) as raised:
        _build._libpython("0.0")
    assert raised.value.missing == "libpython"


def test_no_command_is_a_usage_error(cache_env):
    done = subprocess.run([sys.executable, "-m", "acl_mem.shim"], env=cache_env,
                          capture_output=True, text=True)
    assert done.returncode == 2



def test_every_surface_function_is_exported_by_its_library(libdir):
    """Each library exports exactly its part of acl_mem/shim/surface.json (libacl_rt.so:
    the part acl_mem/shim/acl_rt_exports.txt names)."""
    import ctypes

    from acl_mem.shim._csource import FRONT_LIBRARIES, library_functions, load_surface

    functions = load_surface()["functions"]
    for number, soname in FRONT_LIBRARIES.items():
        library = ctypes.CDLL(str(libdir / soname), mode=os.RTLD_LOCAL)
        mine = [f["name"] for f in library_functions(number)]
        assert mine and all(hasattr(library, name) for name in mine), soname
        others = [f["name"] for f in functions if f["name"] not in mine]
        assert not any(hasattr(library, name) for name in others), soname


def test_the_readme_example_builds_with_the_printed_include_directory(libdir, cache_env,
                                                                      tmp_path):
    """examples/c/hello_acl.c as the README compiles it: headers from
    --print-includedir (no CANN toolkit needed), run through `acl-mem shim exec`."""
    printed = _cli("--print-includedir", env=cache_env).communicate()[0].strip()
    include = Path(printed)
    assert include == libdir.parent / "include" and (include / "acl" / "acl.h").is_file()
    binary = tmp_path / "hello_acl"
    done = subprocess.run([*_build.compiler(), "-std=c11", "-Wall", "-Werror", f"-I{include}",
                           str(ROOT / "examples" / "c" / "hello_acl.c"), f"-L{libdir}",
                           "-lascendcl", "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = subprocess.run([sys.executable, "-m", "acl_mem", "shim", "exec", "--", str(binary)],
                         env=cache_env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    values = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    assert values["read back"] == "hello, device"
    assert run.stdout.splitlines()[-1] == "aclrtMalloc(1 TiB) -> 207001"


@pytest.mark.parametrize("make", ["foreign", "symlink", "group-writable"])
def test_a_cache_another_user_could_write_is_refused(tmp_path, monkeypatch, make):
    """Libraries from a directory another user controls would run their code in every
    program that loads them: refused before anything is built or loaded. A directory of
    our own that others may write is closed to them instead."""
    cache = tmp_path / "xdg" / "acl_mem" / "shim"
    if make == "symlink":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        cache.parent.mkdir(parents=True)
        cache.symlink_to(elsewhere)
    else:
        cache.mkdir(parents=True)
        cache.chmod(0o777)
        if make == "foreign":
            if os.geteuid() != 0:
                pytest.skip("giving a directory to another user needs root")
            os.chown(cache, 65534, 65534)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if make == "group-writable":
        monkeypatch.setattr(_build, "inputs", _no_build)
        with pytest.raises(_NotBuilt):
            _build.libdir(quiet=True)
        assert cache.stat().st_mode & 0o777 == 0o755
        return
    with pytest.raises(_build.ShimBuildError) as refused:
        _build.libdir(quiet=True)
    assert refused.value.missing == "cache"
    assert not any(p.name.endswith(".so") for p in tmp_path.rglob("*"))


class _NotBuilt(Exception):
    pass


class _Key:
    @staticmethod
    def key() -> str:
        raise _NotBuilt  # past the directory checks: stop before building anything


def _no_build() -> _Key:
    return _Key()


class _CallerLib:
    """The engine's C helpers as CallerSites uses them: a fixed caller address."""

    def __init__(self) -> None:
        self.caller = 0x1234

    def acl_mem_shim_caller(self) -> int:
        return self.caller


def test_noted_callers_forget_freed_blocks_and_keep_live_ones(monkeypatch):
    """The notes behind the leak report's C callers stay bounded: past the bound, the
    addresses of freed blocks are forgotten and every live block keeps its caller."""
    import acl_mem
    from acl_mem.shim import _engine_runtime

    monkeypatch.setattr(_engine_runtime, "_NOTED_KEPT", 8)
    lib = _CallerLib()
    sites = _engine_runtime.CallerSites(None, lib)
    acl_mem.fake.configure()
    with acl_mem.Device(0) as device:
        live = [device.malloc(512) for _ in range(3)]
        for buffer in live:
            sites.note(buffer.ptr)
        lib.caller = 0x5678
        for k in range(20):  # blocks allocated and freed since: no live block there
            buffer = device.malloc(k * 4096 + 512)
            sites.note(buffer.ptr)
            buffer.free()
            sites.note(0x1000 * (k + 1))
        assert len(sites._noted) <= 8
        assert all(sites._noted.get(b.ptr) == 0x1234 for b in live)
        for buffer in live:
            buffer.free()


def test_noted_callers_survive_threads_noting_while_they_are_pruned(monkeypatch):
    """Several threads note allocations while the notes are pruned again and again:
    no error escapes (it would turn a successful allocation into a failed one)."""
    import threading

    import acl_mem
    from acl_mem.shim import _engine_runtime

    monkeypatch.setattr(_engine_runtime, "_NOTED_KEPT", 4096)
    sites = _engine_runtime.CallerSites(None, _CallerLib())
    acl_mem.fake.configure()
    errors: list[BaseException] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch inside the pruning, as under load

    def noting(first: int) -> None:
        try:
            for k in range(20_000):
                sites.note(first + 64 * k)
        except BaseException as exc:  # any escape fails the test
            errors.append(exc)

    with acl_mem.Device(0):
        workers = [threading.Thread(target=noting, args=(n << 32,)) for n in range(4)]
        for worker in workers:
            worker.start()
        try:
            for worker in workers:
                worker.join()
        finally:
            sys.setswitchinterval(interval)
    assert errors == []
    assert len(sites._noted) <= sites._noted_kept
