/* The first calls a program makes on acl_mem's C library (benchmarks/engine_c_bench.py
 * runs it in fresh processes): aclInit + aclrtSetDevice + a 4 KiB aclrtMalloc + aclrtFree,
 * timed from main, and whether a libpython is mapped into the process. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "acl/acl.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(void)
{
    double t0 = now();
    void *d = NULL;
    if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0 ||
        aclrtMalloc(&d, 4096, ACL_MEM_MALLOC_HUGE_FIRST) != 0 || aclrtFree(d) != 0)
        return 1;
    double t1 = now();
    int python = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    while (maps != NULL && fgets(line, sizeof line, maps) != NULL)
        python |= strstr(line, "libpython") != NULL;
    if (maps != NULL)
        fclose(maps);
    printf("first_call_ns %.0f\nlibpython_mapped %d\n", t1 - t0, python);
    return aclFinalize() == 0 ? 0 : 1;
}
