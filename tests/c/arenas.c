/* Threads sharing one device: more threads than the engine has arenas, each allocating
 * small blocks (its arena's fast path), filling them, copying device to device into the
 * next thread's blocks (two arenas in one copy), reading those back, and freeing the
 * next thread's blocks (a free in another thread's arena). At each barrier the memory
 * the device reports free must be exact, whatever the arenas hold in reserve. Then the
 * main thread takes the whole normal-page pool while a worker's arena holds a reserve:
 * it must succeed, and the worker's next small block must then be refused (207001).
 * Last, the fake is reset again and again while threads allocate (any result but a
 * crash, a hang or a sanitizer report will do: their devices vanish under them).
 *
 * Output: "ok <step>" lines and "done"; a failure prints "FAIL ..." and exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "acl/acl.h"

/* The fake's own control call (include/acl_mem_fake.h), declared here: the program is
 * also compiled against the real headers, which do not have it. */
int acl_mem_fake_reset(void);

#define THREADS 6
#define BLOCKS 48
#define SIZE 4000

static pthread_barrier_t together;
static void *blocks[THREADS][BLOCKS];
static size_t freeAtStart;
static atomic_int failures;

static void Fail(int index, const char *what, aclError code)
{
    printf("FAIL thread %d: %s (%d)\n", index, what, (int)code);
    atomic_store(&failures, 1);
}

static size_t FreeNow(void)
{
    size_t freeBytes = 0, total = 0;
    aclError code = aclrtGetMemInfo(ACL_HBM_MEM, &freeBytes, &total);
    return code == ACL_SUCCESS ? freeBytes : 0;
}

static void *Worker(void *arg)
{
    int index = (int)(size_t)arg, next = (index + 1) % THREADS;
    unsigned char in[SIZE], out[SIZE];
    aclError code = aclrtSetDevice(0);
    if (code != ACL_SUCCESS)
        Fail(index, "aclrtSetDevice", code);
    memset(in, 0x40 + index, sizeof in);
    for (int i = 0; i < BLOCKS && code == ACL_SUCCESS; i++) {
        code = aclrtMalloc(&blocks[index][i], SIZE, ACL_MEM_MALLOC_HUGE_FIRST);
        if (code == ACL_SUCCESS)
            code = aclrtMemcpy(blocks[index][i], SIZE, in, SIZE, ACL_MEMCPY_HOST_TO_DEVICE);
        if (code != ACL_SUCCESS)
            Fail(index, "malloc and fill", code);
    }
    pthread_barrier_wait(&together);
    /* Every block is allocated: 4 KiB each, and no more, whatever the arenas reserve. */
    if (FreeNow() != freeAtStart - (size_t)THREADS * BLOCKS * 4096)
        Fail(index, "free memory with every block allocated", 0);
    pthread_barrier_wait(&together);
    /* Copy the next thread's first half onto its second half (two arenas when they are
     * not this one's), then read every block of it back. */
    for (int i = 0; i < BLOCKS / 2; i++) {
        code = aclrtMemcpy(blocks[next][BLOCKS / 2 + i], SIZE, blocks[next][i], SIZE,
                           ACL_MEMCPY_DEVICE_TO_DEVICE);
        if (code != ACL_SUCCESS)
            Fail(index, "device to device", code);
    }
    for (int i = 0; i < BLOCKS; i++) {
        code = aclrtMemcpy(out, SIZE, blocks[next][i], SIZE, ACL_MEMCPY_DEVICE_TO_HOST);
        if (code != ACL_SUCCESS || out[0] != 0x40 + next || out[SIZE - 1] != 0x40 + next)
            Fail(index, "read back the next thread's block", code);
    }
    pthread_barrier_wait(&together);
    for (int i = 0; i < BLOCKS - 1; i++) {
        code = aclrtFree(blocks[next][i]);
        if (code != ACL_SUCCESS)
            Fail(index, "free the next thread's block", code);
    }
    pthread_barrier_wait(&together);
    if (FreeNow() != freeAtStart - (size_t)THREADS * 4096)
        Fail(index, "free memory with one block a thread left", 0);
    return NULL;
}

