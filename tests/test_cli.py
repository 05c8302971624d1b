"""The acl-mem command line: info (one line per device, -v pools, --json), help text,
argument errors and the --differential message. acl-mem conformance's report is in
test_conformance_report.py.

Pools are aclrtGetMemInfo per device (docs/runtime-model.md §3.12); the fake's atlas-a2 profile has
8 devices of 64 GiB HBM, atlas-inference has no 1 GiB pages (docs/runtime-model.md §3.5, §3.12).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from helpers import ROOT, clean_env, native_is_installed

import acl_mem
from acl_mem import Device, MemInfo, raw
from acl_mem._fake.engine_fake import EngineFake
from acl_mem._native.loader import candidate_dirs
from acl_mem.cli import format_size, main
from acl_mem.conformance.providers import native_provider, set_native_provider
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


# -- info: one line per device, -v pools, --json as the API reports it ----------------------------


def _device_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("device ")]


def _api_pools(device_id: int) -> dict[str, MemInfo]:
    with Device(device_id) as device:
        return {attr.name: info for attr, info in device.pools().items() if info.total}


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (64 * GiB, "64 GiB"),
    (int(63.9 * GiB), "63.9 GiB"), (3 * GiB // 2, "1.5 GiB"), (45 * GiB // 2, "22.5 GiB"),
    (512 << 20, "512 MiB"), (1 << 40, "1 TiB"),
])
def test_format_size_is_binary_and_short(n, text):
    assert format_size(n) == text


def test_info_text_is_one_line_per_device(backend, capsys):
    """Without -v: a header naming the backend, then exactly one line per device with its
    SoC, memory, free and used memory as aclrtGetMemInfo reports them; no pool table."""
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"acl_mem {acl_mem.__version__}, backend {backend.name}")
    devices = _device_lines(out)
    assert len(devices) == Device.count()
    soc = backend.soc_name()
    for device_id, line in enumerate(devices):
        hbm = _api_pools(device_id)["HBM_MEM"]
        assert line.split()[:3] == ["device", str(device_id), soc]
        for part in (f"HBM {format_size(hbm.total)}", f"free {format_size(hbm.free)}",
                     f"used {format_size(hbm.used)}"):
            assert part in line
    for name in _api_pools(0):
        assert name not in out  # the pool table is -v only
    # Header, runtime version, backend details, device count, one line per device.
    assert len(lines) <= 4 + len(devices)
    version = acl_mem.runtime_version()
    assert f"runtime CANN {version.cann}, ACL {'.'.join(map(str, version.acl))}" in lines


def test_info_free_memory_follows_allocations(backend, capsys):
    """An allocation held on a device shows in that device's line only."""
    device = Device(1).use()
    try:
        buffer = device.malloc(3 * GiB // 2)
        assert main(["info"]) == 0
        lines = _device_lines(capsys.readouterr().out)
        hbm = device.mem_info()
        assert hbm.used >= 3 * GiB // 2
        assert f"used {format_size(hbm.used)}" in lines[1]
        assert "used 0 B" in lines[0]
        buffer.free()
    finally:
        device.reset()


def test_info_verbose_adds_every_pool(backend, capsys):
    """-v: after each device's line, one line per page pool with free and total, in bytes
    too, and the full reason."""
    assert main(["info", "-v"]) == 0
    lines = capsys.readouterr().out.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("device ")]
    assert len(starts) == Device.count()
    ends = [*starts[1:], len(lines)]
    for device_id, (start, end) in enumerate(zip(starts, ends, strict=True)):
        pools = _api_pools(device_id)
        rows = lines[start + 1:end]
        assert [row.split()[0] for row in rows] == list(pools)
        for row, info in zip(rows, pools.values(), strict=True):
            assert f"({info.free} of {info.total} bytes)" in row
    reason = acl_mem.backend_reason().strip().splitlines()
    joined = "\n".join(lines)
    for part in reason:
        assert part.strip() in joined


