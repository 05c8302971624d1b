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
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_spec = importlib.util.spec_from_file_location(
    "engine_build", Path(__file__).parent / "acl_mem" / "_fake" / "engine_build.py")
assert _spec is not None and _spec.loader is not None
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)

SOURCE = Path("acl_mem") / "_fake" / "src"
EXTRA = shlex.split(os.environ.get("ACL_MEM_ENGINE_CFLAGS", ""))


def _library(soname: str, sources: tuple[str, ...], *, engine: bool,
             release: str | None = None) -> Extension:
    # A release build lives in lib64/<release>/: its name's part is the directory with
    # dots and dashes made underscores (BuildLibraries.get_ext_filename maps it back).
    where = "" if release is None else release.replace("-", "_").replace(".", "_") + "."
    defines = [] if release is None else list(recipe.RELEASE_BUILDS[release])
    return Extension(
        f"acl_mem._fake.lib64.{where}{soname.removesuffix('.so')}",
        sources=[str(SOURCE / name) for name in sources],
        depends=[os.path.normpath(str(SOURCE / name)) for name in recipe.HEADERS],
        extra_compile_args=[*recipe.CFLAGS, *defines, *EXTRA],
        extra_link_args=[*recipe.link_flags(soname, EXTRA, engine=engine), *EXTRA],
        libraries=[] if engine else ["ascendcl"],
    )


#: The module-name part of each release build's directory, and the directory.
_RELEASES = {name.replace("-", "_").replace(".", "_"): name for name in recipe.RELEASE_BUILDS}


class BuildLibraries(build_ext):
    """Plain shared libraries named as the runtime's, not Python extension modules."""

    def get_ext_filename(self, fullname: str) -> str:
        parts = [_RELEASES.get(part, part) for part in fullname.split(".")]
        return os.path.join(*parts) + ".so"

    def _release_path(self, path: str) -> str:
        for part, name in _RELEASES.items():
            path = path.replace(os.sep + part + os.sep, os.sep + name + os.sep)
        return path

    def get_ext_fullpath(self, ext_name: str) -> str:
        # setuptools joins the package path itself: map the release directory there too.
        return self._release_path(super().get_ext_fullpath(ext_name))

    def _get_inplace_equivalent(self, build_py: Any, ext: Extension) -> tuple[str, str]:
        inplace, regular = super()._get_inplace_equivalent(build_py, ext)
        return self._release_path(inplace), self._release_path(regular)

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
            engine = self.get_ext_fullpath(ext.name.rsplit(".", 1)[0] + ".libascendcl")
            ext.library_dirs = [os.path.dirname(engine)]
        # Each release build compiles the same sources with other flags: its objects go
        # to a directory of their own.
        release = ext.name.split(".")[-2]
        saved = self.build_temp
        if release in _RELEASES:
            self.build_temp = os.path.join(saved, _RELEASES[release])
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = saved


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
        *[library
          for release in (None, *recipe.RELEASE_BUILDS)
          for library in (
              _library("libascendcl.so", recipe.ENGINE, engine=True, release=release),
              *[_library(name, files, engine=False, release=release)
                for name, files in recipe.SIDE_LIBRARIES.items()])],
    ],
    cmdclass={"build_ext": BuildLibraries, "bdist_wheel": PlatformWheel},
)
