/* Edges of the fake library a review found, one per argument; tests/test_engine_programs.py
 * runs each.
 *   raise   after a guarded host copy (the library's SIGSEGV handler is installed),
 *           raise(SIGSEGV) still kills the process as the default disposition does;
 *   chain   a chain of 3000 streams on 3000 contexts, each waiting for the previous
 *           one's event, synchronised from a thread with a 256 KiB stack: the waits are
 *           followed without the C stack growing with the chain;
 *   fd0     with standard input closed, a memfd may be descriptor 0: two physical
 *           handles still hold two different memories;
 *   wrap    host ranges that wrap around the end of the address space are refused;
 *   contexts  4.3 million contexts made and destroyed one after another (more than the
 *           slots there are: an ended context's slot serves again), and a destroyed
 *           context's handle never names the context made in its slot after it, also
 *           past 65 536 reuses of one slot;
 *   resethand  a program's SA_RESETHAND handler takes a raise(SIGSEGV); the library's
 *           guard still turns a later copy from protected memory into 107000;
 *   strtok  an export (which reads /proc) in the middle of the program's own strtok loop
 *           leaves the loop's state alone (needs ACL_MEM_FAKE_SHARE_DIR);
 *   traceprop  with ACL_MEM_TRACE set, a refused call with a wild pointer argument is
 *           recorded without the recorder reading through it.
 * Output: "ok <step>" lines, then "done". */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "acl/acl.h"
#include "steps.h"

#define CHAIN 3000
#define HUGE (2u << 20)

