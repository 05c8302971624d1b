"""acl_mem.pyacl's contexts and events (docs/pyacl.md; behaviour: docs/runtime-model.md §3.3,
§3.15).

A pyACL program in the style of Huawei's samples (set_device, create_context first, two
streams ordered by an event, queries, elapsed time, everything destroyed) runs in a child
process through both launchers, on the fake and on the native backend (the stand-in
libascendcl without hardware). In-process tests pin each function's return shape, its
outputs on failure and its argument parsing. Codes are compared by value.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, clean_env
from test_pyacl import LAUNCHERS, PRELUDE, results

import acl_mem
from acl_mem import pyacl
from acl_mem.conformance.providers import brief, native_provider
from acl_mem.pyacl import UnsupportedError

ACL_EVENT_SYNC = 0x1
ACL_EVENT_DEVICE_USE_ONLY = 0x10
ACL_EVENT_TIME_LINE = 0x8
NOT_READY, COMPLETE = 0, 1                    # aclrtEventRecordedStatus
OLD_COMPLETE = 0                              # aclrtEventStatus (query_event)

# -- the program -----------------------------------------------------------------------------------

CONTEXTS_AND_EVENTS = """\
import time

ACL_EVENT_SYNC = 0x00000001
ACL_EVENT_RECORDED_STATUS_NOT_READY = 0
ACL_EVENT_RECORDED_STATUS_COMPLETE = 1
ACL_EVENT_STATUS_COMPLETE = 0

check_ret("acl.init", acl.init())
check_ret("acl.rt.set_device", acl.rt.set_device(DEVICE_ID))
context, ret = acl.rt.create_context(DEVICE_ID)
check_ret("acl.rt.create_context", ret)
current, ret = acl.rt.get_context()
check_ret("acl.rt.get_context", ret)
RESULTS["context"] = [isinstance(context, int) and context != 0, current == context,
                      acl.rt.set_context(context)]
producer, ret = acl.rt.create_stream()
check_ret("acl.rt.create_stream", ret)
consumer, ret = acl.rt.create_stream()
check_ret("acl.rt.create_stream", ret)

data = np.random.default_rng(3).integers(0, 255, 1 << 20, dtype=np.uint8)
size = data.nbytes
source = data.tobytes()
dev_in, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
check_ret("acl.rt.malloc", ret)
dev_out, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
check_ret("acl.rt.malloc", ret)
host_out, ret = acl.rt.malloc_host(size)
check_ret("acl.rt.malloc_host", ret)
check_ret("acl.rt.memcpy", acl.rt.memcpy(dev_in, size, acl.util.bytes_to_ptr(source), size,
                                         ACL_MEMCPY_HOST_TO_DEVICE))

start, ret = acl.rt.create_event()
check_ret("acl.rt.create_event", ret)
end, ret = acl.rt.create_event()
check_ret("acl.rt.create_event", ret)
copied, ret = acl.rt.create_event_with_flag(ACL_EVENT_SYNC)
check_ret("acl.rt.create_event_with_flag", ret)
RESULTS["never_recorded"] = [acl.rt.query_event_status(copied), acl.rt.query_event(start)]

# the producer copies on the device; the consumer waits for that copy, then reads it out
check_ret("acl.rt.record_event", acl.rt.record_event(start, producer))
check_ret("acl.rt.memcpy_async", acl.rt.memcpy_async(dev_out, size, dev_in, size,
                                                     ACL_MEMCPY_DEVICE_TO_DEVICE, producer))
check_ret("acl.rt.record_event", acl.rt.record_event(copied, producer))
check_ret("acl.rt.record_event", acl.rt.record_event(end, producer))
check_ret("acl.rt.stream_wait_event", acl.rt.stream_wait_event(consumer, copied))
check_ret("acl.rt.memcpy_async", acl.rt.memcpy_async(host_out, size, dev_out, size,
                                                     ACL_MEMCPY_DEVICE_TO_HOST, consumer))
