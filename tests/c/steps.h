/* The test programs' steps: each prints "ok <step>", or "FAIL <step>: ..." and makes
 * main return 1 (tests/test_shim*.py read the output). */
#ifndef ACL_MEM_TEST_STEPS_H
#define ACL_MEM_TEST_STEPS_H
#include <stdio.h>
#include "acl/acl.h"

/* A call that must return ``expected``; on failure the thread's aclGetRecentErrMsg too. */
#define ACL_CHECK(step, expr, expected)                                          \
    do {                                                                         \
        aclError ret_ = (expr);                                                  \
        if (ret_ != (expected)) {                                                \
            const char *msg_ = aclGetRecentErrMsg();                             \
            printf("FAIL %s: %s returned %d, expected %d (%s)\n", step, #expr,   \
                   (int)ret_, (int)(expected), msg_ ? msg_ : "no message");      \
            return 1;                                                            \
        }                                                                        \
        printf("ok %s\n", step);                                                 \
    } while (0)

/* A condition that must hold. */
#define EXPECT(step, cond)                                                       \
    do {                                                                         \
        if (!(cond)) {                                                           \
            printf("FAIL %s: %s\n", step, #cond);                                \
            return 1;                                                            \
        }                                                                        \
        printf("ok %s\n", step);                                                 \
    } while (0)

#endif
