"""Raw access to host memory for the fake: addresses checked before they are touched.

The fake copies to and from host addresses it did not allocate (numpy arrays,
bytes, plain malloc memory). A wrong address must become an error code, not a
segfault. ``mincore`` tells whether a range is mapped at all; whether it may be read
or written is proven by the copy itself for small copies (``process_vm_readv`` /
``process_vm_writev`` on this process fail with EFAULT instead of faulting) and by the
permissions in ``/proc/self/maps`` for large ones, where a kernel copy would cost more
than the check. Device addresses live in a range reserved here with PROT_NONE, so the
host never maps anything there.
"""

from __future__ import annotations

import errno
import mmap
import os
import sys
from typing import Any

import cffi

__all__ = [
    "HOST_PAGE", "address_of", "copy_host", "ffi", "host_range_mapped", "reserve_address_space",
]

ffi = cffi.FFI()
ffi.cdef(
    """
    void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
    int mincore(void *addr, size_t length, unsigned char *vec);
    struct iovec { void *iov_base; size_t iov_len; };
    long process_vm_readv(int pid, const struct iovec *local, unsigned long liovcnt,
                          const struct iovec *remote, unsigned long riovcnt,
                          unsigned long flags);
    long process_vm_writev(int pid, const struct iovec *local, unsigned long liovcnt,
                           const struct iovec *remote, unsigned long riovcnt,
                           unsigned long flags);
    """
)
_libc: Any = ffi.dlopen(None)
HOST_PAGE = mmap.PAGESIZE
_MAP_PRIVATE = 0x02
_MAP_ANONYMOUS = 0x20 if sys.platform.startswith("linux") else 0x1000
_MAP_NORESERVE = 0x4000 if sys.platform.startswith("linux") else 0
_MAP_FIXED_NOREPLACE = 0x100000 if sys.platform.startswith("linux") else 0
_PROT_NONE = 0


def address_of(buffer: Any) -> int:
    """Address of the first byte of a writable or read-only buffer object."""
    return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer)))


def reserve_address_space(base: int, size: int) -> bool:
    """Map ``[base, base+size)`` PROT_NONE so no host allocation can land there.

    Returns False when the range is taken or the platform cannot pin it; the fake
    still works, only the "never a host address" guarantee is lost.
    """
    flags = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE | _MAP_FIXED_NOREPLACE
    got = _libc.mmap(ffi.cast("void *", base), size, _PROT_NONE, flags, -1, 0)
    return int(ffi.cast("uintptr_t", got)) == base


def host_range_mapped(address: int, size: int) -> bool:
    """True when every page of ``[address, address+size)`` is mapped in this process."""
    if address <= 0 or size <= 0 or address + size > 1 << 64:
        return size == 0 and address > 0
    first = address - address % HOST_PAGE
    length = address + size - first
    pages = -(-length // HOST_PAGE)
    vec = ffi.new("unsigned char[]", pages)
    return int(_libc.mincore(ffi.cast("void *", first), length, vec)) == 0


#: Up to this size an unregistered host range is copied by the kernel, which checks it.
_KERNEL_COPY_LIMIT = 1 << 20
_kernel_copy = sys.platform.startswith("linux")


def copy_host(dst: int, src: int, count: int, *, untrusted: str | None) -> bool:
    """``memmove`` that first proves the ``untrusted`` side ("dst", "src" or None) usable.

    Returns False (nothing or part copied) when that side is not readable / writable.
    """
    global _kernel_copy
    if untrusted is None:
        ffi.memmove(ffi.cast("void *", dst), ffi.cast("void *", src), count)
        return True
    if _kernel_copy and count <= _KERNEL_COPY_LIMIT:
        local: Any = ffi.new("struct iovec *")
        remote: Any = ffi.new("struct iovec *")
        local.iov_len = remote.iov_len = count
        if untrusted == "src":
            local.iov_base, remote.iov_base = ffi.cast("void *", dst), ffi.cast("void *", src)
            done = _libc.process_vm_readv(os.getpid(), local, 1, remote, 1, 0)
        else:
            local.iov_base, remote.iov_base = ffi.cast("void *", src), ffi.cast("void *", dst)
            done = _libc.process_vm_writev(os.getpid(), local, 1, remote, 1, 0)
        if done == count:
            return True
        if ffi.errno not in (errno.ENOSYS, errno.EPERM):
            return False
        _kernel_copy = False  # forbidden here (seccomp): fall back to the maps check
    address = src if untrusted == "src" else dst
    if not _permitted(address, count, "r" if untrusted == "src" else "w"):
        return False
    ffi.memmove(ffi.cast("void *", dst), ffi.cast("void *", src), count)
    return True


def _permitted(address: int, size: int, permission: str) -> bool:
    """True when ``[address, address+size)`` lies in mappings that all allow ``permission``."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return host_range_mapped(address, size)
    cursor, end = address, address + size
    for line in lines:
        span, perms = line.split(maxsplit=2)[:2]
        low, high = (int(x, 16) for x in span.split("-"))
        if low <= cursor < high:
            if permission not in perms:
                return False
            cursor = high
            if cursor >= end:
                return True
    return False
