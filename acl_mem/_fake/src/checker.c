/* The memory checker (ACL_MEM_CHECK=1): overwrites found on a laptop.
 *
 * On hardware, writing past the bytes requested lands silently in the runtime's padding
 * or in the neighbouring block (docs/runtime-model.md §3.14). With the checker on, every
 * block's slack between the requested and the padded size is filled with canary bytes
 * and verified at its free, at every synchronisation and on demand (acl_mem_fake_check);
 * allocations are poisoned (read-before-write shows); a copy or memset that runs past a
 * block's requested size is reported at once, naming the neighbour it reaches. Findings
 * are reported as hazards are (ACL_MEM_HAZARDS: warn, raise, count, or queued for a
 * binding), each naming the C function that allocated the block.
 *
 * Pools of a binding report the segments they carve out of blocks
 * (acl_mem_fake_segment_allocated / _freed): each gets canaries and poison like a block,
 * a copy past its requested bytes is reported, and a freed segment is poisoned and kept
 * until a new segment or the block's free takes its bytes: any copy touching it is a
 * use after free. Freed pinned host memory, which stays mapped a while, is poisoned too,
 * and a write through a pointer that outlived the free is reported once.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine.h"
#include "../include/acl_mem_fake.h"

enum { CANARY = 0xCB, POISON_ALLOCATED = 0xA5, POISON_FREED = 0xDD };
/* Poison at most this much of a block: whole blocks would make the sparse device dense. */
#define POISON_LIMIT (16 * AM_KiB)

static bool configured, configured_on;

void am_check_read_setting(void)
{
    if (configured) {
        am.check = configured_on;
        return;
    }
    am.check = false;
    const char *value = secure_getenv("ACL_MEM_CHECK");
    if (value == NULL)
        return;
    int wanted = am_yes_or_no(value);
    am.check = wanted == 1;
    if (wanted < 0 && am.setting_error[0] == '\0')
        snprintf(am.setting_error, sizeof am.setting_error, "ACL_MEM_CHECK=%.40s is not one "
                 "of 1, true, yes, on, 0, false, no, off", value);
}

void am_check_allocated(struct am_block *block, unsigned char *host)
{
    block->checked = true;
    memset(host, POISON_ALLOCATED, block->requested < POISON_LIMIT ? block->requested
                                                                   : POISON_LIMIT);
    memset(host + block->requested, CANARY, block->padded - block->requested);
}

/* [host, host + length) bytes that are not `fill`: how many, the first and the last. */
struct damage {
    uint64_t count, first, last;
};

static struct damage damage_in(const unsigned char *host, uint64_t length, unsigned char fill)
{
    struct damage found = {0, length, 0};
    for (uint64_t i = 0; i < length; i++) {
        if (host[i] != fill) {
            found.first = found.first < i ? found.first : i;
            found.last = i;
            found.count++;
        }
    }
    return found;
}

/* A damaged canary of `subject` ("aclrtMalloc block 0x... (100 bytes requested)"), whose
 * canaries start `offset` bytes into it. */
static void report_canary(const char *subject, struct damage d, uint64_t offset,
                          const void *caller, const char *when)
{
    char where[512];
    am_describe_caller(caller, where, sizeof where);
    am_check_report("canary-overwritten", "%s: %llu byte(s) after the requested size were "
                    "overwritten, at offsets %llu..%llu (seen at %s); allocated at:\n%s",
                    subject, (unsigned long long)d.count, (unsigned long long)(offset + d.first),
                    (unsigned long long)(offset + d.last), when, where);
}

void am_check_freeing(const struct am_block *block, const unsigned char *host, const char *when)
{
    if (!block->checked || block->padded <= block->requested)
        return;
    struct damage d = damage_in(host + block->requested, block->padded - block->requested,
                                CANARY);
    if (d.count == 0)
        return;
    char subject[128];
    snprintf(subject, sizeof subject, "%s block %#llx (%llu bytes requested)",
             am_api_name(block->api), (unsigned long long)block->node.key,
             (unsigned long long)block->requested);
    report_canary(subject, d, block->requested, block->caller, when);
}

/* ---- pool segments ------------------------------------------------------------------------ */

static unsigned char *segment_host(uint64_t start, uint64_t size)
{
    struct am_located found = am_locate(start, size);
    return found.where == AM_ON_DEVICE || found.where == AM_PINNED_HOST ? found.host : NULL;
}