def test_info_json_keys_and_values_match_the_api(backend, capsys):
    """--json: exactly the documented keys, with the values acl_mem's API reports."""
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"acl_mem", "backend", "reason", "runtime", "details", "devices"}
    assert data["acl_mem"] == acl_mem.__version__
    version = acl_mem.runtime_version()
    assert data["runtime"] == {"cann": version.cann, "acl": ".".join(map(str, version.acl))}
    assert data["backend"] == acl_mem.backend_name() == backend.name
    assert data["reason"] == acl_mem.backend_reason()
    assert data["details"] == json.loads(json.dumps(backend.describe()))
    assert [d["id"] for d in data["devices"]] == list(range(Device.count()))
    for device in data["devices"]:
        assert set(device) == {"id", "soc", "memory", "total", "free", "pools"}
        pools = _api_pools(device["id"])
        assert device["pools"] == {name: {"free": info.free, "total": info.total}
                                   for name, info in pools.items()}
        assert device["soc"] == backend.soc_name()
        assert device["memory"] == "HBM"
        assert (device["total"], device["free"]) == (pools["HBM_MEM"].total,
                                                     pools["HBM_MEM"].free)


def test_info_json_on_ddr_profile_counts_ddr():
    """Atlas inference has DDR: memory, total and free are the DDR_MEM pool's."""
    proc = _cli("info", "--json", ACL_MEM_BACKEND="fake", ACL_MEM_FAKE_PROFILE="atlas-inference")
    assert proc.returncode == 0, proc.stderr
    for device in json.loads(proc.stdout)["devices"]:
        assert device["memory"] == "DDR"
        assert device["total"] == device["pools"]["DDR_MEM"]["total"]
        assert device["free"] == device["pools"]["DDR_MEM"]["free"]


# -- help: plain text, documented keys -------------------------------------------------------------
_MARKUP = re.compile(r"``|:[a-z]+:`|\*\*|\.\. [a-z]+::")


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", [(), ("info",), ("conformance",)])
def test_help_is_plain_text(capsys, argv):
    text = _help(capsys, *argv)
    assert text.startswith("usage: acl-mem")
    assert not _MARKUP.search(text), _MARKUP.search(text)
    # A description, not only the option list.
    assert len(text.split("options:")[0].splitlines()) > 3


def test_info_help_documents_every_json_key(backend, capsys):
    text = _help(capsys, "info")
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    keys = set(data) | {key for device in data["devices"] for key in device}
    for key in keys:
        assert re.search(rf"^\s+{key}\s", text, re.MULTILINE), key


def test_conformance_help_documents_every_json_key(capsys):
    text = _help(capsys, "conformance")
    for key in ("check", "backend", "rule", "spec", "expected", "observed", "outcome"):
        assert re.search(rf"^\s+{key}\s", text, re.MULTILINE), key


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert acl_mem.__version__ in capsys.readouterr().out


# -- errors: exit status, a message, no traceback ----------------------------------------------


def test_info_with_a_bad_acl_mem_backend_exits_one():
    """In a fresh process (in this one a backend may be chosen already, and the variable is
    read only when one is chosen)."""
    proc = _cli("info", ACL_MEM_BACKEND="bogus")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("acl-mem: ") and "Traceback" not in proc.stderr


@pytest.mark.parametrize("extra", [["--json", "report.json"], ["-k", "malloc"], ["-v"],
                                   ["--backend", "fake"]])
def test_differential_rejects_options_it_does_not_use(capsys, extra):
    with pytest.raises(SystemExit) as e:
        main(["conformance", "--differential", *extra])
    assert e.value.code == 2
    capsys.readouterr()


@pytest.mark.parametrize("examples", ["0", "-3", "many"])
def test_examples_must_be_positive(capsys, examples):
    with pytest.raises(SystemExit) as e:
        main(["conformance", "--differential", "--examples", examples])
    assert e.value.code == 2
    capsys.readouterr()


