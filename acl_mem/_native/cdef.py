"""Declarations for cffi ABI mode, copied from the real headers.

Source: ``torch_npu/include/acl/acl_base_rt.h`` and ``acl_rt.h`` of the torch-npu
2.14.0 wheel (ACL 1.17); DVPP prototypes from ``acl/ops/acl_dvpp.h`` and
``acl/dvpp/hi_dvpp.h`` (docs/runtime-model.md §3.8-§3.9). ``tests/test_native_headers.py`` compiles
these against the real headers where they are available.
"""

from __future__ import annotations

__all__ = ["CDEF", "DVPP_FUNCTIONS", "FAST_CDEF", "FUNCTIONS", "MPI_FUNCTIONS", "TYPES"]

TYPES = """
typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtContext;
typedef void *aclrtEvent;

typedef enum aclrtRunMode {
    ACL_DEVICE,
    ACL_HOST,
} aclrtRunMode;

typedef enum aclrtEventRecordedStatus {
    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
} aclrtEventRecordedStatus;

typedef enum aclrtEventStatus {
    ACL_EVENT_STATUS_COMPLETE  = 0,
    ACL_EVENT_STATUS_NOT_READY = 1,
    ACL_EVENT_STATUS_RESERVED  = 2,
} aclrtEventStatus;

typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_MEM_MALLOC_HUGE_ONLY,
    ACL_MEM_MALLOC_NORMAL_ONLY,
    ACL_MEM_MALLOC_HUGE_FIRST_P2P,
    ACL_MEM_MALLOC_HUGE_ONLY_P2P,
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P,
    ACL_MEM_MALLOC_HUGE1G_ONLY,
    ACL_MEM_MALLOC_HUGE1G_ONLY_P2P,
    ACL_MEM_TYPE_LOW_BAND_WIDTH   = 0x0100,
    ACL_MEM_TYPE_HIGH_BAND_WIDTH  = 0x1000,
    ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000,
} aclrtMemMallocPolicy;

typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST,
    ACL_MEMCPY_HOST_TO_DEVICE,
    ACL_MEMCPY_DEVICE_TO_HOST,
    ACL_MEMCPY_DEVICE_TO_DEVICE,
    ACL_MEMCPY_DEFAULT,
    ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
    ACL_MEMCPY_INNER_DEVICE_TO_DEVICE,
    ACL_MEMCPY_INTER_DEVICE_TO_DEVICE,
} aclrtMemcpyKind;

typedef enum aclrtMemAttr {
    ACL_DDR_MEM,
    ACL_HBM_MEM,
    ACL_DDR_MEM_HUGE,
    ACL_DDR_MEM_NORMAL,
    ACL_HBM_MEM_HUGE,
    ACL_HBM_MEM_NORMAL,
    ACL_DDR_MEM_P2P_HUGE,
    ACL_DDR_MEM_P2P_NORMAL,
    ACL_HBM_MEM_P2P_HUGE,
    ACL_HBM_MEM_P2P_NORMAL,
    ACL_HBM_MEM_HUGE1G,
    ACL_HBM_MEM_P2P_HUGE1G,
    ACL_MEM_NORMAL,
    ACL_MEM_HUGE,
    ACL_MEM_HUGE1G,
    ACL_MEM_P2P_NORMAL,
    ACL_MEM_P2P_HUGE,
    ACL_MEM_P2P_HUGE1G,
} aclrtMemAttr;

typedef enum aclrtMemLocationType {
    ACL_MEM_LOCATION_TYPE_HOST = 0,
    ACL_MEM_LOCATION_TYPE_DEVICE,
    ACL_MEM_LOCATION_TYPE_UNREGISTERED,
    ACL_MEM_LOCATION_TYPE_HOST_NUMA = 4,
} aclrtMemLocationType;

typedef struct aclrtMemLocation {
    uint32_t id;
    aclrtMemLocationType type;
} aclrtMemLocation;

typedef struct aclrtPtrAttributes {
    aclrtMemLocation location;
    uint32_t pageSize;
    uint32_t rsv[4];
} aclrtPtrAttributes;

typedef enum aclrtMemAllocationType {
    ACL_MEM_ALLOCATION_TYPE_PINNED = 0,
} aclrtMemAllocationType;

typedef enum aclrtMemHandleType {
    ACL_MEM_HANDLE_TYPE_NONE = 0,
    ACL_MEM_HANDLE_TYPE_POSIX = 2,
} aclrtMemHandleType;

typedef struct aclrtPhysicalMemProp {
    aclrtMemHandleType handleType;
    aclrtMemAllocationType allocationType;
    aclrtMemAttr memAttr;
    aclrtMemLocation location;
    uint64_t reserve;
} aclrtPhysicalMemProp;

typedef enum aclrtMemGranularityOptions {
    ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
    ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
    ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF = 0xFFFF,
} aclrtMemGranularityOptions;

typedef void* aclrtDrvMemHandle;

typedef enum {
    ACL_RT_MEM_ACCESS_FLAGS_NONE = 0x0,
    ACL_RT_MEM_ACCESS_FLAGS_READ = 0x1,
    ACL_RT_MEM_ACCESS_FLAGS_READWRITE = 0x3,
} aclrtMemAccessFlags;

typedef struct {
    aclrtMemAccessFlags flags;
    aclrtMemLocation location;
    uint8_t rsv[12];
} aclrtMemAccessDesc;

typedef enum aclrtLastErrLevel {
    ACL_RT_THREAD_LEVEL = 0,
} aclrtLastErrLevel;
"""

