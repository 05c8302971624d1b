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
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine.h"
#include "../include/acl_mem_fake.h"

enum { CANARY = 0xCB, POISON_ALLOCATED = 0xA5 };
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

void am_check_freeing(const struct am_block *block, const unsigned char *host, const char *when)
{
    if (!block->checked || block->padded <= block->requested)
        return;
    const unsigned char *slack = host + block->requested;
    uint64_t length = block->padded - block->requested, first = length, last = 0, damaged = 0;
    for (uint64_t i = 0; i < length; i++) {
        if (slack[i] != CANARY) {
            first = first < i ? first : i;
            last = i;
            damaged++;
        }
    }
    if (damaged == 0)
        return;
    char where[512];
    am_describe_caller(block->caller, where, sizeof where);
    am_check_report("canary-overwritten", "%s block %#llx (%llu bytes requested): %llu byte(s) "
                    "after the requested size were overwritten, at offsets %llu..%llu (seen at "
                    "%s); allocated at:\n%s", am_api_name(block->api),
                    (unsigned long long)block->node.key, (unsigned long long)block->requested,
                    (unsigned long long)damaged,
                    (unsigned long long)(block->requested + first),
                    (unsigned long long)(block->requested + last), when, where);
}

static struct am_block *block_holding(uint64_t address)
{
    struct am_device *device = am_device_of(address);
    struct am_node *node = device != NULL ? am_tree_containing(device->blocks, address)
                                          : am_tree_containing(am.pinned, address);
    return (struct am_block *)node;
}

void am_check_bounds(uint64_t address, uint64_t count, const char *what)
{
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
        for (struct am_node *node = am_tree_after(device->blocks, 0); node != NULL;
             node = am_tree_after(device->blocks, node->key))
            am_check_freeing((struct am_block *)node, am_host_of(device, node->key), when);
    }
    for (struct am_node *node = am_tree_after(am.pinned, 0); node != NULL;
         node = am_tree_after(am.pinned, node->key))
        am_check_freeing((struct am_block *)node, (const unsigned char *)(uintptr_t)node->key,
                         when);
}

/* ---- the control API ------------------------------------------------------------------- */

int acl_mem_fake_set_check(int on)
{
    am_lock();
    configured = on >= 0;
    configured_on = on > 0;
    am_check_read_setting();
    am_unlock();
    return 0;
}

unsigned long acl_mem_fake_check(void)
{
    am_lock();
    unsigned long before = am_count_of("canary-overwritten");
    if (am.check)
        am_check_all("acl_mem_fake_check()");
    unsigned long found = am_count_of("canary-overwritten") - before;
    am_unlock();
    return found;
}
