/* Two processes sharing device memory, in the style of the CANN VMM IPC samples.
 *
 * Process A (no argument) starts process B (this program again, "import <fd> <fd>")
 * with two pipes, then: aclrtMallocPhysical, aclrtMemExportToShareableHandle with pid
 * validation on (flags 0), reads B's pid (B asks aclrtDeviceGetBareTgid), allows it with
 * aclrtMemSetPidToShareableHandle and sends B the shareable handle. B imports it
 * (aclrtMemImportFromShareableHandle), reserves an address range, maps the handle there
 * and writes a pattern with aclrtMemcpy; A maps its own handle and reads the pattern
 * back. A process that is not on the whitelist is refused the import first (A asks for
 * that with a second, never allowed export). tests/test_shim_fork.py runs it.
 *
 * Output (A): "refused <code>", "read back ok", "done"; B's lines start with "B ".
 * A failure prints "FAIL ..." and exits with status 1. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "acl/acl.h"

#define CHECK(expr)                                                             \
    do {                                                                        \
        aclError ret_ = (expr);                                                 \
        if (ret_ != ACL_SUCCESS) {                                              \
            printf("FAIL %s%s returned %d\n", role, #expr, (int)ret_);          \
            fflush(stdout);                                                     \
            return 1;                                                           \
        }                                                                       \
    } while (0)

#define SIZE_TO_WRITE 4096

static const char *role = "";

static int ReadAll(int fd, void *data, size_t size)
{
    char *at = (char *)data;
    while (size > 0) {
        ssize_t got = read(fd, at, size);
        if (got <= 0)
            return 0;
        at += got;
        size -= (size_t)got;
    }
    return 1;
}

static int WriteAll(int fd, const void *data, size_t size)
{
    return write(fd, data, size) == (ssize_t)size;
}

static void Prop(aclrtPhysicalMemProp *prop)
{
    memset(prop, 0, sizeof *prop);
    prop->handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop->allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop->memAttr = ACL_HBM_MEM_HUGE;
    prop->location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = 0;
}

static unsigned char Pattern(size_t i)
{
    return (unsigned char)(i * 7 + 3);
}

/* B: import what A sends, write the pattern into it, tell A, wait until A read it. */
static int Importer(int fromA, int toB)
{
    int32_t pid = 0;
    uint64_t refused = 0;
    uint64_t shareable = 0;
    aclrtDrvMemHandle handle = NULL;
    aclrtDrvMemHandle never = NULL;
    aclrtPhysicalMemProp prop;
    size_t granularity = 0;
    void *va = NULL;
    unsigned char host[SIZE_TO_WRITE];
    char done = 0;
    aclError ret;
    size_t i;
    role = "B ";
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtDeviceGetBareTgid(&pid));
    if (!WriteAll(toB, &pid, sizeof pid) || !ReadAll(fromA, &refused, sizeof refused)
            || !ReadAll(fromA, &shareable, sizeof shareable)) {
        printf("FAIL B pipe\n");
        return 1;
    }
    /* Not whitelisted: refused. */
    ret = aclrtMemImportFromShareableHandle(refused, 0, &never);
    if (!WriteAll(toB, &ret, sizeof ret))
        return 1;
    CHECK(aclrtMemImportFromShareableHandle(shareable, 0, &handle));
    Prop(&prop);
    CHECK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
                                           &granularity));
    CHECK(aclrtReserveMemAddress(&va, granularity, 0, NULL, 0));
    CHECK(aclrtMapMem(va, granularity, 0, handle, 0));
    for (i = 0; i < SIZE_TO_WRITE; ++i)
        host[i] = Pattern(i);
    CHECK(aclrtMemcpy(va, granularity, host, SIZE_TO_WRITE, ACL_MEMCPY_HOST_TO_DEVICE));
    printf("B wrote %d bytes at %p\n", SIZE_TO_WRITE, va);
    fflush(stdout);
    if (!WriteAll(toB, &done, 1) || !ReadAll(fromA, &done, 1))
        return 1;
    CHECK(aclrtUnmapMem(va));
    CHECK(aclrtReleaseMemAddress(va));
    CHECK(aclrtFreePhysical(handle));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("B done\n");
    return 0;
}

