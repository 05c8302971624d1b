/* aclrtMemcpy and aclrtMemset (docs/runtime-model.md §3.10, §3.11). Memory the engine
 * knows (device blocks, pinned host blocks) is copied directly; any other host range is
 * copied by the kernel, which refuses an unmapped or protected page instead of the
 * process dying. */
#include <stdio.h>
#include <string.h>

#include "engine.h"


/* Back-to-back live blocks from `first` cover [first, end). */
static bool covered(struct am_device *device, struct am_node *first, uint64_t end)
{
    struct am_node *block = first;
    while (block->key + block->len < end) {
        struct am_node *next =
            (struct am_node *)am_block_starting(device, block->key + block->len);
        if (next == NULL)
            return false;
        block = next;
    }
    return true;
}

struct am_located am_locate(uint64_t address, uint64_t count)
{
    struct am_located found = {.where = AM_NOWHERE, .host = NULL, .device = -1,
                               .block = NULL, .mapping_start = 0};
    if (address >= am_device_base() &&
        address < am_device_base() + AM_MAX_DEVICES * AM_DEVICE_SLOT) {
        struct am_device *device = am_device_of(address);
        if (device == NULL)
            return found;
        struct am_node *block = (struct am_node *)am_block_holding(device, address);
        if (block == NULL || address + count < address)
            return found;
        if (address + count > block->key + block->len && !covered(device, block, address + count))
            return found;
        found.where = AM_ON_DEVICE;
        found.host = am_host_of(device, address);
        found.device = device->id;
        found.block = (struct am_block *)block;
        return found;
    }
    if (address >= AM_VMM_BASE && address < AM_VMM_END) {
        if (!am_vmm_find(address, count, &found))
            found.where = AM_NOWHERE;
        return found;
    }
    struct am_node *pinned = am_tree_containing(am.pinned, address);
    if (pinned != NULL) {
        if (count > pinned->key + pinned->len - address)
            return found;
        found.where = AM_PINNED_HOST;
        found.host = (unsigned char *)(uintptr_t)address;
        found.block = (struct am_block *)pinned;
        return found;
    }
    if (address < AM_HOST_PAGE || address >= AM_USER_SPACE_END ||
        count > AM_USER_SPACE_END - address)
        return found;
    /* Freed pinned memory kept mapped a while: the runtime no longer knows it. */
    if (am_tree_containing(am.pinned_freed, address) != NULL ||
        am_tree_containing(am.pinned_freed, address + count - 1) != NULL) {
        return found;
    }
    struct am_node *next = am_tree_after(am.pinned_freed, address);
    if (next != NULL && next->key < address + count)
        return found;
    found.where = AM_PAGEABLE;
    found.host = (unsigned char *)(uintptr_t)address;
    return found;
}

/* ---- host ranges proven usable ---------------------------------------------------------
 * Pages of pageable host memory a kernel-checked copy read or wrote (docs/fidelity.md):
 * later copies of them use memmove under the fault guard instead of a system call. An
 * entry goes when a guarded copy over it faults (unmapped or protected since). Per
 * thread: threads copying on different devices share nothing here. */
#define PROVEN_SLOTS 32

static _Thread_local struct {
    uint64_t start, end; /* whole pages */
    bool writable;
} proven[PROVEN_SLOTS];
static _Thread_local unsigned proven_next;

static uint64_t page_down(uint64_t address)
{
    return address & ~(AM_HOST_PAGE - 1);
}

static bool is_proven(const unsigned char *host, uint64_t count, bool write)
{
    uint64_t start = (uintptr_t)host, end = start + count;
    if (end < start)
        return false;
    for (unsigned i = 0; i < PROVEN_SLOTS; i++)
        if (proven[i].start <= start && end <= proven[i].end && proven[i].end != 0 &&
            (!write || proven[i].writable))
            return true;
    return false;
}