@pytest.mark.parametrize("where", ["missing/report.json", "."])
def test_conformance_json_to_an_unusable_path_exits_two_before_running(capsys, tmp_path, where):
    target = tmp_path / where
    assert main(["conformance", "--json", str(target)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("acl-mem conformance: ")
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("target", ["/dev/full", "fifo"])
def test_conformance_json_that_cannot_be_written_exits_non_zero(capsys, tmp_path, target):
    """A report path that passes the early check but cannot take the report (a full device,
    a FIFO nobody reads): the checks run, then the status is non-zero, nothing hangs."""
    if target == "fifo":
        target = str(tmp_path / "report.json")
        os.mkfifo(target)
    status = main(["conformance", "--backend", "fake", "--json", target, "-k",
                   "malloc and zero"])
    err = capsys.readouterr().err
    assert status == 2
    assert "could not write the JSON report" in err


@pytest.mark.skipif(native_is_installed(), reason="libascendcl.so is installed here")
def test_differential_without_native_lists_every_path_tried(tmp_path, monkeypatch):
    """The message names every place the loader looked, after "Tried:"."""
    env = clean_env(ASCEND_HOME_PATH=str(tmp_path))
    proc = _cli("conformance", "--differential", ASCEND_HOME_PATH=str(tmp_path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    tried = proc.stderr.split("Tried:", 1)[1].strip().splitlines()
    for variable in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH"):
        if variable in env:
            monkeypatch.setenv(variable, env[variable])
        else:
            monkeypatch.delenv(variable, raising=False)
    expected = [os.path.join(directory, "libascendcl.so") for directory, _ in candidate_dirs()]
    assert expected
    assert str(tmp_path) in expected[0]
    for path in expected:
        assert any(line.strip().startswith(path) for line in tried), path


class _NoDeviceFake(EngineFake):
    """A broken "native" backend: aclrtSetDevice(0) fails, the first call of every
    sequence (so the divergence needs no shrinking)."""

    name = "native"

    def aclrtSetDevice(self, deviceId):
        return 107001


class _BrokenProvider:
    subprocess_prelude = ""

    def load(self):
        return _NoDeviceFake(acl_mem.fake.profile(), private=True), "a broken stand-in"

    def before_test(self):
        return None

    def after_test(self):
        return None


def test_differential_reports_a_divergence_with_exit_one(capsys, tmp_path, monkeypatch):
    """A backend that breaks a rule: exit status 1, the diverging call and the next step
    on stdout; Hypothesis's storage in the cache directory, not the current one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    previous = native_provider()
    set_native_provider(_BrokenProvider())
    try:
        assert main(["conformance", "--differential", "--examples", "5"]) == 1
    finally:
        set_native_provider(previous)
    out = capsys.readouterr().out
    assert out.startswith("DIVERGENCE: ")
    assert "aclrtSetDevice" in out
    assert os.listdir(tmp_path) == ["cache"]


# -- run: a pyACL program with acl_mem.pyacl as acl (details in test_pyacl.py) ---------------------


def test_run_help_is_plain_text(capsys):
    text = _help(capsys, "run")
    assert text.startswith("usage: acl-mem run")
    assert not _MARKUP.search(text), _MARKUP.search(text)
    assert "--force" in text and "--backend" in text
    assert "exit status" in text


def test_run_is_listed_in_the_main_help(capsys):
    assert re.search(r"^\s+run\s", _help(capsys), re.MULTILINE)


def test_run_runs_a_pyacl_script_with_its_arguments(tmp_path):
    """`acl-mem run script.py args`: acl is acl_mem.pyacl, the exit status is the script's."""
    script = tmp_path / "program.py"
    script.write_text("import sys\nimport acl\n"
                      "ptr, ret = acl.rt.malloc(64, 0)\n"
                      "print(acl.rt.set_device(0), sys.argv[1:])\n"
                      "sys.exit(int(sys.argv[1]))\n")
    proc = _cli("run", str(script), "7", "--json", ACL_MEM_BACKEND="fake")
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout.strip() == "0 ['7', '--json']"


def test_run_without_a_script_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run"])
    assert e.value.code == 2
    assert "script" in capsys.readouterr().err


def test_run_of_a_missing_script_exits_two(capsys, tmp_path):
    assert main(["run", str(tmp_path / "missing.py")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("acl-mem run: ")
    assert "Traceback" not in err


def test_run_refuses_to_shadow_a_real_acl(tmp_path):
    """A real acl importable: exit 2 and a message naming it; --force runs the script."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "acl.py").write_text("")
    script = tmp_path / "program.py"
    script.write_text("import acl\nprint(acl.__name__)\n")
    path = f"{site}{os.pathsep}{ROOT}"
    refused = _cli("run", str(script), ACL_MEM_BACKEND="fake", PYTHONPATH=path)
    assert refused.returncode == 2
    assert str(site / "acl.py") in refused.stderr and refused.stdout == ""
    forced = _cli("run", "--force", str(script), ACL_MEM_BACKEND="fake", PYTHONPATH=path)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.strip() == "acl_mem.pyacl"