check_ret("acl.rt.synchronize_stream", acl.rt.synchronize_stream(consumer))
RESULTS["ordered_copy"] = acl.util.ptr_to_bytes(host_out, size) == source

check_ret("acl.rt.synchronize_event", acl.rt.synchronize_event(end))
status, ret = acl.rt.query_event_status(end)
check_ret("acl.rt.query_event_status", ret)
old_status, ret = acl.rt.query_event(end)
check_ret("acl.rt.query_event", ret)
RESULTS["after_synchronize"] = [status == ACL_EVENT_RECORDED_STATUS_COMPLETE,
                                old_status == ACL_EVENT_STATUS_COMPLETE]
elapsed, ret = acl.rt.event_elapsed_time(start, end)
check_ret("acl.rt.event_elapsed_time", ret)
RESULTS["elapsed"] = [type(elapsed).__name__, elapsed >= 0.0,
                      elapsed == float(np.float32(elapsed))]

# poll a new record until it completes, as the samples do
check_ret("acl.rt.record_event", acl.rt.record_event(end, producer))
polls = 0
while True:
    status, ret = acl.rt.query_event_status(end)
    check_ret("acl.rt.query_event_status", ret)
    if status == ACL_EVENT_RECORDED_STATUS_COMPLETE:
        break
    polls += 1
    if polls > 1000:
        raise Exception("the record never completed")
    time.sleep(0.001)
RESULTS["polled"] = True

# a reset event counts as never recorded again
check_ret("acl.rt.reset_event", acl.rt.reset_event(copied, producer))
check_ret("acl.rt.synchronize_stream", acl.rt.synchronize_stream(producer))
RESULTS["after_reset"] = acl.rt.query_event_status(copied)

RESULTS["destroy"] = [acl.rt.destroy_event(start), acl.rt.destroy_event(end),
                      acl.rt.destroy_event(copied), acl.rt.free(dev_in), acl.rt.free(dev_out),
                      acl.rt.free_host(host_out), acl.rt.destroy_stream(producer),
                      acl.rt.destroy_stream(consumer), acl.rt.destroy_context(context)]
