"""Reading and writing the bytes of a :class:`~acl_mem.vmm.Mapping` or of the mapped parts of
a :class:`~acl_mem.vmm.VirtualRange`, with DeviceBuffer's calls and errors.

Each call wraps the mapping it touches in a borrowed DeviceBuffer for the duration of the
copy, so bounds, memcpy kinds, streams-free synchronous semantics and error classes are
DeviceBuffer's own: FreedBufferError once closed, ValueError out of bounds (here: out of
the mapping), TypeError for what is not a buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._args import c_uint
from ._vmm_locks import Locked, locked

if TYPE_CHECKING:
    from .buffers import BufferLike, DeviceBuffer

__all__ = ["MappedIO"]


class MappedIO(Locked):
    """``read`` / ``write`` / ``copy_from`` / ``copy_to`` over mapped device memory, each
    holding the object's lock: a close() of the object (or of a mapping in the range)
    waits for the copy."""

    def _open(self, what: str) -> None:
        raise NotImplementedError

    def _mapping_at(self, what: str, offset: int) -> tuple[int, int, int, int, object]:
        """``(mapping address, mapping size, device id, offset within it, mapping)`` of
        the live mapping holding ``offset``; ValueError where nothing is mapped."""
        raise NotImplementedError

    def _view(self, what: str, offset: int) -> tuple[DeviceBuffer, int, object]:
        """A borrowed buffer over the mapping holding ``offset``, the offset in it, and
        the mapping itself: the caller holds it until its copy is done, so that dropping
        the mapping's last other reference cannot unmap it (its finalizer) meanwhile."""
        from .buffers import DeviceBuffer

        self._open(what)
        start = c_uint(offset, f"{type(self).__name__}.{what}", "offset")
        address, size, device, local, mapping = self._mapping_at(what, start)
        return DeviceBuffer.from_ptr(address, size, device=device), local, mapping

    @locked
    def read(self, count: int | None = None, offset: int = 0) -> bytes:
        """A bytes copy of ``count`` bytes from ``offset`` (default: to the end of the
        mapping there)."""
        view, local, _held = self._view("read", offset)  # held to the end
        return view.read(count, local)

    @locked
    def write(self, data: BufferLike, offset: int = 0) -> None:
        """Copy all of ``data`` (a buffer-protocol object or an acl_mem buffer) to
        ``offset``."""
        view, local, _held = self._view("write", offset)  # held to the end
        view.copy_from(data, offset=local)

    @locked
    def copy_from(self, src: BufferLike, count: int | None = None, *, offset: int = 0,
                  src_offset: int = 0) -> None:
        """As :meth:`DeviceBuffer.copy_from`: ``count`` bytes (default: the rest of
        ``src``) from ``src`` at ``src_offset`` to ``offset``."""
        view, local, _held = self._view("copy_from", offset)  # held to the end
        view.copy_from(src, count, offset=local, src_offset=src_offset)

    @locked
    def copy_to(self, dst: BufferLike, count: int | None = None, *, offset: int = 0,
                dst_offset: int = 0) -> None:
        """As :meth:`DeviceBuffer.copy_to`: ``count`` bytes (default: to the end of the
        mapping) from ``offset`` into ``dst`` at ``dst_offset``."""
        view, local, _held = self._view("copy_to", offset)  # held to the end
        view.copy_to(dst, count, offset=local, dst_offset=dst_offset)
