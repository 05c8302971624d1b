"""A drop-in libascendcl.so (and the toolkit's other libraries) made from acl_mem's fake.

``acl-mem shim build`` / ``acl-mem shim --print-libdir`` (or ``python -m acl_mem.shim``)
compile the libraries for the running interpreter, cached per user (``_build``). A C or
C++ program linked against them, or loading them with dlopen/ctypes, runs on the fake
device with the rules and error codes acl_mem has from Python:

- ``surface.json`` (generated from the real headers by stubs/gen_shim_surface.py): every
  exported function with its exact prototype; ``_csource`` turns it into the C of the
  front libraries (supported calls forward to the engine, the rest fail loudly);
- ``_engine`` / ``_engine_runtime``: the cffi embedding library that starts Python once
  (or joins the process's interpreter) and routes each call into the active fake;
- ``_marshal`` / ``_decls``: C arguments to the Backend protocol, shared with the test
  suite's stand-in libascendcl (tests/stand_in.py);
- ``headers.json`` (same generator) / ``_headers``: the real headers' declarations as
  data (enums, structs, typedefs, macros, error codes), written back as the prefix's
  headers;
- ``_build`` / ``_cache`` / ``_prefix``: the build, the checks that make its cache safe
  to load code from, and the headers and set_env.sh that make it a CANN-like prefix.

Importing this package does nothing: each part loads on use.
"""

from __future__ import annotations
