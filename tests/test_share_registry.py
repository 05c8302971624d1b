"""The fake's cross-process sharing registry (docs/runtime-model.md §4.6): its directory, its
records and the processes that hold exported memory.

Everything here is about the files the fake keeps in its share directory, which
hardware does not have, hence fake_only. Each check points ACL_MEM_FAKE_SHARE_DIR at a
directory of its own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from injection import interrupted_runs
from share_support import (
    EXPORTER,
    FAKE_ONLY,
    HUGE,
    IMPORTER,
    LOCK_NAME,
    MAGIC,
    child,
    handles,
    huge_free,
    kill,
    lock_is_free,
    no_tmpfile,
    physical,
    read_record,
    record_path,
    records,
    share_dir,
    signalled_lines,
    write_record,
)

from acl_mem import raw
from acl_mem.errors import InternalError, RtParamInvalidError

__all__ = ["handles", "no_tmpfile", "share_dir"]  # fixtures, used by name


# -- 1. the directory is trusted only when it is the user's own ------------------------------------



@pytest.mark.fake_library(FAKE_ONLY)
@pytest.mark.parametrize("mode", [0o777, 0o755, 0o1777, 0o770])
def test_share_directory_open_to_others_is_refused(backend, dev, share_dir, handles, mode):
    """A share directory someone else could write into (or read) is not used: every
    sharing call refuses with ACL_ERROR_RT_INTERNAL_ERROR and nothing is written."""
    share_dir.mkdir()
    share_dir.chmod(mode)
    handle = physical(handles)
    with pytest.raises(InternalError) as e:
        raw.aclrtMemExportToShareableHandle(handle, 0, 1)
    assert e.value.code == 507000
    for call in (lambda: raw.aclrtMemImportFromShareableHandle(0x1234 << 24 | 1, 0),
                 lambda: raw.aclrtMemSetPidToShareableHandle(0x1234 << 24 | 1, [1], 1)):
        with pytest.raises(InternalError) as e:
            call()
        assert e.value.code == 507000
    assert list(share_dir.iterdir()) == []
    # Once the directory is fixed the same handle exports (the refusal left no mark).
    share_dir.chmod(0o700)
    assert raw.aclrtMemExportToShareableHandle(handle, 0, 1) != 0


@pytest.mark.fake_library(FAKE_ONLY)
def test_share_directory_that_is_a_symlink_is_refused(backend, dev, share_dir, handles,
                                                      tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    share_dir.symlink_to(real)
    with pytest.raises(InternalError) as e:
        raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert e.value.code == 507000
    assert list(real.iterdir()) == []


@pytest.mark.fake_library(FAKE_ONLY)
@pytest.mark.parametrize("tail", ["/", "//", "/.", "/./"])
def test_a_symlinked_share_directory_is_refused_whatever_the_path_ends_with(
        backend, dev, share_dir, handles, tmp_path, monkeypatch, tail):
    """O_NOFOLLOW does not hold for a path ending in "/": the name is checked as the
    directory it leads to, never through a symlink."""
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    share_dir.symlink_to(real)
    monkeypatch.setenv("ACL_MEM_FAKE_SHARE_DIR", str(share_dir) + tail)
    with pytest.raises(InternalError) as e:
        raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert e.value.code == 507000
    assert list(real.iterdir()) == []


@pytest.mark.fake_library(FAKE_ONLY)
def test_a_share_directory_path_ending_in_dot_dot_is_refused(backend, dev, share_dir, handles,
                                                            tmp_path, monkeypatch):
    """"link/.." would be the parent of wherever a symlink points: not the directory
    named."""
    (tmp_path / "elsewhere" / "inner").mkdir(parents=True, mode=0o700)
    (tmp_path / "elsewhere").chmod(0o700)
    share_dir.symlink_to(tmp_path / "elsewhere" / "inner")
    monkeypatch.setenv("ACL_MEM_FAKE_SHARE_DIR", str(share_dir) + "/..")
    with pytest.raises(InternalError) as e:
        raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert e.value.code == 507000
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["inner"]


@pytest.mark.fake_library(FAKE_ONLY)
def test_a_whitelist_too_long_for_its_record_is_refused_and_the_record_kept(
        backend, dev, share_dir, handles):
    """A whitelist that would outgrow what a record holds (4 MiB) over many calls is
    refused with 107000; the record stays readable and usable."""
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 0)
    refused = None
    for round_number in range(8):
        base = 5_000_000 + round_number * 65535  # pids no process has here
        try:
            raw.aclrtMemSetPidToShareableHandle(shareable, list(range(base, base + 65535)),
                                                65535)
        except RtParamInvalidError as exc:
            refused = exc
            break
    assert refused is not None and refused.code == 107000
    assert record_path(share_dir, shareable).stat().st_size <= 4 << 20
    raw.aclrtMemSetPidToShareableHandle(shareable, [os.getppid()], 1)
    assert os.getppid() in [entry[0] for entry in
                            read_record(record_path(share_dir, shareable))["pids"]]


@pytest.mark.fake_library(FAKE_ONLY)
def test_share_directory_that_is_a_file_is_refused(backend, dev, share_dir, handles):
    share_dir.write_bytes(b"not a directory")
    with pytest.raises(InternalError) as e:
        raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert e.value.code == 507000
    assert share_dir.read_bytes() == b"not a directory"


@pytest.mark.fake_library(FAKE_ONLY)
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_share_directory_of_another_user_is_refused(backend, dev, share_dir, handles):
    share_dir.mkdir(mode=0o700)
    os.chown(share_dir, 65534, 65534)
    with pytest.raises(InternalError) as e:
        raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert e.value.code == 507000
    assert list(share_dir.iterdir()) == []


@pytest.mark.fake_library(FAKE_ONLY)
def test_share_directory_is_created_private(backend, dev, share_dir, handles):
    old = os.umask(0)
    try:
        raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    finally:
        os.umask(old)
    assert share_dir.stat().st_mode & 0o7777 == 0o700


@pytest.mark.fake_library(FAKE_ONLY)
def test_symlinks_at_record_names_are_not_followed(backend, dev, share_dir, handles,
                                                   tmp_path):
    """A symlink planted where the next record goes is replaced, never written through."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    first = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    for n in range(1, 9):
        record_path(share_dir, first + n).symlink_to(victim)
    shared = [raw.aclrtMemExportToShareableHandle(physical(handles), 0, 0) for _ in range(3)]
    raw.aclrtMemSetPidToShareableHandle(shared[0], [os.getpid() + 1], 1)
    for handle in handles:
        raw.aclrtFreePhysical(handle)
    handles.clear()
    assert victim.read_bytes() == b"precious"


