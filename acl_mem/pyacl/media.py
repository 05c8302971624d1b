"""``acl.media``: pyACL's media (DVPP V1) module; acl_mem.pyacl implements its memory calls.

``acl.media.dvpp_malloc`` / ``dvpp_free`` are acldvppMalloc / acldvppFree
(docs/runtime-model.md §3.8); every other name of pyACL's ``acl.media`` exists and raises
:class:`~acl_mem.pyacl.UnsupportedError`.
"""

from .. import raw as _raw
from . import _common

_MODULE = "acl.media"


def dvpp_malloc(size: int, /) -> tuple[int, int]:
    """``dev_ptr, ret = acl.media.dvpp_malloc(size)``: acldvppMalloc."""
    nbytes = _common.as_ulong(size, "acl.media.dvpp_malloc", "size")
    return _common.with_code(lambda: _raw.acldvppMalloc(nbytes), 0)


def dvpp_free(dev_ptr: int, /) -> int:
    """``ret = acl.media.dvpp_free(dev_ptr)``: acldvppFree."""
    ptr = _common.as_ulong(dev_ptr, "acl.media.dvpp_free", "dev_ptr")
    return _common.code_of(lambda: _raw.acldvppFree(ptr))


_common.define_stubs(globals(), _MODULE, """
    dvpp_malloc_with_cfg dvpp_create_channel dvpp_destroy_channel dvpp_create_channel_desc
    dvpp_destroy_channel_desc dvpp_set_channel_desc_param dvpp_get_channel_desc_param
    dvpp_get_channel_desc_channel_id dvpp_create_pic_desc dvpp_destroy_pic_desc
    dvpp_set_pic_desc_data dvpp_set_pic_desc_size dvpp_set_pic_desc_format
    dvpp_set_pic_desc_width dvpp_set_pic_desc_height dvpp_set_pic_desc_width_stride
    dvpp_set_pic_desc_height_stride dvpp_set_pic_desc_ret_code dvpp_get_pic_desc_data
    dvpp_get_pic_desc_size dvpp_get_pic_desc_format dvpp_get_pic_desc_width
    dvpp_get_pic_desc_height dvpp_get_pic_desc_width_stride dvpp_get_pic_desc_height_stride
    dvpp_get_pic_desc_ret_code dvpp_create_stream_desc dvpp_destroy_stream_desc
    dvpp_set_stream_desc_data dvpp_set_stream_desc_size dvpp_set_stream_desc_format
    dvpp_set_stream_desc_timestamp dvpp_set_stream_desc_ret_code dvpp_set_stream_desc_eos
    dvpp_get_stream_desc_data dvpp_get_stream_desc_size dvpp_get_stream_desc_format
    dvpp_get_stream_desc_timestamp dvpp_get_stream_desc_ret_code dvpp_get_stream_desc_eos
    dvpp_create_batch_pic_desc dvpp_destroy_batch_pic_desc dvpp_get_pic_desc
    dvpp_vpc_resize_async dvpp_vpc_crop_async dvpp_vpc_batch_crop_async
    dvpp_vpc_crop_and_paste_async dvpp_vpc_batch_crop_and_paste_async
    dvpp_vpc_crop_resize_async dvpp_vpc_batch_crop_resize_async
    dvpp_vpc_crop_resize_paste_async dvpp_vpc_batch_crop_resize_paste_async
    dvpp_vpc_batch_crop_resize_make_border_async dvpp_create_roi_config dvpp_destroy_roi_config
    dvpp_set_roi_config dvpp_set_roi_config_left dvpp_set_roi_config_right
    dvpp_set_roi_config_top dvpp_set_roi_config_bottom dvpp_create_resize_config
    dvpp_destroy_resize_config dvpp_set_resize_config_interpolation
    dvpp_get_resize_config_interpolation dvpp_jpeg_decode_async dvpp_jpeg_get_image_info
    dvpp_jpeg_get_image_info_v2 dvpp_jpeg_predict_dec_size dvpp_jpeg_encode_async
    dvpp_jpeg_predict_enc_size dvpp_create_jpege_config dvpp_destroy_jpege_config
    dvpp_set_jpege_config_level dvpp_get_jpege_config_level vdec_create_channel
    vdec_destroy_channel vdec_create_channel_desc vdec_destroy_channel_desc
    vdec_set_channel_desc_channel_id vdec_set_channel_desc_thread_id
    vdec_set_channel_desc_callback vdec_set_channel_desc_entype
    vdec_set_channel_desc_out_pic_format vdec_set_channel_desc_out_pic_width
    vdec_set_channel_desc_out_pic_height vdec_set_channel_desc_ref_frame_num
    vdec_get_channel_desc_channel_id vdec_get_channel_desc_thread_id
    vdec_get_channel_desc_callback vdec_get_channel_desc_entype
    vdec_get_channel_desc_out_pic_format vdec_get_channel_desc_out_pic_width
    vdec_get_channel_desc_out_pic_height vdec_get_channel_desc_ref_frame_num vdec_send_frame
    vdec_send_skipped_frame vdec_create_frame_config vdec_destroy_frame_config
    vdec_get_channel_desc_out_mode vdec_set_channel_desc_out_mode
    vdec_get_channel_desc_bit_depth vdec_set_channel_desc_bit_depth
    vdec_set_channel_desc_param vdec_get_channel_desc_param venc_create_channel
    venc_destroy_channel venc_send_frame venc_create_channel_desc venc_destroy_channel_desc
    venc_set_channel_desc_thread_id venc_set_channel_desc_callback venc_set_channel_desc_entype
    venc_set_channel_desc_pic_format venc_set_channel_desc_pic_width
    venc_set_channel_desc_pic_height venc_set_channel_desc_key_frame_interval
    venc_get_channel_desc_channel_id venc_get_channel_desc_thread_id
    venc_get_channel_desc_callback venc_get_channel_desc_entype venc_get_channel_desc_pic_format
    venc_get_channel_desc_pic_width venc_get_channel_desc_pic_height
    venc_get_channel_desc_key_frame_interval venc_create_frame_config venc_destroy_frame_config
    venc_set_frame_config_force_i_frame venc_set_frame_config_eos
    venc_get_frame_config_force_i_frame venc_get_frame_config_eos venc_get_channel_desc_buf_addr
    venc_set_channel_desc_buf_addr venc_get_channel_desc_buf_size venc_set_channel_desc_buf_size
    venc_get_channel_desc_max_bit_rate venc_set_channel_desc_max_bit_rate
    venc_get_channel_desc_rc_mode venc_set_channel_desc_rc_mode venc_get_channel_desc_src_rate
    venc_set_channel_desc_src_rate venc_get_channel_desc_param venc_set_channel_desc_param
    dvpp_create_border_config dvpp_destroy_border_config dvpp_set_border_config_value
    dvpp_set_border_config_border_type dvpp_set_border_config_top dvpp_set_border_config_bottom
    dvpp_set_border_config_left dvpp_set_border_config_right dvpp_get_border_config_value
    dvpp_get_border_config_border_type dvpp_get_border_config_top dvpp_get_border_config_bottom
    dvpp_get_border_config_left dvpp_get_border_config_right dvpp_vpc_convert_color_async
    dvpp_vpc_pyr_down_async dvpp_set_channel_desc_mode dvpp_png_decode_async
    dvpp_png_get_image_info dvpp_png_predict_dec_size dvpp_create_hist dvpp_destroy_hist
    dvpp_get_hist_dims dvpp_get_hist_data dvpp_get_hist_ret_code dvpp_clear_hist
    dvpp_create_lut_map dvpp_destroy_lut_map dvpp_get_lut_map_dims dvpp_get_lut_map_data
    dvpp_vpc_equalize_hist_async dvpp_vpc_make_border_async dvpp_vpc_calc_hist_async
""", _common.MEMORY_ONLY.format(what="media processing (DVPP channels, VPC, JPEG, PNG and "
                                "video coding)"))
