"""Conformance: aclInit / aclFinalize (docs/runtime-model.md §3.1) and devices
(docs/runtime-model.md §3.2).

Sequences that depend on the whole process's history ("before any aclInit", "the very
first aclInit's config") run in a fresh interpreter with the backend under test, so
they mean the same on the fake and on real hardware.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import acl_mem
from acl_mem import raw
from acl_mem.conformance.providers import native_provider
from acl_mem.enums import MallocPolicy, MemAttr
from acl_mem.errors import (
    ContextNullError,
    ContextReleaseError,
    InvalidDeviceIdError,
    InvalidParamError,
    RepeatFinalizeError,
    RepeatInitializeError,
)

from .helpers import address_of, padding, raise_from_fresh_thread

MiB = 1 << 20
HUGE_PAGE = 2 * MiB
NORMAL_PAGE = 4096

# -- helpers ---------------------------------------------------------------------------------------


class Worker:
    """A thread that runs the callables it is given, one at a time, and hands back results."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], Any], queue.Queue[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, reply = job
            try:
                reply.put((True, fn()))
            except BaseException as exc:
                reply.put((False, exc))

    def run(self, fn: Callable[[], Any]) -> Any:
        reply: queue.Queue[Any] = queue.Queue()
        self._jobs.put((fn, reply))
        ok, value = reply.get(timeout=30)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def error_code(fn: Callable[[], Any]) -> int:
    """0 if ``fn`` succeeds, else the aclError code it raised."""
    try:
        fn()
    except acl_mem.AclError as exc:
        return exc.code
    return 0


_PRELUDE = """
import json
import acl_mem
from acl_mem import raw
acl_mem.use_backend({name!r})
codes = []
def rc(call, *args):
    try:
        call(*args)
    except acl_mem.AclError as exc:
        codes.append(exc.code)
    else:
        codes.append(0)
"""


