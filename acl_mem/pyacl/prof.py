"""``acl.prof``: pyACL's profiling calls. acl_mem covers memory only: every name exists
and raises :class:`~acl_mem.pyacl.UnsupportedError`."""

from . import _common

_common.define_stubs(globals(), "acl.prof", """
    create_config destroy_config init finalize start stop model_subscribe model_un_subscribe
    model_unsubscribe create_subscribe_config destroy_subscribe_config get_op_desc_size
    get_op_num get_op_type get_op_name get_op_type_v2 get_op_name_v2 get_op_start get_op_end
    get_op_duration get_model_id get_op_type_len get_op_name_len get_step_timestamp
    destroy_step_info create_step_info create_stamp destroy_stamp push pop range_start
    range_stop set_stamp_trace_message mark mark_ex set_config
""", _common.MEMORY_ONLY.format(what="profiling"))
