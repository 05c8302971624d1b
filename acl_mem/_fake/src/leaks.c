/* Leaks: the blocks still allocated, each with the return address of the call that made
 * it, and the virtual memory still held (reservations, physical handles, mappings).
 * ACL_MEM_LEAK_REPORT=1 prints them when the program exits, in the format of the Python
 * binding's report (the C caller as a "File ..., line 0, in symbol+0xoffset" line);
 * acl_mem_fake_leaks() lists them for a binding. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine.h"
#include "../include/acl_mem_fake.h"

bool am_leak_report_wanted(void)
{
    const char *value = secure_getenv("ACL_MEM_LEAK_REPORT");
    if (value == NULL)
        return false;
    int wanted = am_yes_or_no(value);
    if (wanted < 0 && am.setting_error[0] == '\0')
        snprintf(am.setting_error, sizeof am.setting_error, "ACL_MEM_LEAK_REPORT=%.40s is not "
                 "one of 1, true, yes, on, 0, false, no, off", value);
    return wanted == 1;
}

void am_describe_caller(const void *caller_address, char *out, size_t size)
{
    Dl_info where;
    /* The return address is just past the call: look the call itself up. */
    const char *caller = (const char *)caller_address;
    if (caller == NULL || dladdr(caller - 1, &where) == 0 || where.dli_fname == NULL)
        snprintf(out, size, "  (caller unknown)");
    else if (where.dli_sname != NULL)
        snprintf(out, size, "  File \"%s\", line 0, in %s+%#lx", where.dli_fname,
                 where.dli_sname, (unsigned long)(caller - (const char *)where.dli_saddr));
    else
        snprintf(out, size, "  File \"%s\", line 0, in +%#lx (no exported symbol here: a "
                 "static function, or a program linked without -rdynamic)", where.dli_fname,
                 (unsigned long)(caller - (const char *)where.dli_fbase));
}

struct visiting {
    void (*visit)(const struct am_held *, void *);
    void *context;
};

static void visit_block(const struct am_block *block, struct visiting *visiting)
{
    struct am_held held = {am_api_name(block->api), block->node.key, block->requested,
                           block->device, block->caller, false, block->node.len,
                           block->page_size};
    visiting->visit(&held, visiting->context);
}

/* Everything held: device blocks by device and address, pinned host blocks, then
 * virtual memory (reservations, physical handles not freed, mappings). */
static void each_held(void (*visit)(const struct am_held *, void *), void *context)
{
    struct visiting visiting = {visit, context};
    for (int d = 0; d < am.device_count; d++)
        for (struct am_block *block = am_block_after(&am.devices[d], 0); block != NULL;
             block = am_block_after(&am.devices[d], block->node.key))
            visit_block(block, &visiting);
    for (struct am_node *node = am_tree_after(am.pinned, 0); node != NULL;
         node = am_tree_after(am.pinned, node->key))
        visit_block((const struct am_block *)node, &visiting);
    am_vmm_each(visit, context);
}

static void count_held(const struct am_held *held, void *context)
{
    (void)held;
    ++*(size_t *)context;
}

static void print_held(const struct am_held *held, void *context)
{
    (void)context;
    char device[16];
    if (held->device >= 0)
        snprintf(device, sizeof device, "%d", held->device);
    else
        snprintf(device, sizeof device, "None");
    fprintf(stderr, "  %s %#llx (%llu bytes, device %s)\n", held->api,
            (unsigned long long)held->address, (unsigned long long)held->size, device);
    if (held->vmm)
        return;
    char where[512];
    am_describe_caller(held->caller, where, sizeof where);
    fprintf(stderr, "%s\n", where);
}

static bool report_off; /* acl_mem_fake_set_leak_report(0) */

static void report_at_exit(void)
{
    if (__atomic_load_n(&report_off, __ATOMIC_ACQUIRE))
        return; /* a binding prints its own (acl_mem in Python, with Python stacks) */
    if (!am_lock_within(2000)) {
        fprintf(stderr, "acl_mem: no leak report: another thread stayed inside the library "
                "at exit\n");
        return;
    }
    size_t count = 0;
    each_held(count_held, &count);
    if (count != 0) {
        fprintf(stderr, "acl_mem: %zu allocation(s) never freed:\n", count);
        each_held(print_held, NULL);
    }
    am_unlock();
}

/* At load, before the program's own constructors register their exit handlers: the
 * report runs after them (C++ globals that free device memory in their destructors). */
__attribute__((constructor)) static void arm_report(void)
{
    if (am_leak_report_wanted())
        atexit(report_at_exit);
}

int acl_mem_fake_set_leak_report(int on)
{
    __atomic_store_n(&report_off, on == 0, __ATOMIC_RELEASE);
    return 0;
}

/* ---- the control API ----------------------------------------------------------------- */

struct filling {
    struct acl_mem_fake_leak *out;
    size_t max, count;
};

static void fill_held(const struct am_held *held, void *context)
{
    struct filling *filling = context;
    if (filling->count < filling->max) {
        struct acl_mem_fake_leak *leak = &filling->out[filling->count];
        memset(leak, 0, sizeof *leak);
        leak->address = held->address;
        leak->size = held->size;
        leak->device = held->device;
        leak->caller = held->caller;
        leak->extent = held->extent;
        leak->page_size = held->page_size;
        snprintf(leak->api, sizeof leak->api, "%s", held->api);
    }
    filling->count++;
}

size_t acl_mem_fake_leaks(struct acl_mem_fake_leak *out, size_t max)
{
    struct filling filling = {.out = out, .max = out == NULL ? 0 : max, .count = 0};
    am_lock();
    each_held(fill_held, &filling);
    am_unlock();
    return filling.count;
}
