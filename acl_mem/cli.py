"""The acl-mem command line (entry point acl_mem.cli:main; also python -m acl_mem).

acl-mem info shows the backend, why it was chosen and the memory of every device;
acl-mem conformance runs the shipped conformance checks; acl-mem run runs a pyACL
program with acl_mem.pyacl as its acl module; acl-mem trace summary summarises an
allocation trace (acl_mem/trace/_cli.py); acl-mem shim builds a drop-in libascendcl.so
over the fake for C programs (acl_mem/shim/_cli.py).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__, _backend
from .conformance.providers import brief
from .device import Device
from .errors import AclError, BackendError, FunctionNotAvailableError, SettingError
from .pyacl._install import RUN_DESCRIPTION, RUN_EPILOG, add_run_arguments, run_script
from .shim._cli import add_shim_parser, run_shim
from .sizes import format_size
from .trace._cli import add_trace_parser, run_trace
from .versions import runtime_version

__all__ = ["collect_info", "format_size", "main"]

_DESCRIPTION = """\
Ascend NPU memory from Python. acl-mem shows which backend acl_mem uses and why
(native: the real libascendcl; fake: acl_mem's model of the device) with the
memory of every device, and checks the runtime model's rules on this machine.
"""

_EPILOG = """\
With no command, acl-mem runs 'info'.
"""

_INFO_DESCRIPTION = """\
Show the backend in use and why it was chosen, then one line per device: SoC,
memory kind (HBM or DDR) and size, free and used memory, and the page pools.
The backend is chosen by --backend, else by ACL_MEM_BACKEND (native, fake or
auto; auto takes native when libascendcl loads and reports a device).
"""

_INFO_EPILOG = """\
--json prints one JSON object; sizes are in bytes:
  acl_mem    version of acl_mem
  backend    "native" or "fake"
  reason     why that backend was chosen (may span several lines)
  runtime    {"cann": release string ("" if the runtime does not say),
              "acl": "major.minor.patch" from aclrtGetVersion}; null if the
             version query failed
  details    what the backend says about itself; native: library, soc;
             fake: profile, soc, description, device_count,
             capacity_per_device, device_address_space_reserved
  devices    a list, one object per device:
    id         device id
    soc        SoC name
    memory     "HBM" or "DDR": the memory that total and free count
    total      bytes of that memory (null if the device reports none)
    free       bytes of it free (null if the device reports none)
    pools      each page pool the device reports, by aclrtMemAttr name
               (HBM_MEM, HBM_MEM_HUGE, MEM_NORMAL, ...):
               {"free": bytes, "total": bytes}; pools of size 0 are left out

exit status: 0 report printed; 1 the backend could not be loaded or a device
query failed; 2 usage error.
"""

_CONFORMANCE_DESCRIPTION = """\
Run the conformance checks shipped with acl_mem (pytest and hypothesis needed:
pip install "acl_mem[conformance]") on the fake and, where libascendcl loads, on
the native backend. Prints one progress line per check file, then pass, fail and
skip counts per runtime-model section (docs/runtime-model.md) and every failure.
Nothing is written to the current directory: Hypothesis keeps its examples in
$XDG_CACHE_HOME/acl_mem/hypothesis (default ~/.cache/acl_mem/hypothesis).
"""

_CONFORMANCE_EPILOG = """\
--json FILE writes a JSON list, one object per check:
  check      pytest node id of the check
  backend    "fake", "native", or "-" for checks that need no backend
  rule       the docs/runtime-model.md section the check's docstring cites
             first (e.g. "§3.5"), or "-"
  spec       the same as rule: its former name, kept for this release only
  expected   the rule as the check states it (first paragraph of its docstring)
  observed   "as expected", or what happened instead (failure or skip reason)
  outcome    "passed", "failed" or "skipped"

--differential sends the same random call sequences to the fake and to the
native backend and prints the first divergence, shrunk to a minimal sequence;
it needs libascendcl (an Atlas host with CANN installed).

exit status: 0 no check failed (or no divergence); 1 a check failed (or the
backends diverged); 2 nothing was checked: missing dependencies, no check
selected by -k, native backend unavailable for --differential, bad arguments.
"""


def _memory_of(pools: dict[str, dict[str, int]]) -> tuple[str, int | None, int | None]:
    """The device's memory kind and its (total, free): DDR on chips that have it, else HBM."""
    kind = "DDR" if "DDR_MEM" in pools else "HBM"
    whole = pools.get(f"{kind}_MEM")
    if whole is None:
        return kind, None, None
    return kind, whole["total"], whole["free"]


def collect_info() -> dict[str, object]:
    """Backend, reason, description and per-device memory as plain data (see --json)."""
    backend = _backend.get()
    info: dict[str, object] = {
        "acl_mem": __version__,
        "backend": backend.name,
        "reason": _backend.backend_reason(),
        "runtime": _runtime(),
        "details": backend.describe(),
    }
    devices: list[dict[str, object]] = []
    for device_id in range(Device.count()):
        with Device(device_id) as device:
            pools = {attr.name: {"free": m.free, "total": m.total}
                     for attr, m in device.pools().items() if m.total}
            soc = backend.soc_name()
        kind, total, free = _memory_of(pools)
        devices.append({"id": device_id, "soc": soc, "memory": kind, "total": total,
                        "free": free, "pools": pools})
    info["devices"] = devices
    return info


def _runtime() -> dict[str, str] | None:
    try:
        version = runtime_version()
    except (AclError, FunctionNotAvailableError):
        return None
    return {"cann": version.cann, "acl": ".".join(map(str, version.acl))}


def _runtime_line(info: dict[str, Any]) -> list[str]:
    runtime = info.get("runtime")
    if runtime is None:
        return ["runtime version unknown (aclrtGetVersion failed)"]
    return [f"runtime CANN {runtime['cann'] or '(unknown)'}, ACL {runtime['acl']}"]


def _backend_line(info: dict[str, Any], verbose: bool) -> list[str]:
    name, reason = str(info["backend"]), str(info["reason"]).strip()
    if not verbose:
        short = brief(reason)
        if short != reason:
            short += " ('acl-mem info -v' shows the details)"
        text = short if short.startswith(f"{name}:") else f"{name}: {short}"
        return [f"acl_mem {info['acl_mem']}, backend {text}"]
    first, *rest = reason.splitlines()
    return [f"acl_mem {info['acl_mem']}", f"backend: {name}", f"why:     {first}",
            *(f"         {line.strip()}" for line in rest)]


def _details_lines(details: dict[str, Any], verbose: bool) -> list[str]:
    if verbose:
        lines = ["details:"]
        for key, value in details.items():
            shown = f"{value} ({format_size(value)})" if (
                isinstance(value, int) and not isinstance(value, bool) and value >= 1024
            ) else str(value)
            lines.append(f"  {key}: {shown}")
        return lines
    if "profile" in details:
        return [f"fake profile {details['profile']}: {details.get('description', '')}".rstrip()]
    if "library" in details:
        return [f"library {details['library']}"]
    return []


def _pages(device: dict[str, Any]) -> str:
    """``huge pages 60 GiB + normal 4 GiB, 1 GiB pages``: the pools that make up the memory."""
    pools, kind = device["pools"], device["memory"]
    huge, normal = pools.get(f"{kind}_MEM_HUGE"), pools.get(f"{kind}_MEM_NORMAL")
    parts = []
    if huge is not None and normal is not None:
        parts.append(f"huge pages {format_size(huge['total'])} + normal "
                     f"{format_size(normal['total'])}")
    if any(name.endswith("HUGE1G") for name in pools):
        parts.append("1 GiB pages")
    return ", ".join(parts)


def _device_columns(device: dict[str, Any]) -> list[str]:
    total, free = device["total"], device["free"]
    if total is None:
        return [f"device {device['id']}", device["soc"] or "(no SoC name)",
                f"{device['memory']} not reported", "", "", _pages(device)]
    return [f"device {device['id']}", device["soc"] or "(no SoC name)",
            f"{device['memory']} {format_size(total)}", f"free {format_size(free)}",
            f"used {format_size(total - free)}", _pages(device)]


def format_info(info: dict[str, Any], verbose: bool = False) -> list[str]:
    """The text report of ``acl-mem info``: one line per device, pools with verbose."""
    lines = [*_backend_line(info, verbose), *_runtime_line(info),
             *_details_lines(info["details"], verbose)]
    devices = info["devices"]
    lines.append(f"{len(devices)} device{'s' if len(devices) != 1 else ''}")
    rows = [_device_columns(device) for device in devices]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(6)]
    for device, row in zip(devices, rows, strict=True):
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
        if verbose:
            for name, pool in device["pools"].items():
                lines.append(f"    {name:<20} free {format_size(pool['free']):>10} of "
                             f"{format_size(pool['total']):>10}  "
                             f"({pool['free']} of {pool['total']} bytes)")
    return lines


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="acl-mem", description=_DESCRIPTION,
                                     epilog=_EPILOG, formatter_class=formatter)
    parser.add_argument("-V", "--version", action="version", version=f"acl-mem {__version__}")
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND",
                                help="'acl-mem COMMAND --help' shows its options")
    info = sub.add_parser("info", help="backend in use, why it was chosen, memory per device",
                          description=_INFO_DESCRIPTION, epilog=_INFO_EPILOG,
                          formatter_class=formatter)
    info.add_argument("--backend", choices=_backend.BACKEND_NAMES,
                      help="use this backend (default: ACL_MEM_BACKEND, else auto)")
    info.add_argument("-v", "--verbose", action="store_true",
                      help="also show the full reason, the backend's details and every "
                      "device's page pools")
    info.add_argument("--json", action="store_true",
                      help="print a JSON object instead of text (keys below)")
    check = sub.add_parser("conformance", help="run the shipped conformance checks and "
                           "summarise them per runtime-model section",
                           description=_CONFORMANCE_DESCRIPTION, epilog=_CONFORMANCE_EPILOG,
                           formatter_class=formatter)
    check.add_argument("--backend", choices=("native", "fake", "all"),
                       help="backend to check (default: all, native only where it loads)")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="also list every check: backend, section, expected and, unless "
                       "it passed, observed outcome")
    check.add_argument("-k", metavar="EXPRESSION", dest="keyword",
                       help="run only the checks whose names match this pytest -k expression "
                       "(e.g. 'malloc and not dvpp')")
    check.add_argument("--json", metavar="FILE",
                       help="also write every check's outcome to FILE as JSON (keys below)")
    check.add_argument("--differential", action="store_true",
                       help="instead of the checks, send the same random call sequences to "
                       "the fake and to native and report the first divergence")
    check.add_argument("--examples", type=_positive, default=200, metavar="N",
                       help="sequences tried by --differential (default 200)")
    run = sub.add_parser("run", help="run a pyACL program unchanged, with acl_mem.pyacl as "
                         "its acl module", description=RUN_DESCRIPTION, epilog=RUN_EPILOG,
                         formatter_class=formatter)
    add_run_arguments(run)
    add_trace_parser(sub, formatter)
    add_shim_parser(sub, formatter)
    return parser, check