RESULTS["no_context_left"] = list(acl.rt.get_context())
RESULTS["runtime"] = acl.get_version_str("runtime")[0]
RESULTS["release"] = [acl.rt.reset_device(DEVICE_ID), acl.finalize()]
print(json.dumps(RESULTS))
"""

#: The launchers' entry points, for a child that must run the native provider's prelude
#: first (the stand-in library is bound there, before the backend loads).
_NATIVE_ENTRIES = {
    "python -m acl_mem.pyacl": ("from acl_mem.pyacl.__main__ import main", []),
    "acl-mem run": ("from acl_mem.cli import main", ["run"]),
}


def run_on(backend_name: str, launcher: str, tmp_path: Path,
           body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` as a pyACL program through ``launcher`` on ``backend_name``."""
    script = tmp_path / "program.py"
    script.write_text(PRELUDE + "\n" + textwrap.dedent(body))
    if backend_name == "fake":
        command = [sys.executable, *LAUNCHERS[launcher]]
        env = clean_env(ACL_MEM_BACKEND="fake")
    else:
        provider = native_provider()
        native, why = provider.load()
        if native is None:
            pytest.skip(f"native backend unavailable: {brief(why)}")
        entry, arguments = _NATIVE_ENTRIES[launcher]
        code = f"{provider.subprocess_prelude}\nimport sys\n{entry}\nsys.exit(main())\n"
        command = [sys.executable, "-c", code, *arguments, "--backend", "native"]
        # The native library is found as the provider found it (ASCEND_* and the
        # stand-in's variables stay); the backend is the --backend option's.
        env = {k: v for k, v in os.environ.items() if k != "ACL_MEM_BACKEND"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH"))
                                            if p)
    return subprocess.run([*command, str(script)], env=env, capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
@pytest.mark.parametrize("backend_name", ["fake", "native"])
def test_contexts_and_events_program(backend_name, launcher, tmp_path):
    """create_context first, two streams ordered by an event (the consumer's copy sees the
    producer's), statuses before and after, elapsed time as a C float, polling, reset, and
    every destroy returning 0; the thread has no context after destroying its own."""
    got = results(run_on(backend_name, launcher, tmp_path, CONTEXTS_AND_EVENTS))
    assert got["context"] == [True, True, 0]
    assert got["never_recorded"] == [[NOT_READY, 0], [OLD_COMPLETE, 0]]
    assert got["ordered_copy"] is True
    assert got["after_synchronize"] == [True, True]
    assert got["elapsed"] == ["float", True, True]
    assert got["polled"] is True
    assert got["after_reset"] == [NOT_READY, 0]
    assert got["destroy"] == [0] * 9
    # CANN 8.5.0 answers success and NULL without a context (docs/runtime-model.md §3.3).
    old_release = str(got["runtime"]).startswith("8.")
    assert got["no_context_left"] == [0, 0 if old_release else 107002]
    assert got["release"] == [0, 0]


# -- in-process: shapes, failure outputs, codes ----------------------------------------------------


@pytest.fixture
def device(monkeypatch):
    """Device 0 on a fake playing the default release (the codes below are 9.1.0's)."""
    monkeypatch.delenv("ACL_MEM_FAKE_CANN", raising=False)
    with acl_mem.using_backend("fake"):
        assert pyacl.rt.set_device(0) == 0
        try:
            yield 0
        finally:
            pyacl.rt.reset_device(0)


def _in_fresh_thread(call):
    box = []
    worker = threading.Thread(target=lambda: box.append(call()))
    worker.start()
    worker.join(timeout=30)
    return box[0]


def test_context_shapes_and_codes(device):
    """create_context -> (context, 0), current at once; get_context -> (context, 0);
    set_context / destroy_context -> ret. Failures: (0, code) and the bare code."""
    default, ret = pyacl.rt.get_context()
    assert (type(default), ret) == (int, 0) and default != 0
    context, ret = pyacl.rt.create_context(0)
    assert (type(context), ret) == (int, 0) and context not in (0, default)
    assert pyacl.rt.get_context() == (context, 0)
    assert pyacl.rt.set_context(default) == 0
    assert pyacl.rt.get_context() == (default, 0)
    assert pyacl.rt.set_context(context) == 0
    assert pyacl.rt.destroy_context(default) == 107002        # the default context
    assert pyacl.rt.create_context(99) == (0, 107001)
    assert [pyacl.rt.destroy_context(0), pyacl.rt.set_context(0)] == [100000, 100000]
    assert pyacl.rt.destroy_context(context) == 0
    assert pyacl.rt.get_context() == (0, 107002)             # no fallback to the default
    assert pyacl.rt.destroy_context(context) == 107002
    assert pyacl.rt.set_context(context) == 107000
    assert pyacl.rt.set_device(0) == 0                        # back to the default context
    assert pyacl.rt.get_context() == (default, 0)
    assert pyacl.rt.reset_device(0) == 0


def test_streams_belong_to_their_context(device):
    """A stream used while another context is current: 107003 (docs/runtime-model.md §3.3)."""
    first, _ = pyacl.rt.create_context(0)
    stream, ret = pyacl.rt.create_stream()
    assert ret == 0
    second, _ = pyacl.rt.create_context(0)
    assert pyacl.rt.synchronize_stream(stream) == 107003
    event, _ = pyacl.rt.create_event()
    assert pyacl.rt.record_event(event, stream) == 107003
    assert pyacl.rt.set_context(first) == 0
    assert pyacl.rt.record_event(event, stream) == 0
    assert pyacl.rt.synchronize_event(event) == 0
    assert [pyacl.rt.destroy_event(event), pyacl.rt.destroy_context(second),
            pyacl.rt.destroy_context(first)] == [0, 0, 0]   # the stream goes with its context
    assert pyacl.rt.set_device(0) == 0
    assert pyacl.rt.reset_device(0) == 0


def test_event_shapes_and_failure_outputs(device):
    """Every event call: outputs first, ret last; on failure the outputs are 0 (0.0 for
    the milliseconds, still a float)."""
    event, ret = pyacl.rt.create_event()
    assert (type(event), ret) == (int, 0) and event != 0
    timed, ret = pyacl.rt.create_event_with_flag(ACL_EVENT_TIME_LINE)
    assert ret == 0 and timed != 0
    reusable, ret = pyacl.rt.create_event_ex_with_flag(ACL_EVENT_SYNC)
    assert ret == 0 and reusable != 0
    assert pyacl.rt.create_event_with_flag(0) == (0, 107000)
    assert pyacl.rt.create_event_ex_with_flag(ACL_EVENT_DEVICE_USE_ONLY) == (0, 107000)
    assert pyacl.rt.query_event_status(reusable) == (COMPLETE, 0)   # ExWithFlag: never recorded
    assert pyacl.rt.query_event(reusable) == (0, 207000)
    assert pyacl.rt.reset_event(reusable, 0) == 207000
    assert pyacl.rt.stream_wait_event(0, timed) == 207000           # TIME_LINE only
    assert pyacl.rt.stream_wait_event(0, event) == 107000           # never recorded
    ms, ret = pyacl.rt.event_elapsed_time(event, timed)
    assert (type(ms), ms, ret) == (float, 0.0, 507000)              # never recorded
    assert pyacl.rt.record_event(event, 0) == 0
    assert pyacl.rt.record_event(timed, 0) == 0
    assert pyacl.rt.synchronize_event(timed) == 0
    assert [pyacl.rt.query_event_status(timed), pyacl.rt.query_event(timed)] == [(1, 0), (0, 0)]
    ms, ret = pyacl.rt.event_elapsed_time(event, timed)
    assert ret == 0 and type(ms) is float and ms == float(np.float32(ms))
    nulls = [pyacl.rt.record_event(0, 0), pyacl.rt.reset_event(0, 0),
             pyacl.rt.stream_wait_event(0, 0), pyacl.rt.synchronize_event(0),
             pyacl.rt.destroy_event(0)]
    assert nulls == [100000] * 5
    assert [pyacl.rt.query_event_status(0), pyacl.rt.query_event(0)] == [(0, 100000)] * 2
    assert pyacl.rt.event_elapsed_time(0, 0) == (0.0, 100000)
    for handle in (event, timed, reusable):
        assert pyacl.rt.destroy_event(handle) == 0
    assert pyacl.rt.destroy_event(event) == 107017
    assert pyacl.rt.record_event(event, 0) == 107017
    assert pyacl.rt.query_event_status(event) == (0, 107017)
    assert pyacl.rt.event_elapsed_time(event, event) == (0.0, 107017)


def test_event_calls_without_a_context(device):
    """A thread without a context: creating events is 107002; synchronize_event needs no
    context (docs/runtime-model.md §3.15)."""
    event, _ = pyacl.rt.create_event()
    assert _in_fresh_thread(pyacl.rt.create_event) == (0, 107002)
    assert _in_fresh_thread(lambda: pyacl.rt.create_event_with_flag(ACL_EVENT_SYNC)) == (0, 107002)
    assert _in_fresh_thread(pyacl.rt.get_context) == (0, 107002)
    assert _in_fresh_thread(lambda: pyacl.rt.synchronize_event(event)) == 0
    assert pyacl.rt.destroy_event(event) == 0


def test_flag_is_unit_capital_i_and_handles_wrap(device):
    """Flags parse as ``I`` (any integer with __index__, wrapped to 32 bits); handles as
    ``k`` (ints only, wrapped to 64 bits)."""
    event, ret = pyacl.rt.create_event_with_flag(np.uint32(ACL_EVENT_TIME_LINE))
    assert ret == 0 and pyacl.rt.destroy_event(event) == 0
    event, ret = pyacl.rt.create_event_ex_with_flag((1 << 32) | ACL_EVENT_SYNC)   # -> 1
    assert ret == 0 and pyacl.rt.destroy_event(event) == 0
    assert pyacl.rt.create_event_with_flag(-1) == (0, 107000)       # 0xFFFFFFFF
    assert pyacl.rt.record_event(-1, 0) == 107017                   # 2**64 - 1: no event
    assert pyacl.rt.create_context(np.int32(99)) == (0, 107001)      # device id: unit i


def test_argumentless_context_and_event_calls_ignore_arguments(device):
    context, ret = pyacl.rt.get_context("ignored", 1)
    assert ret == 0 and context != 0
    event, ret = pyacl.rt.create_event(None)
    assert ret == 0 and pyacl.rt.destroy_event(event) == 0


@pytest.mark.parametrize(("call", "args"), [
    (pyacl.rt.create_context, ("0",)),
    (pyacl.rt.create_context, (0.0,)),
    (pyacl.rt.create_context, (1 << 31,)),          # unit i: outside the C int range
    (pyacl.rt.create_context, ()),
    (pyacl.rt.destroy_context, (np.uint64(1),)),    # unit k: numpy integers are refused
    (pyacl.rt.set_context, (None,)),
    (pyacl.rt.create_event_with_flag, (8.0,)),
    (pyacl.rt.create_event_with_flag, ("8",)),
    (pyacl.rt.create_event_ex_with_flag, ()),
    (pyacl.rt.destroy_event, ()),
    (pyacl.rt.record_event, (1,)),                  # the stream is required
    (pyacl.rt.record_event, (1, "0")),
    (pyacl.rt.reset_event, (1,)),
    (pyacl.rt.stream_wait_event, (1,)),
    (pyacl.rt.synchronize_event, (1.5,)),
    (pyacl.rt.query_event_status, (np.int64(1),)),
    (pyacl.rt.query_event, (None,)),
    (pyacl.rt.event_elapsed_time, (1,)),
    (pyacl.rt.event_elapsed_time, (1, 2.0)),
])
def test_bad_argument_types_raise_type_error(call, args):
    """As pyACL's CHECK_NULL after PyArg_ParseTuple: TypeError."""
    with pytest.raises(TypeError):
        call(*args)


def test_keyword_arguments_are_refused():
    with pytest.raises(TypeError):
        pyacl.rt.create_context(device_id=0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        pyacl.rt.record_event(event=1, stream=0)  # type: ignore[call-arg]


@pytest.mark.parametrize("name", [
    "ctx_get_current_default_stream", "get_primary_ctx_state", "ctx_set_sys_param_opt",
    "ctx_get_sys_param_opt", "query_event_wait_status", "synchronize_event_with_timeout",
    "event_get_timestamp", "get_event_id", "get_event_avail_num",
])
def test_other_context_and_event_names_still_raise(name):
    with pytest.raises(UnsupportedError) as caught:
        getattr(pyacl.rt, name)(0)
    assert caught.value.function == f"acl.rt.{name}"


def test_implemented_functions_belong_to_acl_rt():
    """help(acl.rt) lists them: they are acl.rt's functions, not stubs."""
    for name in pyacl._events.__all__:
        function = getattr(pyacl.rt, name)
        assert function is getattr(pyacl._events, name)
        assert function.__module__ == "acl_mem.pyacl.rt"
        assert "not implemented" not in (function.__doc__ or "")


def test_no_event_constants():
    """pyACL's modules export functions only ([S] PyInit_acl): no ACL_EVENT_* names."""
    for name in ("ACL_EVENT_SYNC", "ACL_EVENT_TIME_LINE", "ACL_EVENT_RECORDED_STATUS_COMPLETE",
                 "ACL_EVENT_STATUS_COMPLETE"):
        assert not hasattr(pyacl, name) and not hasattr(pyacl.rt, name)
