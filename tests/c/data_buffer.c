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
#include "steps.h"

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

    EXPECT("init", aclInit(NULL) == ACL_SUCCESS);
    EXPECT("set device", aclrtSetDevice(0) == ACL_SUCCESS);
    EXPECT("malloc input", aclrtMalloc(&inputDev, inputSize, ACL_MEM_MALLOC_HUGE_FIRST)
           == ACL_SUCCESS);

    inputBuffer = aclCreateDataBuffer(inputDev, inputSize);
    EXPECT("create buffer", inputBuffer != NULL);
    EXPECT("buffer addr", aclGetDataBufferAddr(inputBuffer) == inputDev);
    EXPECT("buffer size v2", aclGetDataBufferSizeV2(inputBuffer) == inputSize);
    EXPECT("buffer size", (size_t)OldBufferSize(inputBuffer) == inputSize);

    /* Re-point the buffer at other memory (the old memory stays the caller's). */
    EXPECT("malloc other", aclrtMalloc(&otherDev, 512, ACL_MEM_MALLOC_NORMAL_ONLY)
           == ACL_SUCCESS);
    EXPECT("update buffer", aclUpdateDataBuffer(inputBuffer, otherDev, 512) == ACL_SUCCESS);
    EXPECT("updated addr", aclGetDataBufferAddr(inputBuffer) == otherDev);
    EXPECT("updated size", aclGetDataBufferSizeV2(inputBuffer) == 512);

    /* Sizes beyond 32 bits: the deprecated getter truncates, V2 does not. */
    EXPECT("update big", aclUpdateDataBuffer(inputBuffer, NULL, (size_t)5 << 30) == ACL_SUCCESS);
    EXPECT("big size v2", aclGetDataBufferSizeV2(inputBuffer) == (size_t)5 << 30);
    EXPECT("big size truncated", OldBufferSize(inputBuffer) == (uint32_t)(1u << 30));

    /* An empty buffer (no memory, size 0) is allowed, as for empty tensors. */
    emptyBuffer = aclCreateDataBuffer(NULL, 0);
    EXPECT("empty buffer", emptyBuffer != NULL);
    EXPECT("empty addr", aclGetDataBufferAddr(emptyBuffer) == NULL);
    EXPECT("empty size", aclGetDataBufferSizeV2(emptyBuffer) == 0);
    EXPECT("destroy empty", aclDestroyDataBuffer(emptyBuffer) == ACL_SUCCESS);

    /* NULL: getters give NULL / 0, the others ACL_ERROR_INVALID_PARAM. */
    EXPECT("null addr", aclGetDataBufferAddr(NULL) == NULL);
    EXPECT("null size", OldBufferSize(NULL) == 0 && aclGetDataBufferSizeV2(NULL) == 0);
    EXPECT("update null", aclUpdateDataBuffer(NULL, otherDev, 512) == ACL_ERROR_INVALID_PARAM);
    EXPECT("destroy null", aclDestroyDataBuffer(NULL) == ACL_ERROR_INVALID_PARAM);
    recent = aclGetRecentErrMsg();
    EXPECT("recent message", recent != NULL && strstr(recent, "aclDestroyDataBuffer") != NULL);
    printf("recent %s\n", recent);

    /* Element sizes, as samples compute buffer sizes from a model's data types. */
    EXPECT("size float", aclDataTypeSize(ACL_FLOAT) == 4);
    EXPECT("size float16", aclDataTypeSize(ACL_FLOAT16) == 2);
    EXPECT("size bf16", aclDataTypeSize(ACL_BF16) == 2);
    EXPECT("size int8", aclDataTypeSize(ACL_INT8) == 1);
    EXPECT("size bool", aclDataTypeSize(ACL_BOOL) == 1);
    EXPECT("size int64", aclDataTypeSize(ACL_INT64) == 8);
    EXPECT("size double", aclDataTypeSize(ACL_DOUBLE) == 8);
    EXPECT("size complex128", aclDataTypeSize(ACL_COMPLEX128) == 16);
    EXPECT("size string", aclDataTypeSize(ACL_STRING) == 0);
    EXPECT("size undefined", aclDataTypeSize(ACL_DT_UNDEFINED) == 0);

    EXPECT("destroy buffer", aclDestroyDataBuffer(inputBuffer) == ACL_SUCCESS);
    EXPECT("free input", aclrtFree(inputDev) == ACL_SUCCESS);
    EXPECT("free other", aclrtFree(otherDev) == ACL_SUCCESS);
    EXPECT("reset device", aclrtResetDevice(0) == ACL_SUCCESS);
    EXPECT("finalize", aclFinalize() == ACL_SUCCESS);
    printf("done\n");
    return 0;
}