/* Holds a reserve of its arena (one small block made), waits, then asks for another. */
static pthread_barrier_t handOver;
static aclError refused;

static void *Holder(void *arg)
{
    (void)arg;
    void *first = NULL, *second = NULL;
    aclrtSetDevice(0);
    aclError code = aclrtMalloc(&first, SIZE, ACL_MEM_MALLOC_NORMAL_ONLY);
    pthread_barrier_wait(&handOver); /* main takes the pool */
    pthread_barrier_wait(&handOver);
    refused = aclrtMalloc(&second, SIZE, ACL_MEM_MALLOC_NORMAL_ONLY);
    if (refused == ACL_SUCCESS)
        aclrtFree(second);
    if (code == ACL_SUCCESS)
        aclrtFree(first);
    return NULL;
}

static atomic_int stopChurning;

static void *Churner(void *arg)
{
    (void)arg;
    while (!atomic_load(&stopChurning)) {
        void *p = NULL;
        if (aclrtSetDevice(0) == ACL_SUCCESS &&
            aclrtMalloc(&p, SIZE, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS)
            aclrtFree(p);
    }
    return NULL;
}

int main(void)
{
    if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) {
        printf("FAIL start\n");
        return 1;
    }
    freeAtStart = FreeNow();
    pthread_t threads[THREADS];
    pthread_barrier_init(&together, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, Worker, (void *)(size_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    if (atomic_load(&failures))
        return 1;
    printf("ok threads on one device\n");
    /* The blocks the threads left are freed here: a thread's arena outlives it. */
    for (int i = 0; i < THREADS; i++) {
        if (aclrtFree(blocks[i][BLOCKS - 1]) != ACL_SUCCESS) {
            printf("FAIL free a block of a thread that ended\n");
            return 1;
        }
    }
    if (FreeNow() != freeAtStart) {
        printf("FAIL free memory after every free\n");
        return 1;
    }
    printf("ok blocks outlive their threads\n");

    pthread_t holder;
    pthread_barrier_init(&handOver, NULL, 2);
    pthread_create(&holder, NULL, Holder, NULL);
    pthread_barrier_wait(&handOver);
    size_t normalFree = 0, normalTotal = 0;
    void *whole = NULL;
    aclError code = aclrtGetMemInfo(ACL_HBM_MEM_NORMAL, &normalFree, &normalTotal);
    /* 4095 bytes less than the pool: the padding takes it to the pool's last page. */
    if (code == ACL_SUCCESS)
        code = aclrtMalloc(&whole, normalFree - 4095, ACL_MEM_MALLOC_NORMAL_ONLY);
    size_t after = 1;
    if (code == ACL_SUCCESS)
        code = aclrtGetMemInfo(ACL_HBM_MEM_NORMAL, &after, &normalTotal);
    pthread_barrier_wait(&handOver);
    pthread_join(holder, NULL);
    if (code != ACL_SUCCESS || after != 0) {
        printf("FAIL the whole normal pool beside another arena's reserve: %d, %zu left\n",
               (int)code, after);
        return 1;
    }
    printf("ok the whole pool beside another arena's reserve\n");
    if (refused != ACL_ERROR_RT_MEMORY_ALLOCATION) {
        printf("FAIL a small block with the pool taken: %d\n", (int)refused);
        return 1;
    }
    printf("ok the reserve went back to the pool\n");
    aclrtFree(whole);
    pthread_t churners[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&churners[i], NULL, Churner, NULL);
    for (int i = 0; i < 20; i++)
        acl_mem_fake_reset();
    atomic_store(&stopChurning, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(churners[i], NULL);
    printf("ok resets beside busy threads\n");
    aclFinalize();
    printf("done\n");
    return 0;
}