def fresh_process(backend_name: str, body: str) -> list[int]:
    """Run ``body`` (which appends to ``codes`` via ``rc``) in a new interpreter."""
    prelude = native_provider().subprocess_prelude if backend_name == "native" else ""
    script = prelude + _PRELUDE.format(name=backend_name) + textwrap.dedent(body)
    script += "\nprint(json.dumps(codes))\n"
    root = str(Path(acl_mem.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: list[int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def device_count() -> int:
    return raw.aclrtGetDeviceCount()


def need_devices(n: int) -> None:
    if device_count() < n:
        pytest.skip(f"needs {n} devices")


# -- §3.1 aclInit / aclFinalize --------------------------------------------------------------------


def test_spec_3_1_repeat_init_returns_100002(backend):
    """docs/runtime-model.md §3.1: first aclInit succeeds; every later aclInit returns 100002."""
    raw.aclInit()
    try:
        for _ in range(3):
            with pytest.raises(RepeatInitializeError) as e:
                raw.aclInit()
            assert e.value.code == 100002
    finally:
        raw.aclFinalize()


def test_spec_3_1_one_finalize_undoes_every_init_then_repeat_finalize_is_100037(backend):
    """docs/runtime-model.md §3.1: one aclFinalize undoes any number of aclInit; the next one
    returns 100037."""
    raw.aclInit()
    for _ in range(4):
        with pytest.raises(RepeatInitializeError):
            raw.aclInit()
    raw.aclFinalize()
    for _ in range(2):
        with pytest.raises(RepeatFinalizeError) as e:
            raw.aclFinalize()
        assert e.value.code == 100037


def test_spec_3_1_init_works_again_after_finalize(backend):
    """docs/runtime-model.md §3.1: aclInit -> aclFinalize -> aclInit succeeds; the flag is reset."""
    raw.aclInit()
    raw.aclFinalize()
    raw.aclInit()
    with pytest.raises(RepeatInitializeError) as e:
        raw.aclInit()
    assert e.value.code == 100002
    raw.aclFinalize()
    with pytest.raises(RepeatFinalizeError) as e2:
        raw.aclFinalize()
    assert e2.value.code == 100037


@pytest.mark.open_question(13)
def test_spec_3_1_finalize_before_any_init_returns_0(backend):
    """docs/runtime-model.md §3.1 / §8.13: aclFinalize before any aclInit succeeds; a second one is
    100037."""
    codes = fresh_process(backend.name, """
        rc(raw.aclFinalize)
        rc(raw.aclFinalize)
        rc(raw.aclInit)
        rc(raw.aclFinalize)
    """)
    assert codes == [0, 100037, 0, 0]


def test_spec_3_1_init_with_config_file(backend, tmp_path):
    """docs/runtime-model.md §3.1: configPath may point to a JSON file ("{}" allowed), str or
    path-like."""
    config = tmp_path / "acl.json"
    config.write_text("{}")
    codes = fresh_process(backend.name, f"""
        import pathlib
        rc(raw.aclInit, {str(config)!r})
        rc(raw.aclFinalize)
        rc(raw.aclInit, pathlib.Path({str(config)!r}))
        rc(raw.aclFinalize)
    """)
    assert codes == [0, 0, 0, 0]


def test_spec_3_1_repeat_init_does_not_read_the_config(backend, tmp_path):
    """docs/runtime-model.md §3.1: while initialised, a later aclInit's config is not read: 100002
    even for a missing file or one with different content."""
    first = tmp_path / "first.json"
    first.write_text("{}")
    other = tmp_path / "other.json"
    other.write_text('{"err_msg_mode": "1"}')
    missing = tmp_path / "does-not-exist.json"
    codes = fresh_process(backend.name, f"""
        rc(raw.aclInit, {str(first)!r})
        rc(raw.aclInit, {str(missing)!r})
        rc(raw.aclInit, {str(other)!r})
        rc(raw.aclInit, None)
        rc(raw.aclFinalize)
    """)
    assert codes == [0, 100002, 100002, 100002, 0]


def test_spec_3_1_different_config_content_after_finalize_is_100000(backend, tmp_path):
    """docs/runtime-model.md §3.1: after aclFinalize, aclInit with config content differing from the
    very first aclInit's returns 100000; the same content (any path) succeeds."""
    first = tmp_path / "first.json"
    first.write_text("{}")
    same = tmp_path / "same-content-elsewhere.json"
    same.write_text("{}")
    other = tmp_path / "other.json"
    other.write_text('{"err_msg_mode": "1"}')
    codes = fresh_process(backend.name, f"""
        rc(raw.aclInit, {str(first)!r})
        rc(raw.aclFinalize)
        rc(raw.aclInit, {str(other)!r})
        rc(raw.aclInit, {str(same)!r})
        rc(raw.aclFinalize)
    """)
    assert codes == [0, 0, 100000, 0, 0]


def test_spec_3_1_1_empty_path_is_an_empty_config_like_null(backend, tmp_path):
    """docs/runtime-model.md §3.1.1: aclInit("") is an empty configuration, exactly like NULL and
    like an empty file: it succeeds, and they count as the same content after aclFinalize."""
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    codes = fresh_process(backend.name, f"""
        rc(raw.aclInit, "")
        rc(raw.aclFinalize)
        rc(raw.aclInit, None)
        rc(raw.aclFinalize)
        rc(raw.aclInit, {str(empty)!r})
        rc(raw.aclFinalize)
    """)
    assert codes == [0, 0, 0, 0, 0, 0]


_CONFIG_FAILURES = {
    "not_json": (b"{not json", 100006),
    "nan": (b'{"x": NaN}', 100006),
    "bad_utf8": (b'{"x": "\xff"}', 100006),
    "deep": (b"[" * 11 + b"]" * 11, 100006),
    "deep_in_a_string": (b'{"x": "' + b"{" * 11 + b'"}', 100006),
    "overflowing_number": (b'{"x": 1e400}', 100006),
    "overflowing_integer": (b'{"x": 1' + b"0" * 400 + b"}", 100006),
    "lone_surrogate": (b'{"x": "\\ud800"}', 100006),
    "mode_int": (b'{"err_msg_mode": 1}', 100000),
    "mode_two": (b'{"err_msg_mode": "2"}', 100000),
}


def test_spec_3_1_1_config_file_errors(backend, tmp_path):
    """docs/runtime-model.md §3.1.1: a config path that does not exist or is a directory is
    100003; a file that is not JSON or nests brackets more than 10 deep is 100006; an
    err_msg_mode other than "0" or "1" is 100000. A failed aclInit leaves nothing behind: the
    next aclInit, with another config, succeeds."""
    paths = {"missing": tmp_path / "missing.json", "directory": tmp_path}
    for name, (content, _) in _CONFIG_FAILURES.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_bytes(content)
    body = "".join(f"rc(raw.aclInit, {str(path)!r})\n" for path in paths.values())
    codes = fresh_process(backend.name, body + "rc(raw.aclInit, None)\n")
    expected = {"missing": 100003, "directory": 100003,
                **{name: code for name, (_, code) in _CONFIG_FAILURES.items()}}
    assert dict(zip([*paths, "then NULL"], codes, strict=True)) == {**expected, "then NULL": 0}


@pytest.mark.parametrize("content", [b"[" * 10 + b"]" * 10, b'{"err_msg_mode": "1"}',
                                     b'{"err_msg_mode": "0"}', b"[1, 2]", b"\xef\xbb\xbf{}"],
                         ids=["ten_deep", "mode_one", "mode_zero", "top_level_list", "bom"])
def test_spec_3_1_1_config_files_the_runtime_accepts(backend, tmp_path, content):
    """docs/runtime-model.md §3.1.1: ten levels of brackets, err_msg_mode "0" or "1", any JSON
    value at the top, a UTF-8 byte order mark: aclInit succeeds."""
    path = tmp_path / "acl.json"
    path.write_bytes(content)
    assert fresh_process(backend.name, f"rc(raw.aclInit, {str(path)!r})\n") == [0]


def test_spec_3_1_1_content_check_comes_before_the_json_checks(backend, tmp_path):
    """docs/runtime-model.md §3.1.1: after aclFinalize, a different content is 100000 before its
    JSON is looked at; a missing file is still 100003 (it is read first)."""
    first = tmp_path / "first.json"
    first.write_text("{}")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    codes = fresh_process(backend.name, f"""
        rc(raw.aclInit, {str(broken)!r})
        rc(raw.aclInit, {str(first)!r})
        rc(raw.aclFinalize)
        rc(raw.aclInit, {str(broken)!r})
        rc(raw.aclInit, {str(tmp_path / "missing.json")!r})
        rc(raw.aclInit, "")
        rc(raw.aclInit, {str(first)!r})
    """)
    assert codes == [100006, 0, 0, 100000, 100003, 100000, 0]


# -- §3.1.2 the thread's last error ---------------------------------------------------------------


def _last_errors_after(steps: Callable[[], None]) -> tuple[int, int, int, int]:
    """In a fresh thread: run ``steps``, then peek twice, get once and peek again."""
    def body() -> tuple[int, int, int, int]:
        steps()
        return (raw.aclrtPeekAtLastError(), raw.aclrtPeekAtLastError(0),
                raw.aclrtGetLastError(), raw.aclrtPeekAtLastError())
    result: tuple[int, int, int, int] = raise_from_fresh_thread(body)
    return result


def _fails(call: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        with pytest.raises(acl_mem.AclError):
            call()
    return run


def test_spec_3_1_2_a_new_thread_has_no_last_error(backend):
    """docs/runtime-model.md §3.1.2: nothing failed on this thread: both getters return 0."""
    assert _last_errors_after(lambda: None) == (0, 0, 0, 0)


def test_spec_3_1_2_runtime_failures_are_kept_until_got(backend):
    """docs/runtime-model.md §3.1.2: a failure of the runtime (107002: no context) is the thread's
    last error: peeking keeps it, getting returns it once and clears it."""
    assert _last_errors_after(_fails(raw.aclrtGetDevice)) == (107002, 107002, 107002, 0)


def test_spec_3_1_2_the_latest_runtime_failure_wins_and_acl_refusals_are_not_kept(dev):
    """docs/runtime-model.md §3.1.2: the last of two runtime failures is kept; a refusal of the
    ACL layer's parameter checks (100000: size 0) afterwards changes nothing."""
    def steps() -> None:
        _fails(raw.aclrtGetDevice)()
        raw.aclrtSetDevice(0)
        try:
            _fails(lambda: raw.aclrtFree(0x1000))()
            _fails(lambda: raw.aclrtMalloc(0))()
        finally:
            raw.aclrtResetDevice(0)
    assert _last_errors_after(steps) == (107000, 107000, 107000, 0)


def test_spec_3_1_2_other_levels_are_100000_and_keep_the_last_error(backend):
    """docs/runtime-model.md §3.1.2: only ACL_RT_THREAD_LEVEL (0) exists: any other level is
    100000 from either getter, which is no failure to remember: the kept code stays."""
    def steps() -> None:
        _fails(raw.aclrtGetDevice)()
        for getter in (raw.aclrtGetLastError, raw.aclrtPeekAtLastError):
            for level in (1, -1, 2**31 - 1):
                with pytest.raises(InvalidParamError) as e:
                    getter(level)
                assert e.value.code == 100000
    assert _last_errors_after(steps) == (107002, 107002, 107002, 0)


def test_spec_3_1_2_each_thread_has_its_own(backend):
    """docs/runtime-model.md §3.1.2: a failure on one thread is not another thread's last
    error."""
    def steps() -> None:
        _fails(raw.aclrtGetDevice)()
        assert _last_errors_after(lambda: None) == (0, 0, 0, 0)
    assert _last_errors_after(steps) == (107002, 107002, 107002, 0)


# -- §3.1 which release: aclrtGetVersion, aclsysGetVersionStr -------------------------------------


@pytest.mark.cann("8.5.0")
def test_spec_3_1_acl_version_is_1_16_0_on_8_5_0(backend):
    """docs/runtime-model.md §3.1 Releases: aclrtGetVersion reports ACL 1.16.0 on CANN 8.5.0."""
    assert raw.aclrtGetVersion() == (1, 16, 0)


@pytest.mark.cann("9.0.1", "9.1.0")
def test_spec_3_1_acl_version_is_1_17_0_from_9_0_1(backend):
    """docs/runtime-model.md §3.1 Releases: aclrtGetVersion reports ACL 1.17.0 from CANN 9.0.1
    on (the version of the headers acl_mem binds, §0.1)."""
    assert raw.aclrtGetVersion() == (1, 17, 0)


def test_spec_3_1_runtime_version_reports_release_and_acl_version(backend, cann):
    """docs/runtime-model.md §0.1 / §3.1: acl_mem.runtime_version() is aclsysGetVersionStr
    ("runtime") and aclrtGetVersion together; neither needs aclInit, a device or a context."""
    version = acl_mem.runtime_version()
    assert version.cann == cann
    assert version.acl == raw.aclrtGetVersion()
    assert str(version) == f"CANN {cann or '(unknown)'}, ACL {'.'.join(map(str, version.acl))}"
    assert raise_from_fresh_thread(acl_mem.runtime_version) == version


def test_spec_3_1_version_queries_check_their_pointers(backend):
    """docs/runtime-model.md §3.1: aclrtGetVersion with any NULL output, and aclsysGetVersionStr
    with a NULL package name or output -> 100000."""
    for null_outputs in (1, 2, 4, 7):
        assert backend.aclrtGetVersion(null_outputs=null_outputs)[0] == 100000
    assert backend.aclsysGetVersionStr(None)[0] == 100000
    assert backend.aclsysGetVersionStr("runtime", null_outputs=1)[0] == 100000


# -- §3.2 aclrtSetDevice / aclrtResetDevice --------------------------------------------------------


@pytest.mark.parametrize("which", ["-1", "count", "count+1", "INT32_MAX", "INT32_MIN"])
def test_spec_3_2_set_device_invalid_id_is_107001(backend, which):
    """docs/runtime-model.md §3.2: aclrtSetDevice with an id outside [0, count) -> 107001."""
    count = device_count()
    device_id = {"-1": -1, "count": count, "count+1": count + 1, "INT32_MAX": 2**31 - 1,
                 "INT32_MIN": -(2**31)}[which]
    with pytest.raises(InvalidDeviceIdError) as e:
        raw.aclrtSetDevice(device_id)
    assert e.value.code == 107001
    # Nothing became current.
    with pytest.raises(ContextNullError) as e2:
        raw.aclrtGetDevice()
    assert e2.value.code == 107002


def test_spec_3_2_set_device_every_valid_id(backend):
    """docs/runtime-model.md §3.2: every id in [0, count) can be set; the last one set is
    current."""
    count = device_count()
    for device_id in range(count):
        raw.aclrtSetDevice(device_id)
        assert raw.aclrtGetDevice() == device_id
    for device_id in range(count):
        raw.aclrtResetDevice(device_id)


def test_spec_3_2_reset_never_set_device_is_507007(backend):
    """docs/runtime-model.md §3.2: aclrtResetDevice on a device with no reference -> 507007."""
    with pytest.raises(ContextReleaseError) as e:
        raw.aclrtResetDevice(0)
    assert e.value.code == 507007


def test_spec_3_2_reset_after_last_reference_is_507007(backend):
    """docs/runtime-model.md §3.2: a reset beyond the last reference ("already been reset") ->
    507007."""
    raw.aclrtSetDevice(0)
    raw.aclrtResetDevice(0)
    with pytest.raises(ContextReleaseError) as e:
        raw.aclrtResetDevice(0)
    assert e.value.code == 507007


@pytest.mark.parametrize("which", ["-1", "count", "INT32_MAX"])
def test_spec_3_2_reset_out_of_range_is_107001(backend, which):
    """docs/runtime-model.md §3.2: aclrtResetDevice with an out-of-range id -> 107001 (not
    507007)."""
    count = device_count()
    device_id = {"-1": -1, "count": count, "INT32_MAX": 2**31 - 1}[which]
    with pytest.raises(InvalidDeviceIdError) as e:
        raw.aclrtResetDevice(device_id)
    assert e.value.code == 107001


def test_spec_3_2_reset_force_drops_every_reference_and_the_memory(backend):
    """docs/runtime-model.md §3.2: aclrtResetDeviceForce after three aclrtSetDevice releases the
    device at once: the context is gone, the memory free again; another force reset -> 507007."""
    raw.aclrtSetDevice(0)
    huge0 = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0]
    raw.aclrtSetDevice(0)
    raw.aclrtSetDevice(0)
    raw.aclrtMalloc(4 * MiB, MallocPolicy.HUGE_ONLY)
    assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0] < huge0
    raw.aclrtResetDeviceForce(0)
    with pytest.raises(ContextNullError):
        raw.aclrtGetDevice()
    for reset in (raw.aclrtResetDeviceForce, raw.aclrtResetDevice):
        with pytest.raises(ContextReleaseError) as e:
            reset(0)
        assert e.value.code == 507007
    raw.aclrtSetDevice(0)
    try:
        assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0] == huge0
    finally:
        raw.aclrtResetDevice(0)


def test_spec_3_2_reset_force_of_a_device_never_set_is_507007(backend):
    """docs/runtime-model.md §3.2: no reference to drop -> 507007; an id out of range ->
    107001."""
    with pytest.raises(ContextReleaseError) as e:
        raw.aclrtResetDeviceForce(0)
    assert e.value.code == 507007
    with pytest.raises(InvalidDeviceIdError) as e2:
        raw.aclrtResetDeviceForce(device_count())
    assert e2.value.code == 107001


def test_spec_3_2_reset_force_leaves_created_contexts_holding_the_device(backend):
    """docs/runtime-model.md §3.2 / §3.3: a context from aclrtCreateContext is no reference of the
    default context: after the force reset its memory and the context still work."""
    raw.aclrtSetDevice(0)
    created = raw.aclrtCreateContext(0)
    try:
        ptr = raw.aclrtMalloc(64)
        raw.aclrtSetDevice(0)
        raw.aclrtResetDeviceForce(0)
        raw.aclrtSetCurrentContext(created)
        raw.aclrtMemset(ptr, 64, 7, 64)
        raw.aclrtFree(ptr)
    finally:
        raw.aclrtDestroyContext(created)


# -- §3.2 aclrtGetDevice / per-thread contexts -----------------------------------------------------


def test_spec_3_2_get_device_without_set_is_107002(backend):
    """docs/runtime-model.md §3.2: aclrtGetDevice in a thread that never set a device -> 107002."""
    with pytest.raises(ContextNullError) as e:
        raise_from_fresh_thread(raw.aclrtGetDevice)
    assert e.value.code == 107002


def test_spec_3_2_get_device_in_other_thread_is_107002_while_main_has_one(dev):
    """docs/runtime-model.md §3.2: the current device is per thread: another thread still has
    none."""
    assert raw.aclrtGetDevice() == 0
    with pytest.raises(ContextNullError) as e:
        raise_from_fresh_thread(raw.aclrtGetDevice)
    assert e.value.code == 107002
    assert raw.aclrtGetDevice() == 0


def test_spec_3_2_two_threads_have_different_current_devices(backend):
    """docs/runtime-model.md §3.2: two threads that set different devices each see their own
    device."""
    need_devices(2)
    with Worker() as a, Worker() as b:
        a.run(lambda: raw.aclrtSetDevice(0))
        b.run(lambda: raw.aclrtSetDevice(1))
        assert a.run(raw.aclrtGetDevice) == 0
        assert b.run(raw.aclrtGetDevice) == 1
        # The main thread set nothing.
        with pytest.raises(ContextNullError):
            raw.aclrtGetDevice()
        a.run(lambda: raw.aclrtResetDevice(0))
        b.run(lambda: raw.aclrtResetDevice(1))


def test_spec_3_2_set_device_switches_the_current_device(backend):
    """docs/runtime-model.md §3.2: a second aclrtSetDevice in the same thread makes that device
    current."""
    need_devices(2)
    raw.aclrtSetDevice(0)
    raw.aclrtSetDevice(1)
    assert raw.aclrtGetDevice() == 1
    raw.aclrtSetDevice(0)
    assert raw.aclrtGetDevice() == 0
    raw.aclrtResetDevice(0)
    raw.aclrtResetDevice(0)
    raw.aclrtResetDevice(1)


# -- §3.2 reference counting -----------------------------------------------------------------------


def test_spec_3_2_set_twice_reset_once_keeps_the_context(backend):
    """docs/runtime-model.md §3.2: each set adds a reference; one reset of two keeps context and
    memory."""
    raw.aclrtSetDevice(0)
    raw.aclrtSetDevice(0)
    ptr = raw.aclrtMalloc(4096, MallocPolicy.HUGE_FIRST)
    raw.aclrtMemset(ptr, 4096, 0x5A, 4096)
    raw.aclrtResetDevice(0)
    assert raw.aclrtGetDevice() == 0
    # The block survives: its bytes are still there and it can still be freed.
    out = bytearray(16)
    raw.aclrtMemcpy(address_of(out), 16, ptr, 16, acl_mem.MemcpyKind.DEVICE_TO_HOST)
    assert bytes(out) == b"\x5a" * 16
    raw.aclrtFree(ptr)
    # New allocations still work in the kept context.
    raw.aclrtFree(raw.aclrtMalloc(64, MallocPolicy.HUGE_FIRST))
    raw.aclrtResetDevice(0)


def test_spec_3_2_final_reset_releases_the_device_memory(backend):
    """docs/runtime-model.md §3.2: at zero references the device's memory is freed: after setting
    the device again the pools show the bytes free again."""
    raw.aclrtSetDevice(0)
    normal0 = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[0]
    huge0 = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0]
    pad = padding()  # the SoC's from 9.1.0, a fixed 32 before (docs/runtime-model.md §3.5)
    raw.aclrtMalloc(4 * MiB, MallocPolicy.HUGE_ONLY)     # 4 MiB + pad -> 6 MiB of huge pages
    raw.aclrtMalloc(1, MallocPolicy.NORMAL_ONLY)         # 32 + pad -> one 4 KiB page
    huge_taken = 6 * MiB if pad else 4 * MiB
    assert huge0 - raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0] == huge_taken
    assert normal0 - raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[0] == NORMAL_PAGE
    raw.aclrtResetDevice(0)
    # The context died with the last reference.
    with pytest.raises(ContextNullError) as e:
        raw.aclrtGetDevice()
    assert e.value.code == 107002
    raw.aclrtSetDevice(0)
    assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0] == huge0
    assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[0] == normal0
    raw.aclrtResetDevice(0)


