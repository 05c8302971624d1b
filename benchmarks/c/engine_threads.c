/* Threads on acl_mem's C library against libc in the same run (benchmarks/engine_c_bench.py
 * compiles and runs it): 4 KiB malloc + H2D + D2H + free rounds in 1, 2 and 4 threads,
 * each thread on its own device ("separate"), all on device 0 ("same"), and libc's
 * malloc + 2 memmove + free for reference. Prints the throughput of 2 and of 4 threads
 * over 1 (the thread count is perfect scaling, up to the CPUs there are), the best of
 * several repeats. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "acl/acl.h"

#define ROUNDS 200000
#define REPEATS 3

enum mode { SEPARATE, SAME, LIBC };
static enum mode mode;
static volatile char sink;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *work(void *arg)
{
    int id = (int)(long)arg;
    char host[4096], back[4096];
    memset(host, 1, sizeof host);
    if (mode != LIBC && aclrtSetDevice(mode == SAME ? 0 : id) != 0)
        return (void *)1;
    for (int i = 0; i < ROUNDS; i++) {
        if (mode == LIBC) {
            char *p = malloc(4096);
            memmove(p, host, 4096);
            memmove(back, p, 4096);
            free(p);
        } else {
            void *d = NULL;
            aclrtMalloc(&d, 4096, ACL_MEM_MALLOC_HUGE_FIRST);
            aclrtMemcpy(d, 4096, host, 4096, ACL_MEMCPY_HOST_TO_DEVICE);
            aclrtMemcpy(back, 4096, d, 4096, ACL_MEMCPY_DEVICE_TO_HOST);
            aclrtFree(d);
        }
        sink = back[i & 4095];
    }
    if (mode != LIBC)
        aclrtResetDevice(mode == SAME ? 0 : id);
    return NULL;
}

/* Nanoseconds per round per thread with `threads` threads. */
static double run(int threads)
{
    pthread_t ids[4];
    double start = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&ids[i], NULL, work, (void *)(long)i);
    for (int i = 0; i < threads; i++)
        pthread_join(ids[i], NULL);
    return (now() - start) / ROUNDS;
}

int main(void)
{
    static const char *const names[] = {"separate", "same", "libc"};
    if (aclInit(NULL) != 0)
        return 1;
    for (int m = SEPARATE; m <= LIBC; m++) {
        mode = (enum mode)m;
        double best = 0, best4 = 0;
        for (int r = 0; r < REPEATS; r++) {
            double one = run(1), two = run(2), four = run(4);
            if (2 * one / two > best)
                best = 2 * one / two;
            if (4 * one / four > best4)
                best4 = 4 * one / four;
        }
        printf("threads_%s %.2f\n", names[m], best);
        printf("threads4_%s %.2f\n", names[m], best4);
    }
    aclFinalize();
    return 0;
}
