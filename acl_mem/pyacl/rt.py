"""``acl.rt``: pyACL's runtime calls for devices, contexts, streams, events and memory
(docs/pyacl.md).

Each function takes its arguments positionally as pyACL does, returns its outputs
first and the aclError code last (``ptr, ret = acl.rt.malloc(size, policy)``), or the
code alone, and never raises for a runtime error. The other names of pyACL's
``acl.rt`` exist and raise :class:`~acl_mem.pyacl.UnsupportedError`.
"""

from collections.abc import Callable

from .. import raw as _raw
from ..errors import AclError
from . import _common, _events
from ._events import create_context as create_context
from ._events import create_event as create_event
from ._events import create_event_ex_with_flag as create_event_ex_with_flag
from ._events import create_event_with_flag as create_event_with_flag
from ._events import destroy_context as destroy_context
from ._events import destroy_event as destroy_event
from ._events import event_elapsed_time as event_elapsed_time
from ._events import get_context as get_context
from ._events import query_event as query_event
from ._events import query_event_status as query_event_status
from ._events import record_event as record_event
from ._events import reset_event as reset_event
from ._events import set_context as set_context
from ._events import stream_wait_event as stream_wait_event
from ._events import synchronize_event as synchronize_event

_MODULE = "acl.rt"

# Contexts and events live in _events.py (to keep files small) but belong to acl.rt.
for _name in _events.__all__:
    globals()[_name].__module__ = __name__
del _name


# -- devices --------------------------------------------------------------------------------------


def set_device(device_id: int, /) -> int:
    """``ret = acl.rt.set_device(device_id)``: aclrtSetDevice."""
    dev = _common.as_int(device_id, "acl.rt.set_device", "device_id")
    return _common.code_of(lambda: _raw.aclrtSetDevice(dev))


def reset_device(device_id: int, /) -> int:
    """``ret = acl.rt.reset_device(device_id)``: aclrtResetDevice."""
    dev = _common.as_int(device_id, "acl.rt.reset_device", "device_id")
    return _common.code_of(lambda: _raw.aclrtResetDevice(dev))


def get_device(*_ignored: object) -> tuple[int, int]:
    """``device_id, ret = acl.rt.get_device()``: aclrtGetDevice (0 and the code on failure)."""
    return _common.with_code(_raw.aclrtGetDevice, 0)


def get_device_count(*_ignored: object) -> tuple[int, int]:
    """``count, ret = acl.rt.get_device_count()``: aclrtGetDeviceCount."""
    return _common.with_code(_raw.aclrtGetDeviceCount, 0)


def get_run_mode(*_ignored: object) -> tuple[int, int]:
    """``run_mode, ret = acl.rt.get_run_mode()``: aclrtGetRunMode, before or after acl.init:
    ``(1, 0)`` (ACL_HOST, EP mode) on a host driving the device, ``(0, 0)`` (ACL_DEVICE, RC
    mode) on a board's control CPU (the fake's ``atlas-200dk`` profile)."""
    return _common.with_code(_raw.aclrtGetRunMode, 0)


def synchronize_device(*_ignored: object) -> int:
    """``ret = acl.rt.synchronize_device()``: aclrtSynchronizeDevice (extra arguments are
    ignored, as pyACL ignores them)."""
    return _common.code_of(_raw.aclrtSynchronizeDevice)


# -- streams --------------------------------------------------------------------------------------


def create_stream(*_ignored: object) -> tuple[int, int]:
    """``stream, ret = acl.rt.create_stream()``: aclrtCreateStream."""
    return _common.with_code(_raw.aclrtCreateStream, 0)


def destroy_stream(stream: int, /) -> int:
    """``ret = acl.rt.destroy_stream(stream)``: aclrtDestroyStream."""
    handle = _common.as_ulong(stream, "acl.rt.destroy_stream", "stream")
    return _common.code_of(lambda: _raw.aclrtDestroyStream(handle))


