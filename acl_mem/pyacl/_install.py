"""``import acl`` as acl_mem.pyacl: install, uninstall, and running a script with it.

pyACL's submodules are registered as ``acl.rt``, ``acl.util`` ... as the real extension
registers them, so ``import acl.rt`` and ``from acl import rt`` work. A real pyACL is
never shadowed without being asked: when a module named ``acl`` is importable (or
already imported) and is not acl_mem.pyacl, :func:`install` refuses unless ``force``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType

__all__ = ["RUN_DESCRIPTION", "RUN_EPILOG", "SUBMODULES", "ShadowingRefusedError",
           "add_run_arguments", "install", "real_acl", "run_script", "uninstall"]

#: pyACL's submodules, in the order the extension adds them.
SUBMODULES = ("rt", "mdl", "media", "op", "blas", "util", "prof", "himpi", "fv")


class ShadowingRefusedError(RuntimeError):
    """A real ``acl`` module (pyACL) is importable, and install() was not forced."""


ShadowingRefusedError.__module__ = "acl_mem.pyacl"  # where users find it


def _ours() -> ModuleType:
    return importlib.import_module("acl_mem.pyacl")


def real_acl() -> str | None:
    """Where the ``acl`` module that ``import acl`` would give lives, if it is not
    acl_mem.pyacl: its file, or a description; None when there is none (or it is ours)."""
    ours = _ours()
    loaded = sys.modules.get("acl")
    if loaded is not None:
        if loaded is ours:
            return None
        return getattr(loaded, "__file__", None) or repr(loaded)
    try:
        spec = importlib.util.find_spec("acl")
    except (ImportError, ValueError) as exc:  # a broken acl package is still an acl
        return f"an acl module that fails to import ({exc})"
    if spec is None:
        return None
    return spec.origin or ", ".join(spec.submodule_search_locations or []) or "acl"


def install(force: bool = False) -> ModuleType:
    """Make ``import acl`` (and ``import acl.rt`` ...) give acl_mem.pyacl in this process.

    Refuses with :class:`ShadowingRefusedError` when a real ``acl`` is importable or
    imported, unless ``force=True``. Installing twice is harmless. The backend is chosen
    as usual, on first use (``ACL_MEM_BACKEND``, :func:`acl_mem.use_backend`).
    """
    ours = _ours()
    existing = real_acl()
    if existing is not None and not force:
        raise ShadowingRefusedError(
            f"a real acl module is importable ({existing}): installing acl_mem.pyacl "
            "would shadow pyACL. Run without it (remove it from sys.path / PYTHONPATH, "
            "or use 'from acl_mem import pyacl as acl'), or force it with "
            "install(force=True) / --force")
    sys.modules["acl"] = ours
    for name in SUBMODULES:
        sys.modules[f"acl.{name}"] = getattr(ours, name)
    return ours


def uninstall() -> None:
    """Undo :func:`install`: ``acl`` and ``acl.*`` entries that are acl_mem.pyacl go."""
    ours = _ours()
    if sys.modules.get("acl") is ours:
        del sys.modules["acl"]
    for name in SUBMODULES:
        if sys.modules.get(f"acl.{name}") is getattr(ours, name):
            del sys.modules[f"acl.{name}"]


def run_script(script: str, args: Sequence[str], *, prog: str, force: bool = False,
               backend: str | None = None) -> int:
    """Run ``script`` as ``python script args...`` would, with acl_mem.pyacl as ``acl``.

    Returns the exit status: the script's (0 when it ends, its SystemExit code, 1 after
    an uncaught exception, printed as Python prints it), or 2 when nothing ran (the
    script cannot be read, a real pyACL is importable without ``force``, the backend
    cannot load). ``prog`` prefixes acl_mem's own messages on stderr.
    """
    from .. import _backend
    from ..errors import BackendError

    path = os.path.abspath(script)
    if not os.path.isfile(path):
        reason = "no such file" if not os.path.exists(path) else "not a file"
        print(f"{prog}: cannot run {script!r}: {reason}", file=sys.stderr)
        return 2
    if not os.access(path, os.R_OK):
        print(f"{prog}: cannot run {script!r}: not readable", file=sys.stderr)
        return 2
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    # As `python script.py` does: the script's directory comes first on sys.path (and an
    # acl module there is the one the script would import).
    if sys.path:
        sys.path[0] = os.path.dirname(path)
    else:
        sys.path.insert(0, os.path.dirname(path))
    try:
        existing = real_acl()
        if existing is not None:
            if not force:
                print(f"{prog}: a real acl module (pyACL) is importable: {existing}\n"
                      "Running the script with acl_mem.pyacl would shadow it; pass --force "
                      "to do so anyway, or run the script with python to use pyACL.",
                      file=sys.stderr)
                return 2
            print(f"{prog}: --force: acl_mem.pyacl shadows the acl module at {existing}",
                  file=sys.stderr)
        if backend is not None:
            try:
                _backend.use_backend(backend)
            except BackendError as exc:
                print(f"{prog}: {str(exc).rstrip()}", file=sys.stderr)
                return 2
        install(force=True)
        sys.argv = [script, *args]
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        return _exit_status(exc.code)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        _print_exception(exc)
        return 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return 0


def _exit_status(code: object) -> int:
    """What the interpreter exits with for ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _print_exception(exc: BaseException) -> None:
    """The traceback as Python prints it, without the frames of runpy and this module."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in (__name__, "runpy"):
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))


RUN_DESCRIPTION = """\
Run a pyACL program unchanged on acl_mem: the script runs as 'python script.py
args...' would, with 'import acl' (and 'import acl.rt' ...) giving acl_mem.pyacl,
which implements pyACL's memory, device, context, stream, event and data buffer
calls on acl_mem's backend (chosen by --backend, else by ACL_MEM_BACKEND: native,
fake or auto). Other pyACL calls (models, operators, media processing ...) raise
acl_mem.pyacl.UnsupportedError. See docs/pyacl.md.

A real pyACL is never shadowed silently: when a module named acl is importable,
nothing runs unless --force is given.
"""

RUN_EPILOG = """\
Options go before the script; everything after the script is passed to it.

exit status: the script's (0 when it ends normally, its sys.exit code, 1 after an
uncaught exception); 2 when nothing ran: the script cannot be read, a real acl
module is importable and --force was not given, the backend cannot be loaded, or
the command line is wrong.
"""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options and arguments of a run (shared with ``acl-mem run``)."""
    parser.add_argument("--force", action="store_true",
                        help="run even if a real acl module (pyACL) is importable, "
                        "shadowing it")
    parser.add_argument("--backend", choices=("native", "fake", "auto"),
                        help="use this backend (default: ACL_MEM_BACKEND, else auto)")
    parser.add_argument("script", help="the pyACL program to run")
    rest = parser.add_argument("args", nargs=argparse.REMAINDER,
                               help="arguments for the script (sys.argv[1:])")
    rest.required = False  # may be empty; not listed when the script is missing
