"""``acl.himpi``: pyACL's media V2 (hi_mpi) module; acl_mem.pyacl implements its memory calls.

``acl.himpi.dvpp_malloc`` / ``dvpp_free`` are hi_mpi_dvpp_malloc / hi_mpi_dvpp_free
(docs/runtime-model.md §3.9). pyACL returns their ``hi_s32`` result as an unsigned 32-bit
int, and so does acl_mem.pyacl. Every other name of pyACL's ``acl.himpi`` exists and
raises :class:`~acl_mem.pyacl.UnsupportedError`.
"""

from .. import raw as _raw
from . import _common

_MODULE = "acl.himpi"


def dvpp_malloc(dev_id: int, size: int, /) -> tuple[int, int]:
    """``dev_ptr, ret = acl.himpi.dvpp_malloc(dev_id, size)``: hi_mpi_dvpp_malloc."""
    call = "acl.himpi.dvpp_malloc"
    dev = _common.as_int(dev_id, call, "dev_id") & 0xFFFFFFFF
    nbytes = _common.as_ulong(size, call, "size")
    ptr, ret = _common.with_code(lambda: _raw.hi_mpi_dvpp_malloc(dev, nbytes), 0)
    return ptr, ret & 0xFFFFFFFF


def dvpp_free(dev_ptr: int, /) -> int:
    """``ret = acl.himpi.dvpp_free(dev_ptr)``: hi_mpi_dvpp_free."""
    ptr = _common.as_ulong(dev_ptr, "acl.himpi.dvpp_free", "dev_ptr")
    return _common.code_of(lambda: _raw.hi_mpi_dvpp_free(ptr)) & 0xFFFFFFFF


_common.define_stubs(globals(), _MODULE, """
    sys_init sys_exit dvpp_get_version sys_create_epoll sys_ctl_epoll sys_wait_epoll
    sys_close_epoll sys_set_chn_csc_matrix sys_get_chn_csc_matrix sys_get_image_align_info
    vdec_create_chn vdec_destroy_chn vdec_get_chn_attr vdec_set_chn_attr vdec_start_recv_stream
    vdec_stop_recv_stream vdec_query_status vdec_reset_chn vdec_set_chn_param vdec_get_chn_param
    vdec_set_protocol_param vdec_get_protocol_param vdec_send_stream vdec_get_frame
    vdec_release_frame vdec_get_fd vdec_close_fd vdec_get_pic_buf_size vdec_get_tmv_buf_size
    dvpp_get_image_info vdec_set_jpegd_precision_mode vdec_get_jpegd_output_info
    vdec_set_display_mode vdec_get_display_mode venc_create_chn venc_destroy_chn venc_start_chn
    venc_stop_chn venc_query_status venc_get_stream venc_release_stream venc_send_frame
    venc_send_frame_ex venc_set_mod_param venc_get_mod_param venc_request_idr venc_get_fd
    venc_close_fd venc_set_jpeg_param venc_get_jpeg_param venc_set_chn_param venc_get_chn_param
    venc_set_chn_attr venc_get_chn_attr venc_set_scene_mode venc_set_rc_param venc_get_rc_param
    venc_set_jpeg_huffman_param venc_get_jpeg_huffman_param venc_compact_jpeg_tables
    venc_send_jpege_frame venc_get_jpege_predicted_size venc_get_scene_mode venc_set_cu_pred
    venc_get_cu_pred venc_set_h264_vui venc_get_h264_vui venc_set_h265_vui venc_get_h265_vui
    venc_set_intra_refresh venc_get_intra_refresh venc_set_ref_param venc_get_ref_param
    venc_set_roi_attr venc_get_roi_attr venc_set_slice_split venc_get_slice_split
    venc_get_qpmap_stride venc_get_qpmap_size venc_set_streamcopy_param
    venc_get_streamcopy_param vpc_create_chn vpc_destroy_chn vpc_resize vpc_crop
    vpc_crop_resize vpc_crop_resize_paste vpc_convert_color vpc_convert_color_v2
    vpc_convert_color_to_yuv420 vpc_copy_make_border vpc_pyrdown vpc_calc_hist vpc_calc_hist_v2
    vpc_equalize_hist vpc_get_process_result vpc_sys_create_chn vpc_crop_resize_make_border
    vpc_batch_crop_resize_paste vpc_batch_crop_resize_make_border vpc_crop_resize_resize_paste
    vpc_dilate vpc_draw_cover vpc_draw_line vpc_draw_mosaic vpc_draw_osd vpc_blur
    vpc_gaussian_blur vpc_erode vpc_filter2d vpc_flip vpc_get_affine_lut vpc_get_lut_mem_size
    vpc_get_affine_transform vpc_get_perspective_lut vpc_get_remap_lut vpc_get_rotation_matrix
    vpc_lut_remap vpc_set_chn_workspace vpc_median_blur vpc_rotate vpc_warp_affine
    vpc_set_chn_opt_attr pngd_create_chn pngd_destroy_chn pngd_send_stream pngd_get_image_data
    png_get_image_info
""", _common.MEMORY_ONLY.format(what="media processing (hi_mpi system, VPC, video and image "
                                "coding)"))
