"""What the fake libascendcl is built from, and a build outside an install.

setup.py reads the lists here (loaded by path: nothing of acl_mem is imported at build
time) and builds the libraries into acl_mem/_fake/lib64 when acl_mem is installed.
:func:`build` compiles the same sources into any directory, with extra flags: the test
suite's sanitizer builds use it.

    python -m acl_mem._fake.engine_build OUT [--flags="-fsanitize=address,undefined"]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "src"
#: The engine (libascendcl.so); libacl_dvpp.so and libacl_dvpp_mpi.so forward to it.
ENGINE = ("data.c", "tree.c", "os.c", "state.c", "config_file.c", "runtime.c", "memory.c",
          "copies.c", "streams.c", "events.c", "hazards.c", "checker.c", "leaks.c", "vmm.c",
          "share_dir.c", "share_record.c", "share_registry.c", "host_side.c", "unsupported.c",
          "trace.c", "trace_lines.c")
#: Libraries beside it, which find it beside them ($ORIGIN): the DVPP calls' own two, the
#: profiling library, libacl_rt.so (a filter of libascendcl.so: acl_rt.c) and the
#: companions some programs also link, which hold nothing of their own (on an Atlas host
#: their functions are operators, BLAS and tensor queues: libascendcl.so's unsupported ones).
SIDE_LIBRARIES = {"libacl_dvpp.so": ("dvpp.c",), "libacl_dvpp_mpi.so": ("mpi.c",),
                  "libmsprofiler.so": ("msprofiler.c",), "libacl_rt.so": ("acl_rt.c",),
                  **{name: ("companion.c",) for name in (
                      "libacl_op_compiler.so", "libacl_cblas.so", "libacl_tdt_channel.so",
                      "libacl_tdt_queue.so", "libacl_rt_impl.so")}}
#: Link flags of one side library.
SIDE_LINK = {"libacl_rt.so": ("-Wl,--filter=libascendcl.so",)}
HEADERS = ("engine.h", "acl_api.h", "share.h", "unsupported.h", "tables.h",
           "../include/acl_mem_fake.h")
#: Releases whose libraries export less than the default build (CANN 8.5.0 has no
#: aclrtMemGetAddressRange): each is built again into a directory of its own under the
#: default one, playing only that release.
RELEASE_BUILDS = {"cann-8.5.0": ("-DAM_ONLY_CANN_8_5_0",)}


def _version() -> str:
    # The package's version as acl_mem/__init__.py says it (traces name it in their header).
    text = (Path(__file__).resolve().parent.parent / "__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    return match[1] if match else "unknown"


#: Warnings are errors; only the ACL functions and the control API are exported.
CFLAGS = ("-std=c11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-pthread",
          f'-DAM_VERSION="{_version()}"')


def link_flags(soname: str, extra: list[str], *, engine: bool) -> list[str]:
    flags = ["-pthread", f"-Wl,-soname,{soname}"]
    if not any(flag.startswith("-fsanitize") for flag in extra):
        # A sanitizer's runtime comes with the program, so its symbols stay undefined here.
        flags.append("-Wl,--no-undefined")
    if engine:
        flags.append("-ldl")  # dladdr, for the leak report (in libc itself from glibc 2.34)
    else:
        flags += ["-Wl,-rpath,$ORIGIN", *SIDE_LINK.get(soname, ())]
    return flags


def build(out: Path, extra: list[str], cc: str | None = None) -> Path:
    """The libraries in ``out`` (made if needed), compiled with ``extra`` flags, and
    each release build of RELEASE_BUILDS in its directory under ``out``."""
    compiler = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler: install gcc or clang, or set CC")
    _build_one(out, extra, compiler)
    for directory, defines in RELEASE_BUILDS.items():
        _build_one(out / directory, [*defines, *extra], compiler)
    return out


def _build_one(out: Path, extra: list[str], compiler: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    common = [compiler, *CFLAGS, "-fPIC", "-O2", "-g", *extra, "-shared"]
    steps = [("libascendcl.so", ENGINE, True),
             *[(name, files, False) for name, files in SIDE_LIBRARIES.items()]]
    for soname, files, engine in steps:
        command = [*common, *[str(SOURCE / f) for f in files], "-o", str(out / soname),
                   *link_flags(soname, extra, engine=engine)]
        if not engine:
            command += [f"-L{out}", "-lascendcl"]
        subprocess.run(command, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description="build acl_mem's fake libascendcl")
    parser.add_argument("out", type=Path, help="directory for the libraries")
    parser.add_argument("--flags", default="", help="extra compiler and linker flags")
    args = parser.parse_args()
    try:
        build(args.out, shlex.split(args.flags))
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"engine_build: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
