"""acl_mem's fake libascendcl (the engine in C) seen from Python: its generated parts are
current, its device profiles and releases are acl_mem.fake's, its control API
resets and configures it, and an unusable setting fails every call with its reason."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acl_mem._fake.library import EngineLibrary
from acl_mem._fake.profiles import PROFILES
from acl_mem._fake.versions import VERSIONS
from acl_mem._native import load_native_backend
from acl_mem._native.backend import NativeBackend

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def engine() -> Iterator[EngineLibrary]:
    library = EngineLibrary.get()
    yield library
    library.configure()  # the environment's choice again, and a fresh state


@pytest.fixture(scope="module")
def native() -> NativeBackend:
    return load_native_backend(str(EngineLibrary.get().path.rsplit("/", 1)[0]))


def test_the_generated_engine_sources_are_current():
    done = subprocess.run([sys.executable, str(ROOT / "stubs" / "gen_engine_api.py"),
                           "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("cann", sorted(VERSIONS))
def test_every_profile_and_release_is_played_as_its_data_says(engine, native, profile, cann):
    """The library plays each profile and release of acl_mem/_fake/profiles.py and
    versions.py (from which its tables are generated) as their fields say."""
    engine.configure(profile, cann)
    described = engine.describe()
    expected = PROFILES[profile]
    assert (described.profile, described.soc_name, described.cann) == (
        profile, expected.soc_name, cann)
    assert (described.device_count, described.capacity) == (
        expected.device_count, expected.capacity)
    assert native.aclrtGetVersion() == (0, *VERSIONS[cann].acl_version)
    assert native.aclrtGetRunMode() == (0, expected.run_mode)
    assert native.soc_name() == expected.soc_name


def test_configure_refuses_what_it_does_not_know_and_changes_nothing(engine):
    before = engine.describe()
    for bad in ({"profile": "no-such-chip"}, {"cann": "7.0"}, {"device_count": 33},
                {"capacity": 1 << 62}):
        with pytest.raises(ValueError):
            engine.configure(**bad)  # type: ignore[arg-type]
        assert engine.describe() == before


def test_reset_is_a_new_process(engine, native):
    assert native.aclrtSetDevice(0) == 0
    rc, ptr = native.aclrtMalloc(4096, 0)
    assert rc == 0
    engine.reset()
    assert native.aclrtGetDevice() == (107002, 0)
    assert native.aclrtFree(ptr) == 107000
    assert native.aclrtSetDevice(0) == 0
    assert native.aclrtGetMemInfo(1)[1] == native.aclrtGetMemInfo(1)[2]  # all free
    assert native.aclrtResetDevice(0) == 0


def test_configured_devices_and_capacity(engine, native):
    engine.configure("atlas-a2", None, device_count=2, capacity=1 << 30)
    assert native.aclrtGetDeviceCount() == (0, 2)
    assert native.aclrtSetDevice(2) == 107001
    assert native.aclrtSetDevice(1) == 0
    assert native.aclrtGetMemInfo(1)[2] == 1 << 30
    assert native.aclrtMalloc(1 << 30, 0)[0] == 207001
    assert native.aclrtResetDevice(1) == 0


def test_hazards_are_queued_for_a_binding_and_counted(engine, native):
    """With queue_findings the engine keeps hazards for the binding (nothing on stderr)
    and raises the waiting counter; taking them empties the queue; counts stay until a
    reset."""
    engine.set_hazards("raise", queue=True)
    try:
        assert native.aclrtSetDevice(0) == 0
        rc, ptr = native.aclrtMalloc(4096, 0)
        assert rc == 0
        assert engine.findings() == []
        assert native.aclrtMemsetAsync(ptr, 4096, 1, 4096, 0) == 0
        # Queued for the binding: the call itself succeeds whatever the mode.
        assert native.aclrtFree(ptr) == 0
        assert native.aclrtSynchronizeDevice() == 0
        found = engine.findings()
        assert [kind for kind, _ in found] == ["free-while-queued",
                                               "queued-work-on-freed-memory"]
        assert f"{ptr:#x}" in found[0][1]
        assert engine.findings() == []
        assert engine.hazard_count("free-while-queued") == 1
        assert engine.hazard_count() == 2
        engine.reset()
        assert engine.hazard_count() == 0
    finally:
        engine.set_hazards(None)


def test_the_host_touching_memory_queued_work_uses_is_a_hazard(engine, native):
    """acl_mem_fake_host_access: a read races with queued writes only, a write with any
    queued access; after the synchronisation nothing races."""
    engine.set_hazards("count", queue=True)
    try:
        assert native.aclrtSetDevice(0) == 0
        rc, host = native.aclrtMallocHost(4096)
        rc2, device = native.aclrtMalloc(4096, 0)
        rc3, stream = native.aclrtCreateStream()
        assert rc == rc2 == rc3 == 0
        assert native.aclrtMemcpyAsync(device, 4096, host, 4096, 1, stream) == 0  # reads host
        engine.host_access(host, 16, access="read", what="a view reads")
        assert engine.findings() == []
        engine.host_access(host + 8, 16, access="write", what="a view writes")
        found = engine.findings()
        assert [kind for kind, _ in found] == ["access-before-synchronize"]
        assert found[0][1].startswith("a view writes while queued")
        engine.host_access(device + 64, 64, access="free", what="a segment freed")  # written
        assert [kind for kind, _ in engine.findings()] == ["free-while-queued"]
        assert native.aclrtMemcpyAsync(host, 4096, device, 4096, 2, stream) == 0  # writes it
        engine.host_access(host + 4095, 1, access="read", what="a view reads")
        assert [kind for kind, _ in engine.findings()] == ["access-before-synchronize"]
        assert native.aclrtSynchronizeStream(stream) == 0
        engine.host_access(host, 4096, access="write", what="a view writes")
        assert engine.findings() == []
        with pytest.raises(ValueError):
            engine.host_access(1 << 63, 1 << 63, access="read", what="wrapping")
        assert native.aclrtDestroyStream(stream) == 0
        assert native.aclrtFree(device) == 0 and native.aclrtFreeHost(host) == 0
    finally:
        engine.set_hazards(None)


def test_the_checker_holds_freed_addresses_back_a_while(engine, native):
    """With the checker on, a freed block's address is not given to the next blocks (a
    stale pointer does not reach a new block) until 64 more frees push it out; with it
    off, the next block of that size takes it at once."""
    assert native.aclrtSetDevice(0) == 0
    rc, first = native.aclrtMalloc(4096, 0)
    assert rc == 0 and native.aclrtFree(first) == 0
    rc, again = native.aclrtMalloc(4096, 0)
    assert (rc, again) == (0, first) and native.aclrtFree(again) == 0
    engine.set_check(True)
    try:
        seen = []
        for _ in range(65):  # the 65th free pushes the first address out
            rc, ptr = native.aclrtMalloc(4096, 0)
            assert rc == 0 and native.aclrtFree(ptr) == 0
            seen.append(ptr)
        assert len(set(seen)) == 65
        rc, ptr = native.aclrtMalloc(4096, 0)  # the first one is back in the space
        assert rc == 0 and ptr == seen[0] and native.aclrtFree(ptr) == 0
    finally:
        engine.set_check(None)


def test_a_full_finding_queue_says_how_many_it_dropped(engine, native):
    engine.set_hazards(None, queue=True)
    try:
        assert native.aclrtSetDevice(0) == 0
        for _ in range(70):
            rc, ptr = native.aclrtMalloc(64, 0)
            assert rc == 0
            assert native.aclrtMemsetAsync(ptr, 64, 1, 64, 0) == 0
            assert native.aclrtFree(ptr) == 0
        found = engine.findings()
        assert len(found) == 65
        assert found[-1][0] == "dropped" and found[-1][1].startswith("6 ")
        assert engine.hazard_count("free-while-queued") == 70
    finally:
        engine.set_hazards(None)


def test_leaks_list_every_live_block_with_its_caller(engine, native):
    assert native.aclrtSetDevice(0) == 0
    rc, device_block = native.aclrtMalloc(1000, 0)
    assert rc == 0
    rc, pinned = native.aclrtMallocHost(4096)
    assert rc == 0
    rc, freed = native.aclrtMalloc(64, 0)
    assert rc == 0 and native.aclrtFree(freed) == 0
    leaks = engine.leaks()
    assert [(leak.api, leak.address, leak.size, leak.device) for leak in leaks] == [
        ("aclrtMalloc", device_block, 1000, 0), ("aclrtMallocHost", pinned, 4096, None)]
    assert all(leak.caller != 0 for leak in leaks)
    assert native.aclrtFree(device_block) == 0 and native.aclrtFreeHost(pinned) == 0
    assert engine.leaks() == []


def test_an_injected_fault_fails_the_nth_call_once(engine, native):
    assert native.aclrtSetDevice(0) == 0
    engine.inject_fault("aclrtMalloc", nth=2, code=207001)
    assert native.aclrtMalloc(64, 0)[0] == 0
    assert native.aclrtMalloc(64, 0)[0] == 207001
    assert native.aclrtGetLastError(0) == 207001
    assert native.aclrtMalloc(64, 0)[0] == 0  # once only
    # Argument checks come first: a refused call does not count.
    engine.inject_fault("aclrtMallocHost", code=507899)
    assert native.aclrtMallocHost(0)[0] == 100000
    assert native.aclrtMallocHost(64)[0] == 507899
    engine.inject_fault("aclrtMallocCached")
    engine.reset()  # forgets the plan
    assert native.aclrtSetDevice(0) == 0
    assert native.aclrtMallocCached(64, 0)[0] == 0


@pytest.mark.parametrize(("call", "nth", "code"), [("aclrtFree", 1, 207001),
                                                   ("aclrtMalloc", 0, 207001),
                                                   ("aclrtMalloc", 1, 0)])
def test_an_impossible_fault_is_refused(engine, call, nth, code):
    with pytest.raises(ValueError):
        engine.inject_fault(call, nth, code)


def test_the_checker_finds_damaged_canaries_on_demand(engine, native):
    engine.set_hazards("count", queue=True)
    engine.set_check(True)
    try:
        assert native.aclrtSetDevice(0) == 0
        rc, ptr = native.aclrtMalloc(100, 0)
        assert rc == 0
        assert engine.check() == 0
        # A device-to-device copy past the 100 bytes asked for: reported at once.
        rc, other = native.aclrtMalloc(4096, 0)
        assert native.aclrtMemcpy(ptr, 128, other, 128, 3) == 0
        assert [kind for kind, _ in engine.findings()] == ["boundary-crossed"]
        assert engine.check() == 1
        found = engine.findings()
        assert [kind for kind, _ in found] == ["canary-overwritten"]
        assert f"{ptr:#x} (100 bytes requested)" in found[0][1]
        assert "offsets 100..127" in found[0][1]
    finally:
        engine.set_check(None)
        engine.set_hazards(None)


@pytest.fixture
def checking(engine):
    engine.set_hazards("count", queue=True)
    engine.set_check(True)
    try:
        yield engine
    finally:
        engine.set_check(None)
        engine.set_hazards(None)


def _host_copy(native, dst: int, data: bytes) -> int:
    import ctypes

    buffer = ctypes.create_string_buffer(data, len(data))
    return int(native.aclrtMemcpy(dst, len(data), ctypes.addressof(buffer), len(data), 1))


def test_pool_segments_get_canaries_bounds_and_use_after_free(checking, native):
    """A binding's pool reports its segments: a copy past a segment's requested bytes is
    reported naming the next segment, a damaged canary is found at the segment's free,
    and a copy into a freed segment is a use after free."""
    engine = checking
    assert native.aclrtSetDevice(0) == 0
    rc, block = native.aclrtMalloc(1 << 20, 0)
    assert rc == 0
    engine.segment_allocated(block, block, 100, 512)
    engine.segment_allocated(block, block + 512, 200, 512)
    assert _host_copy(native, block, b"x" * 600) == 0
    found = engine.findings()
    assert [kind for kind, _ in found] == ["boundary-crossed"]
    assert f"pool segment {block:#x}" in found[0][1] and f"{block + 512:#x}" in found[0][1]
    engine.segment_freed(block)
    found = engine.findings()
    assert [kind for kind, _ in found] == ["canary-overwritten"]
    assert "offsets 100..511" in found[0][1]
    assert _host_copy(native, block + 16, b"late") == 0
    assert [kind for kind, _ in engine.findings()] == ["use-after-free"]
    # A new segment over the freed bytes makes them live again; the block's free forgets
    # every segment in it.
    engine.segment_allocated(block, block, 64, 64)
    assert _host_copy(native, block, b"y" * 64) == 0
    assert engine.findings() == []
    assert native.aclrtFree(block) == 0
    rc, again = native.aclrtMalloc(1 << 20, 0)
    assert rc == 0 and _host_copy(native, again, b"z" * 600) == 0
    assert engine.findings() == []
    assert native.aclrtFree(again) == 0


def test_segments_in_freed_pinned_memory_go_with_it(checking, native):
    """Pinned memory freed with a pool segment in it: once its address is handed out again
    (after the quarantine), the old segment does not judge the new block's copies."""
    engine = checking
    assert native.aclrtSetDevice(0) == 0
    rc, first = native.aclrtMallocHost(4096)
    assert rc == 0
    engine.segment_allocated(first, first, 16, 64)
    assert native.aclrtFreeHost(first) == 0
    for _ in range(200):  # until the quarantine lets the address go and it comes back
        rc, again = native.aclrtMallocHost(4096)
        assert rc == 0
        if again == first:
            break
        assert native.aclrtFreeHost(again) == 0
    else:
        pytest.skip("the host never handed the address out again")
    assert _host_copy(native, again, b"n" * 256) == 0
    assert engine.findings() == []
    assert native.aclrtFreeHost(again) == 0


