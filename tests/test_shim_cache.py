"""The drop-in's cache is code every C program loads (acl_mem/shim/_cache.py): who may
write the directories on the way to it, where it is, and what a killed build leaves.

Runs as any user; the cases that give a directory to another user need root (chown).
A directory that cannot be written is simulated with os.access: root writes anyway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from shim_support import skip_without_a_build

from acl_mem.shim import _build, _cache

skip_without_a_build()


class _NotBuilt(Exception):
    pass


class _Given:
    """Build inputs with a fixed key; key() can stop libdir() past the directory checks."""

    def __init__(self, stop: bool = False) -> None:
        self.stop = stop

    def key(self) -> str:
        if self.stop:
            raise _NotBuilt
        return "key"


def _fake_build(directory: Path, given: Any) -> Path:
    (directory / "lib64").mkdir(parents=True)
    (directory / "lib64" / "libascendcl.so").write_bytes(b"\x7fELF")
    (directory / _build.STAMP).write_text("{}\n")
    return directory / "lib64"


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "xdg"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(directory))
    return directory


def _foreign(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    os.chown(path, 65534, 65534)


@pytest.mark.parametrize("make", ["world-writable", "group-writable-grandparent",
                                  "foreign-parent", "foreign-acl_mem"])
def test_a_directory_above_the_cache_others_can_write_is_refused(xdg, monkeypatch, make):
    """Whoever can write a directory on the way can put their own libascendcl.so in
    place of ours: refused before anything is built or loaded."""
    monkeypatch.setattr(_build, "inputs", lambda: _Given(stop=True))
    if make == "world-writable":
        xdg.chmod(0o777)
    elif make == "group-writable-grandparent":
        xdg.parent.chmod(0o770)
    elif make == "foreign-parent":
        _foreign(xdg)
    else:
        (xdg / "acl_mem").mkdir(mode=0o700)
        _foreign(xdg / "acl_mem")
    with pytest.raises(_build.ShimBuildError) as refused:
        _build.libdir(quiet=True)
    assert refused.value.missing == "cache"
    if make in ("world-writable", "foreign-parent"):
        # Nothing was made in the directory the checks refuse.
        assert list(xdg.iterdir()) == []


def test_a_sticky_world_writable_directory_above_the_cache_is_accepted(xdg, monkeypatch):
    """Like /tmp: with the sticky bit, others cannot rename or remove our entries."""
    monkeypatch.setattr(_build, "inputs", lambda: _Given(stop=True))
    xdg.chmod(0o1777)
    with pytest.raises(_NotBuilt):  # past every check
        _build.libdir(quiet=True)


@pytest.mark.parametrize("make", ["writable-library", "foreign-lib64", "symlinked-lib64"])
def test_a_build_with_anything_others_control_is_refused(xdg, monkeypatch, tmp_path, make):
    """Below the cache root every directory and file is checked, not only the top."""
    monkeypatch.setattr(_build, "inputs", lambda: _Given())
    root = xdg / "acl_mem" / "shim"
    _fake_build(root / "key", None)
    lib64 = root / "key" / "lib64"
    if make == "writable-library":
        (lib64 / "libascendcl.so").chmod(0o666)
    elif make == "foreign-lib64":
        _foreign(lib64)
    else:
        elsewhere = tmp_path / "elsewhere"
        lib64.rename(elsewhere)
        lib64.symlink_to(elsewhere)
    with pytest.raises(_build.ShimBuildError) as refused:
        _build.libdir(quiet=True)
    assert refused.value.missing == "cache"


def test_a_directory_another_process_makes_at_the_same_moment_is_accepted(xdg, monkeypatch):
    """Two `acl-mem` started together: the other one makes the directory between this
    one's look and its mkdir. That is no error; the directory is checked like any."""
    monkeypatch.setattr(_build, "inputs", lambda: _Given(stop=True))
    real_mkdir = os.mkdir
    raced: list[str] = []

    def mkdir_after_the_other(path: Any, mode: int = 0o777) -> None:
        real_mkdir(path, mode)  # the other process wins
        raced.append(str(path))
        real_mkdir(path, mode)  # raises FileExistsError, as ours would

    monkeypatch.setattr(_cache.os, "mkdir", mkdir_after_the_other)
    with pytest.raises(_NotBuilt):  # past every check
        _build.libdir(quiet=True)
    assert raced and (xdg / "acl_mem" / "shim").is_dir()


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    """The XDG Base Directory specification: relative paths are invalid and ignored."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert _build.cache_root() == tmp_path / ".cache" / "acl_mem" / "shim"
    monkeypatch.setenv("XDG_CACHE_HOME", "   ")
    assert _build.cache_root() == tmp_path / ".cache" / "acl_mem" / "shim"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert _build.cache_root() == tmp_path / "x" / "acl_mem" / "shim"


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acl_mem", "shim", *args], env=env,
                          capture_output=True, text=True)


@pytest.mark.parametrize("where", ["xdg", "acl_mem"])
def test_a_file_where_the_cache_should_be_is_one_line_on_stderr(tmp_path, where):
    """No traceback: one line naming the path and the problem, and status 1."""
    blocker = tmp_path / "xdg" if where == "xdg" else tmp_path / "xdg" / "acl_mem"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")
    done = _cli(dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg")), "--print-libdir")
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("acl-mem shim: "), done.stderr
    assert str(blocker) in lines[0]


def test_a_cache_that_cannot_be_written_is_refused(xdg, monkeypatch):
    """A read-only cache (mode 0555 for anyone but root): refused with the path."""
    monkeypatch.setattr(_build, "inputs", lambda: _Given(stop=True))
    root = xdg / "acl_mem" / "shim"
    real_access = os.access
    monkeypatch.setattr(_cache.os, "access",
                        lambda path, mode: False if Path(path) == root
                        else real_access(path, mode))
    with pytest.raises(_build.ShimBuildError) as refused:
        _build.libdir(quiet=True)
    assert refused.value.missing == "cache" and str(root) in str(refused.value)


def _wait_for(predicate: Any, what: str) -> None:
    for _ in range(600):
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"gave up waiting for {what}")


def test_a_build_killed_half_way_leaves_nothing_behind(tmp_path):
    """SIGKILL while the compiler runs: no directory that looks built; the next build
    removes the dead one's temporary directory and completes."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    root = tmp_path / "xdg" / "acl_mem" / "shim"
    build = subprocess.Popen([sys.executable, "-m", "acl_mem", "shim", "build"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        # Killed once the first library is written: compiling the rest is under way.
        _wait_for(lambda: root.is_dir() and any(root.glob(".*/build/lib64/*.so")),
                  "the build to write a library")
    finally:
        os.killpg(build.pid, signal.SIGKILL)
        build.wait()
    looks_built = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert all((p / _build.STAMP).is_file() for p in looks_built)
    if not looks_built:  # killed before the rename (the usual case): its temporary dir
        assert any(p.name.startswith(".") for p in root.iterdir() if p.is_dir())
    again = _cli(env, "build")
    assert again.returncode == 0, again.stderr
    built = Path(again.stdout.strip()).parent
    assert (built / _build.STAMP).is_file()
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [built.name]


def test_a_leftover_of_a_dead_build_is_removed_and_a_stale_directory_replaced(xdg,
                                                                            monkeypatch):
    """Temporary directories of dead builds go; a directory without the stamp (not made
    by a complete build) is rebuilt, not used."""
    monkeypatch.setattr(_build, "inputs", lambda: _Given())
    monkeypatch.setattr(_build, "build_into", _fake_build)
    root = xdg / "acl_mem" / "shim"
    (root / ".key.dead" / "build" / "lib64").mkdir(parents=True)
    (root / "key" / "lib64").mkdir(parents=True)
    assert _build.libdir(quiet=True) == root / "key" / "lib64"
    assert (root / "key" / _build.STAMP).is_file()
    assert sorted(p.name for p in root.iterdir()) == ["key", "key.lock"]