@pytest.mark.fake_library(FAKE_ONLY)
def test_symlinked_lock_file_is_refused(backend, dev, share_dir, handles, tmp_path):
    share_dir.mkdir(mode=0o700)
    target = tmp_path / "lock-target"
    (share_dir / LOCK_NAME).symlink_to(target)
    with pytest.raises(InternalError) as e:
        raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert e.value.code == 507000
    assert not target.exists()


# -- 3. damaged records ----------------------------------------------------------------------------

_DAMAGE = {
    "not json": b"\x00garbage{",
    "empty": b"",
    "a list": b"[1, 2, 3]",
    "missing keys": json.dumps({"pid": 1}).encode(),
    "wrong types": None,  # the real record with every value turned into a string
    "holders not a list": None,
    "not utf-8": b"\xff\xfe{}",
}


def damage(path: Path, how: str) -> None:
    data = _DAMAGE[how]
    if data is None:
        record = read_record(path)
        if how == "wrong types":
            record = {key: str(value) for key, value in record.items()}
        else:
            record["holders"] = "many"
        data = json.dumps(record).encode()
    path.write_bytes(MAGIC + data)


@pytest.mark.fake_library(FAKE_ONLY)
@pytest.mark.parametrize("how", sorted(_DAMAGE))
def test_damaged_record_is_an_unusable_handle(backend, dev, share_dir, handles, how):
    """A record that does not parse is a handle nobody can use: 107000 from import and
    set-pid, and the exporter's free still gives its memory back."""
    before = huge_free()
    handle = physical(handles)
    shareable = raw.aclrtMemExportToShareableHandle(handle, 0, 1)
    damage(record_path(share_dir, shareable), how)
    for call in (lambda: raw.aclrtMemImportFromShareableHandle(shareable, 0),
                 lambda: raw.aclrtMemSetPidToShareableHandle(shareable, [1], 1)):
        with pytest.raises(RtParamInvalidError) as e:
            call()
        assert e.value.code == 107000
    raw.aclrtFreePhysical(handles.pop())
    assert huge_free() == before
    assert records(share_dir) == []


