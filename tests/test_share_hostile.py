"""The share registry among files and processes that are not its own (docs/fidelity.md
rows 52, 55 to 57): a user's directory full of the user's files, a default directory
another user took first, pids reused by other processes, fifos, huge files and
exporters racing each other.
"""

from __future__ import annotations

import contextlib
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
from share_support import (
    CHILD,
    FAKE_ONLY,
    LOCK_NAME,
    MAGIC,
    child,
    child_command,
    handles,
    huge_free,
    no_tmpfile,
    physical,
    read_record,
    record_path,
    records,
    share_dir,
    write_record,
)

from acl_mem import raw
from acl_mem._fake.library import EngineLibrary
from acl_mem.errors import InternalError, RtParamInvalidError

__all__ = ["handles", "no_tmpfile", "share_dir"]  # fixtures, used by name


def dead_pid() -> int:
    """A pid no process has now (the one a finished child had)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a blocking open of a fifo would never return)."""

    def expired(signum: int, frame: Any) -> None:
        raise AssertionError(f"still blocked after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def snapshot(directory: Path, names: list[str]) -> dict[str, object]:
    """What each named entry is now: its bytes, or its kind and target."""
    found: dict[str, object] = {}
    for name in names:
        path = directory / name
        if path.is_symlink():
            found[name] = ("symlink", os.readlink(path))
        elif path.is_fifo():
            found[name] = "fifo"
        elif path.exists():
            found[name] = path.read_bytes()
    return found


# -- files the registry did not write ----------------------------------------------------------


@pytest.mark.fake_library(FAKE_ONLY)
def test_files_of_the_user_in_the_share_directory_are_never_removed(
        backend, dev, share_dir, handles, tmp_path):
    """ACL_MEM_FAKE_SHARE_DIR at a directory of the user's own: every export, whitelist,
    import and free (each sweeps what dead processes left) leaves the user's files as
    they were, even those named like the fake's records and temporary files."""
    share_dir.mkdir(mode=0o700)
    gone = dead_pid()
    users = {
        ".tmp-notes": b"mine",
        f".tmp-{gone}-0123456789ab": b"also mine",
        "0123456789abcdef.json": b"{}",
        ".lock": b"a lock of some other program",
        f"acl_mem_fake-{gone << 24 | 1:016x}.record": b"looks like a record, is not",
        f".acl_mem_fake-tmp-{gone}-0123456789ab": b"looks like a temporary file, is not",
        "notes.txt": b"hello",
    }
    for name, data in users.items():
        (share_dir / name).write_bytes(data)
    (share_dir / f"acl_mem_fake-{gone << 24 | 2:016x}.record").symlink_to(tmp_path)
    os.mkfifo(share_dir / f"acl_mem_fake-{gone << 24 | 3:016x}.record")
    names = sorted(p.name for p in share_dir.iterdir())
    before = snapshot(share_dir, names)

    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 0)
    raw.aclrtMemSetPidToShareableHandle(shareable, [os.getpid() + 1], 1)
    open_export = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    with child(CHILD + textwrap.dedent("""
            print(code(raw.aclrtMemImportFromShareableHandle, int(sys.argv[1]), 0), flush=True)
            """), str(open_export)) as (_, imported):
        assert imported > 0
    for handle in handles:
        raw.aclrtFreePhysical(handle)
    handles.clear()
    raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)  # sweeps once more

    assert snapshot(share_dir, names) == before


@pytest.mark.fake_library(FAKE_ONLY)
def test_a_users_file_at_a_records_name_is_left_alone(backend, dev, share_dir, handles):
    """A record replaced by a file the fake did not write: the handle cannot be used
    (107000), the exporter's free still gives the memory back, and the file stays."""
    before = huge_free()
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    path = record_path(share_dir, shareable)
    path.write_bytes(b'{"pid": 1}')
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemImportFromShareableHandle(shareable, 0)
    assert e.value.code == 107000
    raw.aclrtFreePhysical(handles.pop())
    assert huge_free() == before
    assert path.read_bytes() == b'{"pid": 1}'


