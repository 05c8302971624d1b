"""Backend selection: ``ACL_MEM_BACKEND``, ``use_backend`` and the fake's configuration.

The choice is made once per process, so most tests run a fresh interpreter with a
controlled environment. No AclError here: these are the package's own rules (the
native backend binds libascendcl as docs/runtime-model.md §0.1 describes; the fake models §3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT, clean_env, native_is_installed

import acl_mem
from acl_mem import _backend, raw
from acl_mem._fake.config import set_profile
from acl_mem.enums import MemAttr
from acl_mem.errors import FreedBufferError, InvalidDeviceIdError

GiB = 1 << 30

_PRELUDE = "import json, os, sys\nimport acl_mem\nfrom acl_mem import _backend\n"


def _run(code: str, **env: str | None) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    proc = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(code)],
        env=clean_env(**env), capture_output=True, text=True, timeout=60, cwd=str(ROOT),
    )
    assert proc.returncode == 0, f"child failed:\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


needs_no_native = pytest.mark.skipif(native_is_installed(), reason="libascendcl.so is installed")


# -- import ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("requested", [None, "native", "fake", "auto", "bogus"])
def test_import_loads_no_backend(requested):
    """Importing acl_mem loads neither backend and touches no driver, whatever is requested."""
    result = _run(
        """
        maps = ""
        if os.path.exists("/proc/self/maps"):
            with open("/proc/self/maps") as handle:
                maps = handle.read()
        size = acl_mem.allocation_size("aclrtMalloc", 100)
        loaded = sorted(m for m in sys.modules
                        if m.startswith(("acl_mem._native", "acl_mem._fake"))
                        or m == "acl_mem.fake")
        print(json.dumps({"loaded": loaded, "active": _backend._active is not None,
                          "driver": "libascendcl" in maps or "libascend_hal" in maps,
                          "size": size}))
        """,
        ACL_MEM_BACKEND=requested,
    )
    assert result["loaded"] == []
    assert result["active"] is False
    assert result["driver"] is False
    assert result["size"] == 160  # arithmetic needs no backend (runtime model §3.5)


# -- ACL_MEM_BACKEND -------------------------------------------------------------------------------


def test_env_fake_is_used_and_reason_says_requested():
    """ACL_MEM_BACKEND=fake: the fake, because it was requested."""
    result = _run(
        """
        from acl_mem import _backend
        from acl_mem._fake.library import PREFIX
        library = _backend.get().describe().get("library", str(PREFIX))
        print(json.dumps({"name": acl_mem.backend_name(), "reason": acl_mem.backend_reason(),
                          "own": library.startswith(str(PREFIX))}))
        """,
        ACL_MEM_BACKEND="fake",
    )
    assert result["name"] == "fake"
    assert "requested" in str(result["reason"])
    assert result["own"] is True  # acl_mem's library, never Huawei's


@needs_no_native
def test_env_native_without_library_lists_searched_paths(tmp_path):
    """ACL_MEM_BACKEND=native with no library: BackendError naming every directory tried."""
    home = tmp_path / "ascend-home"
    extra = tmp_path / "ld-extra"
    home.mkdir()
    extra.mkdir()
    result = _run(
        """
        errors = []
        for _ in range(2):
            try:
                acl_mem.backend_name()
            except acl_mem.BackendError as exc:
                errors.append(str(exc))
            else:
                errors.append(None)
        print(json.dumps({"errors": errors, "active": _backend._active is not None}))
        """,
        ACL_MEM_BACKEND="native",
        ASCEND_HOME_PATH=str(home),
        LD_LIBRARY_PATH=os.pathsep.join(
            p for p in (str(extra), os.environ.get("LD_LIBRARY_PATH", "")) if p
        ),
    )
    first, second = result["errors"]
    assert first is not None, "no BackendError although libascendcl.so is missing"
    assert str(home) in first
    assert str(extra) in first
    assert second is not None, "the second use silently picked a backend"
    assert result["active"] is False


@needs_no_native
@pytest.mark.parametrize("requested", [None, "auto"])
def test_env_auto_falls_back_to_fake_with_reason(requested, tmp_path):
    """ACL_MEM_BACKEND=auto (the default): native fails to load, so the fake, saying why."""
    result = _run(
        """
        print(json.dumps({"name": acl_mem.backend_name(), "reason": acl_mem.backend_reason()}))
        """,
        ACL_MEM_BACKEND=requested,
        ASCEND_HOME_PATH=str(tmp_path),
    )
    assert result["name"] == "fake"
    assert "libascendcl.so" in str(result["reason"])


def test_env_bogus_raises_setting_error():
    """ACL_MEM_BACKEND=bogus: SettingError at first use, no backend chosen."""
    result = _run(
        """
        try:
            acl_mem.backend_name()
        except acl_mem.SettingError as exc:
            outcome = [exc.variable, exc.value]
        except Exception as exc:
            outcome = type(exc).__name__
        else:
            outcome = "no error"
        print(json.dumps({"outcome": outcome, "active": _backend._active is not None}))
        """,
        ACL_MEM_BACKEND="bogus",
    )
    assert result == {"outcome": ["ACL_MEM_BACKEND", "bogus"], "active": False}


# -- use_backend -----------------------------------------------------------------------------------


def test_use_backend_native_after_fake_in_use_raises():
    """use_backend('native') once the fake is in use: BackendError, the fake stays."""
    result = _run(
        """
        acl_mem.backend_name()
        try:
            acl_mem.use_backend("native")
        except acl_mem.BackendError:
            outcome = "BackendError"
        except Exception as exc:
            outcome = type(exc).__name__
        else:
            outcome = "no error"
        print(json.dumps({"outcome": outcome, "name": acl_mem.backend_name()}))
        """,
        ACL_MEM_BACKEND="fake",
    )
    assert result == {"outcome": "BackendError", "name": "fake"}


def test_use_backend_fake_twice_is_fine():
    """use_backend('fake') twice: the same fake, no error; 'auto' afterwards is fine too."""
    result = _run(
        """
        acl_mem.use_backend("fake")
        first = _backend.get()
        acl_mem.use_backend("fake")
        acl_mem.use_backend("auto")
        print(json.dumps({"name": acl_mem.backend_name(), "same": _backend.get() is first}))
        """,
        ACL_MEM_BACKEND="native",
    )
    assert result == {"name": "fake", "same": True}


def test_use_backend_unknown_name_raises_value_error():
    """use_backend('nonsense'): ValueError, and nothing is chosen."""
    result = _run(
        """
        try:
            acl_mem.use_backend("nonsense")
        except ValueError:
            outcome = "ValueError"
        except Exception as exc:
            outcome = type(exc).__name__
        else:
            outcome = "no error"
        print(json.dumps({"outcome": outcome, "active": _backend._active is not None}))
        """,
        ACL_MEM_BACKEND="fake",
    )
    assert result == {"outcome": "ValueError", "active": False}


@needs_no_native
def test_use_backend_native_without_library_lists_paths(tmp_path):
    """use_backend('native') with no library: BackendError naming the directories tried."""
    result = _run(
        """
        try:
            acl_mem.use_backend("native")
        except acl_mem.BackendError as exc:
            message = str(exc)
        else:
            message = None
        print(json.dumps({"message": message, "active": _backend._active is not None}))
        """,
        ASCEND_HOME_PATH=str(tmp_path),
    )
    assert result["message"] is not None
    assert str(tmp_path) in str(result["message"])
    assert result["active"] is False


# -- fake profiles ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "soc_prefix", "malloc_100"),
    [("atlas-inference", "Ascend310P", 160), ("ascend950", "Ascend950", 128),
     ("atlas-a2", "Ascend910B", 160)],
)
def test_env_fake_profile(profile, soc_prefix, malloc_100):
    """ACL_MEM_FAKE_PROFILE picks the SoC; aclrtMalloc(100) pads per docs/runtime-model.md §3.5."""
    result = _run(
        """
        soc = acl_mem.raw.aclrtGetSocName()
        with acl_mem.Device(0) as dev, dev.malloc(100) as buf:
            allocated = buf.allocated_size
        print(json.dumps({"soc": soc, "allocated": allocated}))
        """,
        ACL_MEM_BACKEND="fake",
        ACL_MEM_FAKE_PROFILE=profile,
    )
    assert str(result["soc"]).startswith(soc_prefix)
    assert result["allocated"] == malloc_100


def test_configure_before_first_use_in_fresh_process():
    """acl_mem.fake.configure before first use shapes the fake that is then chosen."""
    result = _run(
        """
        acl_mem.fake.configure(profile="ascend950", device_count=2, hbm_bytes=8 << 30)
        with acl_mem.Device(0) as dev:
            total = dev.mem_info(acl_mem.MemAttr.HBM_MEM).total
        print(json.dumps({"name": acl_mem.backend_name(),
                          "count": acl_mem.raw.aclrtGetDeviceCount(),
                          "soc": acl_mem.raw.aclrtGetSocName(), "total": total}))
        """,
        ACL_MEM_BACKEND="fake",
    )
    assert result["name"] == "fake"
    assert result["count"] == 2
    assert str(result["soc"]).startswith("Ascend950")
    assert result["total"] == 8 * GiB


@pytest.fixture
def restore_profile():
    yield
    set_profile(None)


@pytest.mark.fake_only("acl_mem.fake.configure reshapes the fake device model")
def test_configure_replaces_the_fake(fake, restore_profile):
    """configure(ascend950, 2 devices, 8 GiB): two devices with 8 GiB of HBM each."""
    acl_mem.fake.configure(profile="ascend950", device_count=2, hbm_bytes=8 * GiB)
    assert acl_mem.backend_name() == "fake"
    assert _backend.get() is not fake
    assert raw.aclrtGetDeviceCount() == 2
    assert raw.aclrtGetSocName().startswith("Ascend950")
    for device_id in (0, 1):
        with acl_mem.Device(device_id) as dev:
            assert dev.mem_info(MemAttr.HBM_MEM).total == 8 * GiB
            assert dev.mem_info(MemAttr.HBM_MEM).free == 8 * GiB
    with pytest.raises(InvalidDeviceIdError) as e:
        raw.aclrtSetDevice(2)
    assert e.value.code == 107001


@pytest.mark.fake_only("acl_mem.fake.configure reshapes the fake device model")
def test_configure_unknown_profile_raises_value_error(fake, restore_profile):
    """configure(profile='nonsense'): ValueError and the active fake is kept."""
    with pytest.raises(ValueError):
        acl_mem.fake.configure(profile="nonsense")
    assert _backend.get() is fake


@pytest.mark.fake_only("acl_mem.fake.configure reshapes the fake device model")
def test_buffers_from_before_configure_report_freed(fake, restore_profile, mocker):
    """configure starts a fresh device: older buffers are gone and free() is a no-op."""
    device = acl_mem.Device(0)
    device.set_current()
    buf = device.malloc(100)
    host = device.malloc_host(100)
    acl_mem.fake.configure(device_count=1, hbm_bytes=GiB)
    fresh = _backend.get()
    free_spy = mocker.spy(fresh, "aclrtFree")
    host_spy = mocker.spy(fresh, "aclrtFreeHost")
    assert buf.freed
    assert host.freed
    with pytest.raises(FreedBufferError):
        _ = buf.ptr
    with pytest.raises(FreedBufferError):
        host.view()
    buf.free()
    host.free()
    assert free_spy.call_count == 0
    assert host_spy.call_count == 0
    with acl_mem.Device(0) as dev:
        assert dev.mem_info(MemAttr.HBM_MEM).free == GiB
