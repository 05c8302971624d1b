/* The engine's process state: the lock, settings, contexts, the calling thread's view,
 * failure records, device memory release and the fork rules. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sched.h>
#include <time.h>

#include "engine.h"

struct am_engine am = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Arena locks spin a little before sleeping (glibc): their critical sections are a few
 * hundred nanoseconds, shorter than a sleep and a wake-up (2 threads sharing one: 0.3x
 * the rounds of one thread with a plain mutex, 0.7x with this). */
static void arena_lock_init(pthread_mutex_t *lock)
{
    pthread_mutexattr_t attributes;
    pthread_mutexattr_init(&attributes);
#ifdef __GLIBC__
    pthread_mutexattr_settype(&attributes, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(lock, &attributes);
    pthread_mutexattr_destroy(&attributes);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Thread_local struct am_thread thread_state;

struct am_thread *am_thread(void)
{
    struct am_thread *self = &thread_state;
    uint64_t generation = __atomic_load_n(&am.generation, __ATOMIC_ACQUIRE);
    if (self->generation != generation) {
        /* A reset or a fork since this thread last looked: its contexts are gone. */
        self->generation = generation;
        self->ref = self->ctx = self->cur = 0;
    }
    return self;
}

int am_thread_arena(void)
{
    static unsigned next;
    struct am_thread *self = &thread_state;
    if (self->arena == 0)
        self->arena = (int)(__atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % AM_ARENAS) + 1;
    return self->arena - 1;
}

static void init_arena_locks(void)
{
    for (int i = 0; i < AM_MAX_DEVICES; i++)
        for (int j = 0; j < AM_ARENAS; j++)
            arena_lock_init(&am.devices[i].arenas[j].lock);
}

struct am_arena *am_arena_activate(struct am_device *device, int index)
{
    struct am_arena *arena = &device->arenas[index];
    __atomic_store_n(&arena->active, true, __ATOMIC_RELAXED);
    return arena;
}

static const char *code_name(aclError code)
{
    switch (code) {
    case AM_INVALID_PARAM: return "ACL_ERROR_INVALID_PARAM";
    case AM_REPEAT_INITIALIZE: return "ACL_ERROR_REPEAT_INITIALIZE";
    case AM_INVALID_FILE: return "ACL_ERROR_INVALID_FILE";
    case AM_PARSE_FILE: return "ACL_ERROR_PARSE_FILE";
    case AM_REPEAT_FINALIZE: return "ACL_ERROR_REPEAT_FINALIZE";
    case AM_INTERNAL_ERROR: return "ACL_ERROR_INTERNAL_ERROR";
    case AM_FEATURE_UNSUPPORTED: return "ACL_ERROR_FEATURE_UNSUPPORTED";
    case AM_RT_PARAM_INVALID: return "ACL_ERROR_RT_PARAM_INVALID";
    case AM_INVALID_DEVICEID: return "ACL_ERROR_RT_INVALID_DEVICEID";
    case AM_CONTEXT_NULL: return "ACL_ERROR_RT_CONTEXT_NULL";
    case AM_INVALID_MEMORY_TYPE: return "ACL_ERROR_RT_INVALID_MEMORY_TYPE";
    case AM_FEATURE_NOT_SUPPORT: return "ACL_ERROR_RT_FEATURE_NOT_SUPPORT";
    case AM_MEMORY_ALLOCATION: return "ACL_ERROR_RT_MEMORY_ALLOCATION";
    case AM_RT_INTERNAL_ERROR: return "ACL_ERROR_RT_INTERNAL_ERROR";
    case AM_CONTEXT_RELEASE_ERROR: return "ACL_ERROR_RT_CONTEXT_RELEASE_ERROR";
    default: return "error";
    }
}

struct am_thread *am_thread_raw(void)
{
    return &thread_state;
}

void am_args(const struct am_call *call, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3,
             uint64_t a4, uint64_t a5)
{
    struct am_thread *self = &thread_state;
    self->call = call;
    self->traced = false;
    /* A call that gives something back is recorded at its entry (trace.c): a free sorts
     * before the allocation that reuses its address. 0: it entered while nothing was
     * recorded (then it is recorded at its exit, if a recording began meanwhile). */
    self->entry_ns = 0;
    if (__builtin_expect(__atomic_load_n(&am.tracing, __ATOMIC_RELAXED), 0) &&
        call->trace != NULL && call->trace->release)
        self->entry_ns = am_trace_now();
    self->args[0] = a0;
    self->args[1] = a1;
    self->args[2] = a2;
    self->args[3] = a3;
    self->args[4] = a4;
    self->args[5] = a5;
}

/* "call(name=value, ...)" of the recorded call when it is `call`, else "call". */
static int describe_call(struct am_thread *self, const char *call, char *out, size_t size)
{
    const struct am_call *recorded = self->call;
    if (recorded == NULL || strcmp(recorded->name, call) != 0)
        return snprintf(out, size, "%s", call);
    int used = snprintf(out, size, "%s(", call);
    for (int i = 0; i < recorded->count && used >= 0 && (size_t)used < size; i++) {
        uint64_t value = self->args[i];
        const char *name = recorded->args[i].name, *comma = i ? ", " : "";
        char *at = out + used;
        size_t left = size - (size_t)used;
        int n;
        switch (recorded->args[i].kind) {
        case AM_ARG_POINTER:
            n = value == 0 ? snprintf(at, left, "%s%s=NULL", comma, name)
                           : snprintf(at, left, "%s%s=%#llx", comma, name,
                                      (unsigned long long)value);
            break;
        case AM_ARG_HEX:
            n = snprintf(at, left, "%s%s=0x%llx", comma, name, (unsigned long long)value);
            break;
        case AM_ARG_UNSIGNED:
            n = snprintf(at, left, "%s%s=%llu", comma, name, (unsigned long long)value);
            break;
        default:
            n = snprintf(at, left, "%s%s=%lld", comma, name, (long long)(int64_t)value);
            break;
        }
        used = n < 0 ? n : used + n;
    }
    if (used >= 0 && (size_t)used < size)
        used += snprintf(out + used, size - (size_t)used, ")");
    return used;
}

aclError am_fail(aclError code, const char *call, const char *format, ...)
{
    struct am_thread *self = &thread_state;
    int used = describe_call(self, call, self->message, sizeof self->message);
    if (used >= 0 && (size_t)used < sizeof self->message)
        used += snprintf(self->message + used, sizeof self->message - (size_t)used,
                         ": %s (%d). ", code_name(code), (int)code);
    if (used > 0 && (size_t)used < sizeof self->message) {
        va_list args;
        va_start(args, format);
        vsnprintf(self->message + used, sizeof self->message - (size_t)used, format, args);
        va_end(args);
        /* The detail reads as a sentence, like the Python layer's hints. */
        char *first = self->message + used;
        if (*first >= 'a' && *first <= 'z')
            *first = (char)(*first - 'a' + 'A');
    }
    self->has_message = true;
    am_hazard_result(code, call); /* a failed call reports its failure, not a hazard */
    /* The runtime's own failures become the thread's last error; the ACL layer's
     * parameter checks (100000 ...) do not (docs/runtime-model.md §3.1.2). */
    int family = code / 1000;
    if (family == 107 || family == 207 || family == 507)
        self->last_error = code;
    return code;
}

struct am_human am_human(uint64_t n)
{
    /* As acl_mem/_hints.py writes sizes: whole units, else two decimals and the bytes. */
    static const struct {
        uint64_t unit;
        const char *name;
    } units[] = {{AM_GiB, "GiB"}, {AM_MiB, "MiB"}, {AM_KiB, "KiB"}};
    struct am_human out;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (n < units[i].unit)
            continue;
        if (n % units[i].unit == 0)
            snprintf(out.text, sizeof out.text, "%llu %s",
                     (unsigned long long)(n / units[i].unit), units[i].name);
        else
            snprintf(out.text, sizeof out.text, "%.2f %s (%llu bytes)",
                     (double)n / (double)units[i].unit, units[i].name, (unsigned long long)n);
        return out;
    }
    snprintf(out.text, sizeof out.text, "%llu bytes", (unsigned long long)n);
    return out;
}

/* ---- settings ------------------------------------------------------------------------ */

int am_yes_or_no(const char *value)
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

/* A yes/no variable: its value, or `fallback` when unset or blank; a value that is
 * neither becomes the setting error (every call fails and says so). */
static bool flag_setting(const char *name, bool fallback)
{
    const char *value = secure_getenv(name);
    if (value == NULL || value[strspn(value, " \t\n")] == '\0')
        return fallback;
    int wanted = am_yes_or_no(value);
    if (wanted < 0 && am.setting_error[0] == '\0')
        snprintf(am.setting_error, sizeof am.setting_error, "%s=%.40s is not one of 1, true, "
                 "yes, on, 0, false, no, off", name, value);
    return wanted == 1;
}

/* The variable's text with blanks stripped into buffer, or NULL when unset or blank. */
static const char *setting(const char *name, char *buffer, size_t size)
{
    const char *value = secure_getenv(name);
    if (value == NULL)
        return NULL;
    while (*value == ' ' || *value == '\t' || *value == '\n')
        value++;
    size_t length = strlen(value);
    while (length > 0 && (value[length - 1] == ' ' || value[length - 1] == '\t' ||
                          value[length - 1] == '\n'))
        length--;
    if (length == 0)
        return NULL;
    if (length >= size)
        length = size - 1;
    memcpy(buffer, value, length);
    buffer[length] = '\0';
    return buffer;
}

/* Explicit configuration (acl_mem_fake_configure) wins over the environment. */
static const struct am_profile *configured_profile;
static const struct am_release *configured_release;
static int configured_devices;
static uint64_t configured_capacity;

static void read_settings(void)
{
    char buffer[128];
    am.setting_error[0] = '\0';
    am.profile = configured_profile;
    if (am.profile == NULL) {
        const char *name = setting("ACL_MEM_FAKE_PROFILE", buffer, sizeof buffer);
        am.profile = name == NULL ? &am_profiles[0] : am_profile_named(name);
        if (am.profile == NULL) {
            snprintf(am.setting_error, sizeof am.setting_error,
                     "ACL_MEM_FAKE_PROFILE=%s is not a device profile of the fake "
                     "(atlas-a2, atlas-inference, ascend950, atlas-200dk)", name);
            am.profile = &am_profiles[0];
        }
    }
    am.cann = configured_release;
    if (am.cann == NULL) {
        const char *name = setting("ACL_MEM_FAKE_CANN", buffer, sizeof buffer);
        am.cann = name == NULL ? am_release_named(AM_DEFAULT_RELEASE) : am_release_named(name);
        if (am.cann == NULL) {
            if (am.setting_error[0] == '\0')
                snprintf(am.setting_error, sizeof am.setting_error,
                         "ACL_MEM_FAKE_CANN=%s is not a CANN release the fake plays "
                         "(8.5.0, 9.0.1, 9.1.0)", name);
            am.cann = am_release_named(AM_DEFAULT_RELEASE);
        }
#ifdef AM_ONLY_CANN_8_5_0
        if (strcmp(am.cann->name, AM_DEFAULT_RELEASE) != 0) {
            if (am.setting_error[0] == '\0')
                snprintf(am.setting_error, sizeof am.setting_error,
                         "ACL_MEM_FAKE_CANN=%s: this is the fake's CANN 8.5.0 library "
                         "(lib64/cann-8.5.0); later releases are the library in lib64", name);
            am.cann = am_release_named(AM_DEFAULT_RELEASE);
        }
#endif
    }
    am_hazards_read_setting();
    am_check_read_setting();
    (void)am_leak_report_wanted(); /* only to refuse a value that is not yes or no */
    am.abort_on_unsupported = flag_setting("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", false);
    am.device_count = configured_devices ? configured_devices : am.profile->device_count;
    am.capacity = configured_capacity ? configured_capacity : am.profile->capacity;
}

/* ---- devices ------------------------------------------------------------------------- */

static uint64_t align_up(uint64_t value, uint64_t to)
{
    return (value + to - 1) / to * to;
}

static void layout_devices(void)
{
    uint64_t normal = align_up(am.capacity * am.profile->normal_sixteenths / 16, AM_HUGE_PAGE);
    if (normal > am.capacity)
        normal = am.capacity;
    uint64_t span = align_up(2 * am.capacity, AM_GiB);
    if (span > AM_DEVICE_SLOT - 2 * AM_DVPP_WINDOW)
        span = AM_DEVICE_SLOT - 2 * AM_DVPP_WINDOW;
    for (int i = 0; i < AM_MAX_DEVICES; i++) {
        struct am_device *device = &am.devices[i];
        /* The arenas keep their locks (held by whoever lays devices out), serial counters
         * and chunk arrays; the owner table keeps its leaves. */
        am_arenas_clear(device);
        memset(&device->id, 0, sizeof *device - offsetof(struct am_device, id));
        device->id = i;
        /* Arena 0 only, until threads use the others: the engine lock takes fewer. */
        for (int j = 0; j < AM_ARENAS; j++)
            __atomic_store_n(&device->arenas[j].active, j == 0, __ATOMIC_RELAXED);
        uint64_t slot = am_device_base() + (uint64_t)i * AM_DEVICE_SLOT;
        device->heap.base = slot;
        device->heap.size = span;
        device->dvpp.base = slot + AM_DEVICE_SLOT - AM_DVPP_WINDOW;
        device->dvpp.size = AM_DVPP_WINDOW;
        device->normal_total = normal;
        device->huge_total = am.capacity - normal;
        if (i < am.device_count) {
            am_space_init(&device->heap_space, device->heap.base, span);
            am_space_init(&device->dvpp_space, device->dvpp.base, AM_DVPP_WINDOW);
        }
    }
}

/* Host bytes sit this far from page alignment: a copy between a page-aligned device
 * block and a malloc'ed host buffer whose addresses differ by a multiple of 4 KiB
 * stalls on 4K aliasing. */
#define AM_SKEW 2048

bool am_backing_ready(struct am_device *device)
{
    struct am_region *regions[2] = {&device->heap, &device->dvpp};
    for (int i = 0; i < 2; i++) {
        struct am_region *region = regions[i];
        if (region->backing != NULL)
            continue;
        if (am.profile->run_mode == 0 && am.space_reserved) {
            if (!am_os_map_at(region->base, region->size))
                return false;
            region->backing = (unsigned char *)(uintptr_t)region->base;
            region->in_place = true;
            region->skew = 0;
            continue;
        }
        unsigned char *mapped = am_os_map(region->size + AM_HOST_PAGE, true);
        if (mapped == NULL)
            return false;
        region->backing = mapped + AM_SKEW;
        region->in_place = false;
        region->skew = AM_SKEW;
    }
    return true;
}

static void discard_region(struct am_region *region)
{
    if (region->backing != NULL)
        am_os_discard(region->backing - region->skew, region->size + (region->in_place ? 0 :
                                                                       AM_HOST_PAGE));
}

static void unmap_region(struct am_region *region)
{
    if (region->backing == NULL)
        return;
    if (region->in_place)
        am_os_unmap_at(region->base, region->size);
    else
        am_os_unmap(region->backing - region->skew, region->size + AM_HOST_PAGE);
    region->backing = NULL;
}

unsigned char *am_host_of(struct am_device *device, uint64_t address)
{
    struct am_region *region =
        am_in_dvpp(device, address) ? &device->dvpp : &device->heap;
    return region->backing + (address - region->base);
}

static void free_block(struct am_node *node)
{
    free(node);
}

void am_release_device_memory(struct am_device *device)
{
    am_check_forget(am_device_base() + (uint64_t)device->id * AM_DEVICE_SLOT,
                    AM_DEVICE_SLOT);
    am_arenas_clear(device);
    device->normal_used = device->normal_physical;
    device->huge_used = device->huge_physical;
    am_space_reset(&device->heap_space);
    am_space_reset(&device->dvpp_space);
    device->quarantined = 0; /* the spaces are whole again */
    device->kept_large[0] = device->kept_large[1] = 0;
    discard_region(&device->heap);
    discard_region(&device->dvpp);
}

/* ---- contexts ------------------------------------------------------------------------ */

struct am_context *am_context_at(size_t sequence)
{
    if (sequence == 0 || sequence >= __atomic_load_n(&am.context_count, __ATOMIC_ACQUIRE))
        return NULL;
    struct am_context *chunk = __atomic_load_n(&am.context_chunks[sequence / AM_CONTEXT_CHUNK],
                                               __ATOMIC_ACQUIRE);
    return chunk == NULL ? NULL : &chunk[sequence % AM_CONTEXT_CHUNK];
}

/* A handle is BASE + (generation << SLOT_BITS | slot) * STEP. */
#define SLOT_BITS 22
#define GENERATION_LIMIT ((uint32_t)1 << 16)

uint64_t am_context_handle(size_t sequence)
{
    struct am_context *context = am_context_at(sequence);
    uint64_t generation = context == NULL ? 0
        : __atomic_load_n(&context->generation, __ATOMIC_RELAXED);
    return AM_CONTEXT_BASE + (generation << SLOT_BITS | sequence) * AM_CONTEXT_STEP;
}

struct am_context *am_context_of(uint64_t handle)
{
    if (handle <= AM_CONTEXT_BASE || (handle - AM_CONTEXT_BASE) % AM_CONTEXT_STEP != 0)
        return NULL;
    uint64_t field = (handle - AM_CONTEXT_BASE) / AM_CONTEXT_STEP;
    uint64_t sequence = field & (((uint64_t)1 << SLOT_BITS) - 1), generation = field >> SLOT_BITS;
    if (generation >= GENERATION_LIMIT)
        return NULL;
    struct am_context *context = am_context_at((size_t)sequence);
    if (context == NULL || __atomic_load_n(&context->generation, __ATOMIC_RELAXED) != generation)
        return NULL;
    return context;
}

/* A slot whose generation reached the last value is retired, never given again: a
 * handle of its last context must not come back as another context's. */
static bool retired(const struct am_context *context)
{
    return context->generation == GENERATION_LIMIT - 1;
}

uint64_t am_context_new(int device, bool primary)
{
    size_t sequence;
    struct am_context *context;
    if (am.context_free != 0) {
        sequence = am.context_free - 1; /* a slot an ended context left */
        context = &am.context_chunks[sequence / AM_CONTEXT_CHUNK][sequence % AM_CONTEXT_CHUNK];
        am.context_free = context->next_free;
    } else {
        sequence = am.context_count == 0 ? 1 : am.context_count; /* 0 is no context */
        for (;;) {
            size_t index = sequence / AM_CONTEXT_CHUNK;
            if (index >= AM_CONTEXT_CHUNKS)
                return 0;
            if (am.context_chunks[index] == NULL) {
                struct am_context *chunk = calloc(AM_CONTEXT_CHUNK, sizeof *chunk);
                if (chunk == NULL)
                    return 0;
                __atomic_store_n(&am.context_chunks[index], chunk, __ATOMIC_RELEASE);
            }
            context = &am.context_chunks[index][sequence % AM_CONTEXT_CHUNK];
            if (!retired(context))
                break;
            sequence++; /* used up before a reset: skip it */
        }
    }
    context->next_free = 0;
    context->alive = true;
    context->primary = primary;
    context->streams = 0;
    context->default_stream = NULL;
    __atomic_store_n(&context->device, device, __ATOMIC_RELAXED);
    __atomic_store_n(&context->generation, context->generation + 1, __ATOMIC_RELAXED);
    if (sequence >= am.context_count)
        __atomic_store_n(&am.context_count, sequence + 1, __ATOMIC_RELEASE);
    return am_context_handle(sequence);
}

/* An ended context's slot goes on the free list, unless it is retired. */
static void free_slot(struct am_context *context, size_t sequence)
{
    if (retired(context))
        return;
    context->next_free = (uint32_t)am.context_free;
    am.context_free = sequence + 1;
}

void am_end_context(uint64_t handle)
{
    struct am_context *context = am_context_of(handle);
    if (context != NULL && context->alive) {
        context->alive = false;
        am_context_ended(handle);
        /* The slot serves the next context; this handle never names it (generation). */
        free_slot(context, (size_t)(((handle - AM_CONTEXT_BASE) / AM_CONTEXT_STEP) &
                                    (((uint64_t)1 << SLOT_BITS) - 1)));
    }
}

struct am_device *am_current_device(void)
{
    struct am_context *context = am_context_of(am_thread()->cur);
    if (context == NULL || !context->alive)
        return NULL;
    return &am.devices[context->device];
}

/* ---- the engine ---------------------------------------------------------------------- */

aclError am_fault(const char *call)
{
    for (int i = 0; i < am.fault_count; i++) {
        if (strcmp(am.faults[i].call, call) != 0)
            continue;
        if (--am.faults[i].nth > 0)
            return AM_SUCCESS;
        aclError code = am.faults[i].code;
        am.faults[i] = am.faults[--am.fault_count];
        return code;
    }
    return AM_SUCCESS;
}

static void release_everything(void)
{
    am.fault_count = 0;
    am_streams_clear();
    am_events_clear();
    am_hazards_clear();
    am_proven_clear();
    am_vmm_clear(false);
    for (int i = 0; i < AM_MAX_DEVICES; i++) {
        struct am_device *device = &am.devices[i];
        am_arenas_clear(device);
        am_tree_clear(&device->heap_space.free, free_block);
        am_tree_clear(&device->dvpp_space.free, free_block);
        device->quarantined = 0;
        device->kept_large[0] = device->kept_large[1] = 0;
    }
    /* Chunks stay (a fast path may be reading one); a reset starts the numbering again. */
    for (size_t i = 1; i < am.context_count; i++)
        am_context_at(i)->alive = false;
    __atomic_store_n(&am.context_count, 0, __ATOMIC_RELEASE);
    am.context_free = 0;
    am_tree_clear(&am.pinned, free_block);
    /* Freed pinned memory kept mapped for stale views goes with the old process's state
     * (live pinned blocks stay mapped: views of them may still be used). */
    for (int i = 0; i < am.quarantine_count; i++)
        am_os_unmap((void *)(uintptr_t)am.quarantine[i][0], am.quarantine[i][1]);
    am_tree_clear(&am.pinned_freed, free_block);
    am.quarantine_count = 0;
    am_tree_clear(&am.segments, free_block);
    am_tree_clear(&am.freed_segments, free_block);
}

/* A fresh device model (the pinned mappings of the old one stay mapped: views of them
 * may exist). Under the lock. */
static void start_over(void)
{
    struct am_region kept[AM_MAX_DEVICES][2];
    for (int i = 0; i < AM_MAX_DEVICES; i++) {
        kept[i][0] = am.devices[i].heap;
        kept[i][1] = am.devices[i].dvpp;
    }
    release_everything();
    read_settings();
    __atomic_add_fetch(&am.generation, 1, __ATOMIC_RELEASE);
    am.init_count = 0;
    am.finalized = false;
    am.have_config = false;
    layout_devices();
    /* Backing mappings are kept when the layout did not move: mapping 2x the capacity
     * anew on every reset would cost more than the reset. */
    for (int i = 0; i < AM_MAX_DEVICES; i++) {
        for (int r = 0; r < 2; r++) {
            struct am_region *region = r == 0 ? &am.devices[i].heap : &am.devices[i].dvpp;
            struct am_region *old = &kept[i][r];
            if (old->backing == NULL)
                continue;
            bool in_place = am.profile->run_mode == 0 && am.space_reserved;
            if (old->base == region->base && old->size == region->size &&
                old->in_place == in_place) {
                *region = *old;
                discard_region(region);
            } else {
                unmap_region(old);
            }
        }
    }
}

static void before_fork(void)
{
    am_lock();
    am_trace_before_fork();
}

static void after_fork_in_parent(void)
{
    am_trace_after_fork(false);
    am_unlock();
}

/* The child gets what a new process sees: no contexts, empty devices. A thread of the
 * parent may have been in the engine; the lock was taken before the fork, so the state
 * is whole. */
static void after_fork_in_child(void)
{
    pthread_mutex_init(&am.lock, NULL);
    am_trace_after_fork(true);
    init_arena_locks();
    __atomic_store_n(&am.engine_held, 0, __ATOMIC_RELEASE);
    for (int i = 0; i < AM_MAX_DEVICES; i++) {
        am.devices[i].references = am.devices[i].created = 0;
        am.devices[i].primary = 0;
        if (i < am.device_count)
            am_release_device_memory(&am.devices[i]);
    }
    for (size_t i = 1; i < am.context_count; i++) {
        struct am_context *context = am_context_at(i);
        if (context->alive) {
            context->alive = false;
            free_slot(context, i);
        }
    }
    am_streams_clear();
    am_events_clear();
    am_vmm_clear(true); /* the parent's mappings must not write into its shared memory */
    am_tree_clear(&am.pinned, free_block);
    am_tree_clear(&am.segments, free_block); /* the parent's pools are not the child's */
    am_tree_clear(&am.freed_segments, free_block);
    __atomic_add_fetch(&am.generation, 1, __ATOMIC_RELEASE);
}

/* The device space and the VMM mirror: fixed host addresses nothing else may take. */
static void reserve_address_space(void)
{
    static const uint64_t bases[] = AM_DEVICE_BASES, offsets[] = AM_MIRROR_OFFSETS;
    const uint64_t span = AM_MAX_DEVICES * AM_DEVICE_SLOT, window = AM_VMM_END - AM_VMM_BASE;
    uint64_t base = bases[0];
    for (size_t i = 0; i < sizeof bases / sizeof bases[0] && !am.space_reserved; i++) {
        base = bases[i];
        am.space_reserved = am_os_reserve(base, span);
    }
    __atomic_store_n(&am.device_base, am.space_reserved ? base : bases[0], __ATOMIC_RELAXED);
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0] && !am.mirror_reserved; i++) {
        uint64_t mirror = AM_VMM_BASE + offsets[i];
        if (am.space_reserved && mirror < base + span && base < mirror + window)
            continue; /* the device space has it */
        am.mirror_offset = offsets[i];
        am.mirror_reserved = am_os_reserve(mirror, window);
    }
}

