"""Host memory read from Python at addresses it did not allocate: checked before touched.

``acl_mem.pyacl.util`` reads host addresses a pyACL program hands it (numpy arrays,
bytes, plain malloc memory). A wrong address must become an error, not a
segfault. Each range is proven by the kernel: small copies are done by ``process_vm_readv`` /
``process_vm_writev`` on this process (they fail with EFAULT instead of faulting), large
ones first move one byte of every page that way, then copy with memmove. Only where
those calls are forbidden (seccomp) are the permissions in ``/proc/self/maps`` read.
"""

from __future__ import annotations

import array
import errno
import mmap
import os
import sys
from types import SimpleNamespace
from typing import Any

from ._cffi_lite import LiteFFI, libc_function
from .sizes import MiB

__all__ = ["COPIED", "HOST_PAGE", "KERNEL_COPY_LIMIT", "PROVEN", "REFUSED", "address_of", "ffi",
           "host_range_mapped", "prove_untrusted"]

# The C library's functions with their prototypes, and the C types, built at import from
# _cffi_backend (acl_mem/_cffi_lite.py): no C parser, and nothing parsed or resolved on a
# call path, where an interrupt could leave cffi's parser lock behind a memory call.
ffi = LiteFFI()
_libc: Any = SimpleNamespace(
    mmap=libc_function("void *", "mmap", "void *", "size_t", "int", "int", "int", "long"),
    mincore=libc_function("int", "mincore", "void *", "size_t", "unsigned char *"),
    process_vm_readv=libc_function("long", "process_vm_readv", "int", "const struct iovec *",
                                   "unsigned long", "const struct iovec *", "unsigned long",
                                   "unsigned long"),
    process_vm_writev=libc_function("long", "process_vm_writev", "int",
                                    "const struct iovec *", "unsigned long",
                                    "const struct iovec *", "unsigned long", "unsigned long"),
)
HOST_PAGE = mmap.PAGESIZE


def address_of(buffer: Any) -> int:
    """Address of the first byte of a writable or read-only buffer object."""
    return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer)))


def host_range_mapped(address: int, size: int) -> bool:
    """True when every page of ``[address, address+size)`` is mapped in this process."""
    if address <= 0 or size <= 0 or address + size > _USER_SPACE_END:
        return size == 0 and address > 0
    first = address - address % HOST_PAGE
    end = address + size
    vec = ffi.new("unsigned char[]", _PROBE_PAGES)
    # In bounded steps: a huge range must not need a huge vector.
    while first < end:
        length = min(end - first, _PROBE_PAGES * HOST_PAGE)
        if int(_libc.mincore(ffi.cast("void *", first), length, vec)) != 0:
            return False
        first += length
    return True


#: Up to this size a host range is copied by the kernel, which checks it;
#: above, one byte of each page is moved by the kernel first and the bytes by memmove.
KERNEL_COPY_LIMIT = 64 << 10
#: Above this a range over anonymous memory is checked against the maps, not
#: probed page by page.
_PROBE_LIMIT = 2 * MiB
#: Pages probed per system call (the kernel's IOV_MAX).
_PROBE_PAGES = 1024
#: No user-space host address reaches this (x86-64 and AArch64 with 5-level tables: 2**56).
_USER_SPACE_END = 1 << 56
_kernel_copy = sys.platform.startswith("linux")
_scratch = bytearray(_PROBE_PAGES)


#: What :func:`prove_untrusted` found.
REFUSED, COPIED, PROVEN = -1, 1, 0


def prove_untrusted(dst: int, src: int, count: int, untrusted: str) -> int:
    """Prove the ``untrusted`` side ("dst" or "src") of a copy usable, copying if cheaper.

    :data:`COPIED`: done (small copies are made by the kernel, which checks them);
    :data:`PROVEN`: every page is usable, the caller moves the bytes; :data:`REFUSED`:
    some page is unmapped, protected, or past the end of a mapped file (where a plain
    memmove would die with SIGSEGV or SIGBUS).
    """
    global _kernel_copy
    address = dst if untrusted == "dst" else src
    if _kernel_copy:
        if count <= KERNEL_COPY_LIMIT:
            done = _kernel_move(dst, src, count, untrusted)
            if done is not None:
                return COPIED if done else REFUSED
        else:
            if count > _PROBE_LIMIT:
                # Reading the maps costs less than probing this many pages; it cannot
                # see a file's end, so ranges over file mappings are probed anyway.
                permitted = _permitted(address, count, "r" if untrusted == "src" else "w",
                                       anonymous_only=True)
                if permitted is not None:
                    return PROVEN if permitted else REFUSED
            done = _probe(dst, src, count, untrusted)
            if done is not None:
                return PROVEN if done else REFUSED
        _kernel_copy = False  # forbidden here (seccomp): fall back to the maps check
    return PROVEN if _permitted(address, count, "r" if untrusted == "src" else "w") \
        else REFUSED