@pytest.mark.fake_library(FAKE_ONLY)
def test_names_taken_by_others_are_skipped_not_replaced(backend, dev, share_dir, handles,
                                                       tmp_path):
    """Fifos, symlinks and user files where this process's next records would go: the
    export takes other numbers, never blocks, and leaves them all as they were."""
    share_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    upcoming = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    planted = []
    for n in range(1, 7):
        path = record_path(share_dir, upcoming + n)
        if n % 3 == 0:
            os.mkfifo(path)
        elif n % 3 == 1:
            path.symlink_to(victim)
        else:
            path.write_bytes(b"not a record")
        planted.append(path.name)
    before = snapshot(share_dir, planted)
    with deadline(20):
        exported = [raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
                    for _ in range(3)]
        for path in planted:
            shareable = int(path.split("-")[1].split(".")[0], 16)
            with pytest.raises(RtParamInvalidError) as e:
                raw.aclrtMemImportFromShareableHandle(shareable, 0)
            assert e.value.code == 107000
        for handle in handles:
            raw.aclrtFreePhysical(handle)
        handles.clear()
    assert len(set(exported)) == 3
    assert snapshot(share_dir, planted) == before
    assert victim.read_bytes() == b"precious"
    assert records(share_dir) == sorted(share_dir / name for name in planted)


@pytest.mark.fake_library(FAKE_ONLY)
def test_a_huge_file_at_a_records_name_is_not_read_whole(backend, dev, share_dir, handles):
    """A record-named file of 1 GiB (sparse, starting like a record) is a damaged record:
    107000 without reading it all into memory."""
    share_dir.mkdir(mode=0o700)
    shareable = os.getppid() << 24 | 5  # a live process's: never swept
    path = record_path(share_dir, shareable)
    with open(path, "wb") as file:
        file.write(MAGIC + b'{"pid": ')
        file.truncate(1 << 30)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemImportFromShareableHandle(shareable, 0)
    assert e.value.code == 107000
    assert path.stat().st_size == 1 << 30


# -- whitelisted processes are processes, not pids ------------------------------------------------

#: Says "ready", waits for a line, then imports the handle and prints what it got.
_WAITING_IMPORTER = CHILD + """
print(1, flush=True)
sys.stdin.readline()
print(code(raw.aclrtMemImportFromShareableHandle, int(sys.argv[1]), 0), flush=True)
sys.stdin.readline()
"""


def import_when_told(proc: subprocess.Popen[str]) -> int:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return int(proc.stdout.readline())


@pytest.mark.fake_library(FAKE_ONLY)
@pytest.mark.parametrize("reused", [False, True])
def test_whitelisted_pid_is_one_process(backend, dev, share_dir, handles, reused):
    """A whitelist entry names the process running under the pid when it was added: a
    later process given the same pid (here: the entry's start time moved, as a reuse
    would see it) is refused with 107000, the process itself imports."""
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 0)
    with child(_WAITING_IMPORTER, str(shareable)) as (proc, _):
        raw.aclrtMemSetPidToShareableHandle(shareable, [proc.pid], 1)
        if reused:
            path = record_path(share_dir, shareable)
            record = read_record(path)
            record["pids"] = [[pid, start - 1, exact] for pid, start, exact in record["pids"]]
            write_record(path, record)
        got = import_when_told(proc)
    assert got == -107000 if reused else got > 0


@pytest.mark.fake_library(FAKE_ONLY)
def test_whitelisting_the_same_pids_again_does_not_grow_the_record(backend, dev, share_dir,
                                                                  handles):
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 0)
    pids = [dead_pid(), os.getppid()]
    for _ in range(3):
        raw.aclrtMemSetPidToShareableHandle(shareable, pids, 2)
    entries = read_record(record_path(share_dir, shareable))["pids"]
    assert sorted(entry[0] for entry in entries) == sorted(pids)