def test_spec_3_2_references_are_per_process_and_final_reset_ends_other_threads(backend):
    """docs/runtime-model.md §3.2: threads setting the same device share its context and its
    reference count; when the count reaches 0 the other threads have no context (107002)."""
    with Worker() as other:
        other.run(lambda: raw.aclrtSetDevice(0))
        raw.aclrtSetDevice(0)
        assert other.run(raw.aclrtGetDevice) == 0
        raw.aclrtResetDevice(0)               # two references -> one
        assert other.run(raw.aclrtGetDevice) == 0
        assert raw.aclrtGetDevice() == 0
        raw.aclrtResetDevice(0)               # one -> zero: context released
        assert other.run(lambda: error_code(raw.aclrtGetDevice)) == 107002
        assert error_code(raw.aclrtGetDevice) == 107002
        with pytest.raises(ContextReleaseError):
            other.run(lambda: raw.aclrtResetDevice(0))


def test_spec_3_2_memory_is_shared_by_threads_of_one_device(backend):
    """docs/runtime-model.md §3.2: threads that set the same device share its context: memory
    allocated in one thread is visible in the pools of the other."""
    raw.aclrtSetDevice(0)
    with Worker() as other:
        other.run(lambda: raw.aclrtSetDevice(0))
        huge0 = other.run(lambda: raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0])
        ptr = raw.aclrtMallocAlign32(2 * MiB, MallocPolicy.HUGE_ONLY)
        assert huge0 - other.run(lambda: raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0]) == HUGE_PAGE
        other.run(lambda: raw.aclrtFree(ptr))
        assert other.run(lambda: raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)[0]) == huge0
        other.run(lambda: raw.aclrtResetDevice(0))
    raw.aclrtResetDevice(0)


