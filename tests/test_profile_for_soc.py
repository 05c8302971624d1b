"""Which fake profile stands for a real SoC (the differential comparison and the native
stand-in play it)."""

import pytest

from acl_mem._fake.profiles import profile_for_soc


@pytest.mark.parametrize(("soc", "profile"), [
    ("Ascend310", "atlas-200dk"),      # exact name first
    ("Ascend310P1", "atlas-inference"),  # the longest shared prefix
    ("Ascend310P3", "atlas-inference"),
    ("Ascend910B4", "atlas-a2"),
    ("Ascend950DT", "ascend950"),
    ("Ascend910_9391", "atlas-a2"),
    ("", "atlas-a2"),                  # nothing shared: the default
    ("Kunpeng920", "atlas-a2"),
])
def test_the_profile_of_a_soc(soc, profile):
    assert profile_for_soc(soc).name == profile