int main(int argc, char **argv)
{
    int toA[2];  /* A -> B */
    int toB[2];  /* B -> A ("to the exporter"; named for who reads) */
    char fdA[16];
    char fdB[16];
    pid_t child;
    int32_t importer = 0;
    aclrtPhysicalMemProp prop;
    aclrtDrvMemHandle handle = NULL;
    aclrtDrvMemHandle other = NULL;
    size_t granularity = 0;
    uint64_t shareable = 0;
    uint64_t unlisted = 0;
    aclError refused = 0;
    void *va = NULL;
    unsigned char host[SIZE_TO_WRITE];
    char done = 0;
    int status = 0;
    size_t i;

    if (argc == 4 && strcmp(argv[1], "import") == 0)
        return Importer(atoi(argv[2]), atoi(argv[3]));
    role = "A ";
    if (pipe(toA) != 0 || pipe(toB) != 0) {
        printf("FAIL pipe\n");
        return 1;
    }
    fflush(stdout);
    child = fork();  /* before any ACL call: B is a process of its own */
    if (child == 0) {
        close(toA[1]);
        close(toB[0]);
        snprintf(fdA, sizeof fdA, "%d", toA[0]);
        snprintf(fdB, sizeof fdB, "%d", toB[1]);
        execl("/proc/self/exe", argv[0], "import", fdA, fdB, (char *)NULL);
        _exit(127);
    }
    close(toA[0]);
    close(toB[1]);

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    Prop(&prop);
    CHECK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
                                           &granularity));
    CHECK(aclrtMallocPhysical(&handle, granularity, &prop, 0));
    CHECK(aclrtMemExportToShareableHandle(handle, ACL_MEM_HANDLE_TYPE_NONE, 0, &shareable));
    CHECK(aclrtMallocPhysical(&other, granularity, &prop, 0));
    CHECK(aclrtMemExportToShareableHandle(other, ACL_MEM_HANDLE_TYPE_NONE, 0, &unlisted));
    if (!ReadAll(toB[0], &importer, sizeof importer)) {
        printf("FAIL A: B said nothing\n");
        return 1;
    }
    CHECK(aclrtMemSetPidToShareableHandle(shareable, &importer, 1));
    if (!WriteAll(toA[1], &unlisted, sizeof unlisted)
            || !WriteAll(toA[1], &shareable, sizeof shareable)
            || !ReadAll(toB[0], &refused, sizeof refused)) {
        printf("FAIL A pipe\n");
        return 1;
    }
    printf("refused %d\n", (int)refused);
    if (!ReadAll(toB[0], &done, 1)) {
        printf("FAIL A: B ended before writing\n");
        return 1;
    }
    CHECK(aclrtReserveMemAddress(&va, granularity, 0, NULL, 0));
    CHECK(aclrtMapMem(va, granularity, 0, handle, 0));
    memset(host, 0, sizeof host);
    CHECK(aclrtMemcpy(host, SIZE_TO_WRITE, va, SIZE_TO_WRITE, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < SIZE_TO_WRITE; ++i) {
        if (host[i] != Pattern(i)) {
            printf("FAIL A: byte %zu is %d, B wrote %d\n", i, host[i], Pattern(i));
            return 1;
        }
    }
    printf("read back ok\n");
    fflush(stdout);
    if (!WriteAll(toA[1], &done, 1) || waitpid(child, &status, 0) != child
            || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL A: B's exit status %d\n", status);
        return 1;
    }
    CHECK(aclrtUnmapMem(va));
    CHECK(aclrtReleaseMemAddress(va));
    CHECK(aclrtFreePhysical(handle));
    CHECK(aclrtFreePhysical(other));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("done\n");
    return 0;
}