def _set_last_pid(pid: int) -> bool:
    try:
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid))
    except OSError:
        return False
    return True


@pytest.mark.fake_library(FAKE_ONLY)
def test_whitelisted_pid_reused_by_a_new_process_is_refused(backend, dev, share_dir, handles):
    """The real thing: the whitelisted process ends and a new one gets its pid."""
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 0)
    first = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    raw.aclrtMemSetPidToShareableHandle(shareable, [first.pid], 1)
    assert first.stdin is not None
    first.stdin.close()
    first.wait(timeout=10)
    if not _set_last_pid(first.pid - 1):
        pytest.skip("cannot choose the next pid (needs /proc/sys/kernel/ns_last_pid)")
    with child(_WAITING_IMPORTER, str(shareable)) as (proc, _):
        if proc.pid != first.pid:
            pytest.skip("another process took the pid first")
        assert import_when_told(proc) == -107000


# -- exporters at the same time -------------------------------------------------------------------

#: Exports ``argv[1]`` handles as fast as it can, prints them as one JSON line, waits.
_MANY_EXPORTS = CHILD + """
import json
prop = raw.aclrtPhysicalMemProp(0, 0, 4, raw.aclrtMemLocation(0, 1), 0)
made = [raw.aclrtMemExportToShareableHandle(raw.aclrtMallocPhysical(2 << 20, prop), 0, 1)
        for _ in range(int(sys.argv[1]))]
print(json.dumps(made), flush=True)
sys.stdin.readline()
"""


@pytest.mark.fake_library(FAKE_ONLY)
def test_concurrent_exporters_each_get_a_whole_record(backend, dev, share_dir, handles):
    command, env = child_command(_MANY_EXPORTS, "8")
    procs = [subprocess.Popen(command,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=env) for _ in range(3)]
    try:
        mine = [raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
                for _ in range(8)]
        theirs = []
        for proc in procs:
            assert proc.stdout is not None
            theirs += json.loads(proc.stdout.readline())
        everyone = mine + theirs
        assert len(set(everyone)) == len(everyone) == 32
        assert records(share_dir) == sorted(record_path(share_dir, s) for s in everyone)
        for shareable in theirs:
            read_record(record_path(share_dir, shareable))  # whole, and the fake's
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
            if proc.stdin is not None:
                proc.stdin.close()
    raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)  # sweeps the dead ones'
    assert len(records(share_dir)) == 9


# -- a default directory someone else took first --------------------------------------------------


@pytest.fixture
def default_places(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                   backend: Any) -> Iterator[dict[str, Path]]:
    """The default candidates moved under tmp_path: (shm)/acl_mem_fake_<uid>,
    (run/user/<uid>)/acl_mem_fake, (home)/.cache/acl_mem/share."""
    monkeypatch.delenv("ACL_MEM_FAKE_SHARE_DIR", raising=False)
    shm, run, home = tmp_path / "shm", tmp_path / "run", tmp_path / "home"
    shm.mkdir(mode=0o1777)
    shm.chmod(0o1777)
    (run / str(os.geteuid())).mkdir(parents=True, mode=0o700)
    home.mkdir()
    library = EngineLibrary.get()
    library.share_places(str(shm), str(run), str(home))
    try:
        yield {"default": shm / f"acl_mem_fake_{os.geteuid()}",
               "run": run / str(os.geteuid()) / "acl_mem_fake",
               "home": home / ".cache" / "acl_mem" / "share"}
    finally:
        library.share_places(None, None, None)


def squat(path: Path, how: str, tmp_path: Path) -> None:
    if how == "another user's directory":
        path.mkdir(mode=0o700)
        os.chown(path, 12345, 12345)
    elif how == "a file":
        path.write_bytes(b"squatted")
    elif how == "a symlink":
        target = tmp_path / "trap"
        target.mkdir(mode=0o700)
        path.symlink_to(target)
    else:  # a directory of ours that others may write into
        path.mkdir()
        path.chmod(0o777)


