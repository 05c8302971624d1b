"""``acl.op``: pyACL's single-operator calls. acl_mem covers memory only: every name
exists and raises :class:`~acl_mem.pyacl.UnsupportedError`."""

from . import _common

_common.define_stubs(globals(), "acl.op", """
    set_model_dir load execute execute_with_handle cast create_handle_for_cast create_attr
    destroy_attr set_attr_bool set_attr_int set_attr_float set_attr_string set_attr_list_bool
    set_attr_list_int set_attr_list_float set_attr_list_string set_attr_list_list_int
    create_handle destroy_handle start_dump_args stop_dump_args register_compile_func
    unregister_compile_func create_kernel set_kernel_args set_kernel_workspace_sizes
    update_params execute_v2 infer_shape set_attr_data_type set_attr_list_data_type
    set_max_op_queue_num
""", _common.MEMORY_ONLY.format(what="operators"))