def test_a_segment_asking_more_than_it_takes_is_refused(engine):
    with pytest.raises(ValueError):
        engine.segment_allocated(0x1000, 0x1000, 65, 64)


def test_writes_to_freed_pinned_memory_are_a_use_after_free(checking, native):
    import ctypes

    engine = checking
    assert native.aclrtSetDevice(0) == 0
    rc, host = native.aclrtMallocHost(4096)
    assert rc == 0
    assert native.aclrtFreeHost(host) == 0
    assert engine.check() == 0
    ctypes.memset(host + 8, 0x41, 4)  # a pointer that outlived the free
    assert engine.check() == 1
    found = engine.findings()
    assert [kind for kind, _ in found] == ["use-after-free"]
    assert f"{host:#x}" in found[0][1] and "offsets 8..11" in found[0][1]
    assert engine.check() == 0  # said once


def test_an_unknown_hazard_mode_is_refused(engine):
    with pytest.raises(ValueError):
        engine.set_hazards("loud")


_CHILD = """
import sys
from acl_mem._fake.library import EngineLibrary
from acl_mem._native import load_native_backend
library = EngineLibrary.get()
native = load_native_backend(library.path.rsplit("/", 1)[0])
print(library.describe().setting_error)
print(native.aclrtSetDevice(0), native.aclrtGetLastError(0))
print(library.recent_error())
"""


