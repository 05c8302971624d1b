"""Builds the fake libascendcl (acl_mem/_fake/src, C11) into acl_mem/_fake/lib64 when
acl_mem is installed; everything else about the package is in pyproject.toml.

The sources and flags are listed once, in acl_mem/_fake/engine_build.py (loaded here by
path: acl_mem itself is not importable in the build environment). The three libraries
are built as setuptools extensions without a Python module init: libascendcl.so holds
the engine; libacl_dvpp.so and libacl_dvpp_mpi.so (the DVPP calls' own libraries on an
Atlas host) forward to it and find it beside them ($ORIGIN). ACL_MEM_ENGINE_CFLAGS adds
compiler and linker flags.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_spec = importlib.util.spec_from_file_location(
    "engine_build", Path(__file__).parent / "acl_mem" / "_fake" / "engine_build.py")
assert _spec is not None and _spec.loader is not None
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)

SOURCE = Path("acl_mem") / "_fake" / "src"
EXTRA = shlex.split(os.environ.get("ACL_MEM_ENGINE_CFLAGS", ""))


def _library(soname: str, sources: tuple[str, ...], *, engine: bool) -> Extension:
    return Extension(
        f"acl_mem._fake.lib64.{soname.removesuffix('.so')}",
        sources=[str(SOURCE / name) for name in sources],
        depends=[os.path.normpath(str(SOURCE / name)) for name in recipe.HEADERS],
        extra_compile_args=[*recipe.CFLAGS, *EXTRA],
        extra_link_args=[*recipe.link_flags(soname, EXTRA, engine=engine), *EXTRA],
        libraries=[] if engine else ["ascendcl"],
    )


class BuildLibraries(build_ext):
    """Plain shared libraries named as the runtime's, not Python extension modules."""

    def get_ext_filename(self, fullname: str) -> str:
        return os.path.join(*fullname.split(".")) + ".so"

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return []  # no PyInit_ function: these are not Python modules

    def build_extensions(self) -> None:
        # Python's own link line points at libpython's directory; these libraries never
        # load Python, so nothing of it goes into them.
        self.compiler.linker_so = [
            word for word in self.compiler.linker_so
            if not word.startswith(("-L", "-Wl,-rpath", "-Wl,-R"))]
        self.compiler.library_dirs = []
        self.compiler.runtime_library_dirs = []
        super().build_extensions()

    def copy_extensions_to_source(self) -> None:
        for ext in self.extensions:
            os.makedirs(os.path.dirname(self.get_ext_filename(ext.name)), exist_ok=True)
        super().copy_extensions_to_source()

    def build_extension(self, ext: Extension) -> None:
        if ext.libraries == ["ascendcl"]:
            # The DVPP libraries link against the engine just built beside them.
            engine = self.get_ext_fullpath("acl_mem._fake.lib64.libascendcl")
            ext.library_dirs = [os.path.dirname(engine)]
        super().build_extension(ext)


try:  # setuptools >= 70.1 has it; older ones take it from the wheel package
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover - depends on the build environment
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef, import-not-found]


class PlatformWheel(bdist_wheel):
    """The libraries need no Python ABI (nothing of libpython is in them): one wheel per
    platform serves every Python 3."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    ext_modules=[
        _library("libascendcl.so", recipe.ENGINE, engine=True),
        *[_library(name, files, engine=False) for name, files in recipe.SIDE_LIBRARIES.items()],
    ],
    cmdclass={"build_ext": BuildLibraries, "bdist_wheel": PlatformWheel},
)
