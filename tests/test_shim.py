"""``acl-mem shim``: where the drop-in libraries, headers and prefix are (installed with
acl_mem), running a program on them, copying the prefix, and usage errors. What the
programs then see is tests/test_engine_programs.py's and tests/test_shim_programs.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acl_mem._fake.library import LIBRARY_DIR, PREFIX, RELEASE_DIRS

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ["libacl_cblas.so", "libacl_dvpp.so", "libacl_dvpp_mpi.so",
             "libacl_op_compiler.so", "libacl_rt.so", "libacl_rt_impl.so",
             "libacl_tdt_channel.so", "libacl_tdt_queue.so", "libascendcl.so",
             "libmsprofiler.so"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACL_MEM_")}
    env.update(extra)
    return env


def _shim(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acl_mem", "shim", *args], env=_env(**extra),
                          capture_output=True, text=True, timeout=60)


def _compiler() -> str:
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if found is None:
        pytest.skip("no C compiler")
    return found


def test_the_printed_directories_are_the_installed_prefix():
    assert _shim("--print-libdir").stdout == f"{LIBRARY_DIR}\n"
    assert _shim("--print-includedir").stdout == f"{PREFIX / 'include'}\n"
    assert _shim("--print-prefix").stdout == f"{PREFIX}\n"
    assert (PREFIX / "include" / "acl" / "acl.h").is_file()
    assert sorted(p.name for p in LIBRARY_DIR.glob("*.so")) == LIBRARIES


def test_the_libdir_follows_the_release_and_another_build(tmp_path):
    for release, directory in RELEASE_DIRS.items():
        assert _shim("--print-libdir", ACL_MEM_FAKE_CANN=release).stdout.strip() == str(
            LIBRARY_DIR / directory)
    elsewhere = tmp_path / "build"
    elsewhere.mkdir()
    (elsewhere / "libascendcl.so").write_bytes((LIBRARY_DIR / "libascendcl.so").read_bytes())
    assert _shim("--print-libdir", ACL_MEM_FAKE_LIBRARY_DIR=str(elsewhere)).stdout.strip() \
        == str(elsewhere)


@pytest.mark.parametrize("value", ["relative/dir", "/no/such/directory"])
def test_an_unusable_library_directory_is_said_with_status_1(value):
    done = _shim("--print-libdir", ACL_MEM_FAKE_LIBRARY_DIR=value)
    assert done.returncode == 1 and done.stdout == ""
    assert "ACL_MEM_FAKE_LIBRARY_DIR" in done.stderr


def test_exec_runs_a_program_with_the_libraries(headers, tmp_path):
    binary = tmp_path / "sample_memory"
    subprocess.run([_compiler(), "-std=c11", f"-I{headers}",
                    str(ROOT / "tests" / "c" / "sample_memory.c"), f"-L{LIBRARY_DIR}",
                    "-lascendcl", "-o", str(binary)], check=True)
    done = _shim("exec", "--", str(binary))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "done"
    assert _shim("exec", "--", str(tmp_path / "absent")).returncode == 127
    assert _shim("exec").returncode == 2


def test_build_out_copies_a_prefix_that_works_elsewhere(tmp_path):
    """The copy is a whole prefix: a program built against it runs on its libraries
    through its set_env.sh, with acl_mem's own directory nowhere on the way."""
    out = tmp_path / "prefix"
    done = _shim("build", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == out / "lib64"
    assert sorted(p.name for p in (out / "lib64").glob("*.so")) == LIBRARIES
    assert (out / "lib64" / "cann-8.5.0" / "libascendcl.so").is_file()
    assert (out / "include" / "acl" / "ops" / "acl_dvpp.h").is_file()
    binary = tmp_path / "hello_acl"
    subprocess.run([_compiler(), "-std=c11", f"-I{out / 'include'}",
                    str(ROOT / "examples" / "c" / "hello_acl.c"), f"-L{out / 'lib64'}",
                    "-lascendcl", "-o", str(binary)], check=True)
    script = f'. "{out}/set_env.sh" && echo "$LD_LIBRARY_PATH" && "{binary}"'
    run = subprocess.run(["bash", "-c", script], env=_env(), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0].split(":")[0] == str(out / "lib64")
    assert "read back: hello, device" in run.stdout
    # Again over the first copy: replaced, still whole.
    assert _shim("build", "--out", str(out)).returncode == 0


def test_build_out_copies_the_libraries_acl_mem_fake_library_dir_names(tmp_path):
    """Another build of the library (ACL_MEM_FAKE_LIBRARY_DIR, e.g. with sanitizers) is
    what the copied prefix carries, as every other shim command uses it."""
    other = tmp_path / "other"
    shutil.copytree(LIBRARY_DIR, other)
    (other / "libascendcl.so").write_bytes((other / "libascendcl.so").read_bytes() + b"mark")
    out = tmp_path / "prefix"
    done = _shim("build", "--out", str(out), ACL_MEM_FAKE_LIBRARY_DIR=str(other))
    assert done.returncode == 0, done.stderr
    assert (out / "lib64" / "libascendcl.so").read_bytes().endswith(b"mark")
    assert (out / "lib64" / "cann-8.5.0" / "libascendcl.so").is_file()


def test_build_out_from_a_library_dir_without_the_newest_library_says_so(tmp_path):
    """ACL_MEM_FAKE_LIBRARY_DIR holding only CANN 8.5.0's library (while 8.5.0 is played):
    the copy needs the newest one too, and the command says it is missing."""
    other = tmp_path / "other"
    shutil.copytree(LIBRARY_DIR / "cann-8.5.0", other / "cann-8.5.0")
    out = tmp_path / "prefix"
    done = _shim("build", "--out", str(out), ACL_MEM_FAKE_LIBRARY_DIR=str(other),
                 ACL_MEM_FAKE_CANN="8.5.0")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_build_out_onto_a_file_is_refused(tmp_path):
    target = tmp_path / "file"
    target.write_text("mine")
    done = _shim("build", "--out", str(target))
    assert done.returncode == 1 and "not a directory" in done.stderr
    assert target.read_text() == "mine"


def test_build_without_out_prints_the_libdir():
    assert _shim("build").stdout == f"{LIBRARY_DIR}\n"


def test_no_command_is_a_usage_error():
    assert _shim().returncode == 2
    done = subprocess.run([sys.executable, "-m", "acl_mem.shim"], env=_env(),
                          capture_output=True, text=True)
    assert done.returncode == 2


def test_the_readme_example_builds_with_the_printed_include_directory(tmp_path):
    """examples/c/hello_acl.c as the README compiles it: headers from
    --print-includedir (no CANN toolkit needed), run through `acl-mem shim exec`."""
    include = Path(_shim("--print-includedir").stdout.strip())
    libdir = Path(_shim("--print-libdir").stdout.strip())
    binary = tmp_path / "hello_acl"
    done = subprocess.run([_compiler(), "-std=c11", "-Wall", "-Werror", f"-I{include}",
                           str(ROOT / "examples" / "c" / "hello_acl.c"), f"-L{libdir}",
                           "-lascendcl", "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = _shim("exec", "--", str(binary))
    assert run.returncode == 0, run.stderr
    values = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    assert values["read back"] == "hello, device"
    assert run.stdout.splitlines()[-1] == "aclrtMalloc(1 TiB) -> 207001"