FUNCTIONS = """
aclError aclInit(const char *configPath);
aclError aclFinalize();
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtResetDeviceForce(int32_t deviceId);
aclError aclrtGetDevice(int32_t *deviceId);
aclError aclrtGetDeviceCount(uint32_t *count);
aclError aclrtGetRunMode(aclrtRunMode *runMode);
const char *aclrtGetSocName();
aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion);
aclError aclsysGetVersionStr(char *pkgName, char *versionStr);
aclError aclrtPeekAtLastError(aclrtLastErrLevel level);
aclError aclrtGetLastError(aclrtLastErrLevel level);
aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void *devPtr);
aclError aclrtMallocHost(void **hostPtr, size_t size);
aclError aclrtFreeHost(void *hostPtr);
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
                     aclrtMemcpyKind kind);
aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total);
aclError aclrtMemGetAddressRange(void *ptr, void **pbase, size_t *psize);
aclError aclrtPointerGetAttributes(const void *ptr, aclrtPtrAttributes *attributes);
aclError aclrtCreateStream(aclrtStream *stream);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtDestroyStreamForce(aclrtStream stream);
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtSynchronizeDevice(void);
aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream stream);
aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
                          aclrtStream stream);
aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
aclError aclrtDestroyContext(aclrtContext context);
aclError aclrtSetCurrentContext(aclrtContext context);
aclError aclrtGetCurrentContext(aclrtContext *context);
aclError aclrtCreateEvent(aclrtEvent *event);
aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag);
aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag);
aclError aclrtDestroyEvent(aclrtEvent event);
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);
aclError aclrtSynchronizeEvent(aclrtEvent event);
aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status);
aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status);
aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent);
aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr,
                                uint64_t flags);
aclError aclrtReleaseMemAddress(void *virPtr);
aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size,
                             const aclrtPhysicalMemProp *prop, uint64_t flags);
aclError aclrtFreePhysical(aclrtDrvMemHandle handle);
aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
                     uint64_t flags);
aclError aclrtUnmapMem(void *virPtr);
aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
                                          aclrtMemGranularityOptions option,
                                          size_t *granularity);
aclError aclrtMemSetAccess(void *virPtr, size_t size, aclrtMemAccessDesc *desc, size_t count);
aclError aclrtMemExportToShareableHandle(aclrtDrvMemHandle handle,
                                         aclrtMemHandleType handleType, uint64_t flags,
                                         uint64_t *shareableHandle);
aclError aclrtMemImportFromShareableHandle(uint64_t shareableHandle, int32_t deviceId,
                                           aclrtDrvMemHandle *handle);
aclError aclrtMemSetPidToShareableHandle(uint64_t shareableHandle, int32_t *pid, size_t pidNum);
aclError aclrtMemRetainAllocationHandle(void* virPtr, aclrtDrvMemHandle *handle);
aclError aclrtMemGetAllocationPropertiesFromHandle(aclrtDrvMemHandle handle,
                                                   aclrtPhysicalMemProp* prop);
"""

#: libacl_dvpp.so (docs/runtime-model.md §3.8).
DVPP_FUNCTIONS = """
aclError acldvppMalloc(void **devPtr, size_t size);
aclError acldvppFree(void *devPtr);
"""

#: libacl_dvpp_mpi.so (docs/runtime-model.md §3.9); hi_* types as ``hi_type.h`` defines them.
MPI_FUNCTIONS = """
typedef int hi_s32;
typedef unsigned int hi_u32;
typedef unsigned long long hi_u64;
typedef void hi_void;
hi_s32 hi_mpi_dvpp_malloc(hi_u32 dev_id, hi_void **dev_ptr, hi_u64 size);
hi_s32 hi_mpi_dvpp_free(hi_void *dev_ptr);
"""

CDEF = TYPES + FUNCTIONS + DVPP_FUNCTIONS + MPI_FUNCTIONS

#: The calls made most often, declared a second time with each pointer as ``uintptr_t``
#: and each enum as its ``unsigned int``: Python ints then pass and come back without a
#: cast or a pointer object (the pair costs about half). The calling conventions of the
#: platforms CANN supports (x86-64 System V, AArch64) pass a pointer and a 64-bit integer
#: alike, so these are the same functions; tests/test_native_headers.py checks that each
#: differs from FUNCTIONS only so.
FAST_CDEF = """
int aclrtMalloc(uintptr_t *devPtr, size_t size, unsigned int policy);
int aclrtFree(uintptr_t devPtr);
int aclrtMemcpy(uintptr_t dst, size_t destMax, uintptr_t src, size_t count, unsigned int kind);
int aclrtMemset(uintptr_t devPtr, size_t maxCount, int32_t value, size_t count);
"""
