/* The library's capture of traced calls (the records acl_mem's Python recorder takes in
 * bulk) under threads: four workers on two devices allocate and free, on the arenas' fast
 * paths (small blocks) and through the engine (large ones and a failing free), while a
 * taker thread takes the records as they come. Every record must arrive once, whole,
 * from a worker, with its thread's times in order; calls made quietly and calls after
 * the capture stops leave none. Then a fork with records waiting: the child starts with
 * none and captures its own. Last, the capture switched on and off while the workers
 * run: nothing is left behind once it is off.
 *
 * Output: "ok <step>" lines and "done"; a failure prints "FAIL ..." and exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "acl/acl.h"

/* The fake's own control calls (include/acl_mem_fake.h), declared here: the program is
 * also compiled against the real headers, which do not have them. */
int acl_mem_fake_trace_capture(int on);
int acl_mem_fake_trace_quiet(int on);
size_t acl_mem_fake_trace_take(void *out, size_t capacity, unsigned long *lost);
extern unsigned long acl_mem_fake_captured_bytes;

#define WORKERS 4
#define SMALL_ROUNDS 400
#define LARGE_ROUNDS 20
/* Per worker: aclrtSetDevice, the pairs, one failing free. */
#define RECORDS_PER_WORKER (1 + 2 * SMALL_ROUNDS + 2 * LARGE_ROUNDS + 1)

static pthread_t workerIds[WORKERS];
static uint64_t lastTime[WORKERS];
static atomic_int running = WORKERS;
static atomic_int failures;
static unsigned long records, lostRecords;

static void Fail(const char *what, long value)
{
    printf("FAIL %s (%ld)\n", what, value);
    atomic_store(&failures, 1);
}