# -- §3.2 aclrtGetDeviceCount and NULL outputs -----------------------------------------------------


def test_spec_3_2_get_device_count_needs_no_context(backend):
    """docs/runtime-model.md §3.2: aclrtGetDeviceCount returns the visible devices, with or without
    context."""
    count = device_count()
    assert isinstance(count, int)
    assert count >= 1
    assert raise_from_fresh_thread(raw.aclrtGetDeviceCount) == count
    raw.aclrtSetDevice(count - 1)
    assert raw.aclrtGetDevice() == count - 1
    raw.aclrtResetDevice(count - 1)


@pytest.mark.fake_only("only the fake's device count can be chosen")
def test_spec_3_2_get_device_count_follows_the_configured_count(fake):
    """docs/runtime-model.md §3.2: aclrtGetDeviceCount reports the visible devices; ids stop at
    count."""
    acl_mem.fake.configure(device_count=3)
    assert raw.aclrtGetDeviceCount() == 3
    raw.aclrtSetDevice(2)
    raw.aclrtResetDevice(2)
    with pytest.raises(InvalidDeviceIdError) as e:
        raw.aclrtSetDevice(3)
    assert e.value.code == 107001


def test_spec_3_2_get_device_null_output_is_100000(backend):
    """docs/runtime-model.md §3.2: aclrtGetDevice(NULL) -> 100000, before the context lookup."""
    assert backend.aclrtGetDevice(null_outputs=1)[0] == 100000
    assert raise_from_fresh_thread(lambda: backend.aclrtGetDevice(null_outputs=1))[0] == 100000
    raw.aclrtSetDevice(0)
    assert backend.aclrtGetDevice(null_outputs=1)[0] == 100000
    assert backend.aclrtGetDevice() == (0, 0)
    raw.aclrtResetDevice(0)


def test_spec_3_2_get_device_count_null_output_is_100000(backend):
    """docs/runtime-model.md §3.2: aclrtGetDeviceCount(NULL) -> 100000."""
    assert backend.aclrtGetDeviceCount(null_outputs=1)[0] == 100000
    rc, count = backend.aclrtGetDeviceCount()
    assert rc == 0
    assert count == device_count()