static void prove(const unsigned char *host, uint64_t count, bool write)
{
    uint64_t start = page_down((uintptr_t)host);
    uint64_t end = page_down((uintptr_t)host + count - 1) + AM_HOST_PAGE;
    if (end <= start || !am_os_guard_ready())
        return; /* the last page of the address space, or no guard: nothing is kept */
    unsigned slot = proven_next++ % PROVEN_SLOTS;
    proven[slot].start = start;
    proven[slot].end = end;
    proven[slot].writable = write;
}

static void forget_proven(const unsigned char *host, uint64_t count)
{
    uint64_t start = (uintptr_t)host, end = start + count < start ? UINT64_MAX : start + count;
    for (unsigned i = 0; i < PROVEN_SLOTS; i++)
        if (proven[i].start < end && start < proven[i].end)
            proven[i].start = proven[i].end = 0;
}

/* The calling thread's only (the others keep theirs: harmless, the guard stands behind
 * every entry). */
void am_proven_clear(void)
{
    memset(proven, 0, sizeof proven);
}

bool am_copy_now(const struct am_located *target, const struct am_located *source,
                 uint64_t count)
{
    bool dst_pageable = target->where == AM_PAGEABLE, src_pageable = source->where == AM_PAGEABLE;
    if (!dst_pageable && !src_pageable) {
        memmove(target->host, source->host, count);
        return true;
    }
    if ((!dst_pageable || is_proven(target->host, count, true)) &&
        (!src_pageable || is_proven(source->host, count, false))) {
        if (am_os_guarded_copy(target->host, source->host, count))
            return true;
        /* Unmapped or protected since it was proven: the kernel says which. */
        forget_proven(target->host, count);
        forget_proven(source->host, count);
    }
    /* Both sides proven whole first: a refused copy writes nothing (runtime-model §8.10). */
    if ((src_pageable && !am_os_usable(source->host, count, false)) ||
        (dst_pageable && !am_os_usable(target->host, count, true)) ||
        !am_os_checked_copy(target->host, source->host, count))
        return false;
    if (dst_pageable)
        prove(target->host, count, true);
    if (src_pageable)
        prove(source->host, count, false);
    return true;
}

bool am_set_pageable(unsigned char *host, int value, uint64_t count)
{
    if (is_proven(host, count, true)) {
        if (am_os_guarded_set(host, value, count))
            return true;
        forget_proven(host, count);
    }
    if (!am_os_usable(host, count, true) || !am_os_checked_set(host, value, count))
        return false;
    prove(host, count, true);
    return true;
}

#define MEMCPY_CALL "aclrtMemcpy"

/* A copy whose checks passed, left to its caller to move with the locks released. */
struct am_unlocked {
    bool pending;
    struct am_located target, source;
};

/* aclrtMemcpy's checks and copy, with the locks of the devices it touches held. With
 * `later` (the fast path), a large copy is only checked, and left in *later. */