@pytest.mark.fake_library(FAKE_ONLY)
def test_record_that_cannot_be_read_is_an_unusable_handle(backend, dev, share_dir, handles):
    """An OS error reading a record (here: it is a directory) is 107000, not OSError."""
    handle = physical(handles)
    shareable = raw.aclrtMemExportToShareableHandle(handle, 0, 1)
    path = record_path(share_dir, shareable)
    path.unlink()
    path.mkdir()
    for call in (lambda: raw.aclrtMemImportFromShareableHandle(shareable, 0),
                 lambda: raw.aclrtMemSetPidToShareableHandle(shareable, [1], 1)):
        with pytest.raises(RtParamInvalidError) as e:
            call()
        assert e.value.code == 107000
    raw.aclrtFreePhysical(handles.pop())


@pytest.mark.fake_only(FAKE_ONLY)
@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_permission_error_reading_a_record_is_an_unusable_handle(
        fake, dev, share_dir, handles):
    handle = physical(handles)
    shareable = raw.aclrtMemExportToShareableHandle(handle, 0, 1)
    record_path(share_dir, shareable).chmod(0)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemImportFromShareableHandle(shareable, 0)
    assert e.value.code == 107000


@pytest.mark.fake_library(FAKE_ONLY)
def test_unknown_handle_is_107000(backend, dev, share_dir):
    for shareable in (1, os.getpid() << 24 | 0xFFFFFF, 2**64 - 1):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemImportFromShareableHandle(shareable, 0)
        assert e.value.code == 107000


# -- 2. processes that die -------------------------------------------------------------------------


@pytest.mark.fake_library(FAKE_ONLY)
def test_killed_importer_lets_go_of_exported_memory(backend, dev, share_dir, handles):
    """The exporter freed its handle while another process held the import; that
    process is SIGKILLed: the memory goes back to the exporter's pool and the record
    goes away."""
    before = huge_free()
    handle = physical(handles)
    shareable = raw.aclrtMemExportToShareableHandle(handle, 0, 1)
    with child(IMPORTER, str(shareable)) as (proc, imported):
        assert imported > 0
        raw.aclrtFreePhysical(handles.pop())
        assert huge_free() == before - HUGE  # held by the child
        kill(proc)
        assert huge_free() == before
    assert records(share_dir) == []


@pytest.mark.fake_library(FAKE_ONLY)
def test_killed_importer_before_the_exporter_frees(backend, dev, share_dir, handles):
    before = huge_free()
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    with child(IMPORTER, str(shareable)) as (proc, imported):
        assert imported > 0
        kill(proc)
        raw.aclrtFreePhysical(handles.pop())
        assert huge_free() == before
    assert records(share_dir) == []


