"""``acl.blas``: pyACL's matrix calls. acl_mem covers memory only: every name exists and
raises :class:`~acl_mem.pyacl.UnsupportedError`."""

from . import _common

_common.define_stubs(globals(), "acl.blas", """
    gemv_ex create_handle_for_gemv_ex hgemv create_handle_for_hgemv s8gemv
    create_handle_for_s8gemv gemm_ex create_handle_for_gemm_ex hgemm create_handle_for_hgemm
    s8gemm create_handle_for_s8gemm
""", _common.MEMORY_ONLY.format(what="matrix operators (CBLAS)"))
