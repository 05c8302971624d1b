"""The drop-in libascendcl.so for C and C++ programs: acl_mem's fake runtime, the C library
of acl_mem/_fake/src built when acl_mem is installed, and the prefix around it.

``acl-mem shim`` (or ``python -m acl_mem.shim``, ``_cli``) prints where the libraries,
the headers and the prefix are, and runs programs on them. The installed prefix is
acl_mem/_fake: ``lib64/`` (the libraries), ``include/`` (the toolkit's headers and the
control API's), ``set_env.sh``. What the headers and the exports are made from stays
here as data, for stubs/gen_engine_api.py and the tests:

- ``surface.json`` (stubs/gen_shim_surface.py, from the real headers): every exported
  function with its exact prototype and library (``_surface``);
- ``headers.json`` (same generator) and ``_headers``: the real headers' declarations
  (enums, structs, typedefs, macros, error codes), written back as the prefix's headers
  by ``_prefix`` with its scripts;
- ``acl_rt_exports.txt``: the functions libacl_rt.so exports.

Importing this package does nothing: each part loads on use.
"""

from __future__ import annotations