static aclError memcpy_locked(void *dst, size_t destMax, const void *src, size_t count,
                              aclrtMemcpyKind kind, struct am_unlocked *later)
{
    /* The call's text is made only when it fails: a copy that succeeds formats nothing. */
    /* The ACL layer: 9.1.0 checks count 0 first (success), then NULL, then the kind; older
     * releases NULL, then the kind, and leave count 0 to the runtime. */
    if (am.cann->count_checked_first && count == 0)
        return (AM_SUCCESS);
    if (dst == NULL || src == NULL)
        return (am_fail(AM_INVALID_PARAM, MEMCPY_CALL, "dst or src is NULL"));
    if ((uint32_t)kind > 5)
        return (am_fail(AM_INVALID_PARAM, MEMCPY_CALL, "kind %d is not a copy "
                                   "direction", (int)kind));
    if (destMax == 0 || count == 0 || count > destMax)
        return (am_fail(AM_RT_PARAM_INVALID, MEMCPY_CALL, "count %zu must be at "
                                   "least 1 and at most destMax %zu", count, destMax));
    if (dst == src)
        return (AM_SUCCESS);
    if (am_current_device() == NULL)
        return (am_fail(AM_CONTEXT_NULL, MEMCPY_CALL, AM_NO_CONTEXT, "this thread"));
    struct am_located target = am_locate((uintptr_t)dst, count);
    struct am_located source = am_locate((uintptr_t)src, count);
    if (target.where == AM_NOWHERE || source.where == AM_NOWHERE)
        return (am_fail(AM_RT_PARAM_INVALID, MEMCPY_CALL, "%s %p + %zu bytes is "
                                   "not inside live memory", target.where == AM_NOWHERE ?
                                   "dst" : "src", target.where == AM_NOWHERE ? dst : src,
                                   count));
    if (target.device >= 0 && source.device >= 0 && target.device != source.device)
        return (am_fail(AM_RT_PARAM_INVALID, MEMCPY_CALL, "dst is on device %d "
                                   "and src on device %d: copy between devices through the "
                                   "host", target.device, source.device));
    if (acl_mem_fake_queued_work != 0) {
        am_check_queued((uintptr_t)dst, count, false, "access-before-synchronize",
                        "aclrtMemcpy writes");
        am_check_queued((uintptr_t)src, count, true, "access-before-synchronize",
                        "aclrtMemcpy reads");
    }
    if (am.check) {
        am_check_bounds((uintptr_t)dst, count, "aclrtMemcpy write");
        am_check_bounds((uintptr_t)src, count, "aclrtMemcpy read");
    }
    if (later != NULL && count >= AM_UNLOCKED_COPY) {
        later->pending = true;
        later->target = target;
        later->source = source;
        return (AM_SUCCESS);
    }
    if (!am_copy_now(&target, &source, count))
        return (am_fail(AM_RT_PARAM_INVALID, MEMCPY_CALL, "host memory "
                                   "%p + %zu bytes is not mapped %s", target.where ==
                                   AM_PAGEABLE ? dst : src, count, target.where ==
                                   AM_PAGEABLE ? "writable" : "readable"));
    return (am_hazard_result(AM_SUCCESS, "aclrtMemcpy"));
}

/* The arena locks a synchronous copy or set takes on its fast path: those of the blocks
 * its ranges are in (device_slots), or the thread's own on its current device when both
 * are host memory; false when a range is in no block or in blocks of several arenas
 * (the engine lock then). */
struct am_slots {
    int dst, src;       /* am_slot_of each range (-1: host memory) */
    int first, second;  /* the locks */
};

static bool fast_slots(const void *dst, const void *src, uint64_t count, struct am_slots *out)
{
    out->dst = am_slot_of((uintptr_t)dst, count);
    out->src = src == NULL ? -1 : am_slot_of((uintptr_t)src, count);
    if (out->dst == -2 || out->src == -2)
        return false;
    out->first = out->dst >= 0 ? out->dst : out->src;
    out->second = out->dst >= 0 ? out->src : -1;
    if (out->first < 0) {
        int device = am_fast_current_device();
        out->first = device < 0 ? -1 : device * AM_ARENAS + am_thread_arena();
    }
    return out->first >= 0;
}

/* Under the locks: the ranges are still in the arenas chosen (an address no block holds
 * may have changed owner meanwhile). */
static bool same_slots(const void *dst, const void *src, uint64_t count,
                       const struct am_slots *slots)
{
    return (slots->dst < 0 || am_slot_of((uintptr_t)dst, count) == slots->dst) &&
           (slots->src < 0 || am_slot_of((uintptr_t)src, count) == slots->src);
}

/* A copy on the fast path, the locks of slots first and second held; they are released
 * before it returns (before a large copy moves its bytes). */
