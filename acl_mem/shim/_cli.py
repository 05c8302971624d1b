"""``acl-mem shim``: where the drop-in libascendcl.so (acl_mem's fake runtime in C) and its
prefix are, and running C programs on it (acl_mem/cli.py hands the command over here;
``python -m acl_mem.shim`` too)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_shim_parser", "main", "run_shim"]

_DESCRIPTION = """\
A drop-in libascendcl.so and libacl_rt.so (with libacl_dvpp.so, libacl_dvpp_mpi.so,
libmsprofiler.so and empty companions for the other toolkit libraries): acl_mem's fake
runtime, a C library built when acl_mem was installed. An unmodified C or C++ program
linked against it runs on the fake device, with the rules and error codes acl_mem has
from Python, and with no Python in the process.

  cc prog.c -I"$(acl-mem shim --print-includedir)" -L"$(acl-mem shim --print-libdir)" \\
      -lascendcl -o prog
  acl-mem shim exec -- ./prog args...

--print-includedir gives acl/acl.h and every other header the exported functions are
declared in (the toolkit's own headers work as well). --print-prefix gives a directory
laid out like a CANN install (include/, lib64/, set_env.sh): after
'source "$(acl-mem shim --print-prefix)/set_env.sh"' (or with ASCEND_HOME_PATH set to
it) programs build with their own CMake files or Makefiles, unchanged.

--print-libdir and exec choose the library of the release ACL_MEM_FAKE_CANN names
(CANN 8.5.0 has its own, lib64/cann-8.5.0); ACL_MEM_FAKE_LIBRARY_DIR names another
build of the same sources (python -m acl_mem._fake.engine_build, e.g. with sanitizers).
"""

_EPILOG = """\
Memory, devices, contexts, streams, events, virtual memory, run mode and versions
run on the fake; data buffers, aclDataTypeSize, aclGetRecentErrMsg (the text of the
thread's last failed call) and aclrtDeviceGetBareTgid are answered by the library.
ACL_MEM_LEAK_REPORT=1 prints the leak report at exit, ACL_MEM_CHECK=1 turns the memory
checker on and ACL_MEM_TRACE=FILE records every call. Every other ACL function
(models, operators, DVPP processing, tensor queues ...) returns 200006
(ACL_ERROR_FEATURE_UNSUPPORTED; NULL or 0 when it returns something else) and prints
one line on standard error naming it; ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED=1 aborts
instead. A setting the library cannot use makes every call return 500000
(ACL_ERROR_INTERNAL_ERROR) and is named once on standard error.

exit status: 0 done; 1 the libraries are missing (acl_mem was installed without a C
compiler) or --out cannot be written; 2 usage error; with exec, the program's own
status (127 if it cannot be run).
"""


def add_shim_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """Add ``shim`` and its commands to the parser's subcommands ``sub``."""
    shim = sub.add_parser("shim", help="a drop-in libascendcl.so over the fake for C and C++ "
                          "programs", description=_DESCRIPTION, epilog=_EPILOG,
                          formatter_class=formatter)
    _arguments(shim, formatter)


def _arguments(shim: argparse.ArgumentParser, formatter: type[argparse.HelpFormatter]) -> None:
    shim.add_argument("--print-libdir", action="store_true",
                      help="print the directory holding the libraries")
    shim.add_argument("--print-includedir", action="store_true",
                      help="print a directory holding acl/acl.h with every exported "
                      "prototype, for compiling without the CANN toolkit's headers")
    shim.add_argument("--print-prefix", action="store_true",
                      help="print a directory laid out like a CANN install: include/, "
                      "lib64/ and set_env.sh")
    commands = shim.add_subparsers(dest="shim_command", title="commands", metavar="COMMAND")
    build = commands.add_parser("build", help="print the libraries' directory, or copy the "
                                "prefix with --out", formatter_class=formatter)
    build.add_argument("--out", metavar="DIR", type=Path,
                       help="copy the prefix (lib64/, include/, set_env.sh ...) into DIR, "
                       "e.g. for a container image; files already there are replaced")
    run = commands.add_parser("exec", help="run a program with the libraries on "
                              "LD_LIBRARY_PATH", formatter_class=formatter)
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS ...]",
                     help="the program and its arguments")


def _libdir() -> Path | None:
    from .._fake.library import library_dir
    from ..errors import BackendError, SettingError

    try:
        return library_dir()
    except (BackendError, SettingError) as exc:
        print(f"acl-mem shim: {exc}", file=sys.stderr)
        return None


def _copy_prefix(out: Path) -> bool:
    """Copy the installed prefix into ``out`` (which may exist), its libraries from
    ACL_MEM_FAKE_LIBRARY_DIR when that names another build: False, said, on failure."""
    from .._fake.library import PREFIX, library_dir
    from ..errors import BackendError, SettingError

    try:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(f"{out} is not a directory")
        libraries = library_dir("9.1.0")  # the newest release's: cann-8.5.0/ is inside
        for part, source in (("include", PREFIX / "include"), ("lib64", libraries),
                             ("bin", PREFIX / "bin"), ("tikcpp", PREFIX / "tikcpp")):
            shutil.copytree(source, out / part, symlinks=False, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(PREFIX / "set_env.sh", out / "set_env.sh")
    except (OSError, BackendError, SettingError) as exc:
        print(f"acl-mem shim build: cannot copy the prefix into {out}: {exc}", file=sys.stderr)
        return False
    return True


def run_shim(args: argparse.Namespace) -> int:
    command = getattr(args, "shim_command", None)
    if command is None and not (args.print_libdir or args.print_includedir
                                or args.print_prefix):
        print("acl-mem shim: give --print-libdir, --print-includedir, --print-prefix or a "
              "command (build, exec); 'acl-mem shim --help' explains them", file=sys.stderr)
        return 2
    directory = _libdir()
    if directory is None:
        return 1
    if command == "build" and args.out is not None:
        if not _copy_prefix(args.out):
            return 1
        print(args.out / "lib64")
        return 0
    if command != "exec":
        from .._fake.library import PREFIX

        if command is None and args.print_prefix:
            print(PREFIX)
        elif command is None and args.print_includedir:
            print(PREFIX / "include")
        else:
            print(directory)
        return 0
    program = list(args.program)
    if program[:1] == ["--"]:
        program = program[1:]
    if not program:
        print("acl-mem shim exec: give the program to run after --", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [str(directory), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
    sys.stdout.flush()
    try:
        os.execvpe(program[0], program, env)
    except OSError as exc:
        print(f"acl-mem shim exec: cannot run {program[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - execvpe does not return


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m acl_mem.shim``: the same as ``acl-mem shim``."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python -m acl_mem.shim", description=_DESCRIPTION,
                                     epilog=_EPILOG, formatter_class=formatter)
    _arguments(parser, formatter)
    return run_shim(parser.parse_args(argv))
