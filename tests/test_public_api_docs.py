"""Every public class of acl_mem documents its public properties and has a repr that says
more than the default ``<... object at 0x...>``."""

from __future__ import annotations

import inspect

import acl_mem


def _public_classes() -> list[type]:
    return [obj for name in acl_mem.__all__
            if inspect.isclass(obj := getattr(acl_mem, name))]


def test_every_public_property_has_a_docstring():
    missing = sorted({
        f"{klass.__name__}.{attr}"
        for cls in _public_classes() for klass in cls.__mro__
        if klass.__module__.startswith("acl_mem")
        for attr, value in vars(klass).items()
        if isinstance(value, property) and not attr.startswith("_")
        and not (value.__doc__ or "").strip()
    })
    assert missing == []


def test_every_public_class_has_a_docstring():
    assert sorted(cls.__name__ for cls in _public_classes() if not (cls.__doc__ or "").strip()) \
        == []


def test_owning_classes_define_their_own_repr():
    owning = [acl_mem.Buffer, acl_mem.DeviceBuffer, acl_mem.HostBuffer, acl_mem.Segment,
              acl_mem.HostSegment, acl_mem.SegmentPool, acl_mem.ExpandablePool, acl_mem.Stream,
              acl_mem.VirtualRange, acl_mem.PhysicalMemory, acl_mem.Mapping,
              acl_mem.MappedMemory, acl_mem.ExpandableSegment, acl_mem.DeviceArray,
              acl_mem.Device]
    assert [cls.__name__ for cls in owning if cls.__repr__ is object.__repr__] == []