static aclError memcpy_fast(void *dst, size_t destMax, const void *src, size_t count,
                            aclrtMemcpyKind kind, int first, int second)
{
    struct am_unlocked later = {.pending = false};
    aclError code = memcpy_locked(dst, destMax, src, count, kind, &later);
    if (!later.pending) {
        am_fast_unlock(first, second);
        return code;
    }
    __atomic_add_fetch(&am.unlocked_copies, 1, __ATOMIC_ACQ_REL);
    am_fast_unlock(first, second);
    bool copied = am_copy_now(&later.target, &later.source, count);
    __atomic_sub_fetch(&am.unlocked_copies, 1, __ATOMIC_ACQ_REL);
    if (!copied)
        return am_fail(AM_RT_PARAM_INVALID, MEMCPY_CALL, "host memory %p + %zu bytes "
                       "is not mapped %s", later.target.where == AM_PAGEABLE ? dst : src,
                       count, later.target.where == AM_PAGEABLE ? "writable" : "readable");
    return am_hazard_result(AM_SUCCESS, "aclrtMemcpy");
}

aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
                     aclrtMemcpyKind kind)
{
    AM_ARGS(aclrtMemcpy);
    struct am_slots slots;
    if (fast_slots(dst, src, count, &slots) && am_fast_lock(slots.first, slots.second)) {
        if (same_slots(dst, src, count, &slots))
            return memcpy_fast(dst, destMax, src, count, kind, slots.first, slots.second);
        am_fast_unlock(slots.first, slots.second);
    }
    ENTER(MEMCPY_CALL);
    return unlock_with(memcpy_locked(dst, destMax, src, count, kind, NULL));
}

static aclError memset_locked(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
#define MEMSET_CALL "aclrtMemset"
    if (count == 0 && am.cann->zero_count_succeeds) /* 9.1.0: before any other check */
        return (AM_SUCCESS);
    if (devPtr == NULL)
        return (am_fail(AM_INVALID_PARAM, MEMSET_CALL, "devPtr is NULL"));
    if (count == 0) /* before 9.1.0 the runtime refuses count 0 */
        return (am_fail(AM_RT_PARAM_INVALID, MEMSET_CALL, "count is 0"));
    if (am_current_device() == NULL)
        return (am_fail(AM_CONTEXT_NULL, MEMSET_CALL, AM_NO_CONTEXT, "this thread"));
    if (count > maxCount)
        return (am_fail(AM_RT_PARAM_INVALID, MEMSET_CALL, "count %zu is more "
                                   "than maxCount %zu", count, maxCount));
    struct am_located target = am_locate((uintptr_t)devPtr, count);
    if (target.where == AM_NOWHERE)
        return (am_fail(AM_RT_PARAM_INVALID, MEMSET_CALL, "%p + %zu bytes is "
                                   "not inside live memory", devPtr, count));
    if (target.where == AM_PAGEABLE) {
        /* The driver sets pageable host memory like any host memory (§3.11). */
        if (!am_set_pageable(target.host, value & 0xFF, count))
            return (am_fail(AM_RT_PARAM_INVALID, MEMSET_CALL, "host memory "
                                       "%p + %zu bytes is not mapped writable", devPtr,
                                       count));
        return (AM_SUCCESS);
    }
    if (acl_mem_fake_queued_work != 0)
        am_check_queued((uintptr_t)devPtr, count, false, "access-before-synchronize",
                        "aclrtMemset writes");
    if (am.check)
        am_check_bounds((uintptr_t)devPtr, count, "aclrtMemset");
    memset(target.host, value & 0xFF, count);
    return (am_hazard_result(AM_SUCCESS, "aclrtMemset"));
}

aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    AM_ARGS(aclrtMemset);
    struct am_slots slots;
    if (fast_slots(devPtr, NULL, count, &slots) && am_fast_lock(slots.first, slots.second)) {
        if (same_slots(devPtr, NULL, count, &slots)) {
            aclError code = memset_locked(devPtr, maxCount, value, count);
            am_fast_unlock(slots.first, slots.second);
            return code;
        }
        am_fast_unlock(slots.first, slots.second);
    }
    ENTER(MEMSET_CALL);
    return unlock_with(memset_locked(devPtr, maxCount, value, count));
}