def get_last_error(level: int = 0, /) -> int:
    """``ret = acl.rt.get_last_error(level)``: aclrtGetLastError (the code, then forgotten)."""
    lvl = _common.as_int(level, "acl.rt.get_last_error", "level")
    return _kept_code(_raw.aclrtGetLastError, lvl)


def peek_at_last_error(level: int = 0, /) -> int:
    """``ret = acl.rt.peek_at_last_error(level)``: aclrtPeekAtLastError."""
    lvl = _common.as_int(level, "acl.rt.peek_at_last_error", "level")
    return _kept_code(_raw.aclrtPeekAtLastError, lvl)


def _kept_code(getter: Callable[[int], int], level: int) -> int:
    """The code a last-error getter reports, or its own refusal's (100000)."""
    try:
        return _common.as_int32(getter(level))
    except AclError as exc:
        return _common.as_int32(exc.code)


def reset_device_force(device_id: int, /) -> int:
    """``ret = acl.rt.reset_device_force(device_id)``: aclrtResetDeviceForce."""
    dev = _common.as_int(device_id, "acl.rt.reset_device_force", "device_id")
    return _common.code_of(lambda: _raw.aclrtResetDeviceForce(dev))


def destroy_stream_force(stream: int, /) -> int:
    """``ret = acl.rt.destroy_stream_force(stream)``: aclrtDestroyStreamForce."""
    handle = _common.as_ulong(stream, "acl.rt.destroy_stream_force", "stream")
    return _common.code_of(lambda: _raw.aclrtDestroyStreamForce(handle))


def synchronize_stream(stream: int, /) -> int:
    """``ret = acl.rt.synchronize_stream(stream)``: aclrtSynchronizeStream (0: the default
    stream)."""
    handle = _common.as_ulong(stream, "acl.rt.synchronize_stream", "stream")
    return _common.code_of(lambda: _raw.aclrtSynchronizeStream(handle))


# -- memory ---------------------------------------------------------------------------------------


def _size_and_policy(call: str, size: object, policy: object) -> tuple[int, int]:
    nbytes = _common.as_ulong(size, call, "size")
    # pyACL casts the C int to aclrtMemMallocPolicy: -1 reaches the runtime as 0xFFFFFFFF.
    return nbytes, _common.as_int(policy, call, "policy") & 0xFFFFFFFF


def malloc(size: int, policy: int, /) -> tuple[int, int]:
    """``dev_ptr, ret = acl.rt.malloc(size, policy)``: aclrtMalloc (0 and the code on
    failure)."""
    nbytes, pol = _size_and_policy("acl.rt.malloc", size, policy)
    return _common.with_code(lambda: _raw.aclrtMalloc(nbytes, pol), 0)


def malloc_align32(size: int, policy: int, /) -> tuple[int, int]:
    """``dev_ptr, ret = acl.rt.malloc_align32(size, policy)``: aclrtMallocAlign32."""
    nbytes, pol = _size_and_policy("acl.rt.malloc_align32", size, policy)
    return _common.with_code(lambda: _raw.aclrtMallocAlign32(nbytes, pol), 0)


def malloc_cached(size: int, policy: int, /) -> tuple[int, int]:
    """``dev_ptr, ret = acl.rt.malloc_cached(size, policy)``: aclrtMallocCached."""
    nbytes, pol = _size_and_policy("acl.rt.malloc_cached", size, policy)
    return _common.with_code(lambda: _raw.aclrtMallocCached(nbytes, pol), 0)


def malloc_host(size: int, /) -> tuple[int, int]:
    """``host_ptr, ret = acl.rt.malloc_host(size)``: aclrtMallocHost (page-locked)."""
    nbytes = _common.as_ulong(size, "acl.rt.malloc_host", "size")
    return _common.with_code(lambda: _raw.aclrtMallocHost(nbytes), 0)


