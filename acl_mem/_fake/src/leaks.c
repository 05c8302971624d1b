/* Leaks: the blocks still allocated, each with the return address of the call that made
 * it. ACL_MEM_LEAK_REPORT=1 prints them when the program exits, in the format of the
 * Python fake's report (the C caller as a "File ..., line 0, in symbol+0xoffset" line);
 * acl_mem_fake_leaks() lists them for a binding. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine.h"
#include "../include/acl_mem_fake.h"

/* 1 yes, 0 no, -1 a value that is neither (a setting error). */
static int yes_or_no(const char *value)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    char word[8];
    value += strspn(value, " \t\n");
    size_t length = strcspn(value, " \t\n");
    if (length == 0)
        return 0; /* blank: the default */
    if (length >= sizeof word || value[length + strspn(value + length, " \t\n")] != '\0')
        return -1;
    memcpy(word, value, length);
    word[length] = '\0';
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(word, yes[i]) == 0)
            return 1;
        if (strcasecmp(word, no[i]) == 0)
            return 0;
    }
    return -1;
}

bool am_leak_report_wanted(void)
{
    const char *value = secure_getenv("ACL_MEM_LEAK_REPORT");
    if (value == NULL)
        return false;
    int wanted = yes_or_no(value);
    if (wanted < 0 && am.setting_error[0] == '\0')
        snprintf(am.setting_error, sizeof am.setting_error, "ACL_MEM_LEAK_REPORT=%.40s is not "
                 "one of 1, true, yes, on, 0, false, no, off", value);
    return wanted == 1;
}

/* Each live block, device blocks by device and address, then pinned host blocks. */
static void each_block(void (*visit)(const struct am_block *, void *), void *context)
{
    for (int d = 0; d < am.device_count; d++)
        for (struct am_node *node = am_tree_after(am.devices[d].blocks, 0); node != NULL;
             node = am_tree_after(am.devices[d].blocks, node->key))
            visit((const struct am_block *)node, context);
    for (struct am_node *node = am_tree_after(am.pinned, 0); node != NULL;
         node = am_tree_after(am.pinned, node->key))
        visit((const struct am_block *)node, context);
}

static void count_block(const struct am_block *block, void *context)
{
    (void)block;
    ++*(size_t *)context;
}

static void print_block(const struct am_block *block, void *context)
{
    (void)context;
    char device[16];
    if (block->device >= 0)
        snprintf(device, sizeof device, "%d", (int)block->device);
    else
        snprintf(device, sizeof device, "None");
    fprintf(stderr, "  %s %#llx (%llu bytes, device %s)\n", am_api_name(block->api),
            (unsigned long long)block->node.key, (unsigned long long)block->requested, device);
    Dl_info where;
    /* The return address is just past the call: look the call itself up. */
    const char *caller = (const char *)block->caller;
    if (caller == NULL || dladdr(caller - 1, &where) == 0 || where.dli_fname == NULL) {
        fprintf(stderr, "  (caller unknown)\n");
        return;
    }
    if (where.dli_sname != NULL)
        fprintf(stderr, "  File \"%s\", line 0, in %s+%#lx\n", where.dli_fname,
                where.dli_sname, (unsigned long)(caller - (const char *)where.dli_saddr));
    else
        fprintf(stderr, "  File \"%s\", line 0, in +%#lx (no exported symbol here: a static "
                "function, or a program linked without -rdynamic)\n", where.dli_fname,
                (unsigned long)(caller - (const char *)where.dli_fbase));
}

static void report_at_exit(void)
{
    if (!am_lock_within(2000)) {
        fprintf(stderr, "acl_mem: no leak report: another thread stayed inside the library "
                "at exit\n");
        return;
    }
    size_t count = 0;
    each_block(count_block, &count);
    if (count != 0) {
        fprintf(stderr, "acl_mem: %zu allocation(s) never freed:\n", count);
        each_block(print_block, NULL);
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

/* ---- the control API ----------------------------------------------------------------- */

struct filling {
    struct acl_mem_fake_leak *out;
    size_t max, count;
};

static void fill_block(const struct am_block *block, void *context)
{
    struct filling *filling = context;
    if (filling->count < filling->max) {
        struct acl_mem_fake_leak *leak = &filling->out[filling->count];
        memset(leak, 0, sizeof *leak);
        leak->address = block->node.key;
        leak->size = block->requested;
        leak->device = block->device;
        leak->caller = block->caller;
        snprintf(leak->api, sizeof leak->api, "%s", am_api_name(block->api));
    }
    filling->count++;
}

size_t acl_mem_fake_leaks(struct acl_mem_fake_leak *out, size_t max)
{
    struct filling filling = {.out = out, .max = out == NULL ? 0 : max, .count = 0};
    am_lock();
    each_block(fill_block, &filling);
    am_unlock();
    return filling.count;
}
