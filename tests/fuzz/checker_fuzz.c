/* A fuzz target over the memory checker's pool segments and freed pinned memory
 * (acl_mem_fake_segment_allocated / _freed, acl_mem_fake_check), linked against the
 * library like engine_fuzz.c: each input is a program of small steps on up to four
 * device blocks and two pinned blocks, with the checker on and findings counted.
 *
 * Segments are declared anywhere: inside a block, across its end, over a freed block,
 * at wild addresses, larger than they ask for or not; copies run inside and across them;
 * blocks are freed under live segments. What it checks (abort() on a violation): every
 * return code is one the calls document, copies inside live memory succeed, and nothing
 * crashes or leaks under the sanitizers. Each step's bytes: an opcode, then its
 * arguments (missing bytes read as 0).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl_api.h"
#include "acl_mem_fake.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BLOCKS 4
#define PINNED 2
#define BLOCK_BYTES (64 * 1024)

struct reader {
    const uint8_t *at, *end;
};

static unsigned u8(struct reader *r)
{
    return r->at < r->end ? *r->at++ : 0;
}

static unsigned u16(struct reader *r)
{
    unsigned low = u8(r);
    return low | u8(r) << 8;
}

static void expect(int rc, int a, int b, const char *what)
{
    if (rc != a && rc != b) {
        fprintf(stderr, "checker_fuzz: %s returned %d\n", what, rc);
        abort();
    }
}

/* An address near one of the blocks (inside, at its end, past it) or a wild one. */
static uint64_t address(struct reader *r, void *const *blocks, void *const *pinned)
{
    unsigned how = u8(r), offset = u16(r);
    switch (how % 5) {
    case 0: case 1: return (uint64_t)(uintptr_t)blocks[how / 5 % BLOCKS] + offset;
    case 2: return (uint64_t)(uintptr_t)pinned[how / 5 % PINNED] + offset % 8192;
    case 3: return (uint64_t)(uintptr_t)blocks[how / 5 % BLOCKS] + BLOCK_BYTES - offset % 64;
    default: return ((uint64_t)how << 40) | offset; /* wild, maybe zero */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        acl_mem_fake_set_hazards("count", 0);
        ready = 1;
    }
    acl_mem_fake_reset();
    acl_mem_fake_set_check(1);
    struct reader r = {data, data + size};
    void *blocks[BLOCKS] = {NULL}, *pinned[PINNED] = {NULL};
    static unsigned char host[BLOCK_BYTES];
    expect(aclrtSetDevice(0), 0, 0, "aclrtSetDevice");
    for (int i = 0; i < BLOCKS; i++)
        expect(aclrtMalloc(&blocks[i], BLOCK_BYTES, ACL_MEM_MALLOC_HUGE_FIRST), 0, 0,
               "aclrtMalloc");
    for (int i = 0; i < PINNED; i++)
        expect(aclrtMallocHost(&pinned[i], 8192), 0, 0, "aclrtMallocHost");
    for (int steps = 0; r.at < r.end && steps < 256; steps++) {
        unsigned op = u8(&r) % 6;
        if (op == 0) { /* declare a segment */
            uint64_t start = address(&r, blocks, pinned);
            uint64_t requested = u16(&r), extra = u8(&r);
            int rc = acl_mem_fake_segment_allocated(start, start, requested,
                                                    requested + extra);
            expect(rc, 0, 0, "acl_mem_fake_segment_allocated");
            if (u8(&r) == 255) /* a refusal: asks more than it takes */
                expect(acl_mem_fake_segment_allocated(start, start, extra + 1, extra), 100000,
                       100000, "acl_mem_fake_segment_allocated (refused)");
        } else if (op == 1) { /* give one back, known or not */
            expect(acl_mem_fake_segment_freed(address(&r, blocks, pinned)), 0, 0,
                   "acl_mem_fake_segment_freed");
        } else if (op == 2) { /* a copy into a block, maybe across segments */
            unsigned which = u8(&r) % BLOCKS, offset = u16(&r) % BLOCK_BYTES;
            unsigned count = u16(&r) % (BLOCK_BYTES - offset + 1);
            if (blocks[which] != NULL)
                expect(aclrtMemcpy((char *)blocks[which] + offset, BLOCK_BYTES - offset, host,
                                   count, ACL_MEMCPY_HOST_TO_DEVICE), 0, 0, "aclrtMemcpy");
        } else if (op == 3) { /* free a block (its segments go with it) and make another */
            unsigned which = u8(&r) % BLOCKS;
            if (blocks[which] != NULL)
                expect(aclrtFree(blocks[which]), 0, 0, "aclrtFree");
            blocks[which] = NULL;
            expect(aclrtMalloc(&blocks[which], BLOCK_BYTES, ACL_MEM_MALLOC_HUGE_FIRST), 0, 0,
                   "aclrtMalloc");
        } else if (op == 4) { /* free pinned memory, write through the stale pointer */
            unsigned which = u8(&r) % PINNED, offset = u16(&r) % 8192;
            void *old = pinned[which];
            expect(aclrtFreeHost(old), 0, 0, "aclrtFreeHost");
            ((volatile unsigned char *)old)[offset] = (unsigned char)u8(&r);
            expect(aclrtMallocHost(&pinned[which], 8192), 0, 0, "aclrtMallocHost");
        } else {
            (void)acl_mem_fake_check();
        }
    }
    (void)acl_mem_fake_check();
    for (int i = 0; i < BLOCKS; i++)
        expect(aclrtFree(blocks[i]), 0, 0, "aclrtFree (end)");
    for (int i = 0; i < PINNED; i++)
        expect(aclrtFreeHost(pinned[i]), 0, 0, "aclrtFreeHost (end)");
    expect(aclrtResetDevice(0), 0, 0, "aclrtResetDevice");
    acl_mem_fake_set_check(-1);
    return 0;
}
