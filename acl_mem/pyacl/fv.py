"""``acl.fv``: pyACL's feature-retrieval calls. acl_mem covers memory only: every name
exists and raises :class:`~acl_mem.pyacl.UnsupportedError`."""

from . import _common

_common.define_stubs(globals(), "acl.fv", """
    create_init_para destory_init_para destroy_init_para set_1n_top_num set_nm_top_num init
    release repo_add repo_del create_feature_info destroy_feature_info create_repo_range
    destroy_repo_range delete modify create_query_table destroy_query_table
    create_search_input destroy_search_input create_search_result destroy_search_result search
""", _common.MEMORY_ONLY.format(what="feature retrieval"))