static void *Worker(void *arg)
{
    int index = (int)(intptr_t)arg;
    void *ptr = NULL;
    if (aclrtSetDevice(index % 2) != ACL_SUCCESS)
        Fail("aclrtSetDevice", index);
    for (int round = 0; round < SMALL_ROUNDS; round++) {
        if (aclrtMalloc(&ptr, 4000, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS ||
            aclrtFree(ptr) != ACL_SUCCESS)
            Fail("a small pair", round);
    }
    for (int round = 0; round < LARGE_ROUNDS; round++) {
        if (aclrtMalloc(&ptr, 64 << 20, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS ||
            aclrtFree(ptr) != ACL_SUCCESS)
            Fail("a large pair", round);
    }
    if (aclrtFree(ptr) == ACL_SUCCESS) /* freed already: refused, and recorded */
        Fail("a second free succeeded", index);
    acl_mem_fake_trace_quiet(1);
    if (aclrtMalloc(&ptr, 4000, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS ||
        aclrtFree(ptr) != ACL_SUCCESS)
        Fail("a quiet pair", index);
    acl_mem_fake_trace_quiet(0);
    atomic_fetch_sub(&running, 1);
    return NULL;
}

/* Read the records in [data, data + size): each from a worker, its times in order. */
static void Check(const unsigned char *data, size_t size)
{
    size_t at = 0;
    while (at + 8 <= size) {
        unsigned count = data[at + 1];
        if (count < 4 || at + 8 + 8 * (size_t)count > size) {
            Fail("a record cut short or malformed", (long)count);
            return;
        }
        uint64_t values[16];
        memcpy(values, data + at + 8, 8 * (size_t)count);
        int worker = -1;
        for (int i = 0; i < WORKERS; i++)
            if (values[1] == (uint64_t)workerIds[i])
                worker = i;
        if (worker < 0) {
            Fail("a record of no worker", (long)records);
        } else {
            if (values[0] < lastTime[worker])
                Fail("a thread's times out of order", worker);
            lastTime[worker] = values[0];
        }
        records++;
        at += 8 + 8 * (size_t)count;
    }
    if (at != size)
        Fail("bytes after the last record", (long)(size - at));
}

static void TakeAll(unsigned char *buffer, size_t capacity)
{
    for (;;) {
        unsigned long lost = 0;
        size_t got = acl_mem_fake_trace_take(buffer, capacity, &lost);
        lostRecords += lost;
        if (got == 0)
            return;
        Check(buffer, got);
    }
}

static void *Taker(void *arg)
{
    (void)arg;
    /* Small on purpose: takes stop at whole records. */
    size_t capacity = 1000;
    unsigned char *buffer = malloc(capacity);
    while (atomic_load(&running) > 0)
        TakeAll(buffer, capacity);
    TakeAll(buffer, capacity);
    free(buffer);
    return NULL;
}

int main(void)
{
    pthread_t taker;
    acl_mem_fake_trace_capture(1);
    pthread_create(&taker, NULL, Taker, NULL);
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&workerIds[i], NULL, Worker, (void *)(intptr_t)i);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(workerIds[i], NULL);
    pthread_join(taker, NULL);
    if (records != WORKERS * RECORDS_PER_WORKER || lostRecords != 0) {
        printf("FAIL %lu records, %lu lost; %d expected\n", records, lostRecords,
               WORKERS * RECORDS_PER_WORKER);
        return 1;
    }
    printf("ok every record once\n");

    /* A fork with records waiting: they are the parent's. */
    void *ptr = NULL;
    aclrtSetDevice(0);
    aclrtMalloc(&ptr, 100, ACL_MEM_MALLOC_HUGE_FIRST);
    unsigned long waiting = __atomic_load_n(&acl_mem_fake_captured_bytes, __ATOMIC_RELAXED);
    fflush(stdout); /* the child's exit must not write the parent's lines again */
    pid_t child = fork();
    if (child == 0) {
        if (__atomic_load_n(&acl_mem_fake_captured_bytes, __ATOMIC_RELAXED) != 0)
            _exit(2);
        void *own = NULL;
        aclrtSetDevice(0);
        aclrtMalloc(&own, 100, ACL_MEM_MALLOC_HUGE_FIRST);
        unsigned char buffer[256];
        size_t got = acl_mem_fake_trace_take(buffer, sizeof buffer, NULL);
        int count = 0;
        for (size_t at = 0; at + 8 <= got; at += 8 + 8 * (size_t)buffer[at + 1])
            count++;
        _exit(count == 2 ? 0 : 3); /* its aclrtSetDevice and aclrtMalloc */
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        Fail("the forked child's capture", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    if (__atomic_load_n(&acl_mem_fake_captured_bytes, __ATOMIC_RELAXED) != waiting)
        Fail("the parent's records changed at the fork", (long)waiting);
    else
        printf("ok fork\n");

    acl_mem_fake_trace_capture(0);
    aclrtFree(ptr);
    if (__atomic_load_n(&acl_mem_fake_captured_bytes, __ATOMIC_RELAXED) != 0)
        Fail("captured after the capture stopped", 0);
    else
        printf("ok stopped\n");

    /* The capture switched on and off while workers allocate and free (fast paths):
     * nothing is left once it is off. */
    atomic_store(&running, WORKERS);
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&workerIds[i], NULL, Worker, (void *)(intptr_t)i);
    for (int round = 0; round < 200; round++) {
        acl_mem_fake_trace_capture(1);
        acl_mem_fake_trace_take(NULL, 0, NULL);
        acl_mem_fake_trace_capture(0);
        if (__atomic_load_n(&acl_mem_fake_captured_bytes, __ATOMIC_RELAXED) != 0)
            Fail("records left once the capture is off", round);
    }
    for (int i = 0; i < WORKERS; i++)
        pthread_join(workerIds[i], NULL);
    unsigned char none[64];
    if (acl_mem_fake_trace_take(none, sizeof none, NULL) != 0)
        Fail("a record after the capture went off", 0);
    else
        printf("ok switched while busy\n");
    aclrtResetDevice(0);
    printf("done\n");
    return atomic_load(&failures) ? 1 : 0;
}