@pytest.mark.parametrize(("name", "value"), [("ACL_MEM_FAKE_PROFILE", "no-such-chip"),
                                             ("ACL_MEM_FAKE_CANN", "7.0")])
def test_an_unusable_setting_fails_every_call_and_names_it(name, value):
    env = {**os.environ, name: value}
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    reason, codes, recent = done.stdout.splitlines()
    assert f"{name}={value}" in reason
    assert codes == "507000 507000"
    assert name in recent
    assert done.stderr.count(name) == 1


def _recent(native: NativeBackend) -> str:
    import ctypes

    recent = ctypes.CDLL(native.path).aclGetRecentErrMsg
    recent.restype = ctypes.c_char_p
    text = recent()
    assert text is not None
    return text.decode()


def test_c_failure_texts_carry_the_python_errors_hints(engine, native):
    """The hint texts are written once (acl_mem/_hint_texts.py): a failure's text in C
    (aclGetRecentErrMsg) carries the hint acl_mem's Python error has for the same call."""
    import acl_mem
    from acl_mem import raw

    with acl_mem.using_backend(native, "the C library, for its failure texts"):
        raw.aclrtSetDevice(0)
        try:
            ptr = raw.aclrtMalloc(64, 0)
            raw.aclrtFree(ptr)
            failures = [
                (lambda: raw.aclrtFree(ptr), "aclrtFree"),
                (lambda: raw.aclrtSetDevice(99), "aclrtSetDevice"),
                (lambda: raw.aclrtReleaseMemAddress(0x1000_0000_0000), "aclrtReleaseMemAddress"),
                (lambda: raw.aclrtUnmapMem(0x1000_0000_0000), "aclrtUnmapMem"),
            ]
            for fail, call in failures:
                with pytest.raises(acl_mem.AclError) as e:
                    fail()
                text = _recent(native)
                assert text.startswith(call + "("), text
                assert e.value.hint and e.value.hint in text, (e.value.hint, text)
        finally:
            raw.aclrtResetDevice(0)


def test_a_segment_given_back_while_the_checker_is_off_is_forgotten(engine, native):
    """Turned on again, the checker does not judge copies by a segment the pool gave back
    while it was off."""
    engine.set_hazards("count", queue=True)
    try:
        engine.set_check(True)
        assert native.aclrtSetDevice(0) == 0
        rc, block = native.aclrtMalloc(4096, 0)
        assert rc == 0
        engine.segment_allocated(block, block, 16, 64)
        engine.set_check(False)
        engine.segment_freed(block)
        engine.set_check(True)
        assert _host_copy(native, block, b"w" * 256) == 0
        assert engine.findings() == []
        assert native.aclrtFree(block) == 0
    finally:
        engine.set_check(None)
        engine.set_hazards(None)
