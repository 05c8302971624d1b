/* Threads on their own devices allocate, copy and free (the engine's per-arena fast
 * paths) while other threads do what takes the whole engine: pinned host memory,
 * streams with queued work, events, contexts, setting and resetting a device. Every
 * byte read back is checked. tests/test_engine_programs.py runs it, also against a
 * ThreadSanitizer build of the library.
 *
 * Output: "worker <n> ok" per thread, then "done"; a failure prints "FAIL ..." and
 * exits with 1. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "acl/acl.h"

#define ROUNDS 400
#define SIZE 4096
/* Copies this large move their bytes with no engine lock held: the churners' calls that
 * take the whole engine wait for them. */
#define BIG (1024 * 1024)

struct worker {
    int index;
    int device;
    int failed;
    char why[200];
    unsigned char *big_in, *big_out; /* BIG bytes each, for the copiers */
};

static pthread_barrier_t start;

#define CHECK(w, expr)                                                                   \
    do {                                                                                 \
        aclError rc_ = (expr);                                                           \
        if (rc_ != ACL_SUCCESS) {                                                        \
            snprintf((w)->why, sizeof (w)->why, "%s returned %d", #expr, (int)rc_);      \
            (w)->failed = 1;                                                             \
            return NULL;                                                                 \
        }                                                                                \
    } while (0)

/* The fast paths: malloc, H2D, D2D, D2H, memset, free on the thread's own device. */
static void *copier(void *arg)
{
    struct worker *w = arg;
    unsigned char in[SIZE], out[SIZE];
    pthread_barrier_wait(&start);
    CHECK(w, aclrtSetDevice(w->device));
    for (int round = 0; round < ROUNDS; round++) {
        void *a = NULL, *b = NULL;
        for (size_t i = 0; i < SIZE; i++)
            in[i] = (unsigned char)(w->index * 7 + round + i);
        CHECK(w, aclrtMalloc(&a, SIZE, ACL_MEM_MALLOC_HUGE_FIRST));
        CHECK(w, aclrtMalloc(&b, SIZE, ACL_MEM_MALLOC_NORMAL_ONLY));
        CHECK(w, aclrtMemcpy(a, SIZE, in, SIZE, ACL_MEMCPY_HOST_TO_DEVICE));
        CHECK(w, aclrtMemcpy(b, SIZE, a, SIZE, ACL_MEMCPY_DEVICE_TO_DEVICE));
        CHECK(w, aclrtMemset(a, SIZE, 0, SIZE));
        CHECK(w, aclrtMemcpy(out, SIZE, b, SIZE, ACL_MEMCPY_DEVICE_TO_HOST));
        if (memcmp(in, out, SIZE) != 0) {
            snprintf(w->why, sizeof w->why, "round %d: bytes differ", round);
            w->failed = 1;
            return NULL;
        }
        CHECK(w, aclrtFree(a));
        CHECK(w, aclrtFree(b));
        if (round % 8 == 0) {
            void *big = NULL;
            memset(w->big_in, round & 0xFF, BIG);
            CHECK(w, aclrtMalloc(&big, BIG, ACL_MEM_MALLOC_HUGE_FIRST));
            CHECK(w, aclrtMemcpy(big, BIG, w->big_in, BIG, ACL_MEMCPY_HOST_TO_DEVICE));
            CHECK(w, aclrtMemcpy(w->big_out, BIG, big, BIG, ACL_MEMCPY_DEVICE_TO_HOST));
            CHECK(w, aclrtFree(big));
            if (memcmp(w->big_in, w->big_out, BIG) != 0) {
                snprintf(w->why, sizeof w->why, "round %d: large copy differs", round);
                w->failed = 1;
                return NULL;
            }
        }
    }
    CHECK(w, aclrtResetDevice(w->device));
    return NULL;
}

/* What takes the whole engine: pinned memory, streams, events, contexts. */
static void *churner(void *arg)
{
    struct worker *w = arg;
    unsigned char check[SIZE];
    pthread_barrier_wait(&start);
    CHECK(w, aclrtSetDevice(w->device));
    for (int round = 0; round < ROUNDS / 4; round++) {
        void *pinned = NULL, *dev = NULL;
        aclrtStream stream = NULL;
        aclrtEvent event = NULL;
        aclrtContext context = NULL;
        CHECK(w, aclrtMallocHost(&pinned, SIZE));
        CHECK(w, aclrtMalloc(&dev, SIZE, ACL_MEM_MALLOC_HUGE_FIRST));
        CHECK(w, aclrtCreateStream(&stream));
        CHECK(w, aclrtCreateEvent(&event));
        CHECK(w, aclrtMemsetAsync(dev, SIZE, round & 0xFF, SIZE, stream));
        CHECK(w, aclrtMemcpyAsync(pinned, SIZE, dev, SIZE, ACL_MEMCPY_DEVICE_TO_HOST, stream));
        CHECK(w, aclrtRecordEvent(event, stream));
        CHECK(w, aclrtSynchronizeEvent(event));
        memset(check, round & 0xFF, SIZE);
        if (memcmp(pinned, check, SIZE) != 0) {
            snprintf(w->why, sizeof w->why, "round %d: queued work did not land", round);
            w->failed = 1;
            return NULL;
        }
        CHECK(w, aclrtDestroyEvent(event));
        CHECK(w, aclrtDestroyStream(stream));
        CHECK(w, aclrtFree(dev));
        CHECK(w, aclrtFreeHost(pinned));
        CHECK(w, aclrtCreateContext(&context, w->device));
        CHECK(w, aclrtDestroyContext(context));
        CHECK(w, aclrtSetDevice(w->device)); /* the destroy left this thread no context */
        CHECK(w, aclrtResetDevice(w->device));
    }
    CHECK(w, aclrtResetDevice(w->device));
    return NULL;
}

int main(void)
{
    uint32_t count = 0;
    if (aclInit(NULL) != ACL_SUCCESS || aclrtGetDeviceCount(&count) != ACL_SUCCESS) {
        printf("FAIL setup\n");
        return 1;
    }
    int threads = count >= 4 ? 4 : 2;
    pthread_t ids[4];
    struct worker workers[4];
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        memset(&workers[i], 0, sizeof workers[i]);
        workers[i].index = i;
        /* Copiers on their own devices; churners beside them (on a board with one
         * device, everything shares device 0). */
        workers[i].device = count > 1 ? i % (int)count : 0;
        workers[i].big_in = malloc(BIG);
        workers[i].big_out = malloc(BIG);
        if (workers[i].big_in == NULL || workers[i].big_out == NULL) {
            printf("FAIL setup\n");
            return 1;
        }
        pthread_create(&ids[i], NULL, i % 2 == 0 ? copier : churner, &workers[i]);
    }
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        if (workers[i].failed) {
            printf("FAIL worker %d device %d: %s\n", i, workers[i].device, workers[i].why);
            failed = 1;
        } else {
            printf("worker %d ok\n", i);
        }
        free(workers[i].big_in);
        free(workers[i].big_out);
    }
    pthread_barrier_destroy(&start);
    if (failed || aclFinalize() != ACL_SUCCESS)
        return 1;
    printf("done\n");
    return 0;
}