def _fail(message: str) -> int:
    print(f"acl-mem: {message}", file=sys.stderr)
    return 1


def _run_info(args: argparse.Namespace) -> int:
    requested = getattr(args, "backend", None)
    fallback = "" if requested == "fake" else (
        "\nTo look at acl_mem's model of the device instead, run 'acl-mem info --backend fake'.")
    try:
        if requested:
            _backend.use_backend(requested)
        data = collect_info()
    except BackendError as exc:
        return _fail(f"{str(exc).rstrip()}{fallback}")
    except AclError as exc:
        return _fail(f"a device query failed: {exc}\nCheck the driver and devices with "
                     f"'npu-smi info'.{fallback}")
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2))
    else:
        print("\n".join(format_info(data, verbose=getattr(args, "verbose", False))))
    return 0


def _json_target_problem(path: str) -> str | None:
    """Why ``path`` cannot take the JSON report, or None."""
    if os.path.isdir(path):
        return f"{path} is a directory"
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"the directory {directory} does not exist"
    if not os.access(directory, os.W_OK) or (os.path.exists(path)
                                             and not os.access(path, os.W_OK)):
        return f"{path} is not writable"
    return None


def _run_conformance(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.differential:
        unused = [flag for flag, value in (("--json", args.json), ("-k", args.keyword),
                                           ("--backend", args.backend), ("-v", args.verbose))
                  if value]
        if unused:
            parser.error(f"--differential compares fake and native and takes only "
                         f"--examples; drop {', '.join(unused)}")
        from .conformance.differential import run_differential

        return run_differential(max_examples=args.examples)
    if args.json:
        problem = _json_target_problem(args.json)
        if problem:
            print(f"acl-mem conformance: cannot write the JSON report: {problem}; choose "
                  "another --json FILE.", file=sys.stderr)
            return 2
    from .conformance.runner import run_checks

    return run_checks(args.backend or "all", args.json, verbose=args.verbose,
                      keyword=args.keyword)


def main(argv: Sequence[str] | None = None) -> int:
    if sys.stdout is None:  # started with standard output closed (`acl-mem info >&-`)
        return _say("acl-mem: standard output is closed")
    parser, conformance = _parser()
    args = parser.parse_args(argv)
    try:
        status = _run(conformance, args)
        # Here rather than at exit: a full disk behind standard output (`> /dev/full`)
        # is then reported like any other failure, not as an ignored exception.
        sys.stdout.flush()
        return status
    except SettingError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print("acl-mem: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `acl-mem ... | head` stopped reading: not an error to report, as with any Unix
        # tool; the output is dropped.
        _drop_output()
        return 1
    except MemoryError:
        # The work's objects are gone with the stack it unwound: there is room to say it.
        return _say("acl-mem: out of memory")
    except OSError as exc:
        # Most often standard output refusing more (a full disk, a quota, an I/O error);
        # the commands report the errors of the files they name themselves.
        _drop_output()
        where = f"{exc.filename}: " if exc.filename else "cannot write the output: " \
            if exc.errno in _OUTPUT_ERRORS else ""
        return _say(f"acl-mem: {where}{exc.strerror or exc}")


#: Errors of a write to standard output (no file name in the exception to tell it).
_OUTPUT_ERRORS = frozenset({errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT,
                            errno.EAGAIN, errno.EBADF})


def _run(conformance: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "conformance":
        return _run_conformance(conformance, args)
    if args.command == "run":
        return run_script(args.script, args.args, prog="acl-mem run", force=args.force,
                          backend=args.backend)
    if args.command == "trace":
        return run_trace(args)
    if args.command == "shim":
        return run_shim(args)
    return _run_info(args)


def _say(message: str) -> int:
    """``message`` on standard error (if it still takes one); status 1."""
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)
    return 1


def _drop_output() -> None:
    """Point standard output at /dev/null: what is still buffered for a pipe nobody reads
    or a full disk would fail again when Python flushes it at exit, with a traceback."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
