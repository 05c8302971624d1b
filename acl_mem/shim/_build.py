"""Building the shim libraries for the running interpreter, cached per user.

``libdir()`` returns ``<cache>/<key>/lib64`` (cache: ``$XDG_CACHE_HOME/acl_mem/shim``,
default ``~/.cache/acl_mem/shim``; acl_mem/shim/_cache.py checks every directory on the
way), building it first if needed. ``<cache>/<key>`` is laid out like a CANN install
(lib64/, include/, set_env.sh: acl_mem/shim/_prefix.py). The key covers the Python
version and ABI, ``sys.prefix``, the interpreter, the libpython, acl_mem's version,
cffi's version and a hash of the shim's sources, so another venv, interpreter or
acl_mem gets its own build. A build happens in a temporary directory renamed into place
under a lock file: concurrent builds wait for each other and never see a half-built
directory, and a build killed half-way leaves only its temporary directory, which the
next build of that key removes. A C compiler, Python's headers and a shared libpython
are needed only here.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import __version__
from ._cache import CacheError, cache_root, check_tree, prepare_root, remove_stale
from ._csource import COMPANIONS, FRONT_LIBRARIES, config_header, front_source
from ._engine import ENGINE, engine_ffi
from ._prefix import headers, prefix_files

__all__ = ["BuildInputs", "ShimBuildError", "build_into", "cache_root", "inputs", "libdir"]

#: Written last into a build: a directory with it is complete.
STAMP = "shim.json"


class ShimBuildError(RuntimeError):
    """The shim cannot be built here; ``missing`` names what to install (or "compile")."""

    def __init__(self, missing: str, message: str) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class BuildInputs:
    """Everything a build depends on (and records in its ``shim.json``)."""

    python: str
    py_version: str
    abi: str
    prefix: str
    libpython: str
    include: str
    paths: tuple[str, ...]
    acl_mem_version: str
    cffi_version: str
    sources: str

    def key(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        return f"py{self.py_version}-{self.acl_mem_version}-{digest[:16]}"


def _sources_hash() -> str:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in [*sorted(here.glob("*.py")), here / "surface.json", here / "headers.json",
                 here / "acl_rt_exports.txt", here.parent / "_native" / "cdef.py"]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _libpython(version: str) -> str:
    """The shared libpython of this interpreter: the one loaded now, else the installed one."""
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(None, 5)[-1].strip()
            if f"/libpython{version}" in path and ".so" in path and os.path.isfile(path):
                return path
    names = [sysconfig.get_config_var(v) for v in ("INSTSONAME", "LDLIBRARY")]
    dirs = [sysconfig.get_config_var("LIBDIR"), os.path.join(sys.base_prefix, "lib")]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs += [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"]
    for directory in filter(None, dirs):
        for name in filter(None, names):
            path = os.path.join(directory, str(name))
            if ".so" in str(name) and os.path.isfile(path):
                return path
    raise ShimBuildError(
        "libpython", f"no shared libpython{version} for {sys.executable}: the shim embeds "
        f"Python and needs it. Install it (Debian/Ubuntu: apt-get install libpython{version}; "
        f"Fedora/RHEL: dnf install python{version}-libs; pyenv: reinstall with "
        "PYTHON_CONFIGURE_OPTS=--enable-shared) or build with an interpreter that has one.")


def _acl_mem_home() -> str:
    return str(Path(__file__).resolve().parent.parent.parent)


def inputs() -> BuildInputs:
    """The build inputs of the running interpreter (raises ShimBuildError if one is missing)."""
    import _cffi_backend
    import cffi

    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        raise ShimBuildError(
            "headers", f"Python.h is not in {include}: install Python's headers (Debian/"
            f"Ubuntu: apt-get install python{version}-dev; Fedora/RHEL: dnf install "
            f"python{version}-devel)")
    import site

    paths = [_acl_mem_home(), os.path.dirname(os.path.abspath(_cffi_backend.__file__)),
             *site.getsitepackages()]
    unique = tuple(dict.fromkeys(os.path.abspath(p) for p in paths))
    return BuildInputs(
        python=sys.executable, py_version=version, abi=sys.abiflags if hasattr(sys, "abiflags")
        else "", prefix=sys.prefix, libpython=_libpython(version), include=include,
        paths=unique, acl_mem_version=__version__, cffi_version=cffi.__version__,
        sources=_sources_hash())


def compiler() -> list[str]:
    """The C compiler command: $CC, else cc, gcc or clang on PATH."""
    configured = os.environ.get("CC", "").strip()
    if configured:
        command = shlex.split(configured)
        if shutil.which(command[0]):
            return command
    else:
        for name in ("cc", "gcc", "clang"):
            found = shutil.which(name)
            if found:
                return [found]
    tried = f"CC={configured!r}" if configured else "cc, gcc and clang on PATH"
    raise ShimBuildError(
        "compiler", f"no C compiler ({tried}): the shim is compiled on first use. Install "
        "one (Debian/Ubuntu: apt-get install gcc; Fedora/RHEL: dnf install gcc; Alpine: "
        "apk add gcc musl-dev) or set CC.")


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ShimBuildError("compile", f"{shlex.join(command)} failed:\n{done.stderr}")


def build_into(directory: Path, given: BuildInputs) -> Path:
    """Compile the engine, the front libraries and their companions into
    ``directory/lib64``."""
    cc = compiler()
    lib64 = directory / "lib64"
    work = directory / "src"
    lib64.mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    ffi = engine_ffi(python=given.python, paths=list(given.paths),
                     version=given.acl_mem_version)
    engine_c = work / "acl_mem_shim_engine.c"
    with contextlib.redirect_stdout(io.StringIO()):  # cffi says "generating ..." on stdout
        ffi.emit_c_code(str(engine_c))
    _run([*cc, "-shared", "-fPIC", "-O2", "-pthread", f"-I{given.include}", str(engine_c),
          "-o", str(lib64 / ENGINE), "-ldl"])
    (work / "acl_mem_shim_config.h").write_text(config_header(
        libpython=given.libpython, py_version=given.py_version, engine=ENGINE))
    front_c = work / "acl_mem_shim_front.c"
    front_c.write_text(front_source())
    for number, soname in FRONT_LIBRARIES.items():
        _run([*cc, "-shared", "-fPIC", "-O2", "-pthread", "-Wall", "-Werror",
              f"-DACL_MEM_SHIM_LIB={number}", f"-I{work}", str(front_c),
              f"-Wl,-soname,{soname}", "-o", str(lib64 / soname), "-ldl"])
    empty_c = work / "acl_mem_shim_companion.c"
    empty_c.write_text("/* Its functions are libascendcl.so's (acl_mem/shim/_csource.py). */\n"
                       "typedef int acl_mem_shim_companion;\n")
    for soname in COMPANIONS:
        _run([*cc, "-shared", "-fPIC", str(empty_c), f"-Wl,-soname,{soname}",
              "-Wl,--no-as-needed", "-Wl,-rpath,$ORIGIN", f"-L{lib64}", "-lascendcl",
              "-o", str(lib64 / soname)])
    # Programs can be compiled without the CANN toolkit's headers (--print-includedir),
    # and with their own build files that expect a CANN install (set_env.sh).
    for name, text in headers().items():
        header = directory / "include" / name
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text(text)
    for name, text in prefix_files().items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _close_to_others(directory)
    (directory / STAMP).write_text(json.dumps(asdict(given), indent=2) + "\n")
    os.chmod(directory / STAMP, 0o644)
    return lib64


def _close_to_others(directory: Path) -> None:
    """Whatever the umask, nobody else may write what programs will load."""
    for path in [directory, *directory.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, stat.S_IMODE(path.stat().st_mode) & ~0o022)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _announce(target: Path) -> None:
    print(f"acl_mem shim: building the libraries in {target} (once per interpreter and "
          "acl_mem version)", file=sys.stderr)


def _cached(given: BuildInputs, quiet: bool) -> Path:
    """The cache's build for ``given``, built first if needed: in a temporary directory
    next to it, renamed into place when complete, so a build that dies (even by SIGKILL)
    leaves no directory that looks built; its leftovers are removed by the next build."""
    root = cache_root()
    prepare_root(root)
    key = given.key()
    final = root / key
    if not (final / STAMP).is_file():
        with _locked(root / f"{key}.lock"):
            if not (final / STAMP).is_file():
                remove_stale(root, f".{key}.")
                if os.path.lexists(final):  # not built by a complete build: not ours to trust
                    check_tree(final)
                    shutil.rmtree(final)
                if not quiet:
                    _announce(final)
                work = Path(tempfile.mkdtemp(dir=root, prefix=f".{key}."))
                try:
                    build_into(work / "build", given)
                    os.rename(work / "build", final)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
    check_tree(final)
    return final


def libdir(out: Path | None = None, *, quiet: bool = False) -> Path:
    """The directory holding libascendcl.so & co.; built first if needed.

    Without ``out`` the build is cached per user and reused (acl_mem/shim/_cache.py says
    which directories must be the user's). With ``out`` the libraries, headers and
    set_env.sh are (re)built into ``out``, each file replaced atomically.
    """
    given = inputs()
    if out is None:
        try:
            return _cached(given, quiet) / "lib64"
        except CacheError as exc:
            raise ShimBuildError("cache", str(exc)) from None
        except OSError as exc:  # e.g. the disk filled up during the build
            raise ShimBuildError("cache", f"{exc.filename or cache_root()}: "
                                 f"{exc.strerror or exc}") from None
    out = out.resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ShimBuildError("cache", f"{out}: {exc.strerror}") from None
    with _locked(out / ".acl_mem_shim.lock"):
        remove_stale(out, ".build.")
        if not quiet:
            _announce(out)
        with tempfile.TemporaryDirectory(dir=out, prefix=".build.") as work:
            build_into(Path(work), given)
            for item in sorted(Path(work).rglob("*")):
                relative = item.relative_to(work)
                if relative.parts[0] == "src" or item.is_dir() or relative.name == STAMP:
                    continue
                (out / relative).parent.mkdir(parents=True, exist_ok=True)
                os.replace(item, out / relative)
            os.replace(Path(work) / STAMP, out / STAMP)
    return out / "lib64"
