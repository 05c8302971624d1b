"""A pyACL program as CANN's samples write it: a host buffer to the device and back.

It imports ``acl`` (pyACL) and knows nothing of acl_mem (nor does mypy: pyACL ships no
types, so this folder is not type-checked with the other examples); run it on the fake with

    acl-mem run examples/pyacl/copy_round_trip.py --size 4096

Every call returns ``ret``; the program stops at the first one that is not 0.
"""

import argparse
import sys

import acl

ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2


def check(ret: int, what: str) -> None:
    if ret != 0:
        sys.exit(f"{what} failed: {ret}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="bytes to copy (default 1024)")
    size = parser.parse_args().size

    check(acl.init(), "acl.init")
    check(acl.rt.set_device(0), "acl.rt.set_device")
    device, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
    check(ret, "acl.rt.malloc")

    data = bytes(i % 251 for i in range(size))
    check(acl.rt.memcpy(device, size, acl.util.bytes_to_ptr(data), size,
                        ACL_MEMCPY_HOST_TO_DEVICE), "acl.rt.memcpy (to the device)")
    back = bytes(size)
    check(acl.rt.memcpy(acl.util.bytes_to_ptr(back), size, device, size,
                        ACL_MEMCPY_DEVICE_TO_HOST), "acl.rt.memcpy (back)")
    print("round trip", "ok" if back == data else "CORRUPTED", size, "bytes")

    check(acl.rt.free(device), "acl.rt.free")
    check(acl.rt.reset_device(0), "acl.rt.reset_device")
    check(acl.finalize(), "acl.finalize")


if __name__ == "__main__":
    main()
