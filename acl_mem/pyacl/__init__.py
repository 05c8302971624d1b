"""acl_mem.pyacl: pyACL (Huawei's ``acl`` module) for memory, devices, contexts, streams,
events and data buffers, on acl_mem's backends (docs/pyacl.md).

Existing pyACL programs run unchanged: ``python -m acl_mem.pyacl script.py`` or
``acl-mem run script.py`` runs a script with ``import acl`` giving this module, and
:func:`install` does the same inside a process. Directly: ``from acl_mem import pyacl as
acl``. The conventions are pyACL's: pointers and handles are ints, outputs come first
and the aclError code ``ret`` last (``ptr, ret = acl.rt.malloc(size, policy)``), calls
without output return ``ret`` alone, runtime errors are codes and never exceptions; a
wrong argument type raises TypeError as in pyACL. Every other name of pyACL exists and
raises :class:`UnsupportedError` when called.
"""

import ctypes as _ctypes
import threading as _threading

from .. import raw as _raw
from . import _common
from . import blas as blas
from . import fv as fv
from . import himpi as himpi
from . import mdl as mdl
from . import media as media
from . import op as op
from . import prof as prof
from . import rt as rt
from . import util as util
from ._common import UnsupportedError as UnsupportedError
from ._install import ShadowingRefusedError as ShadowingRefusedError
from ._install import install as install
from ._install import uninstall as uninstall

_MODULE = "acl"


# -- initialisation and versions ------------------------------------------------------------------


def init(*config_path: str) -> int:
    """``ret = acl.init()`` or ``ret = acl.init(config_path)``: aclInit.

    The path is optional and positional, and must be a str when given (pyACL refuses
    None with TypeError).
    """
    call = "acl.init"
    if len(config_path) > 1:
        _common.parse_failed(call, f"takes at most 1 argument ({len(config_path)} given)")
    path = _common.as_str(config_path[0], call, "config_path") if config_path else None
    return _common.code_of(lambda: _raw.aclInit(path))


def get_recent_err_msg() -> str:
    """``msg = acl.get_recent_err_msg()``: aclGetRecentErrMsg, the text of this thread's last
    failed call (the call, its arguments, the error and acl_mem's hint); "" while none
    failed. Reading it changes nothing: it reports the failure asked about."""
    return _common.recent_error()


def finalize(*_ignored: object) -> int:
    """``ret = acl.finalize()``: aclFinalize."""
    return _common.code_of(_raw.aclFinalize)


def get_version(*_ignored: object) -> tuple[int, int, int, int]:
    """``major, minor, patch, ret = acl.get_version()``: aclrtGetVersion."""
    (major, minor, patch), ret = _common.with_code(_raw.aclrtGetVersion, (0, 0, 0))
    return major, minor, patch, ret


def get_version_str(pkg_name: str, /) -> tuple[str, int]:
    """``version, ret = acl.get_version_str(pkg_name)``: aclsysGetVersionStr (``""`` and
    the code on failure)."""
    name = _common.as_str(pkg_name, "acl.get_version_str", "pkg_name")
    return _common.with_code(lambda: _raw.aclsysGetVersionStr(name), "")


def get_soc_name(*_ignored: object) -> str:
    """``soc_name = acl.get_soc_name()``: aclrtGetSocName (a str only, no ``ret``)."""
    return _raw.aclrtGetSocName()


# -- data buffers (aclDataBuffer: host-side descriptors of an address and a size) ---------------


class _DataBuffer(_ctypes.Structure):
    # aclDataBuffer's layout; the handle is this struct's address, as in pyACL.
    _fields_ = [("data", _ctypes.c_void_p), ("length", _ctypes.c_size_t)]


_buffers: dict[int, _DataBuffer] = {}
_buffers_lock = _threading.Lock()


def _buffer(handle: int) -> _DataBuffer | None:
    with _buffers_lock:
        return _buffers.get(handle)


