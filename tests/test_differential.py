"""`acl-mem conformance --differential`: fake vs native, first divergence reported."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from acl_mem import fake
from acl_mem._fake.engine_fake import EngineFake
from acl_mem.conformance.differential import Divergence, make_machine, run_differential
from acl_mem.conformance.providers import native_provider

FAST = settings(max_examples=25, stateful_step_count=15, deadline=None,
                suppress_health_check=list(HealthCheck))


class PaddingLostFake(EngineFake):
    """A broken device: aclrtMallocAlign32 forgets to round to 32 bytes."""

    def aclrtMallocAlign32(self, size, policy, null_outputs=0):
        if size and size % 32:
            return 207001, 0
        return super().aclrtMallocAlign32(size, policy, null_outputs)


def test_identical_backends_never_diverge():
    """Two engines in one process (the second from a private copy of the library), each
    with its own device."""
    reference = fake.make_backend()
    subject = fake.make_backend(private=True)
    machine = make_machine(reference, subject)
    run_state_machine_as_test(machine, settings=FAST)


def test_a_broken_rule_is_reported_as_a_divergence():
    reference = fake.make_backend(private=True)
    broken = PaddingLostFake(fake.profile())
    machine = make_machine(reference, broken)
    with pytest.raises(Divergence):
        run_state_machine_as_test(machine, settings=FAST)


def test_fake_against_native_through_the_command(capsys):
    """The command compares the fake with the native backend (here: acl_mem's fake library,
    which the command detects: its fake side then runs on a private copy)."""
    provider = native_provider()
    native, why = provider.load()
    if native is None:
        pytest.skip(f"native backend unavailable: {why}")
    provider.before_test()
    assert run_differential(max_examples=15, steps=15) == 0
    assert "no divergence" in capsys.readouterr().out
    provider.after_test()