def free(dev_ptr: int, /) -> int:
    """``ret = acl.rt.free(dev_ptr)``: aclrtFree."""
    ptr = _common.as_ulong(dev_ptr, "acl.rt.free", "dev_ptr")
    return _common.code_of(lambda: _raw.aclrtFree(ptr))


def free_host(host_ptr: int, /) -> int:
    """``ret = acl.rt.free_host(host_ptr)``: aclrtFreeHost."""
    ptr = _common.as_ulong(host_ptr, "acl.rt.free_host", "host_ptr")
    return _common.code_of(lambda: _raw.aclrtFreeHost(ptr))


def _copy_args(call: str, dst: object, dest_max: object, src: object, count: object,
               kind: object) -> tuple[int, int, int, int, int]:
    return (_common.as_ulong(dst, call, "dst"), _common.as_ulong(dest_max, call, "dest_max"),
            _common.as_ulong(src, call, "src"), _common.as_ulong(count, call, "count"),
            _common.as_int(kind, call, "kind") & 0xFFFFFFFF)


def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int, /) -> int:
    """``ret = acl.rt.memcpy(dst, dest_max, src, count, kind)``: aclrtMemcpy."""
    args = _copy_args("acl.rt.memcpy", dst, dest_max, src, count, kind)
    return _common.code_of(lambda: _raw.aclrtMemcpy(*args))


def memcpy_async(dst: int, dest_max: int, src: int, count: int, kind: int, stream: int,
                 /) -> int:
    """``ret = acl.rt.memcpy_async(dst, dest_max, src, count, kind, stream)``:
    aclrtMemcpyAsync (the stream is required, 0 is the default stream)."""
    call = "acl.rt.memcpy_async"
    args = _copy_args(call, dst, dest_max, src, count, kind)
    handle = _common.as_ulong(stream, call, "stream")
    return _common.code_of(lambda: _raw.aclrtMemcpyAsync(*args, handle))


def _set_args(call: str, dev_ptr: object, max_count: object, value: object,
              count: object) -> tuple[int, int, int, int]:
    return (_common.as_ulong(dev_ptr, call, "dev_ptr"),
            _common.as_ulong(max_count, call, "max_count"),
            _common.as_int(value, call, "value"), _common.as_ulong(count, call, "count"))


def memset(dev_ptr: int, max_count: int, value: int, count: int, /) -> int:
    """``ret = acl.rt.memset(dev_ptr, max_count, value, count)``: aclrtMemset."""
    args = _set_args("acl.rt.memset", dev_ptr, max_count, value, count)
    return _common.code_of(lambda: _raw.aclrtMemset(*args))


def memset_async(dev_ptr: int, max_count: int, value: int, count: int, stream: int,
                 /) -> int:
    """``ret = acl.rt.memset_async(dev_ptr, max_count, value, count, stream)``:
    aclrtMemsetAsync."""
    call = "acl.rt.memset_async"
    args = _set_args(call, dev_ptr, max_count, value, count)
    handle = _common.as_ulong(stream, call, "stream")
    return _common.code_of(lambda: _raw.aclrtMemsetAsync(*args, handle))


def get_mem_info(attr: int, /) -> tuple[int, int, int]:
    """``free, total, ret = acl.rt.get_mem_info(attr)``: aclrtGetMemInfo (``(0, 0, code)``
    on failure)."""
    which = _common.as_int(attr, "acl.rt.get_mem_info", "attr") & 0xFFFFFFFF
    (free_bytes, total), ret = _common.with_code(lambda: _raw.aclrtGetMemInfo(which), (0, 0))
    return free_bytes, total, ret


# -- the rest of pyACL's acl.rt -------------------------------------------------------------------

_common.define_stubs(globals(), _MODULE, """
    ctx_get_current_default_stream get_primary_ctx_state ctx_set_sys_param_opt
    ctx_get_sys_param_opt query_event_wait_status synchronize_event_with_timeout
    event_get_timestamp get_event_id get_event_avail_num
""", _common.NOT_YET.format(what="these context and event calls"))

