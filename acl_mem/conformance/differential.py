"""Differential conformance: the same random call sequences on the fake and on native.

A Hypothesis state machine drives two backends side by side at the C-shaped level
(allocate with every API and policy, copy in and out, memset, free, double free,
query pools, address ranges and pointer attributes) and compares return codes, data
and sizes after every step. The first divergence is shrunk by Hypothesis to a minimal
sequence and reported. Absolute addresses and capacities differ between backends;
what is compared is what the runtime model fixes: codes, bytes, page-rounded sizes, offsets
inside a block, location types, and how much each pool's free memory moved.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .._backend import Backend
from ..enums import MemAttr
from ..errors import FunctionNotAvailableError
from .runner import hypothesis_storage, usable_cache_dir

__all__ = ["make_machine", "run_differential"]

_ALLOCS = ("aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached", "aclrtMallocHost",
           "acldvppMalloc")
_FREE = {"aclrtMalloc": "aclrtFree", "aclrtMallocAlign32": "aclrtFree",
         "aclrtMallocCached": "aclrtFree", "aclrtMallocHost": "aclrtFreeHost",
         "acldvppMalloc": "acldvppFree"}
_POOLS = (MemAttr.HBM_MEM, MemAttr.HBM_MEM_NORMAL, MemAttr.HBM_MEM_HUGE)


class Divergence(AssertionError):
    """The two backends answered one call differently."""


def make_machine(reference: Backend, subject: Backend) -> Any:
    """A RuleBasedStateMachine class comparing ``subject`` against ``reference``."""
    from hypothesis import strategies as st
    from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, multiple, rule

    from .._hostbuf import ffi

    def same(call: str, a: object, b: object) -> None:
        if a != b:
            raise Divergence(f"{call}: {reference.name} gave {a!r}, {subject.name} gave {b!r}")

    def address(buffer: bytearray) -> int:
        return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer)))

    class Differential(RuleBasedStateMachine):
        blocks = Bundle("blocks")

        def __init__(self) -> None:
            super().__init__()
            for backend in (reference, subject):
                same("aclrtSetDevice(0)", 0, backend.aclrtSetDevice(0))
            self.pools = self._pools()

        def _pools(self) -> list[tuple[int, int]]:
            found = []
            for backend in (reference, subject):
                found.append(tuple(backend.aclrtGetMemInfo(attr)[1] for attr in _POOLS))
            return found  # type: ignore[return-value]

        @rule(target=blocks, api=st.sampled_from(_ALLOCS),
              size=st.one_of(st.integers(0, 4096), st.integers(1 << 20, 5 << 20),
                             st.sampled_from([2**64 - 1, 2**64 - 32, 2**63])),
              policy=st.one_of(st.integers(0, 7), st.sampled_from([0x100, 0x1001, 99])))
        def allocate(self, api: str, size: int, policy: int) -> Any:
            args = (size,) if api in ("aclrtMallocHost", "acldvppMalloc") else (size, policy)
            a = getattr(reference, api)(*args)
            b = getattr(subject, api)(*args)
            same(f"{api}{args} rc", a[0], b[0])
            if a[0] != 0:
                return multiple()
            block = (api, size, a[1], b[1])
            self._compare_range(block, 0)
            return block

        def _compare_range(self, block: tuple[str, int, int, int], offset: int) -> None:
            api, _, pa, pb = block
            ra = _address_range(reference, pa + offset)
            rb = _address_range(subject, pb + offset)
            same(f"aclrtMemGetAddressRange({api} block + {offset}) exists", ra is None, rb is None)
            if ra is None or rb is None:
                return
            same(f"aclrtMemGetAddressRange({api} block + {offset}) rc", ra[0], rb[0])
            if ra[0] == 0:
                same(f"aclrtMemGetAddressRange({api} block + {offset}) base offset, size",
                     (pa - ra[1], ra[2]), (pb - rb[1], rb[2]))

        @rule(block=blocks, data=st.binary(min_size=1, max_size=256), offset=st.integers(0, 64))
        def write_and_read(self, block: tuple[str, int, int, int], data: bytes,
                           offset: int) -> None:
            api, size, pa, pb = block
            results = []
            for backend, ptr in ((reference, pa), (subject, pb)):
                source = bytearray(data)
                rc = backend.aclrtMemcpy(ptr + offset, max(size - offset, 0), address(source),
                                         len(data), 1)
                back = bytearray(len(data))
                rc2 = backend.aclrtMemcpy(address(back), len(back), ptr + offset, len(data), 2)
                results.append((rc, rc2, bytes(back) if rc == rc2 == 0 else b""))
            same(f"copy {len(data)} bytes at {api} block + {offset}", results[0], results[1])

        @rule(block=blocks, value=st.integers(-300, 300), count=st.integers(0, 300))
        def memset(self, block: tuple[str, int, int, int], value: int, count: int) -> None:
            api, size, pa, pb = block
            a = reference.aclrtMemset(pa, size, value, count)
            b = subject.aclrtMemset(pb, size, value, count)
            same(f"aclrtMemset({api} block of {size}, value={value}, count={count})", a, b)

        @rule(block=blocks)
        def attributes(self, block: tuple[str, int, int, int]) -> None:
            api, _, pa, pb = block
            a = reference.aclrtPointerGetAttributes(pa)
            b = subject.aclrtPointerGetAttributes(pb)
            same(f"aclrtPointerGetAttributes({api} block) rc, type, pageSize",
                 (a[0], a[1], a[3]), (b[0], b[1], b[3]))

        @rule(block=consumes(blocks), twice=st.booleans())
        def free(self, block: tuple[str, int, int, int], twice: bool) -> None:
            api, _, pa, pb = block
            call = _FREE[api]
            for attempt in range(2 if twice else 1):
                same(f"{call}({api} block) attempt {attempt + 1}",
                     getattr(reference, call)(pa), getattr(subject, call)(pb))

        @rule(attr=st.integers(0, 20))
        def mem_info_codes(self, attr: int) -> None:
            same(f"aclrtGetMemInfo({attr}) rc", reference.aclrtGetMemInfo(attr)[0],
                 subject.aclrtGetMemInfo(attr)[0])

        @rule()
        def pools_moved_alike(self) -> None:
            now = self._pools()
            moved = [tuple(s - n for s, n in zip(start, current, strict=True))
                     for start, current in zip(self.pools, now, strict=True)]
            same("free memory used since the start (HBM, normal, huge)", moved[0], moved[1])

        def teardown(self) -> None:
            for backend in (reference, subject):
                backend.aclrtResetDevice(0)

    return Differential


def _address_range(backend: Backend, ptr: int) -> tuple[int, int, int] | None:
    """aclrtMemGetAddressRange(ptr), or None on a release without it (8.5.0)."""
    try:
        return backend.aclrtMemGetAddressRange(ptr)
    except FunctionNotAvailableError:
        return None


def _subject_and_reference() -> tuple[Backend, Backend]:
    from .. import fake
    from .providers import native_provider

    native, source = native_provider().load()
    if native is None:
        raise RuntimeError(
            "--differential compares the fake with the native backend (libascendcl on an "
            f"Atlas host with CANN installed), which could not be loaded:\n{source}\n"
            "Without hardware, 'acl-mem conformance --backend fake' checks the fake alone.")
    # The fake plays the release the library reports, so release differences are not
    # reported as divergences.
    rc, reported = native.aclsysGetVersionStr("runtime")
    release = fake.closest_release(reported if rc == 0 else "")
    print(f"acl-mem conformance: the native runtime reports CANN {reported or '(unknown)'}; "
          f"the fake plays {release.name}", file=sys.stderr)
    # The native library may be acl_mem's own (its set_env.sh sourced): the fake is then
    # a second engine, or both sides would share one device.
    own = fake.is_fake_library(str(getattr(native, "path", "")))
    if own:
        print("acl-mem conformance: the native library is acl_mem's own fake: the fake side "
              "runs on a private copy of it", file=sys.stderr)
    subject = fake.make_backend(fake.profile_for_soc(native.soc_name()), cann=release.name,
                                hazards="warn", private=own)
    return subject, native


def run_differential(max_examples: int = 200, steps: int = 30) -> int:
    """Compare fake and native; print the minimal diverging sequence, 0 when none."""
    try:
        from hypothesis import HealthCheck, settings
        from hypothesis.stateful import run_state_machine_as_test
    except ImportError:
        print("acl-mem conformance: --differential needs hypothesis, which is not installed; "
              "install it with: pip install \"acl_mem[conformance]\"", file=sys.stderr)
        return 2
    try:
        reference, subject = _subject_and_reference()
    except RuntimeError as exc:
        print(f"acl-mem conformance: {exc}", file=sys.stderr)
        return 2
    machine = make_machine(reference, subject)
    # Hypothesis leaves this function unannotated; the variable gives mypy its type.
    run_machine: Callable[..., None] = run_state_machine_as_test
    try:
        # Hypothesis's examples go to the user's cache, not ./.hypothesis.
        with usable_cache_dir() as cache, hypothesis_storage(cache):
            run_machine(machine, settings=settings(
                max_examples=max_examples, stateful_step_count=steps, deadline=None,
                suppress_health_check=list(HealthCheck)))
    except Divergence as exc:
        print(f"DIVERGENCE: {exc}")
        for note in getattr(exc, "__notes__", []):
            print(note)
        print(f"The fake and {subject.name} answered the call named above differently; the "
              "steps shown are the shortest sequence found that leads there. Please report "
              "it to acl_mem's maintainers with this output and that of 'acl-mem info -v'.")
        return 1
    print(f"no divergence in {max_examples} sequences of up to {steps} calls "
          f"({reference.name} vs {subject.name})")
    return 0
