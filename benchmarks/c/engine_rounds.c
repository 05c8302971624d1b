/* Rounds on acl_mem's C library against libc in the same run (benchmarks/engine_c_bench.py
 * compiles and runs it): a 4 KiB aclrtMalloc+aclrtFree pair vs malloc+free, and a 4 KiB
 * malloc + H2D + D2H + free round vs malloc + 2 memmove + free. Prints nanoseconds per
 * round, the best of several repeats. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "acl/acl.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

#define ROUNDS 200000
#define REPEATS 7
static volatile char sink;

int main(void)
{
    static char host[4096], back[4096];
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    memset(host, 1, sizeof host);
    if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0)
        return 1;
    for (int r = 0; r < REPEATS; r++) {
        double t0 = now();
        for (int i = 0; i < ROUNDS; i++) {
            char *p = malloc(4096);
            sink = p[0];
            free(p);
        }
        double t1 = now();
        for (int i = 0; i < ROUNDS; i++) {
            void *d = NULL;
            aclrtMalloc(&d, 4096, ACL_MEM_MALLOC_HUGE_FIRST);
            aclrtFree(d);
        }
        double t2 = now();
        for (int i = 0; i < ROUNDS; i++) {
            char *p = malloc(4096);
            memmove(p, host, 4096);
            memmove(back, p, 4096);
            sink = back[i & 4095];
            free(p);
        }
        double t3 = now();
        for (int i = 0; i < ROUNDS; i++) {
            void *d = NULL;
            aclrtMalloc(&d, 4096, ACL_MEM_MALLOC_HUGE_FIRST);
            aclrtMemcpy(d, 4096, host, 4096, ACL_MEMCPY_HOST_TO_DEVICE);
            aclrtMemcpy(back, 4096, d, 4096, ACL_MEMCPY_DEVICE_TO_HOST);
            aclrtFree(d);
        }
        double t4 = now();
        double spans[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
        for (int k = 0; k < 4; k++)
            if (spans[k] / ROUNDS < best[k])
                best[k] = spans[k] / ROUNDS;
    }
    printf("libc_pair %.1f\nacl_pair %.1f\nlibc_round %.1f\nacl_round %.1f\n", best[0],
           best[1], best[2], best[3]);
    aclrtResetDevice(0);
    aclFinalize();
    return 0;
}