static void verify_segment(const struct am_segment *segment, const char *when)
{
    unsigned char *host = segment_host(segment->node.key, segment->node.len);
    if (host == NULL || segment->node.len <= segment->requested)
        return;
    struct damage d = damage_in(host + segment->requested,
                                segment->node.len - segment->requested, CANARY);
    if (d.count == 0)
        return;
    char subject[128];
    snprintf(subject, sizeof subject, "pool segment %#llx of block %#llx (%llu bytes requested)",
             (unsigned long long)segment->node.key, (unsigned long long)segment->parent,
             (unsigned long long)segment->requested);
    report_canary(subject, d, segment->requested, segment->caller, when);
}

/* Forget the segments of `tree` overlapping [start, end). */
static void drop_overlapping(struct am_node **tree, uint64_t start, uint64_t end)
{
    struct am_node *node = am_tree_floor(*tree, start);
    if (node == NULL || node->key + node->len <= start)
        node = am_tree_after(*tree, start);
    while (node != NULL && node->key < end) {
        uint64_t key = node->key;
        am_tree_remove(tree, key);
        free(node);
        node = am_tree_after(*tree, key);
    }
}

void am_check_forget(uint64_t start, uint64_t size)
{
    if (am.segments != NULL)
        drop_overlapping(&am.segments, start, start + size);
    if (am.freed_segments != NULL)
        drop_overlapping(&am.freed_segments, start, start + size);
}

int acl_mem_fake_segment_allocated(uint64_t parent, uint64_t start, uint64_t requested,
                                   uint64_t size)
{
    if (requested > size || start + size < start)
        return AM_INVALID_PARAM;
    am_lock();
    unsigned char *host = am.check && size != 0 ? segment_host(start, size) : NULL;
    struct am_segment *segment = host == NULL ? NULL : calloc(1, sizeof *segment);
    if (segment != NULL) {
        am_check_forget(start, size);
        segment->node.key = start;
        segment->node.len = size;
        segment->parent = parent;
        segment->requested = requested;
        segment->caller = __builtin_return_address(0);
        am_tree_insert(&am.segments, &segment->node);
        memset(host, POISON_ALLOCATED, requested < POISON_LIMIT ? requested : POISON_LIMIT);
        memset(host + requested, CANARY, size - requested);
    }
    am_unlock();
    return AM_SUCCESS;
}

int acl_mem_fake_segment_freed(uint64_t start)
{
    am_lock();
    struct am_segment *segment = (struct am_segment *)am_tree_find(am.segments, start);
    if (segment != NULL && !am.check) {
        /* Checker turned off since: the segment is given back all the same, so that a
         * checker turned on again does not judge copies by it. */
        am_tree_remove(&am.segments, start);
        free(segment);
    } else if (segment != NULL) {
        verify_segment(segment, "free");
        am_tree_remove(&am.segments, start);
        unsigned char *host = segment_host(start, segment->node.len);
        if (host != NULL) {
            memset(host, POISON_FREED, segment->node.len < POISON_LIMIT ? segment->node.len
                                                                        : POISON_LIMIT);
            am_tree_insert(&am.freed_segments, &segment->node);
        } else {
            free(segment);
        }
    }
    am_unlock();
    return AM_SUCCESS;
}

/* ---- freed pinned memory ------------------------------------------------------------------- */

void am_check_pinned_freed(struct am_pinned_freed *freed, const struct am_block *block)
{
    freed->requested = block->requested;
    freed->caller = block->caller;
    freed->poisoned = true;
    memset((void *)(uintptr_t)freed->node.key, POISON_FREED,
           block->padded < POISON_LIMIT ? block->padded : POISON_LIMIT);
}

static void verify_pinned_freed(struct am_pinned_freed *freed, const char *when)
{
    if (!freed->poisoned)
        return;
    uint64_t length = freed->node.len < POISON_LIMIT ? freed->node.len : POISON_LIMIT;
    length = freed->requested < length ? (freed->requested ? freed->requested : 1) : length;
    struct damage d = damage_in((const unsigned char *)(uintptr_t)freed->node.key, length,
                                POISON_FREED);
    if (d.count == 0)
        return;
    freed->poisoned = false; /* once */
    char where[512];
    am_describe_caller(freed->caller, where, sizeof where);
    am_check_report("use-after-free", "aclrtMallocHost block %#llx (%llu bytes requested) was "
                    "written after aclrtFreeHost, at offsets %llu..%llu (seen at %s), through a "
                    "pointer that outlived the free; allocated at:\n%s",
                    (unsigned long long)freed->node.key, (unsigned long long)freed->requested,
                    (unsigned long long)d.first, (unsigned long long)d.last, when, where);
}

void am_check_pinned_unmapping(struct am_pinned_freed *freed)
{
    verify_pinned_freed(freed, "its unmapping");
}

/* ---- bounds ----------------------------------------------------------------------------------- */