static void initialise(void)
{
    init_arena_locks();
    read_settings();
    if (am.setting_error[0] != '\0')
        fprintf(stderr, "acl_mem: %s; every ACL call fails with 507000\n", am.setting_error);
    am_trace_read_settings();
    reserve_address_space();
    layout_devices();
    __atomic_store_n(&am.generation, 1, __ATOMIC_RELEASE);
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

void am_ready(void)
{
    pthread_once(&once, initialise);
}

/* Every arena's quota back to its device's pool: the engine lock's holder sees the
 * pools as they are. */
static void take_back_quotas(void)
{
    for (int i = 0; i < am.device_count; i++) {
        struct am_device *device = &am.devices[i];
        for (int j = 0; j < AM_ARENAS; j++) {
            device->normal_used -= device->arenas[j].quota;
            device->arenas[j].quota = 0;
        }
    }
}

/* With the engine lock held: no fast path may run from now on (they see engine_held and
 * take the engine lock instead), and those running end first (each active arena's lock
 * taken and given back: every arena of every device with `everything`). Never more than
 * one arena lock at a time (thread sanitizers track at most 64 held). With `milliseconds`
 * >= 0, give up (releasing the engine lock) after about that long; returns whether the
 * engine is held. */
static bool close_arenas(bool everything, int milliseconds)
{
    __atomic_store_n(&am.engine_held, 1, __ATOMIC_SEQ_CST);
    int count = everything ? AM_MAX_DEVICES : am.device_count;
    struct timespec pause = {0, 1000000};
    int tries = 0;
    for (int i = 0; i < count; i++) {
        for (int j = 0; j < AM_ARENAS; j++) {
            struct am_arena *arena = &am.devices[i].arenas[j];
            if (!everything && !__atomic_load_n(&arena->active, __ATOMIC_RELAXED))
                continue;
            if (milliseconds < 0) {
                pthread_mutex_lock(&arena->lock);
            } else {
                while (pthread_mutex_trylock(&arena->lock) != 0) {
                    if (++tries > milliseconds) {
                        am_unlock();
                        return false;
                    }
                    nanosleep(&pause, NULL);
                }
            }
            pthread_mutex_unlock(&arena->lock);
        }
    }
    /* No new one can start now (each needs a fast path); those running end on their
     * own, taking no lock. */
    while (__atomic_load_n(&am.unlocked_copies, __ATOMIC_ACQUIRE) != 0)
        sched_yield();
    take_back_quotas();
    return true;
}

void am_lock(void)
{
    pthread_once(&once, initialise);
    pthread_mutex_lock(&am.lock);
    close_arenas(false, -1);
}

void am_unlock(void)
{
    __atomic_store_n(&am.engine_held, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&am.lock);
}

bool am_lock_within(int milliseconds)
{
    pthread_once(&once, initialise);
    struct timespec pause = {0, 1000000};
    int tries = 0;
    while (pthread_mutex_trylock(&am.lock) != 0) {
        if (++tries > milliseconds)
            return false;
        nanosleep(&pause, NULL);
    }
    return close_arenas(false, milliseconds > tries ? milliseconds - tries : 0);
}

int am_fast_current_device(void)
{
    struct am_context *context = am_context_of(am_thread()->cur);
    return context == NULL ? -1 : __atomic_load_n(&context->device, __ATOMIC_RELAXED);
}

static struct am_arena *slot_arena(int slot)
{
    return &am.devices[slot / AM_ARENAS].arenas[slot % AM_ARENAS];
}

/* Lock an arena for a fast path: false (not held) while the engine lock is held, and for
 * an arena not active yet (the thread's first call on it goes through the engine lock). */
static bool lock_active(int slot)
{
    struct am_arena *arena = slot_arena(slot);
    pthread_mutex_lock(&arena->lock);
    if (!__atomic_load_n(&am.engine_held, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&arena->active, __ATOMIC_RELAXED))
        return true;
    pthread_mutex_unlock(&arena->lock);
    return false;
}

bool am_fast_lock(int first, int second)
{
    pthread_once(&once, initialise);
    if (second >= 0 && second < first) {
        int lower = second;
        second = first;
        first = lower;
    }
    if (first < 0 || first >= AM_MAX_DEVICES * AM_ARENAS ||
        second >= AM_MAX_DEVICES * AM_ARENAS)
        return false;
    if (!lock_active(first))
        return false;
    if (second >= 0 && second != first && !lock_active(second)) {
        pthread_mutex_unlock(&slot_arena(first)->lock);
        return false;
    }
    /* Stable now: these change only under the engine lock, whose holder waits for us. */
    if (first / AM_ARENAS < am.device_count && second / AM_ARENAS < am.device_count &&
        acl_mem_fake_queued_work == 0 && am.setting_error[0] == '\0' && am.fault_count == 0 &&
        !am.check && !__atomic_load_n(&am.trace_file, __ATOMIC_RELAXED))
        return true;
    am_fast_unlock(first, second);
    return false;
}

void am_fast_unlock(int first, int second)
{
    if (second >= 0 && second != first)
        pthread_mutex_unlock(&slot_arena(second)->lock);
    pthread_mutex_unlock(&slot_arena(first)->lock);
}

/* ---- the control API ------------------------------------------------------------------ */
#include "../include/acl_mem_fake.h"

/* The engine lock, with every arena of every device closed (not only those in use and
 * the configured devices'), for what changes the device count or the layout. */
static void lock_everything(void)
{
    pthread_once(&once, initialise);
    pthread_mutex_lock(&am.lock);
    close_arenas(true, -1);
}

int acl_mem_fake_reset(void)
{
    lock_everything();
    start_over();
    int failed = am.setting_error[0] != '\0';
    am_unlock();
    return failed ? AM_INVALID_PARAM : 0;
}

int acl_mem_fake_forget_thread(void)
{
    struct am_thread *self = am_thread();
    self->ref = self->ctx = self->cur = 0;
    return 0;
}

int acl_mem_fake_configure(const char *profile, const char *cann, int device_count,
                           uint64_t capacity)
{
    const struct am_profile *chosen_profile = NULL;
    const struct am_release *chosen_release = NULL;
    if (profile != NULL && (chosen_profile = am_profile_named(profile)) == NULL)
        return AM_INVALID_PARAM;
    if (cann != NULL && (chosen_release = am_release_named(cann)) == NULL)
        return AM_INVALID_PARAM;
#ifdef AM_ONLY_CANN_8_5_0
    if (chosen_release != NULL && strcmp(chosen_release->name, AM_DEFAULT_RELEASE) != 0)
        return AM_INVALID_PARAM; /* this library is CANN 8.5.0's only */
#endif
    if (device_count < 0 || device_count > AM_MAX_DEVICES)
        return AM_INVALID_PARAM;
    if (capacity > AM_DEVICE_SLOT / 2 - 2 * AM_DVPP_WINDOW)
        return AM_INVALID_PARAM;
    lock_everything();
    configured_profile = chosen_profile;
    configured_release = chosen_release;
    configured_devices = device_count;
    configured_capacity = capacity;
    start_over();
    am_unlock();
    return 0;
}

int acl_mem_fake_describe(struct acl_mem_fake_description *out)
{
    if (out == NULL)
        return AM_INVALID_PARAM;
    am_lock();
    memset(out, 0, sizeof *out);
    snprintf(out->profile, sizeof out->profile, "%s", am.profile->name);
    snprintf(out->soc_name, sizeof out->soc_name, "%s", am.profile->soc_name);
    snprintf(out->cann, sizeof out->cann, "%s", am.cann->name);
    snprintf(out->setting_error, sizeof out->setting_error, "%s", am.setting_error);
    out->device_count = am.device_count;
    out->capacity = am.capacity;
    out->address_space_reserved = am.space_reserved;
    out->pinned_kept = (uint32_t)am.quarantine_count;
    for (int i = 0; i < am.quarantine_count; i++)
        out->pinned_kept_bytes += am.quarantine[i][1];
    am_unlock();
    return 0;
}

const char *acl_mem_fake_setting_error(void)
{
    /* A copy for the calling thread: configure may rewrite the engine's meanwhile. */
    static _Thread_local char copy[sizeof am.setting_error];
    am_lock();
    memcpy(copy, am.setting_error, sizeof copy);
    am_unlock();
    return copy[0] ? copy : NULL;
}

int acl_mem_fake_inject_fault(const char *call, uint32_t nth, int32_t code)
{
    static const char *const injectable[] = {
        "aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached", "aclrtMallocHost",
        "aclrtReserveMemAddress", "aclrtMallocPhysical", "aclrtMapMem",
    };
    bool known = false;
    for (size_t i = 0; call != NULL && i < sizeof injectable / sizeof injectable[0]; i++)
        known = known || strcmp(call, injectable[i]) == 0;
    if (!known || nth == 0 || code == 0)
        return AM_INVALID_PARAM;
    am_lock();
    int slot = 0;
    while (slot < am.fault_count && strcmp(am.faults[slot].call, call) != 0)
        slot++;
    if (slot == am.fault_count)
        am.fault_count++;
    snprintf(am.faults[slot].call, sizeof am.faults[slot].call, "%s", call);
    am.faults[slot].nth = nth;
    am.faults[slot].code = code;
    am_unlock();
    return 0;
}