def create_data_buffer(data: int, size: int, /) -> int:
    """``data_buffer = acl.create_data_buffer(data, size)``: aclCreateDataBuffer.

    An opaque int handle describing ``size`` bytes at ``data`` (any address and size,
    NULL included, as in ACL); nothing is allocated or copied.
    """
    call = "acl.create_data_buffer"
    address = _common.as_ulong(data, call, "data")
    nbytes = _common.as_ulong(size, call, "size")
    buffer = _DataBuffer(address, nbytes)
    handle = _ctypes.addressof(buffer)
    with _buffers_lock:
        _buffers[handle] = buffer
    return handle


def destroy_data_buffer(data_buffer: int, /) -> int:
    """``ret = acl.destroy_data_buffer(data_buffer)``: aclDestroyDataBuffer (the memory it
    describes stays allocated). 100000 for 0 and, where ACL's behaviour is undefined,
    for a handle that is not a live data buffer."""
    handle = _common.as_ulong(data_buffer, "acl.destroy_data_buffer", "data_buffer")
    with _buffers_lock:
        found = _buffers.pop(handle, None)
    return 0 if found is not None else _INVALID_PARAM


def get_data_buffer_addr(data_buffer: int, /) -> int:
    """``data = acl.get_data_buffer_addr(data_buffer)``: aclGetDataBufferAddr (0 for an
    unknown handle)."""
    handle = _common.as_ulong(data_buffer, "acl.get_data_buffer_addr", "data_buffer")
    found = _buffer(handle)
    return int(found.data or 0) if found is not None else 0


def get_data_buffer_size(data_buffer: int, /) -> int:
    """``size = acl.get_data_buffer_size(data_buffer)``: aclGetDataBufferSize, deprecated:
    the size cut to 32 bits, as its uint32_t result is (0 for an unknown handle)."""
    handle = _common.as_ulong(data_buffer, "acl.get_data_buffer_size", "data_buffer")
    found = _buffer(handle)
    return int(found.length) & 0xFFFFFFFF if found is not None else 0


def get_data_buffer_size_v2(data_buffer: int, /) -> int:
    """``size = acl.get_data_buffer_size_v2(data_buffer)``: aclGetDataBufferSizeV2 (0 for
    an unknown handle)."""
    handle = _common.as_ulong(data_buffer, "acl.get_data_buffer_size_v2", "data_buffer")
    found = _buffer(handle)
    return int(found.length) if found is not None else 0


def update_data_buffer(data_buffer: int, data: int, size: int, /) -> int:
    """``ret = acl.update_data_buffer(data_buffer, data, size)``: aclUpdateDataBuffer
    (100000 for 0 or an unknown handle)."""
    call = "acl.update_data_buffer"
    handle = _common.as_ulong(data_buffer, call, "data_buffer")
    address = _common.as_ulong(data, call, "data")
    nbytes = _common.as_ulong(size, call, "size")
    with _buffers_lock:
        found = _buffers.get(handle)
        if found is None:
            return _INVALID_PARAM
        found.data, found.length = address, nbytes
    return 0


#: ACL_ERROR_INVALID_PARAM, ACL's answer to a NULL aclDataBuffer.
_INVALID_PARAM = 100000


# -- the rest of pyACL's top level ----------------------------------------------------------------

_common.define_stubs(globals(), _MODULE, """
    float16_to_float float_to_float16 data_type_size create_tensor_desc destroy_tensor_desc
    get_tensor_desc_type get_tensor_desc_format get_tensor_desc_size
    get_tensor_desc_element_count get_tensor_desc_num_dims get_tensor_desc_dim
    get_tensor_desc_name set_tensor_desc_name trans_tensor_desc_format app_log
    set_tensor_storage_format set_tensor_storage_shape set_tensor_format set_tensor_shape
    set_tensor_origin_format set_tensor_dynamic_input set_tensor_origin_shape
    set_tensor_shape_range get_tensor_desc_address get_tensor_desc_by_index
    get_tensor_desc_dim_range get_tensor_desc_dim_v2 set_tensor_place_ment
    set_tensor_const set_tensor_value_range get_cann_attribute_list get_cann_attribute
    get_device_capability get_cann_version finalize_reference
""", _common.MEMORY_ONLY.format(what="tensor descriptions, logging, error messages, data "
                                "type helpers and CANN attribute queries"))
