/* aclDataBuffer bookkeeping as the public Ascend samples use it (the "model process"
 * input/output datasets of resnet50 and friends): device memory from aclrtMalloc wrapped
 * in data buffers, read back through the getters, re-pointed with aclUpdateDataBuffer,
 * then destroyed before the memory is freed. Also aclDataTypeSize and the NULL cases.
 * tests/test_shim_programs.py runs it and checks each "ok" line and the exit status.
 *
 * Output: "ok <step>" per step, "recent <text>" for the error text after a failed call,
 * then "done"; a failed check prints "FAIL <step>: ..." and exits with status 1. */
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"

#define CHECK(step, cond)                                                        \
    do {                                                                         \
        if (!(cond)) {                                                           \
            printf("FAIL %s: %s\n", step, #cond);                                \
            return 1;                                                            \
        }                                                                        \
        printf("ok %s\n", step);                                                 \
    } while (0)

/* The deprecated 32-bit getter, still called by older samples. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static uint32_t OldBufferSize(const aclDataBuffer *dataBuffer)
{
    return aclGetDataBufferSize(dataBuffer);
}
#pragma GCC diagnostic pop

int main(void)
{
    const size_t inputSize = 3 * 224 * 224 * sizeof(float);
    void *inputDev = NULL;
    void *otherDev = NULL;
    aclDataBuffer *inputBuffer = NULL;
    aclDataBuffer *emptyBuffer = NULL;
    const char *recent = NULL;

    CHECK("init", aclInit(NULL) == ACL_SUCCESS);
    CHECK("set device", aclrtSetDevice(0) == ACL_SUCCESS);
    CHECK("malloc input", aclrtMalloc(&inputDev, inputSize, ACL_MEM_MALLOC_HUGE_FIRST)
          == ACL_SUCCESS);

    inputBuffer = aclCreateDataBuffer(inputDev, inputSize);
    CHECK("create buffer", inputBuffer != NULL);
    CHECK("buffer addr", aclGetDataBufferAddr(inputBuffer) == inputDev);
    CHECK("buffer size v2", aclGetDataBufferSizeV2(inputBuffer) == inputSize);
    CHECK("buffer size", (size_t)OldBufferSize(inputBuffer) == inputSize);

    /* Re-point the buffer at other memory (the old memory stays the caller's). */
    CHECK("malloc other", aclrtMalloc(&otherDev, 512, ACL_MEM_MALLOC_NORMAL_ONLY)
          == ACL_SUCCESS);
    CHECK("update buffer", aclUpdateDataBuffer(inputBuffer, otherDev, 512) == ACL_SUCCESS);
    CHECK("updated addr", aclGetDataBufferAddr(inputBuffer) == otherDev);
    CHECK("updated size", aclGetDataBufferSizeV2(inputBuffer) == 512);

    /* Sizes beyond 32 bits: the deprecated getter truncates, V2 does not. */
    CHECK("update big", aclUpdateDataBuffer(inputBuffer, NULL, (size_t)5 << 30) == ACL_SUCCESS);
    CHECK("big size v2", aclGetDataBufferSizeV2(inputBuffer) == (size_t)5 << 30);
    CHECK("big size truncated", OldBufferSize(inputBuffer) == (uint32_t)(1u << 30));

    /* An empty buffer (no memory, size 0) is allowed, as for empty tensors. */
    emptyBuffer = aclCreateDataBuffer(NULL, 0);
    CHECK("empty buffer", emptyBuffer != NULL);
    CHECK("empty addr", aclGetDataBufferAddr(emptyBuffer) == NULL);
    CHECK("empty size", aclGetDataBufferSizeV2(emptyBuffer) == 0);
    CHECK("destroy empty", aclDestroyDataBuffer(emptyBuffer) == ACL_SUCCESS);

    /* NULL: getters give NULL / 0, the others ACL_ERROR_INVALID_PARAM. */
    CHECK("null addr", aclGetDataBufferAddr(NULL) == NULL);
    CHECK("null size", OldBufferSize(NULL) == 0 && aclGetDataBufferSizeV2(NULL) == 0);
    CHECK("update null", aclUpdateDataBuffer(NULL, otherDev, 512) == ACL_ERROR_INVALID_PARAM);
    CHECK("destroy null", aclDestroyDataBuffer(NULL) == ACL_ERROR_INVALID_PARAM);
    recent = aclGetRecentErrMsg();
    CHECK("recent message", recent != NULL && strstr(recent, "aclDestroyDataBuffer") != NULL);
    printf("recent %s\n", recent);

    /* Element sizes, as samples compute buffer sizes from a model's data types. */
    CHECK("size float", aclDataTypeSize(ACL_FLOAT) == 4);
    CHECK("size float16", aclDataTypeSize(ACL_FLOAT16) == 2);
    CHECK("size bf16", aclDataTypeSize(ACL_BF16) == 2);
    CHECK("size int8", aclDataTypeSize(ACL_INT8) == 1);
    CHECK("size bool", aclDataTypeSize(ACL_BOOL) == 1);
    CHECK("size int64", aclDataTypeSize(ACL_INT64) == 8);
    CHECK("size double", aclDataTypeSize(ACL_DOUBLE) == 8);
    CHECK("size complex128", aclDataTypeSize(ACL_COMPLEX128) == 16);
    CHECK("size string", aclDataTypeSize(ACL_STRING) == 0);
    CHECK("size undefined", aclDataTypeSize(ACL_DT_UNDEFINED) == 0);

    CHECK("destroy buffer", aclDestroyDataBuffer(inputBuffer) == ACL_SUCCESS);
    CHECK("free input", aclrtFree(inputDev) == ACL_SUCCESS);
    CHECK("free other", aclrtFree(otherDev) == ACL_SUCCESS);
    CHECK("reset device", aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK("finalize", aclFinalize() == ACL_SUCCESS);
    printf("done\n");
    return 0;
}
