"""The stand-in libascendcl stays in step with the cdef it is generated from."""

import subprocess
import sys
from pathlib import Path

import stand_in

ROOT = Path(__file__).resolve().parent.parent


def test_generated_stand_in_source_is_current():
    """stubs/stand_in_ascendcl.c must be regenerated whenever acl_mem/_native/cdef.py changes."""
    done = subprocess.run([sys.executable, str(ROOT / "stubs" / "gen_stand_in.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_stand_in_exports_every_bound_function():
    """Each function in the cdef (as cffi's own C parser reads it) is in the table."""
    from acl_mem._native.loader import make_ffi

    ffi = make_ffi()
    declared = {key.split(" ", 1)[1] for key in ffi._parser._declarations
                if key.startswith("function ")}
    table = set(stand_in._generator().function_names())
    assert declared == table
    assert {"aclrtMalloc", "acldvppMalloc", "hi_mpi_dvpp_malloc"} <= table
