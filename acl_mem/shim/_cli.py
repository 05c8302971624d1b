"""``acl-mem shim``: build the drop-in libascendcl.so and run C programs on it
(acl_mem/cli.py hands the command over here; ``python -m acl_mem.shim`` too)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_shim_parser", "main", "run_shim"]

_DESCRIPTION = """\
A drop-in libascendcl.so and libacl_rt.so (with libacl_dvpp.so, libacl_dvpp_mpi.so,
libmsprofiler.so and empty companions for the other toolkit libraries) made from
acl_mem's fake: an unmodified C or C++ program linked against it runs on the fake
device, with the rules and error codes acl_mem has from Python.

  cc prog.c -I<ACL headers> -L"$(acl-mem shim --print-libdir)" -lascendcl -o prog
  acl-mem shim exec -- ./prog args...

Without the CANN toolkit, -I"$(acl-mem shim --print-includedir)" gives acl/acl.h and
every other header the exported functions are declared in. --print-prefix gives a
directory laid out like a CANN install (include/, lib64/, set_env.sh): after
'source "$(acl-mem shim --print-prefix)/set_env.sh"' (or with ASCEND_HOME_PATH set to
it) programs build with their own CMake files or Makefiles, unchanged.

The libraries are compiled on first use for this interpreter and acl_mem version
(a C compiler, Python's headers and a shared libpython are needed then) and cached
in $XDG_CACHE_HOME/acl_mem/shim (default ~/.cache/acl_mem/shim; every directory
on the way must be yours and closed to others, see the README).
"""

_EPILOG = """\
Memory, devices, contexts, streams, events, virtual memory, run mode and versions
run on the fake; data buffers, aclDataTypeSize, aclGetRecentErrMsg (the text of the
thread's last failed call) and aclrtDeviceGetBareTgid are answered by the library.
With ACL_MEM_LEAK_REPORT=1 the fake's leak report is printed at exit. Every other
ACL function (models, operators, DVPP processing, tensor queues ...) returns 200006
(ACL_ERROR_FEATURE_UNSUPPORTED; NULL or 0 when it returns something else) and prints
one line on standard error naming it;
ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED=1 aborts instead. If the fake cannot start, every
call returns 500000 (ACL_ERROR_INTERNAL_ERROR) and the reason is printed once.

exit status: 0 done; 1 the libraries could not be built; 2 usage error; with exec,
the program's own status (127 if it cannot be run).
"""


def add_shim_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """Add ``shim`` and its commands to the parser's subcommands ``sub``."""
    shim = sub.add_parser("shim", help="a drop-in libascendcl.so over the fake for C and C++ "
                          "programs", description=_DESCRIPTION, epilog=_EPILOG,
                          formatter_class=formatter)
    _arguments(shim, formatter)


def _arguments(shim: argparse.ArgumentParser, formatter: type[argparse.HelpFormatter]) -> None:
    shim.add_argument("--print-libdir", action="store_true",
                      help="print the directory holding the libraries (built on first use)")
    shim.add_argument("--print-includedir", action="store_true",
                      help="print a directory holding acl/acl.h with every exported "
                      "prototype, for compiling without the CANN toolkit's headers")
    shim.add_argument("--print-prefix", action="store_true",
                      help="print a directory laid out like a CANN install: include/, "
                      "lib64/ and set_env.sh (built on first use)")
    commands = shim.add_subparsers(dest="shim_command", title="commands", metavar="COMMAND")
    build = commands.add_parser("build", help="build the libraries (if needed) and print "
                                "their directory", formatter_class=formatter)
    build.add_argument("--out", metavar="DIR", type=Path,
                       help="build into DIR (lib64/, include/, set_env.sh; always rebuilt) "
                       "instead of the cache")
    run = commands.add_parser("exec", help="run a program with the libraries on "
                              "LD_LIBRARY_PATH", formatter_class=formatter)
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS ...]",
                     help="the program and its arguments")


def _libdir(out: Path | None = None) -> Path | None:
    from ._build import ShimBuildError, libdir

    try:
        return libdir(out)
    except ShimBuildError as exc:
        print(f"acl-mem shim: {exc}", file=sys.stderr)
        return None


def run_shim(args: argparse.Namespace) -> int:
    command = getattr(args, "shim_command", None)
    if command is None and not (args.print_libdir or args.print_includedir
                                or args.print_prefix):
        print("acl-mem shim: give --print-libdir, --print-includedir, --print-prefix or a "
              "command (build, exec); 'acl-mem shim --help' explains them", file=sys.stderr)
        return 2
    directory = _libdir(getattr(args, "out", None) if command == "build" else None)
    if directory is None:
        return 1
    if command != "exec":
        if command is None and args.print_prefix:
            print(directory.parent)
        elif command is None and args.print_includedir:
            print(directory.parent / "include")
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