static struct am_block *block_holding(uint64_t address)
{
    struct am_device *device = am_device_of(address);
    if (device != NULL)
        return am_block_holding(device, address);
    return (struct am_block *)am_tree_containing(am.pinned, address);
}

/* A copy or memset touching pool segments: true when the segments decided (a finding
 * was made or the access lies within a live segment's requested bytes). */
static bool check_segments(uint64_t address, uint64_t count, const char *what)
{
    struct am_segment *segment = (struct am_segment *)am_tree_containing(am.segments, address);
    uint64_t end = address + (count ? count : 1);
    if (segment == NULL || end > segment->node.key + segment->node.len) {
        struct am_node *freed = am_tree_floor(am.freed_segments, end - 1);
        if (freed != NULL && freed->key + freed->len > address) {
            struct am_segment *gone = (struct am_segment *)freed;
            char where[512];
            am_describe_caller(gone->caller, where, sizeof where);
            am_check_report("use-after-free", "%s of %llu bytes at %#llx touches pool segment "
                            "%#llx (%llu bytes), freed already; it was allocated at:\n%s", what,
                            (unsigned long long)count, (unsigned long long)address,
                            (unsigned long long)gone->node.key,
                            (unsigned long long)gone->requested, where);
            return true;
        }
    }
    if (segment == NULL)
        return false;
    if (address + count > segment->node.key + segment->requested) {
        struct am_node *after = am_tree_after(am.segments, segment->node.key);
        char neighbour[64];
        if (after != NULL && after->key < address + count)
            snprintf(neighbour, sizeof neighbour, "pool segment %#llx",
                     (unsigned long long)after->key);
        else
            snprintf(neighbour, sizeof neighbour, "the segment's padding");
        am_check_report("boundary-crossed", "%s of %llu bytes at %#llx runs past pool segment "
                        "%#llx (%llu bytes requested) into %s", what, (unsigned long long)count,
                        (unsigned long long)address, (unsigned long long)segment->node.key,
                        (unsigned long long)segment->requested, neighbour);
    }
    return true;
}

void am_check_bounds(uint64_t address, uint64_t count, const char *what)
{
    if ((am.segments != NULL || am.freed_segments != NULL) &&
        check_segments(address, count, what))
        return;
    struct am_block *block = block_holding(address);
    if (block == NULL || address + count <= block->node.key + block->requested)
        return;
    uint64_t end = block->node.key + block->node.len;
    struct am_block *next = address + count > end ? block_holding(end) : NULL;
    char neighbour[96];
    if (next != NULL)
        snprintf(neighbour, sizeof neighbour, "%s block %#llx", am_api_name(next->api),
                 (unsigned long long)next->node.key);
    else
        snprintf(neighbour, sizeof neighbour, "the runtime's padding");
    am_check_report("boundary-crossed", "%s of %llu bytes at %#llx runs past %s block %#llx "
                    "(%llu bytes requested) into %s", what, (unsigned long long)count,
                    (unsigned long long)address, am_api_name(block->api),
                    (unsigned long long)block->node.key, (unsigned long long)block->requested,
                    neighbour);
}

void am_check_all(const char *when)
{
    for (int d = 0; d < am.device_count; d++) {
        struct am_device *device = &am.devices[d];
        for (struct am_block *block = am_block_after(device, 0); block != NULL;
             block = am_block_after(device, block->node.key))
            am_check_freeing(block, am_host_of(device, block->node.key), when);
    }
    for (struct am_node *node = am_tree_after(am.pinned, 0); node != NULL;
         node = am_tree_after(am.pinned, node->key))
        am_check_freeing((struct am_block *)node, (const unsigned char *)(uintptr_t)node->key,
                         when);
    for (struct am_node *node = am_tree_after(am.segments, 0); node != NULL;
         node = am_tree_after(am.segments, node->key))
        verify_segment((struct am_segment *)node, when);
    for (struct am_node *node = am_tree_after(am.pinned_freed, 0); node != NULL;
         node = am_tree_after(am.pinned_freed, node->key))
        verify_pinned_freed((struct am_pinned_freed *)node, when);
}

/* ---- the control API ------------------------------------------------------------------- */

int acl_mem_fake_set_check(int on)
{
    am_lock();
    configured = on >= 0;
    configured_on = on > 0;
    am_check_read_setting();
    if (!am.check)
        am_quarantine_release(); /* nothing holds those addresses back any more */
    am_unlock();
    return 0;
}

unsigned long acl_mem_fake_check(void)
{
    am_lock();
    unsigned long before = am_count_of("canary-overwritten") + am_count_of("use-after-free");
    if (am.check)
        am_check_all("acl_mem_fake_check()");
    unsigned long found = am_count_of("canary-overwritten") + am_count_of("use-after-free") -
                          before;
    am_unlock();
    return found;
}
