"""A drop-in libascendcl.so for C and C++ programs, made from acl_mem's fake (in progress).

This package holds the C-arguments -> Backend marshalling (``_marshal``) and the native
cdef's prototypes (``_decls``), shared with the test suite's stand-in libascendcl.
"""

from __future__ import annotations