_SQUATS = ["another user's directory", "a file", "a symlink", "open to others"]


@pytest.mark.fake_library(FAKE_ONLY)
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
@pytest.mark.parametrize("how", _SQUATS)
def test_squatted_default_directory_falls_back_and_says_so_once(
        backend, dev, handles, default_places, tmp_path, capfd, how):
    squat(default_places["default"], how, tmp_path)
    capfd.readouterr()
    first = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    second = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert records(default_places["run"]) == sorted(
        record_path(default_places["run"], s) for s in (first, second))
    assert len(capfd.readouterr().err.splitlines()) == 1
    if how == "a symlink":
        assert list((tmp_path / "trap").iterdir()) == []


@pytest.mark.fake_library(FAKE_ONLY)
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_fallback_without_a_runtime_directory_is_the_home_cache(
        backend, dev, handles, default_places, tmp_path):
    squat(default_places["default"], "another user's directory", tmp_path)
    os.chown(default_places["run"].parent, 12345, 12345)  # not ours: not a candidate
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert records(default_places["home"]) == [record_path(default_places["home"], shareable)]


@pytest.mark.fake_library(FAKE_ONLY)
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_no_usable_default_directory_is_507000(backend, dev, handles, default_places,
                                                tmp_path):
    squat(default_places["default"], "another user's directory", tmp_path)
    os.chown(default_places["run"].parent, 12345, 12345)
    default_places["home"].parents[1].write_bytes(b"")  # ~/.cache is a file
    with pytest.raises(InternalError) as e:
        raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert e.value.code == 507000


#: Exports with the default places moved as the parent moved them, prints the handle.
_EXPORTER_MOVED = """
import sys
from acl_mem._fake.library import EngineLibrary
EngineLibrary.get().share_places(sys.argv[1], sys.argv[2], None)
""" + CHILD + """
prop = raw.aclrtPhysicalMemProp(0, 0, 4, raw.aclrtMemLocation(0, 1), 0)
handle = raw.aclrtMallocPhysical(2 << 20, prop)
print(raw.aclrtMemExportToShareableHandle(handle, 0, 1), flush=True)
sys.stdin.readline()
"""


@pytest.mark.fake_only(FAKE_ONLY)
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_processes_of_one_user_meet_in_the_fallback(fake, dev, default_places, tmp_path):
    squat(default_places["default"], "another user's directory", tmp_path)
    with child(_EXPORTER_MOVED, str(default_places["default"].parent),
               str(default_places["run"].parent.parent)) as (_, shareable):
        assert shareable > 0
        imported = raw.aclrtMemImportFromShareableHandle(shareable, 0)
        raw.aclrtFreePhysical(imported)
    assert default_places["run"].is_dir()


@pytest.mark.fake_library(FAKE_ONLY)
def test_blank_share_dir_setting_means_the_default(backend, dev, handles, default_places,
                                                  monkeypatch):
    monkeypatch.setenv("ACL_MEM_FAKE_SHARE_DIR", "  ")
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert records(default_places["default"]) == [
        record_path(default_places["default"], shareable)]


# -- file systems without unnamed files ----------------------------------------------------------


@pytest.mark.fake_only(FAKE_ONLY)
def test_without_unnamed_files_records_are_still_whole_and_tidy(
        fake, dev, share_dir, handles, no_tmpfile):
    """Where O_TMPFILE is refused a named temporary file is written and linked: the
    sharing calls work the same and leave no temporary file behind."""
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 0)
    raw.aclrtMemSetPidToShareableHandle(shareable, [os.getppid()], 1)
    assert read_record(record_path(share_dir, shareable))["pids"][0][0] == os.getppid()
    raw.aclrtFreePhysical(handles.pop())
    assert [p.name for p in share_dir.iterdir()] == [LOCK_NAME]