_common.define_stubs(globals(), _MODULE, """
    reserve_mem_address release_mem_address malloc_physical free_physical map_mem unmap_mem
    mem_export_to_shareable_handle mem_set_pid_to_shareable_handle
    mem_import_from_shareable_handle mem_get_allocation_granularity device_get_bare_tgid
    malloc_with_cfg malloc_for_task_scheduler malloc_host_with_cfg mem_flush mem_invalidate
    memcpy2d memcpy2d_async pointer_get_attributes host_register host_unregister
    host_register_v2 host_get_device_pointer get_memcpy_desc_size set_memcpy_desc
    memcpy_async_with_desc memcpy_async_with_condition ipc_mem_get_export_key
    ipc_mem_set_import_pid ipc_mem_import_by_key ipc_mem_close device_can_access_peer
    device_enable_peer_access device_disable_peer_access device_peer_access_status
    get_mem_uce_info mem_uce_repair synchronize_stream_with_timeout
    synchronize_device_with_timeout stream_query create_stream_with_config
""", _common.NOT_YET.format(what="these memory, stream and device calls"))

_common.define_stubs(globals(), _MODULE, """
    binary_load_from_file binary_load_from_data get_function_addr get_function_name
    register_cpu_func create_binary destroy_binary binary_load binary_unload
    binary_get_function launch_kernel kernel_args_init kernel_args_init_by_user_mem
    kernel_args_get_mem_size kernel_args_get_handle_mem_size kernel_args_append
    kernel_args_append_place_holder kernel_args_get_place_holder_buffer kernel_args_para_update
    kernel_args_finalize launch_kernel_with_config set_device_sat_mode get_device_sat_mode
    set_ts_device get_overflow_status reset_overflow_status set_stream_overflow_switch
    get_stream_overflow_switch set_stream_failure_mode process_report subscribe_report
    unsubscribe_report launch_callback stream_get_id get_stream_available_num
    set_stream_attribute get_stream_attribute get_thread_last_task_id reduce_async
    set_exception_info_callback get_error_code_from_exception_info
    get_task_id_from_exception_info get_stream_id_from_exception_info
    get_thread_id_from_exception_info get_device_id_from_exception_info set_op_wait_timeout
    set_op_execute_time_out get_device_utilization_rate query_device_status
    set_sys_param_opt get_sys_param_opt allocator_create_desc allocator_destroy_desc
    allocator_set_obj_to_desc allocator_set_alloc_func_to_desc allocator_set_free_func_to_desc
    allocator_set_alloc_advise_func_to_desc allocator_set_get_addr_from_block_func_to_desc
    allocator_register allocator_unregister cmo_async
    device_task_abort stream_abort value_write value_wait get_device_info
    device_get_stream_priority_range get_device_capability get_device_res_limit
    set_device_res_limit reset_device_res_limit get_devices_topo create_notify destroy_notify
    record_notify wait_and_reset_notify get_notify_id notify_batch_reset notify_get_export_key
    notify_set_import_pid notify_import_by_key get_stream_res_limit set_stream_res_limit
    reset_stream_res_limit use_stream_res_in_current_thread unuse_stream_res_in_current_thread
    get_res_in_current_thread get_logic_dev_id_by_user_dev_id get_user_dev_id_by_logic_dev_id
    get_logic_dev_id_by_phy_dev_id get_phy_dev_id_by_logic_dev_id set_op_execute_timeout_v2
    get_op_timeout_interval get_op_execute_timeout device_get_uuid set_group get_group_count
    create_group_info destroy_group_info get_all_group_info get_group_info_detail
""", _common.MEMORY_ONLY.format(what="kernels, callbacks, notifies, exception info and the "
                                "other runtime features"))
