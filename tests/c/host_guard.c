/* Pageable host memory the fake once copied successfully, then unmapped or protected by
 * the program: later copies and memsets into it are 107000, never a crash (the fake
 * remembers proven ranges and copies them under a fault guard). The program's own
 * SIGSEGV handler, installed before, still gets the program's own faults, and never the
 * fake's. tests/test_engine_programs.py runs it. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include "acl/acl.h"
#include "steps.h"

static volatile sig_atomic_t program_faults;
static sigjmp_buf back;

static void program_handler(int signal_number)
{
    (void)signal_number;
    program_faults++;
    siglongjmp(back, 1);
}

int main(void)
{
    void *dev = NULL;
    const size_t size = 1 << 16;
    struct sigaction handler;
    memset(&handler, 0, sizeof handler);
    handler.sa_handler = program_handler;
    handler.sa_flags = SA_NODEFER;
    sigemptyset(&handler.sa_mask);
    EXPECT("program handler", sigaction(SIGSEGV, &handler, NULL) == 0);

    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("malloc", aclrtMalloc(&dev, size, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    unsigned char *host = mmap(NULL, size, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT("mmap", host != MAP_FAILED);
    memset(host, 0x5A, size);
    for (int round = 0; round < 3; round++) {
        /* Proven both ways: the next copies are guarded memmoves. */
        ACL_CHECK("h2d", aclrtMemcpy(dev, size, host, size, ACL_MEMCPY_HOST_TO_DEVICE),
                  ACL_SUCCESS);
        ACL_CHECK("d2h", aclrtMemcpy(host, size, dev, size, ACL_MEMCPY_DEVICE_TO_HOST),
                  ACL_SUCCESS);
        ACL_CHECK("memset host", aclrtMemset(host, size, 0x5A, size), ACL_SUCCESS);
    }
    EXPECT("bytes", host[0] == 0x5A && host[size - 1] == 0x5A);

    /* Read-only since: a write into it is refused, a read still works. */
    EXPECT("protect", mprotect(host, size, PROT_READ) == 0);
    ACL_CHECK("d2h into read-only", aclrtMemcpy(host, size, dev, size,
                                                ACL_MEMCPY_DEVICE_TO_HOST), 107000);
    ACL_CHECK("memset read-only", aclrtMemset(host + 100, 10, 0, 10), 107000);
    ACL_CHECK("h2d from read-only", aclrtMemcpy(dev, size, host, size,
                                                ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);

    /* Unmapped since: both directions are refused. */
    EXPECT("unmap", munmap(host, size) == 0);
    ACL_CHECK("h2d from unmapped", aclrtMemcpy(dev, size, host, size,
                                               ACL_MEMCPY_HOST_TO_DEVICE), 107000);
    ACL_CHECK("d2h into unmapped", aclrtMemcpy(host + 8, 64, dev, 64,
                                               ACL_MEMCPY_DEVICE_TO_HOST), 107000);
    ACL_CHECK("memset unmapped", aclrtMemset(host, size, 1, size), 107000);
    EXPECT("the fake's faults stayed the fake's", program_faults == 0);

    /* The program's own fault still reaches its handler. */
    if (sigsetjmp(back, 0) == 0) {
        volatile unsigned char *gone = host;
        (void)gone[0];
    }
    EXPECT("the program's fault reached its handler", program_faults == 1);
    ACL_CHECK("free", aclrtFree(dev), ACL_SUCCESS);
    ACL_CHECK("reset", aclrtResetDevice(0), ACL_SUCCESS);
    printf("done\n");
    return 0;
}
