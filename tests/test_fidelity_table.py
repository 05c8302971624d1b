"""docs/fidelity.md lists every open-question choice the tests pin down."""

import re
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "docs" / "fidelity.md"


def _rows() -> list[str]:
    return [line for line in TABLE.read_text().splitlines() if re.match(r"\|\s*\d+\s*\|", line)]


def test_every_open_question_marker_has_a_row():
    """A test marked open_question(n) pins a fake choice; the table must document it."""
    root = TABLE.parent.parent
    questions = {
        int(n)
        for folder in (root / "tests", root / "acl_mem" / "conformance" / "checks")
        for path in folder.glob("test_*.py")
        for n in re.findall(r"mark\.open_question\((\d+)\)", path.read_text())
    }
    documented = {int(n) for row in _rows() for n in re.findall(r"§8\.(\d+)", row)}
    assert questions, "no test carries an open_question marker"
    assert questions <= documented, f"undocumented: {sorted(questions - documented)}"


def test_every_row_is_unconfirmed_or_says_how():
    rows = _rows()
    assert len(rows) >= 20
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == 6, row
        assert cells[5] in ("no", "yes"), row
        releases = cells[3]
        assert releases.startswith("all") or re.match(r"\d+\.\d+\.\d+", releases), row


def _function_rows() -> dict[str, list[str]]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        match = re.match(r"\|\s*`(\w+)`\s*\|", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in line.strip("|").split("|")]
    return rows


def _backend_method(function: str) -> str:
    return "soc_name" if function == "aclrtGetSocName" else function


def test_every_bound_function_is_modelled_and_listed():
    """A C function the native backend binds must be exported by acl_mem's library (the
    fake) and be in the table."""
    import ctypes

    from acl_mem._fake.library import library_dir
    from acl_mem._native.backend import NativeBackend
    from acl_mem._native.loader import make_ffi

    ffi = make_ffi()
    bound = {key.split(" ", 1)[1] for key in ffi._parser._declarations
             if key.startswith("function ")}
    rows = _function_rows()
    assert set(rows) == bound
    libraries = [ctypes.CDLL(str(library_dir() / name)) for name in
                 ("libascendcl.so", "libacl_dvpp.so", "libacl_dvpp_mpi.so")]
    for function in bound:
        assert any(hasattr(library, function) for library in libraries), function
        assert callable(getattr(NativeBackend, _backend_method(function), None)), function
        assert rows[function][2:4] == ["yes", "yes"], function
        assert rows[function][5] in ("no", "yes"), function


def test_every_modelled_function_is_bound_and_listed():
    """Whatever C function the fake answers is declared for native and in the table."""
    from acl_mem._fake.engine_fake import EngineFake

    modelled = {name for name in dir(EngineFake)
                if re.match(r"(acl|hi_mpi_)\w+$", name) and callable(getattr(EngineFake, name))}
    assert modelled | {"aclrtGetSocName"} == set(_function_rows())