static int guarded_then_raise(void)
{
    void *dev = NULL;
    char host[4096] = {1};
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("malloc", aclrtMalloc(&dev, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    for (int i = 0; i < 3; i++) /* proven, then guarded */
        ACL_CHECK("h2d", aclrtMemcpy(dev, sizeof host, host, sizeof host,
                                     ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    fflush(stdout);
    raise(SIGSEGV);
    printf("FAIL still alive after raise(SIGSEGV)\n");
    return 1;
}

static aclrtContext contexts[CHAIN];
static aclrtStream streams[CHAIN];
static aclrtEvent events[CHAIN];
static int chain_result = -1;

static void *synchronise_last(void *arg)
{
    (void)arg;
    chain_result = (int)aclrtSetCurrentContext(contexts[CHAIN - 1]);
    if (chain_result == 0)
        chain_result = (int)aclrtSynchronizeStream(streams[CHAIN - 1]);
    return NULL;
}

static int chain_of_waits(void)
{
    void *dev = NULL;
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("malloc", aclrtMalloc(&dev, 4096, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    for (int i = 0; i < CHAIN; i++) {
        if (aclrtCreateContext(&contexts[i], 0) != ACL_SUCCESS ||
            aclrtCreateStream(&streams[i]) != ACL_SUCCESS ||
            aclrtCreateEvent(&events[i]) != ACL_SUCCESS ||
            (i > 0 && aclrtStreamWaitEvent(streams[i], events[i - 1]) != ACL_SUCCESS) ||
            aclrtMemsetAsync(dev, 4096, i & 0xFF, 4096, streams[i]) != ACL_SUCCESS ||
            aclrtRecordEvent(events[i], streams[i]) != ACL_SUCCESS) {
            printf("FAIL link %d: %s\n", i, aclGetRecentErrMsg());
            return 1;
        }
    }
    pthread_attr_t attributes;
    pthread_t thread;
    pthread_attr_init(&attributes);
    pthread_attr_setstacksize(&attributes, 256 * 1024);
    EXPECT("thread", pthread_create(&thread, &attributes, synchronise_last, NULL) == 0);
    pthread_join(thread, NULL);
    EXPECT("the chain ran", chain_result == 0);
    unsigned char out[4096];
    ACL_CHECK("set current", aclrtSetCurrentContext(contexts[0]), ACL_SUCCESS);
    ACL_CHECK("read", aclrtMemcpy(out, sizeof out, dev, sizeof out, ACL_MEMCPY_DEVICE_TO_HOST),
              ACL_SUCCESS);
    EXPECT("the last memset ran last", out[0] == ((CHAIN - 1) & 0xFF));
    return 0;
}

static int descriptor_zero(void)
{
    void *base = NULL;
    aclrtDrvMemHandle first = NULL, second = NULL;
    aclrtPhysicalMemProp prop;
    char a[64] = "first handle", b[64] = "second handle", out[64];
    memset(&prop, 0, sizeof prop);
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    close(0);
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("reserve", aclrtReserveMemAddress(&base, 2 * HUGE, 0, NULL, 0), ACL_SUCCESS);
    ACL_CHECK("first", aclrtMallocPhysical(&first, HUGE, &prop, 0), ACL_SUCCESS);
    ACL_CHECK("second", aclrtMallocPhysical(&second, HUGE, &prop, 0), ACL_SUCCESS);
    ACL_CHECK("map first", aclrtMapMem(base, HUGE, 0, first, 0), ACL_SUCCESS);
    ACL_CHECK("map second", aclrtMapMem((char *)base + HUGE, HUGE, 0, second, 0), ACL_SUCCESS);
    ACL_CHECK("write first", aclrtMemcpy(base, 64, a, 64, ACL_MEMCPY_HOST_TO_DEVICE),
              ACL_SUCCESS);
    ACL_CHECK("write second", aclrtMemcpy((char *)base + HUGE, 64, b, 64,
                                          ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    ACL_CHECK("read first", aclrtMemcpy(out, 64, base, 64, ACL_MEMCPY_DEVICE_TO_HOST),
              ACL_SUCCESS);
    EXPECT("two memories", strcmp(out, "first handle") == 0);
    return 0;
}

static int wrapping_ranges(void)
{
    void *dev = NULL;
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("malloc", aclrtMalloc(&dev, 8192, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    ACL_CHECK("to the top of the address space",
              aclrtMemcpy((void *)(uintptr_t)0xfffffffffffff000u, 8192, dev, 8192,
                          ACL_MEMCPY_DEVICE_TO_HOST), 107000);
    ACL_CHECK("from above user space", aclrtMemcpy(dev, 64, (void *)((uintptr_t)1 << 57), 64,
                                                   ACL_MEMCPY_HOST_TO_DEVICE), 107000);
    ACL_CHECK("memset there", aclrtMemset((void *)(uintptr_t)0xffffffffffff0000u, 8192, 0,
                                          8192), 107000);
    return 0;
}

static int many_contexts(void)
{
    aclrtContext first = NULL, next = NULL, current = NULL, stale = NULL;
    /* The device stays open meanwhile: its memory is not given back at every destroy. */
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("first", aclrtCreateContext(&first, 0), ACL_SUCCESS);
    ACL_CHECK("destroy first", aclrtDestroyContext(first), ACL_SUCCESS);
    ACL_CHECK("next", aclrtCreateContext(&next, 0), ACL_SUCCESS);
    EXPECT("a new handle", next != first);
    ACL_CHECK("the old handle is dead", aclrtDestroyContext(first), 107002);
    ACL_CHECK("the new one is current", aclrtGetCurrentContext(&current), ACL_SUCCESS);
    EXPECT("current is the new one", current == next);
    ACL_CHECK("destroy next", aclrtDestroyContext(next), ACL_SUCCESS);
    ACL_CHECK("stale", aclrtCreateContext(&stale, 0), ACL_SUCCESS);
    ACL_CHECK("destroy stale", aclrtDestroyContext(stale), ACL_SUCCESS);
    for (long i = 0; i < 4300000; i++) {
        aclrtContext context = NULL;
        if (aclrtCreateContext(&context, 0) != ACL_SUCCESS || context == stale ||
            aclrtDestroyContext(context) != ACL_SUCCESS) {
            printf("FAIL pair %ld: %s\n", i, context == stale ? "a destroyed handle came "
                   "back" : aclGetRecentErrMsg());
            return 1;
        }
    }
    printf("ok 4300000 pairs\n");
    return 0;
}

static volatile sig_atomic_t handled;

static void reset_handler(int signal_number, siginfo_t *info, void *context)
{
    (void)signal_number;
    (void)info;
    (void)context;
    handled++;
}

static int reset_hand_then_guard(void)
{
    static char host[4096] __attribute__((aligned(4096)));
    void *dev = NULL;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = reset_handler;
    action.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&action.sa_mask);
    EXPECT("program handler", sigaction(SIGSEGV, &action, NULL) == 0);
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("malloc", aclrtMalloc(&dev, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    for (int i = 0; i < 2; i++) /* proven, then guarded */
        ACL_CHECK("h2d", aclrtMemcpy(dev, sizeof host, host, sizeof host,
                                     ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    raise(SIGSEGV);
    EXPECT("the program's handler ran once", handled == 1);
    EXPECT("protect", mprotect(host, sizeof host, PROT_NONE) == 0);
    ACL_CHECK("from protected memory", aclrtMemcpy(dev, sizeof host, host, sizeof host,
                                                   ACL_MEMCPY_HOST_TO_DEVICE), 107000);
    EXPECT("unprotect", mprotect(host, sizeof host, PROT_READ | PROT_WRITE) == 0);
    return 0;
}

static int strtok_around_an_export(void)
{
    char text[] = "alpha beta gamma";
    const char *seen[3] = {NULL, NULL, NULL};
    aclrtPhysicalMemProp prop;
    memset(&prop, 0, sizeof prop);
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    aclrtDrvMemHandle handle = NULL;
    uint64_t shareable = 0;
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("physical", aclrtMallocPhysical(&handle, HUGE, &prop, 0), ACL_SUCCESS);
    seen[0] = strtok(text, " ");
    ACL_CHECK("export", aclrtMemExportToShareableHandle(handle, ACL_MEM_HANDLE_TYPE_NONE, 0,
                                                        &shareable), ACL_SUCCESS);
    seen[1] = strtok(NULL, " ");
    seen[2] = strtok(NULL, " ");
    EXPECT("strtok goes on", seen[0] != NULL && seen[1] != NULL && seen[2] != NULL &&
                             strcmp(seen[1], "beta") == 0 && strcmp(seen[2], "gamma") == 0);
    ACL_CHECK("free", aclrtFreePhysical(handle), ACL_SUCCESS);
    ACL_CHECK("reset", aclrtResetDevice(0), ACL_SUCCESS);
    return 0;
}

static int trace_of_a_wild_prop(void)
{
    aclrtDrvMemHandle handle = NULL;
    /* NULL handle: refused before prop is looked at; the pointer is nothing readable. */
    ACL_CHECK("refused", aclrtMallocPhysical(NULL, HUGE, (const aclrtPhysicalMemProp *)16, 0),
              ACL_ERROR_INVALID_PARAM);
    ACL_CHECK("refused again", aclrtMallocPhysical(&handle, HUGE, NULL, 0),
              ACL_ERROR_INVALID_PARAM);
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    int failed = strcmp(what, "raise") == 0 ? guarded_then_raise()
                 : strcmp(what, "chain") == 0 ? chain_of_waits()
                 : strcmp(what, "fd0") == 0 ? descriptor_zero()
                 : strcmp(what, "wrap") == 0 ? wrapping_ranges()
                 : strcmp(what, "contexts") == 0 ? many_contexts()
                 : strcmp(what, "resethand") == 0 ? reset_hand_then_guard()
                 : strcmp(what, "strtok") == 0 ? strtok_around_an_export()
                 : strcmp(what, "traceprop") == 0 ? trace_of_a_wild_prop()
                 : (printf("FAIL unknown edge '%s'\n", what), 1);
    if (failed)
        return 1;
    printf("done\n");
    return 0;
}