@pytest.mark.fake_library(FAKE_ONLY)
def test_holder_whose_pid_was_reused_is_not_alive(backend, dev, share_dir, handles):
    """A holder is a (pid, start time) pair: a live process with the holder's pid but
    another start time is not the holder."""
    before = huge_free()
    shareable = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    path = record_path(share_dir, shareable)
    record = read_record(path)
    start = int(Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[19])
    record["holders"] = [[os.getppid(), start + 1]]
    write_record(path, record)
    raw.aclrtFreePhysical(handles.pop())
    assert huge_free() == before
    assert records(share_dir) == []


@pytest.mark.fake_library(FAKE_ONLY)
def test_record_of_a_killed_exporter_is_removed(backend, dev, share_dir, handles):
    with child(EXPORTER) as (proc, shareable):
        assert record_path(share_dir, shareable).exists()
        kill(proc)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemImportFromShareableHandle(shareable, 0)
    assert e.value.code == 107000
    mine = raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    assert records(share_dir) == [record_path(share_dir, mine)]


@pytest.mark.fake_library(FAKE_ONLY)
def test_import_from_a_live_exporter_is_counted(backend, dev, share_dir):
    """Two imports of one export: each holds the memory until it is freed."""
    with child(EXPORTER) as (_, shareable):
        first = raw.aclrtMemImportFromShareableHandle(shareable, 0)
        second = raw.aclrtMemImportFromShareableHandle(shareable, 0)
        path = record_path(share_dir, shareable)
        assert len(read_record(path)["holders"]) == 2
        raw.aclrtFreePhysical(first)
        assert len(read_record(path)["holders"]) == 1
        raw.aclrtFreePhysical(second)
        assert read_record(path)["holders"] == []


# -- 4. interrupted at any line --------------------------------------------------------------------


@pytest.mark.fake_only(FAKE_ONLY)
@pytest.mark.parametrize("files", ["unnamed", "named"])
def test_interrupted_export_leaves_nothing_behind(fake, dev, share_dir, handles, files,
                                                  request):
    """Whatever line an export is interrupted at: the lock is free, every record on disk
    is whole and is the handle's, and freeing the handle removes it; no temporary file
    stays, with or without unnamed files (O_TMPFILE)."""
    if files == "named":
        request.getfixturevalue("no_tmpfile")
    before = huge_free()

    def setup() -> Any:
        handle = physical(handles)
        return lambda: raw.aclrtMemExportToShareableHandle(handle, 0, 1)

    for _ in interrupted_runs(setup, where=signalled_lines):
        on_disk = records(share_dir)
        assert len(on_disk) <= 1
        for path in on_disk:
            read_record(path)
        assert not (share_dir / LOCK_NAME).exists() or lock_is_free(share_dir)
        assert list(share_dir.glob(".acl_mem_fake-tmp-*")) == []
        raw.aclrtFreePhysical(handles.pop())
        assert records(share_dir) == []
    assert huge_free() == before
    raw.aclrtMemExportToShareableHandle(physical(handles), 0, 1)
    raw.aclrtFreePhysical(handles.pop())
    assert list(share_dir.glob(".acl_mem_fake-tmp-*")) == []


@pytest.mark.fake_only(FAKE_ONLY)
def test_interrupted_import_holds_only_what_it_returned(fake, dev, share_dir):
    """Whatever line an import is interrupted at, the record counts exactly the imported
    handles the library holds, and the lock is free."""
    with child(EXPORTER) as (_, shareable):
        path = record_path(share_dir, shareable)

        def setup() -> Any:
            return lambda: raw.aclrtMemImportFromShareableHandle(shareable, 0)

        for _ in interrupted_runs(setup, where=signalled_lines):
            mine = [held.address for held in fake.live_vmm()
                    if held.api == "aclrtMemImportFromShareableHandle"]
            assert len(read_record(path)["holders"]) == len(mine)
            assert lock_is_free(share_dir)
            for handle in mine:
                raw.aclrtFreePhysical(handle)
            assert read_record(path)["holders"] == []
