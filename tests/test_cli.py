"""``acl-mem info``: backend, why it was chosen, and the page pools of every device.

Pools are aclrtGetMemInfo per device (docs/runtime-model.md §3.12); the fake's atlas-a2 profile has
8 devices of 64 GiB HBM, atlas-inference has no 1 GiB pages (docs/runtime-model.md §3.5, §3.12).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT, clean_env, native_is_installed

import acl_mem
from acl_mem import raw
from acl_mem.cli import main
from acl_mem.errors import ContextReleaseError

GiB = 1 << 30
_GIANT_POOLS = ("HBM_MEM_HUGE1G", "HBM_MEM_P2P_HUGE1G", "MEM_HUGE1G", "MEM_P2P_HUGE1G")
# ``acl-mem`` is [project.scripts] acl-mem = "acl_mem.cli:main"; run it without installing.
_ENTRY_POINT = ["-c", "import sys; from acl_mem.cli import main; sys.exit(main())"]


def _cli(*args: str, entry: list[str] | None = None,
         **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, *(entry or ["-m", "acl_mem"]), *args]
    return subprocess.run(command, env=clean_env(**env), capture_output=True, text=True,
                          timeout=60, cwd=str(ROOT))


# -- subprocess ------------------------------------------------------------------------------------


def test_info_text_on_fake_exits_zero():
    """`python -m acl_mem info` with ACL_MEM_BACKEND=fake: exit 0, a report on stdout."""
    proc = _cli("info", ACL_MEM_BACKEND="fake")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    assert proc.stderr == ""


def test_info_json_on_fake_atlas_a2_spec_3_12():
    """`info --json` on the default fake: backend, reason, 8 devices of 64 GiB HBM."""
    proc = _cli("info", "--json", ACL_MEM_BACKEND="fake")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["backend"] == "fake"
    assert isinstance(data["reason"], str)
    assert data["reason"]
    devices = data["devices"]
    assert [d["id"] for d in devices] == list(range(8))
    for device in devices:
        pools = device["pools"]
        assert pools["HBM_MEM"] == {"free": 64 * GiB, "total": 64 * GiB}
        # docs/runtime-model.md §3.12: HBM_MEM is the huge pool plus the normal pool.
        assert (pools["HBM_MEM_HUGE"]["total"] + pools["HBM_MEM_NORMAL"]["total"]
                == 64 * GiB)
        assert "HBM_MEM_HUGE1G" in pools  # Atlas A2 has 1 GiB pages (docs/runtime-model.md §3.5)


def test_info_json_on_fake_atlas_inference_has_no_giant_pools_spec_3_12():
    """docs/runtime-model.md §3.12: *_HUGE1G is unsupported on Atlas inference, so it is not
    listed."""
    proc = _cli("info", "--json", ACL_MEM_BACKEND="fake", ACL_MEM_FAKE_PROFILE="atlas-inference")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["backend"] == "fake"
    assert data["devices"]
    for device in data["devices"]:
        pools = device["pools"]
        assert pools, "no pool reported"
        for name in _GIANT_POOLS:
            assert name not in pools


@pytest.mark.skipif(native_is_installed(), reason="libascendcl.so is installed here")
@pytest.mark.parametrize("entry", ["module", "script"])
def test_info_backend_native_without_library_exits_one(tmp_path, entry):
    """`acl-mem info --backend native` with no libascendcl: exit 1, the paths on stderr."""
    proc = _cli("info", "--backend", "native",
                entry=_ENTRY_POINT if entry == "script" else None,
                ASCEND_HOME_PATH=str(tmp_path))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert str(tmp_path) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_info_json_via_entry_point_function():
    """The `acl-mem` entry point (acl_mem.cli:main) behaves like `python -m acl_mem`."""
    proc = _cli("info", "--json", "--backend", "fake", entry=_ENTRY_POINT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["backend"] == "fake"


# -- in process ------------------------------------------------------------------------------------


def test_main_info_json_in_process_spec_3_12(backend, capsys):
    """main(['info', '--json']) reports the active backend and every device's pools."""
    assert main(["info", "--json"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["backend"] == backend.name
    assert len(data["devices"]) == raw.aclrtGetDeviceCount()
    for device in data["devices"]:
        hbm = device["pools"]["HBM_MEM"]
        assert 0 <= hbm["free"] <= hbm["total"]
        assert hbm["total"] > 0
    # Every device it visited was reset again: no reference is left behind (docs/runtime-model.md
    # §3.2).
    with pytest.raises(ContextReleaseError) as e:
        raw.aclrtResetDevice(0)
    assert e.value.code == 507007


def test_main_info_text_in_process(backend, capsys):
    """main(['info']) and main([]) print the text report and return 0."""
    assert main(["info"]) == 0
    text = capsys.readouterr()
    assert text.out.strip()
    assert text.err == ""
    assert main([]) == 0
    assert capsys.readouterr().out == text.out


def test_main_backend_option_in_process(backend, capsys):
    """--backend naming the backend in use is fine; naming the other one fails with 1."""
    assert main(["info", "--json", "--backend", backend.name]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == backend.name
    other = "native" if backend.name == "fake" else "fake"
    assert main(["info", "--backend", other]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.strip()
    assert acl_mem.backend_name() == backend.name


def test_main_rejects_bad_arguments(backend, capsys):
    """Unknown commands and backend names are usage errors (exit status 2)."""
    with pytest.raises(SystemExit) as e:
        main(["bogus"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["info", "--backend", "bogus"])
    assert e.value.code == 2
    capsys.readouterr()
