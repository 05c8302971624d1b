/* A companion library (libacl_cblas.so, libacl_op_compiler.so, libacl_tdt_channel.so,
 * libacl_tdt_queue.so, libacl_rt_impl.so): some programs link it beside libascendcl.so.
 * It holds no function of its own here; it names libascendcl.so as a dependency, whose
 * unsupported calls answer for the functions it has on an Atlas host. */
typedef int am_companion_library;
