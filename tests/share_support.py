"""What the share-registry tests share: fixtures, record helpers and child processes.

Each check points ACL_MEM_FAKE_SHARE_DIR at a directory of its own (the ``share_dir``
fixture), so runs of the suite on one machine never meet in the default directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import clean_env
from injection import is_unsignalled

from acl_mem import _backend, raw
from acl_mem._fake import is_fake
from acl_mem._fake.library import EngineLibrary
from acl_mem.conformance.providers import native_provider
from acl_mem.enums import MemAttr, MemLocationType
from acl_mem.errors import AclError

__all__ = ["LOCK_NAME", "MAGIC", "handles", "share_dir"]  # re-exported; fixtures by name

MiB = 1 << 20
HUGE = 2 * MiB
FAKE_ONLY = "the share directory and its records exist only in the fake"
#: The share directory's layout (docs/fidelity.md): every record file starts with the
#: magic line; the lock file serialises the processes of one user.
MAGIC = b"acl_mem fake share record 2\n"
LOCK_NAME = ".acl_mem_fake.lock"


def record_name(shareable: int) -> str:
    return f"acl_mem_fake-{shareable:016x}.record"


def signalled_lines(frame: Any) -> bool:
    """Lines where an interrupt can really arrive (the binding's and the raw layer's: a
    call into the library cannot be interrupted half-way)."""
    return not is_unsignalled(frame)


def prop() -> raw.aclrtPhysicalMemProp:
    return raw.aclrtPhysicalMemProp(0, 0, MemAttr.HBM_MEM_HUGE,
                                    raw.aclrtMemLocation(0, MemLocationType.DEVICE), 0)


def huge_free() -> int:
    return raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0]


def record_path(directory: Path, shareable: int) -> Path:
    return directory / record_name(shareable)


def records(directory: Path) -> list[Path]:
    return sorted(directory.glob("acl_mem_fake-*.record"))


def read_record(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    assert data.startswith(MAGIC)
    record: dict[str, Any] = json.loads(data[len(MAGIC):])
    return record


def write_record(path: Path, record: dict[str, Any]) -> None:
    path.write_bytes(MAGIC + json.dumps(record).encode())


def lock_is_free(directory: Path) -> bool:
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.fixture
def share_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    directory = tmp_path / "share"
    monkeypatch.setenv("ACL_MEM_FAKE_SHARE_DIR", str(directory))
    return directory


@pytest.fixture
def handles(backend: Any) -> Iterator[list[int]]:
    """Physical handles of the check, freed at its end whatever happened."""
    made: list[int] = []
    try:
        yield made
    finally:
        for handle in made:
            with contextlib.suppress(AclError):
                raw.aclrtFreePhysical(handle)


def physical(handles: list[int]) -> int:
    handle = raw.aclrtMallocPhysical(HUGE, prop())
    handles.append(handle)
    return handle


# -- other processes -------------------------------------------------------------------------------

CHILD = """
import os, sys
import acl_mem
from acl_mem import raw
acl_mem.use_backend(os.environ["ACL_MEM_TEST_SHARE_BACKEND"])
def code(fn, *args):
    try:
        return fn(*args)
    except acl_mem.AclError as exc:
        return -exc.code
"""

#: Imports the shareable handle given on the command line, says so, then waits.
IMPORTER = CHILD + """
print(code(raw.aclrtMemImportFromShareableHandle, int(sys.argv[1]), 0), flush=True)
sys.stdin.readline()
"""

#: Exports 2 MiB of device memory without pid validation, prints the handle, waits.
EXPORTER = CHILD + """
prop = raw.aclrtPhysicalMemProp(0, 0, 4, raw.aclrtMemLocation(0, 1), 0)
handle = raw.aclrtMallocPhysical(2 << 20, prop)
print(raw.aclrtMemExportToShareableHandle(handle, 0, 1), flush=True)
sys.stdin.readline()
"""


def child_command(script: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a python process running ``script`` (which starts
    with CHILD) on the backend of this check: the fake, or the native binding over
    acl_mem's library."""
    native = not is_fake(_backend._active)
    prelude = native_provider().subprocess_prelude if native else ""
    env = clean_env(ACL_MEM_FAKE_SHARE_DIR=os.environ.get("ACL_MEM_FAKE_SHARE_DIR"),
                    ACL_MEM_TEST_SHARE_BACKEND="native" if native else "fake")
    return [sys.executable, "-c", prelude + textwrap.dedent(script), *args], env


@contextlib.contextmanager
def child(script: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A python process running ``script``; yields it and the number it printed first."""
    command, env = child_command(script, *args)
    proc = subprocess.Popen(command,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=10)
            assert proc.stderr is not None
            raise AssertionError(f"the child ended early:\n{proc.stderr.read()}")
        yield proc, int(line)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.fixture
def no_tmpfile() -> Iterator[None]:
    """Records are written as on a file system that cannot make unnamed files
    (O_TMPFILE): through named temporary files."""
    library = EngineLibrary.get()
    library.share_unnamed_files(False)
    try:
        yield
    finally:
        library.share_unnamed_files(True)


