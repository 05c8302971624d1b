/* What the generated stubs of unsupported functions (unsupported.c) call. */
#ifndef ACL_MEM_UNSUPPORTED_H
#define ACL_MEM_UNSUPPORTED_H

/* `name` is not modelled: say so on stderr once per function (or abort, with
 * ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED=1) and leave the text for aclGetRecentErrMsg.
 * `result` says what the call returns. */
__attribute__((visibility("hidden"))) void am_unsupported(const char *name, const char *result);

#endif
