/* Multi-device, multi-thread use in the style of the public Ascend samples' thread
 * pools: 4 pthreads, each with its own current device (0 or 1, set in the thread),
 * allocating, filling, copying device to device and back, and freeing, concurrently,
 * round after round; every byte read back is checked. A barrier makes the threads start
 * together; at the end each checks that aclGetRecentErrMsg reports its own failed call. tests/test_shim_programs.py runs it and checks the output and exit status.
 *
 * Output: "thread <n> device <d> ok" per thread, then "done"; a failure prints
 * "FAIL thread <n> ..." and exits with status 1. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "acl/acl.h"

#define THREADS 4
#define ROUNDS 25
/* 1 MiB: copies this large move their bytes with no engine lock held, so the two
 * threads of one device copy at the same time. */
#define SIZE (1024 * 1024)

typedef struct {
    int index;
    int32_t deviceId;
    int failed;
    char why[256];
} ThreadArgs;

static pthread_barrier_t startTogether;

#define THREAD_CHECK(args, expr)                                                 \
    do {                                                                         \
        aclError ret_ = (expr);                                                  \
        if (ret_ != ACL_SUCCESS) {                                               \
            snprintf((args)->why, sizeof (args)->why, "%s returned %d", #expr,   \
                     (int)ret_);                                                 \
            (args)->failed = 1;                                                  \
            return NULL;                                                         \
        }                                                                        \
    } while (0)

static void *Worker(void *arg)
{
    ThreadArgs *args = (ThreadArgs *)arg;
    unsigned char *hostIn = (unsigned char *)malloc(SIZE);
    unsigned char *hostOut = (unsigned char *)malloc(SIZE);
    int32_t current = -1;
    int round;
    size_t i;

    pthread_barrier_wait(&startTogether);
    THREAD_CHECK(args, aclrtSetDevice(args->deviceId));
    THREAD_CHECK(args, aclrtGetDevice(&current));
    if (current != args->deviceId) {
        snprintf(args->why, sizeof args->why, "current device %d, expected %d", (int)current,
                 (int)args->deviceId);
        args->failed = 1;
        return NULL;
    }
    for (round = 0; round < ROUNDS; ++round) {
        void *devA = NULL;
        void *devB = NULL;
        unsigned char seed = (unsigned char)(args->index * 31 + round);
        for (i = 0; i < SIZE; ++i)
            hostIn[i] = (unsigned char)(seed + i * 13);
        memset(hostOut, 0, SIZE);
        THREAD_CHECK(args, aclrtMalloc(&devA, SIZE, ACL_MEM_MALLOC_HUGE_FIRST));
        THREAD_CHECK(args, aclrtMalloc(&devB, SIZE, ACL_MEM_MALLOC_NORMAL_ONLY));
        THREAD_CHECK(args, aclrtMemcpy(devA, SIZE, hostIn, SIZE, ACL_MEMCPY_HOST_TO_DEVICE));
        THREAD_CHECK(args, aclrtMemcpy(devB, SIZE, devA, SIZE, ACL_MEMCPY_DEVICE_TO_DEVICE));
        THREAD_CHECK(args, aclrtMemcpy(hostOut, SIZE, devB, SIZE, ACL_MEMCPY_DEVICE_TO_HOST));
        if (memcmp(hostIn, hostOut, SIZE) != 0) {
            snprintf(args->why, sizeof args->why, "round %d: the bytes read back differ", round);
            args->failed = 1;
            return NULL;
        }
        THREAD_CHECK(args, aclrtFree(devA));
        THREAD_CHECK(args, aclrtFree(devB));
    }
    /* Each thread's error text is its own: a bad free of an address only it uses. */
    {
        char expected[64];
        const char *msg = NULL;
        void *bogus = (void *)(uintptr_t)(0x1000u * (unsigned)(args->index + 1));
        if (aclrtFree(bogus) == ACL_SUCCESS) {
            snprintf(args->why, sizeof args->why, "aclrtFree(%p) succeeded", bogus);
            args->failed = 1;
            return NULL;
        }
        pthread_barrier_wait(&startTogether);  /* every thread has failed by now */
        msg = aclGetRecentErrMsg();
        snprintf(expected, sizeof expected, "aclrtFree(devPtr=%p)", bogus);
        if (msg == NULL || strstr(msg, expected) == NULL) {
            snprintf(args->why, sizeof args->why, "recent error %s, expected %s",
                     msg ? msg : "NULL", expected);
            args->failed = 1;
            return NULL;
        }
    }
    THREAD_CHECK(args, aclrtResetDevice(args->deviceId));
    free(hostIn);
    free(hostOut);
    return NULL;
}

int main(void)
{
    pthread_t threads[THREADS];
    ThreadArgs args[THREADS];
    uint32_t count = 0;
    int i;
    int failed = 0;

    if (aclInit(NULL) != ACL_SUCCESS || aclrtGetDeviceCount(&count) != ACL_SUCCESS
            || count < 2) {
        printf("FAIL setup: aclInit or aclrtGetDeviceCount (count %u)\n", count);
        return 1;
    }
    pthread_barrier_init(&startTogether, NULL, THREADS);
    for (i = 0; i < THREADS; ++i) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].index = i;
        args[i].deviceId = i % 2;
        if (pthread_create(&threads[i], NULL, Worker, &args[i]) != 0) {
            printf("FAIL thread %d: pthread_create\n", i);
            return 1;
        }
    }
    for (i = 0; i < THREADS; ++i) {
        pthread_join(threads[i], NULL);
        if (args[i].failed) {
            printf("FAIL thread %d device %d: %s\n", i, (int)args[i].deviceId, args[i].why);
            failed = 1;
        } else {
            printf("thread %d device %d ok\n", i, (int)args[i].deviceId);
        }
    }
    pthread_barrier_destroy(&startTogether);
    if (failed)
        return 1;
    if (aclFinalize() != ACL_SUCCESS) {
        printf("FAIL finalize\n");
        return 1;
    }
    printf("done\n");
    return 0;
}