def _kernel_move(dst: int, src: int, count: int, untrusted: str) -> bool | None:
    """The whole copy by process_vm_readv/writev on this process; None if not allowed."""
    iov: Any = ffi.new("struct iovec[2]")
    iov[0].iov_len = iov[1].iov_len = count
    if untrusted == "src":
        iov[0].iov_base, iov[1].iov_base = ffi.cast("void *", dst), ffi.cast("void *", src)
        done = _libc.process_vm_readv(os.getpid(), iov, 1, iov + 1, 1, 0)
    else:
        iov[0].iov_base, iov[1].iov_base = ffi.cast("void *", src), ffi.cast("void *", dst)
        done = _libc.process_vm_writev(os.getpid(), iov, 1, iov + 1, 1, 0)
    if done == count:
        return True
    return None if done < 0 and ffi.errno in (errno.ENOSYS, errno.EPERM) else False


def _probe(dst: int, src: int, count: int, untrusted: str) -> bool | None:
    """Move one byte of every page of the untrusted side through the kernel.

    A destination page receives the byte the copy puts there anyway; a source page is
    read into a scratch buffer. The kernel refuses pages that are unmapped, protected
    or past the end of a file. None when the calls are not allowed here.
    """
    address = dst if untrusted == "dst" else src
    end = address + count
    first_page = address - address % HOST_PAGE + HOST_PAGE
    # The first byte, then each later page's: a range, sliced lazily (a huge count must
    # not build a list of every page before the first bad one refuses it).
    pages = range(first_page, end, HOST_PAGE)
    pid = os.getpid()
    for low in range(0, len(pages) + 1, _PROBE_PAGES):
        chunk = [address, *pages[:_PROBE_PAGES - 1]] if low == 0 else \
            list(pages[low - 1:low - 1 + _PROBE_PAGES])
        n = len(chunk)
        remote = _iovecs(chunk)
        if untrusted == "src":
            local: Any = ffi.new("struct iovec *")
            local.iov_base = ffi.from_buffer(_scratch)
            local.iov_len = n
            done = _libc.process_vm_readv(pid, local, 1, remote, n, 0)
        else:
            sources = _iovecs([src + (p - dst) for p in chunk])
            done = _libc.process_vm_writev(pid, sources, n, remote, n, 0)
        if done != n:
            if done < 0 and ffi.errno in (errno.ENOSYS, errno.EPERM):
                return None
            return False
    return True


def _iovecs(addresses: list[int]) -> Any:
    """An iovec array of one byte at each address, built without a Python loop per entry."""
    words = array.array("Q", bytes(16 * len(addresses)))
    words[0::2] = array.array("Q", addresses)
    words[1::2] = array.array("Q", [1]) * len(addresses)
    return ffi.from_buffer("struct iovec[]", words)


def permits_writing(address: int, size: int) -> bool:
    """Whether the maps let the process write all of ``[address, address+size)`` (True
    when they cannot be read: the caller's other checks stand)."""
    return _permitted(address, size, "w") is not False


def _permitted(address: int, size: int, permission: str, *,
               anonymous_only: bool = False) -> bool | None:
    """True when ``[address, address+size)`` lies in mappings that all allow ``permission``.

    With ``anonymous_only``, None when part of the range maps a file (whose end the maps
    do not show).
    """
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return None if anonymous_only else host_range_mapped(address, size)
    cursor, end = address, address + size
    for line in lines:
        fields = line.split(maxsplit=5)
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if low <= cursor < high:
            if permission not in fields[1]:
                return False
            if anonymous_only and fields[4] != "0":
                return None
            cursor = high
            if cursor >= end:
                return True
    return False
