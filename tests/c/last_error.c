/* The error getters report the failure the program asks about: aclrtGetLastError and
 * aclrtPeekAtLastError return the thread's last runtime failure, and neither they nor a
 * refusal of theirs change it or the text of aclGetRecentErrMsg.
 * tests/test_shim_programs.py runs it.
 *
 * Output: "ok <step>", "recent <text>" lines, then "done"; a failed check prints
 * "FAIL <step>: ..." and exits with status 1. */
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"
#include "steps.h"

int main(void)
{
    int32_t deviceId = -1;
    const char *before = NULL;
    const char *after = NULL;

    ACL_CHECK("init", aclInit(NULL), ACL_SUCCESS);
    EXPECT("nothing failed yet", aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) == ACL_SUCCESS);
    /* No aclrtSetDevice: the runtime fails with 107002. */
    ACL_CHECK("get device without context", aclrtGetDevice(&deviceId),
              ACL_ERROR_RT_CONTEXT_NULL);
    before = aclGetRecentErrMsg();
    EXPECT("recent names the failed call", before != NULL && strstr(before, "aclrtGetDevice"));
    printf("recent %s\n", before);
    EXPECT("peek", aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) == ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT("peek keeps it", aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) ==
           ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT("bad level", aclrtGetLastError((aclrtLastErrLevel)1) == ACL_ERROR_INVALID_PARAM);
    EXPECT("bad level peek", aclrtPeekAtLastError((aclrtLastErrLevel)7) ==
           ACL_ERROR_INVALID_PARAM);
    after = aclGetRecentErrMsg();
    EXPECT("recent still names the failed call", after != NULL &&
           strstr(after, "aclrtGetDevice") != NULL && strstr(after, "LastError") == NULL);
    printf("recent %s\n", after);
    EXPECT("get", aclrtGetLastError(ACL_RT_THREAD_LEVEL) == ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT("got once", aclrtGetLastError(ACL_RT_THREAD_LEVEL) == ACL_SUCCESS);
    /* A refusal of the ACL layer (NULL output) is no runtime failure. */
    ACL_CHECK("null output", aclrtGetDevice(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT("acl refusals are not kept", aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) ==
           ACL_SUCCESS);
    ACL_CHECK("finalize", aclFinalize(), ACL_SUCCESS);
    printf("done\n");
    return 0;
}
