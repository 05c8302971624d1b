/* Hazards: races with queued work the engine noticed (a free, a copy or a reset while
 * a stream still has work on that memory). Always counted by kind. Then, as
 * ACL_MEM_HAZARDS or acl_mem_fake_set_hazards says: "warn" writes one line to stderr,
 * "raise" also makes the call fail with 507000 once its effect is done (a C program has
 * no exception; aclGetRecentErrMsg names the hazard), "count" only counts. A binding
 * that reports hazards itself asks for them to be queued instead, and drains the queue
 * when acl_mem_fake_findings_waiting is non-zero.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine.h"
#include "../include/acl_mem_fake.h"

enum mode { WARN, RAISE, COUNT };

static const char *const kinds[] = {
    "free-while-queued", "access-before-synchronize", "queued-work-on-freed-memory",
    "destroy-with-pending-work", "reset-with-pending-work",
    "destroy-context-with-pending-work",
    /* the memory checker's (checker.c) */
    "canary-overwritten", "boundary-crossed", "use-after-free",
};
#define KIND_COUNT (sizeof kinds / sizeof kinds[0])
#define QUEUE_SIZE 64

struct finding {
    char kind[40];
    char text[1024];
    unsigned long thread; /* pthread_self() of the call that made it */
};

static enum mode mode = WARN;
static bool configured_mode, queue_for_binding;
static unsigned long counts[KIND_COUNT];
static struct finding queue[QUEUE_SIZE];
static unsigned queue_head, queue_length;
static unsigned long queue_dropped;

ACL_MEM_FAKE_API unsigned long acl_mem_fake_findings_waiting;

/* Findings waiting for the binding, a dropped count included (under the lock). */
static void publish(void)
{
    __atomic_store_n(&acl_mem_fake_findings_waiting, queue_length + (queue_dropped != 0),
                     __ATOMIC_RELEASE);
}

static _Thread_local bool raised;
static _Thread_local char raised_text[1100];

static bool mode_named(const char *name, enum mode *out)
{
    static const char *const names[] = {"warn", "raise", "count"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(name, names[i]) == 0) {
            *out = (enum mode)i;
            return true;
        }
    }
    return false;
}

void am_hazards_read_setting(void)
{
    if (configured_mode)
        return;
    mode = WARN;
    const char *value = secure_getenv("ACL_MEM_HAZARDS");
    if (value == NULL)
        return;
    char word[16];
    size_t length = strspn(value, " \t\n");
    value += length;
    length = strcspn(value, " \t\n");
    if (length == 0)
        return; /* blank: the default */
    if (length >= sizeof word || (memcpy(word, value, length), word[length] = '\0',
                                  !mode_named(word, &mode))) {
        if (am.setting_error[0] == '\0')
            snprintf(am.setting_error, sizeof am.setting_error, "ACL_MEM_HAZARDS=%.40s is not "
                     "one of warn, raise, count", value);
        mode = WARN;
    }
}

void am_hazards_clear(void)
{
    memset(counts, 0, sizeof counts);
    queue_head = queue_length = 0;
    queue_dropped = 0;
    __atomic_store_n(&acl_mem_fake_findings_waiting, 0, __ATOMIC_RELEASE);
}

static void report(const char *what, const char *kind, const char *format, va_list args)
{
    for (size_t i = 0; i < KIND_COUNT; i++)
        if (strcmp(kinds[i], kind) == 0)
            counts[i]++;
    char text[1024];
    vsnprintf(text, sizeof text, format, args);
    if (queue_for_binding) {
        if (queue_length == QUEUE_SIZE) {
            queue_dropped++;
            publish();
            return;
        }
        struct finding *slot = &queue[(queue_head + queue_length) % QUEUE_SIZE];
        snprintf(slot->kind, sizeof slot->kind, "%s", kind);
        snprintf(slot->text, sizeof slot->text, "%s", text);
        slot->thread = (unsigned long)pthread_self();
        queue_length++;
        publish();
        return;
    }
    if (mode == COUNT)
        return;
    fprintf(stderr, "acl_mem: %s %s: %s\n", what, kind, text);
    if (mode == RAISE && !raised) {
        raised = true;
        snprintf(raised_text, sizeof raised_text, "%s: %s", kind, text);
    }
}

void am_hazard(const char *kind, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    report("hazard", kind, format, args);
    va_end(args);
}

void am_check_report(const char *kind, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    report("memory check", kind, format, args);
    va_end(args);
}

aclError am_hazard_result(aclError code, const char *call)
{
    if (!raised)
        return code;
    raised = false;
    if (code != AM_SUCCESS)
        return code;
    return am_fail(AM_RT_INTERNAL_ERROR, call, "done, but a hazard or memory-check finding "
                   "was reported (hazards=raise): %s", raised_text);
}

/* ---- the control API -------------------------------------------------------------------- */

int acl_mem_fake_set_hazards(const char *mode_name, int queue_findings)
{
    enum mode chosen = WARN;
    if (mode_name != NULL && !mode_named(mode_name, &chosen))
        return AM_INVALID_PARAM;
    am_lock();
    configured_mode = mode_name != NULL;
    if (configured_mode)
        mode = chosen;
    else
        am_hazards_read_setting();
    queue_for_binding = queue_findings != 0;
    am_unlock();
    return 0;
}

unsigned long am_count_of(const char *kind)
{
    unsigned long total = 0;
    for (size_t i = 0; i < KIND_COUNT; i++)
        if (kind == NULL || strcmp(kinds[i], kind) == 0)
            total += counts[i];
    return total;
}

unsigned long acl_mem_fake_hazard_count(const char *kind)
{
    am_lock();
    unsigned long total = am_count_of(kind);
    am_unlock();
    return total;
}

int acl_mem_fake_next_finding(char *kind, size_t kind_size, char *text, size_t text_size)
{
    unsigned long thread;
    return acl_mem_fake_next_finding_of(kind, kind_size, text, text_size, &thread);
}

int acl_mem_fake_next_finding_of(char *kind, size_t kind_size, char *text, size_t text_size,
                                 unsigned long *thread)
{
    if (kind == NULL || text == NULL || kind_size == 0 || text_size == 0 || thread == NULL)
        return -AM_INVALID_PARAM;
    *thread = 0;
    am_lock();
    if (queue_length == 0) {
        unsigned long dropped = queue_dropped;
        queue_dropped = 0;
        publish();
        am_unlock();
        if (dropped == 0)
            return 0;
        snprintf(kind, kind_size, "dropped");
        snprintf(text, text_size, "%lu more hazards were found while nobody read them",
                 dropped);
        return 1;
    }
    struct finding *slot = &queue[queue_head];
    snprintf(kind, kind_size, "%s", slot->kind);
    snprintf(text, text_size, "%s", slot->text);
    *thread = slot->thread;
    queue_head = (queue_head + 1) % QUEUE_SIZE;
    queue_length--;
    publish();
    am_unlock();
    return 1;
}
