/* Streams, events and asynchronous copies from C on acl_mem's fake library: work is
 * queued and lands only at a synchronisation; an event orders two streams; a query of a
 * record with work before it says NOT_READY once; a forced destroy drops queued work;
 * freeing memory with work queued on it is a hazard, and the work is skipped instead of
 * writing into memory allocated there since. tests/test_engine_programs.py runs it with
 * each ACL_MEM_HAZARDS mode and reads "hazard-rc <code>" for the free that races. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "acl/acl.h"
#include "steps.h"

int main(void)
{
    void *dev = NULL, *other = NULL, *pinned = NULL;
    aclrtStream first = NULL, second = NULL, gone = NULL;
    aclrtEvent done = NULL, never = NULL;
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_COMPLETE;
    unsigned char out[256];
    float ms = -1.0f;

    ACL_CHECK("no context", aclrtCreateStream(&first), 107002);
    ACL_CHECK("init", aclInit(NULL), ACL_SUCCESS);
    ACL_CHECK("set device", aclrtSetDevice(0), ACL_SUCCESS);
    ACL_CHECK("stream NULL", aclrtCreateStream(NULL), 100000);
    ACL_CHECK("create first", aclrtCreateStream(&first), ACL_SUCCESS);
    ACL_CHECK("create second", aclrtCreateStream(&second), ACL_SUCCESS);
    ACL_CHECK("malloc", aclrtMalloc(&dev, 256, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    ACL_CHECK("malloc other", aclrtMalloc(&other, 256, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    ACL_CHECK("pinned", aclrtMallocHost(&pinned, 256), ACL_SUCCESS);
    ACL_CHECK("memset now", aclrtMemset(dev, 256, 0x11, 256), ACL_SUCCESS);

    /* Queued, not run: the device still holds 0x11 until the stream is synchronised. */
    ACL_CHECK("memset async", aclrtMemsetAsync(dev, 256, 0x22, 256, first), ACL_SUCCESS);
    memset(pinned, 0, 256);
    ACL_CHECK("copy async to pinned", aclrtMemcpyAsync(pinned, 256, dev, 256,
                                                       ACL_MEMCPY_DEVICE_TO_HOST, first),
              ACL_SUCCESS);
    EXPECT("nothing landed yet", ((unsigned char *)pinned)[0] == 0);
    ACL_CHECK("sync first", aclrtSynchronizeStream(first), ACL_SUCCESS);
    EXPECT("landed in order", ((unsigned char *)pinned)[0] == 0x22 &&
                                  ((unsigned char *)pinned)[255] == 0x22);

    /* An event orders the streams: second waits for first's memset before copying. */
    ACL_CHECK("create event", aclrtCreateEvent(&done), ACL_SUCCESS);
    ACL_CHECK("never recorded wait", aclrtStreamWaitEvent(second, done), 107000);
    ACL_CHECK("memset on first", aclrtMemsetAsync(dev, 256, 0x33, 256, first), ACL_SUCCESS);
    ACL_CHECK("record", aclrtRecordEvent(done, first), ACL_SUCCESS);
    ACL_CHECK("wait", aclrtStreamWaitEvent(second, done), ACL_SUCCESS);
    ACL_CHECK("copy on second", aclrtMemcpyAsync(other, 256, dev, 256,
                                                 ACL_MEMCPY_DEVICE_TO_DEVICE, second),
              ACL_SUCCESS);
    ACL_CHECK("query", aclrtQueryEventStatus(done, &status), ACL_SUCCESS);
    EXPECT("first query not ready", status == ACL_EVENT_RECORDED_STATUS_NOT_READY);
    ACL_CHECK("query again", aclrtQueryEventStatus(done, &status), ACL_SUCCESS);
    EXPECT("second query complete", status == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    ACL_CHECK("sync second", aclrtSynchronizeStream(second), ACL_SUCCESS);
    ACL_CHECK("read other", aclrtMemcpy(out, sizeof out, other, 256,
                                        ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    EXPECT("ordered by the event", out[0] == 0x33 && out[255] == 0x33);
    ACL_CHECK("elapsed", aclrtEventElapsedTime(&ms, done, done), ACL_SUCCESS);
    EXPECT("elapsed zero", ms == 0.0f);

    /* A forced destroy recycles queued work: it never runs. */
    ACL_CHECK("create gone", aclrtCreateStream(&gone), ACL_SUCCESS);
    ACL_CHECK("memset on gone", aclrtMemsetAsync(other, 256, 0x44, 256, gone), ACL_SUCCESS);
    ACL_CHECK("record on gone", aclrtRecordEvent(done, gone), ACL_SUCCESS);
    ACL_CHECK("destroy force", aclrtDestroyStreamForce(gone), ACL_SUCCESS);
    ACL_CHECK("destroyed handle", aclrtSynchronizeStream(gone), 107017);
    ACL_CHECK("record completed", aclrtSynchronizeEvent(done), ACL_SUCCESS);
    ACL_CHECK("read other again", aclrtMemcpy(out, sizeof out, other, 256,
                                              ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    EXPECT("dropped work never ran", out[0] == 0x33);

    /* Freeing memory queued work names: a hazard; the work is skipped when it runs,
     * so the block allocated at the same address afterwards keeps its bytes. */
    ACL_CHECK("memset queued", aclrtMemsetAsync(other, 256, 0x55, 256, first), ACL_SUCCESS);
    aclError hazard = aclrtFree(other);
    printf("hazard-rc %d\n", (int)hazard);
    void *again = NULL;
    ACL_CHECK("malloc again", aclrtMalloc(&again, 256, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT("same address", again == other);
    ACL_CHECK("memset again", aclrtMemset(again, 256, 0x66, 256), ACL_SUCCESS);
    aclError skipped = aclrtSynchronizeStream(first);
    printf("skipped-rc %d\n", (int)skipped);
    ACL_CHECK("read again", aclrtMemcpy(out, sizeof out, again, 256,
                                        ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    EXPECT("stale work skipped", out[0] == 0x66 && out[255] == 0x66);

    /* Events and streams after their end. */
    ACL_CHECK("event ex", aclrtCreateEventExWithFlag(&never, 0x8), ACL_SUCCESS);
    ACL_CHECK("ex never recorded is complete", aclrtQueryEventStatus(never, &status),
              ACL_SUCCESS);
    EXPECT("complete", status == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    ACL_CHECK("ex reset refused", aclrtResetEvent(never, first), 207000);
    ACL_CHECK("destroy event", aclrtDestroyEvent(never), ACL_SUCCESS);
    ACL_CHECK("destroyed event", aclrtQueryEventStatus(never, &status), 107017);
    ACL_CHECK("destroy first", aclrtDestroyStream(first), ACL_SUCCESS);
    ACL_CHECK("destroy second", aclrtDestroyStream(second), ACL_SUCCESS);
    ACL_CHECK("destroy default", aclrtDestroyStream(NULL), 100000);
    ACL_CHECK("memset on default", aclrtMemsetAsync(again, 256, 0x77, 256, NULL), ACL_SUCCESS);
    ACL_CHECK("sync device", aclrtSynchronizeDevice(), ACL_SUCCESS);
    ACL_CHECK("read default", aclrtMemcpy(out, sizeof out, again, 256,
                                          ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    EXPECT("default stream ran", out[0] == 0x77);
    ACL_CHECK("destroy event done", aclrtDestroyEvent(done), ACL_SUCCESS);
    ACL_CHECK("free", aclrtFree(dev), ACL_SUCCESS);
    ACL_CHECK("free again", aclrtFree(again), ACL_SUCCESS);
    ACL_CHECK("free host", aclrtFreeHost(pinned), ACL_SUCCESS);
    /* Work left queued when the device goes: a hazard, and it never runs. */
    ACL_CHECK("malloc last", aclrtMalloc(&dev, 256, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    ACL_CHECK("queued at reset", aclrtMemsetAsync(dev, 256, 0, 256, NULL), ACL_SUCCESS);
    printf("reset-rc %d\n", (int)aclrtResetDevice(0));
    ACL_CHECK("finalize", aclFinalize(), ACL_SUCCESS);
    printf("done\n");
    return 0;
}
