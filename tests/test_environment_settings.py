"""Every ACL_MEM_* variable follows one rule: blank means the default, letters are not
case-sensitive, anything else unknown is a SettingError naming the variable and value."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from acl_mem import _env
from acl_mem._fake import config
from acl_mem.errors import SettingError


@pytest.fixture(autouse=True)
def _environment_decides(monkeypatch):
    """What configure() chose earlier in the session would hide the variables."""
    for name in ("_configured", "_cann", "_check", "_hazard_mode"):
        monkeypatch.setattr(config, name, None)


# (variable, a value it rejects, how it is read)
_READERS = [
    ("ACL_MEM_CHECK", "maybe", config.current_check),
    ("ACL_MEM_HAZARDS", "loud", config.current_hazard_mode),
    ("ACL_MEM_FAKE_PROFILE", "no-such-board", config.current_profile),
    ("ACL_MEM_FAKE_CANN", "7.0.0", config.current_cann),
]


@pytest.mark.parametrize(("name", "bad", "read"), _READERS, ids=[r[0] for r in _READERS])
@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_blank_means_default(monkeypatch, name, bad, read, blank):
    monkeypatch.delenv(name, raising=False)
    default = read()
    monkeypatch.setenv(name, blank)
    assert read() == default


@pytest.mark.parametrize(("name", "bad", "read"), _READERS, ids=[r[0] for r in _READERS])
def test_garbage_is_a_setting_error_naming_variable_and_value(monkeypatch, name, bad, read):
    monkeypatch.setenv(name, bad)
    with pytest.raises(SettingError) as caught:
        read()
    assert caught.value.variable == name
    assert caught.value.value == bad
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("text", "expected"), [("1", True), ("TRUE", True), ("Yes", True),
                                                ("on", True), ("0", False), ("False", False),
                                                ("NO", False), ("off", False), (" 1 ", True)])
def test_flags_take_any_case(monkeypatch, text, expected):
    monkeypatch.setenv("ACL_MEM_CHECK", text)
    assert config.current_check() is expected


@pytest.mark.parametrize("text", ["RAISE", "Count", " warn "])
def test_choices_take_any_case(monkeypatch, text):
    monkeypatch.setenv("ACL_MEM_HAZARDS", text)
    assert config.current_hazard_mode() == text.strip().lower()


@pytest.mark.parametrize("text", ["-1", "1e3", "\uff10", "99999999999999999999999", "0x10"])
def test_whole_numbers_refuse_anything_but_plain_decimal(monkeypatch, text):
    monkeypatch.setenv("ACL_MEM_TEST_NUMBER", text)
    with pytest.raises(SettingError):
        _env.whole_number("ACL_MEM_TEST_NUMBER", 0)


def test_paths_are_ignored_when_set_id(monkeypatch):
    monkeypatch.setenv("ACL_MEM_TEST_PATH", "/tmp/somewhere")
    assert _env.secure_path("ACL_MEM_TEST_PATH") == "/tmp/somewhere"
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)
    assert _env.secure_path("ACL_MEM_TEST_PATH") is None


def test_cli_reports_a_bad_setting_in_one_line_with_status_one():
    env = {**os.environ, "ACL_MEM_BACKEND": "fake", "ACL_MEM_FAKE_PROFILE": "nonsense"}
    done = subprocess.run([sys.executable, "-m", "acl_mem", "info"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "ACL_MEM_FAKE_PROFILE" in done.stderr


def test_readme_lists_every_variable_acl_mem_reads():
    """Every ACL_MEM_* name in the package's and the suite's code that names a variable (not
    an enum of the headers) has a row in the README's table."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    table = readme[readme.index("## Environment variables"):]
    table = table[:table.index("\n## ")]
    listed = set(re.findall(r"`(ACL_MEM_[A-Z_]+)`", table))
    read = set()
    for path in [*(root / "acl_mem").rglob("*.py"), *(root / "tests").glob("*.py")]:
        text = path.read_text()
        read |= set(re.findall(r"(?:flag|choice|raw|whole_number|secure_path|environ\.get|"
                               r"getenv|setenv|delenv)\(\s*[\"'](ACL_MEM_[A-Z_]+)", text))
        read |= set(re.findall(r"^ENV_[A-Z]+ = \"(ACL_MEM_[A-Z_]+)\"", text, flags=re.M))
    read -= {"ACL_MEM_TEST_NUMBER", "ACL_MEM_TEST_PATH"}  # this file's own probes
    assert read - listed == set()


def test_a_huge_value_is_cut_in_the_message_but_kept_whole(monkeypatch):
    monkeypatch.setenv("ACL_MEM_HAZARDS", "x" * 100_000)
    with pytest.raises(SettingError) as caught:
        config.current_hazard_mode()
    assert caught.value.value == "x" * 100_000
    assert len(str(caught.value)) < 1000
