/* The core memory surface from C on acl_mem's fake library, with nothing else installed:
 * init, devices, contexts, the malloc family with its padding, pinned host memory, DVPP
 * memory (libacl_dvpp.so), copies both ways, memset, memory info, and the codes of bad
 * input: a bad host pointer is 107000, never a crash. tests/test_engine_programs.py
 * compiles it against the real headers (or the generated minimal acl/acl.h). */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include "acl/acl.h"
#include "steps.h"

aclError acldvppMalloc(void **devPtr, size_t size);
aclError acldvppFree(void *devPtr);

int main(void)
{
    void *dev = NULL, *second = NULL, *pinned = NULL, *dvpp = NULL;
    size_t freeBefore = 0, freeAfter = 0, total = 0;
    char in[4096], out[4096];
    aclrtContext context = NULL, current = NULL;
    int32_t device = -1;

    ACL_CHECK("no context yet", aclrtMalloc(&dev, 64, ACL_MEM_MALLOC_HUGE_FIRST), 107002);
    ACL_CHECK("init", aclInit(NULL), ACL_SUCCESS);
    ACL_CHECK("init again", aclInit(NULL), 100002);
    ACL_CHECK("bad device", aclrtSetDevice(4096), 107001);
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("get device", aclrtGetDevice(&device), ACL_SUCCESS);
    EXPECT("device is 0", device == 0);
    ACL_CHECK("mem info", aclrtGetMemInfo(ACL_HBM_MEM, &freeBefore, &total), ACL_SUCCESS);
    ACL_CHECK("size 0", aclrtMalloc(&dev, 0, ACL_MEM_MALLOC_HUGE_FIRST), 100000);
    ACL_CHECK("malloc", aclrtMalloc(&dev, 4096, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    ACL_CHECK("mem info after", aclrtGetMemInfo(ACL_HBM_MEM, &freeAfter, &total), ACL_SUCCESS);
    /* 4096 + 32 + 32 bytes of padding take two 4 KiB pages. */
    EXPECT("padding takes two pages", freeBefore - freeAfter == 8192);
    ACL_CHECK("malloc 1 MiB + 1", aclrtMalloc(&second, (1 << 20) + 1, ACL_MEM_MALLOC_HUGE_FIRST),
              ACL_SUCCESS);
    EXPECT("huge pages are 2 MiB aligned", ((uintptr_t)second & ((2u << 20) - 1)) == 0);

    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (char)(i * 7);
    ACL_CHECK("h2d", aclrtMemcpy(dev, 4096, in, sizeof in, ACL_MEMCPY_HOST_TO_DEVICE),
              ACL_SUCCESS);
    ACL_CHECK("d2d", aclrtMemcpy(second, 4096, dev, 4096, ACL_MEMCPY_DEVICE_TO_DEVICE),
              ACL_SUCCESS);
    ACL_CHECK("d2h", aclrtMemcpy(out, sizeof out, second, 4096, ACL_MEMCPY_DEVICE_TO_HOST),
              ACL_SUCCESS);
    EXPECT("round trip", memcmp(in, out, sizeof in) == 0);
    ACL_CHECK("memset", aclrtMemset(dev, 4096, 0xAB, 100), ACL_SUCCESS);
    ACL_CHECK("d2h after memset", aclrtMemcpy(out, 100, dev, 100, ACL_MEMCPY_DEVICE_TO_HOST),
              ACL_SUCCESS);
    EXPECT("memset bytes", (unsigned char)out[0] == 0xAB && (unsigned char)out[99] == 0xAB);
    ACL_CHECK("count past destMax", aclrtMemcpy(out, 10, dev, 11, ACL_MEMCPY_DEVICE_TO_HOST),
              107000);
    ACL_CHECK("past the block", aclrtMemcpy(out, sizeof out, dev, 8193,
                                             ACL_MEMCPY_DEVICE_TO_HOST), 107000);

    /* Host pointers the runtime cannot use: refused, never a crash. */
    void *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(gone, 4096);
    ACL_CHECK("unmapped source", aclrtMemcpy(dev, 4096, gone, 64, ACL_MEMCPY_HOST_TO_DEVICE),
              107000);
    ACL_CHECK("unmapped target", aclrtMemcpy(gone, 64, dev, 64, ACL_MEMCPY_DEVICE_TO_HOST),
              107000);
    ACL_CHECK("integer pointer", aclrtMemcpy((void *)(uintptr_t)0x1234, 64, dev, 64,
                                             ACL_MEMCPY_DEVICE_TO_HOST), 107000);
    ACL_CHECK("read-only target", aclrtMemcpy((void *)"literal", 4, dev, 4,
                                              ACL_MEMCPY_DEVICE_TO_HOST), 107000);

    ACL_CHECK("malloc host", aclrtMallocHost(&pinned, 4096), ACL_SUCCESS);
    ACL_CHECK("to pinned", aclrtMemcpy(pinned, 4096, dev, 4096, ACL_MEMCPY_DEVICE_TO_HOST),
              ACL_SUCCESS);
    EXPECT("pinned bytes", ((unsigned char *)pinned)[0] == 0xAB);
    ACL_CHECK("free host", aclrtFreeHost(pinned), ACL_SUCCESS);
    ACL_CHECK("freed pinned", aclrtMemcpy(pinned, 64, dev, 64, ACL_MEMCPY_DEVICE_TO_HOST),
              107000);
    ACL_CHECK("free host twice", aclrtFreeHost(pinned), 107000);

    ACL_CHECK("dvpp malloc", acldvppMalloc(&dvpp, 1000), ACL_SUCCESS);
    ACL_CHECK("aclrtFree of dvpp memory", aclrtFree(dvpp), 107000);
    ACL_CHECK("dvpp free", acldvppFree(dvpp), ACL_SUCCESS);

    ACL_CHECK("free", aclrtFree(dev), ACL_SUCCESS);
    ACL_CHECK("double free", aclrtFree(dev), 107000);
    ACL_CHECK("inside a block", aclrtFree((char *)second + 32), 107000);
    ACL_CHECK("free second", aclrtFree(second), ACL_SUCCESS);

    ACL_CHECK("create context", aclrtCreateContext(&context, 1), ACL_SUCCESS);
    ACL_CHECK("current context", aclrtGetCurrentContext(&current), ACL_SUCCESS);
    EXPECT("created is current", current == context);
    ACL_CHECK("get device 1", aclrtGetDevice(&device), ACL_SUCCESS);
    EXPECT("device is 1", device == 1);
    ACL_CHECK("destroy context", aclrtDestroyContext(context), ACL_SUCCESS);
    ACL_CHECK("destroy context twice", aclrtDestroyContext(context), 107002);
    ACL_CHECK("reset device", aclrtResetDevice(0), ACL_SUCCESS);
    ACL_CHECK("reset device again", aclrtResetDevice(0), 507007);
    ACL_CHECK("finalize", aclFinalize(), ACL_SUCCESS);
    ACL_CHECK("finalize again", aclFinalize(), 100037);
    printf("done\n");
    return 0;
}
