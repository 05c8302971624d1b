/* Streams that really defer (docs/runtime-model.md §3.4, §3.10, §3.11, §3.15).
 *
 * Every context has a default stream (the NULL handle) and created streams up to the
 * profile's limit. An asynchronous copy or memset is queued on its stream and runs when
 * the stream is synchronised (or destroyed, which waits); streams are unordered with
 * respect to each other except through events, whose records and waits are markers in
 * the queues. Queued work names the blocks it touches by serial number, so work whose
 * memory was freed since is recognised and skipped (a hazard) instead of writing into
 * whatever lives there now. Handles are never reused.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "../include/acl_mem_fake.h"

enum { WORK_COPY, WORK_SET, WORK_MARK };

struct am_target {
    uint64_t start, serial;
};

struct am_work {
    struct am_work *next;
    uint8_t kind, value;
    uint64_t dst, src, count;
    unsigned char *dst_host, *src_host;
    struct am_marker *marker;
    uint32_t target_count;
    struct am_target targets[];
};

struct am_stream {
    struct am_node node; /* key: the handle; 0 for a default stream (not in the tree) */
    uint64_t context;
    struct am_work *head, *tail;
    struct am_stream *next_of_all, *prev_of_all;
};

/* ---- markers --------------------------------------------------------------------------- */

struct am_marker *am_marker_new(struct am_stream *stream)
{
    struct am_marker *marker = calloc(1, sizeof *marker);
    if (marker != NULL) {
        marker->stream = stream;
        marker->refs = 1;
    }
    return marker;
}

void am_marker_put(struct am_marker *marker)
{
    while (marker != NULL && --marker->refs == 0) {
        struct am_marker *waited = marker->waits_for;
        if (marker->reset_record != NULL)
            am_marker_put(marker->reset_record);
        free(marker);
        marker = waited;
    }
}

static uint64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* The stream's work reached the marker (idempotent). */
static void finish(struct am_marker *marker)
{
    if (marker->ran)
        return;
    marker->ran = true;
    marker->stream = NULL;
    marker->time_ns = now_ns();
    if (marker->resets != 0)
        am_event_forget_record(marker->resets, marker->reset_record);
}

/* ---- the stream table ------------------------------------------------------------------ */

static struct am_stream *stream_new(uint64_t handle, uint64_t context)
{
    struct am_stream *stream = calloc(1, sizeof *stream);
    if (stream == NULL)
        return NULL;
    stream->node.key = handle;
    stream->context = context;
    stream->next_of_all = am.all_streams;
    if (am.all_streams != NULL)
        am.all_streams->prev_of_all = stream;
    am.all_streams = stream;
    return stream;
}

static void stream_free(struct am_stream *stream)
{
    if (stream->prev_of_all != NULL)
        stream->prev_of_all->next_of_all = stream->next_of_all;
    else
        am.all_streams = stream->next_of_all;
    if (stream->next_of_all != NULL)
        stream->next_of_all->prev_of_all = stream->prev_of_all;
    if (stream->node.key != 0)
        am_tree_remove(&am.streams, stream->node.key);
    free(stream);
}

static struct am_stream *default_of(uint64_t context_handle)
{
    struct am_context *context = am_context_of(context_handle);
    if (context->default_stream == NULL)
        context->default_stream = stream_new(0, context_handle);
    return context->default_stream;
}

static struct am_stream *created(uint64_t handle)
{
    struct am_stream *stream = (struct am_stream *)am_tree_find(am.streams, handle);
    if (stream == NULL)
        return NULL;
    struct am_context *context = am_context_of(stream->context);
    return context != NULL && context->alive ? stream : NULL;
}

bool am_stream_handle_valid(uint64_t handle)
{
    return created(handle) != NULL;
}

/* ---- queued work ----------------------------------------------------------------------- */

static bool target_live(const struct am_target *target)
{
    if (target->start >= AM_VMM_BASE && target->start < AM_VMM_END)
        return am_vmm_live(target->start, target->serial);
    struct am_device *device = am_device_of(target->start);
    struct am_node *node = device != NULL
        ? (struct am_node *)am_block_starting(device, target->start)
        : am_tree_find(am.pinned, target->start);
    return node != NULL && ((struct am_block *)node)->serial == target->serial;
}

/* The block a target names, if it is a block and still the same one. */
static struct am_block *live_block(const struct am_target *target)
{
    if (target->start >= AM_VMM_BASE && target->start < AM_VMM_END)
        return NULL;
    struct am_device *device = am_device_of(target->start);
    struct am_node *node = device != NULL
        ? (struct am_node *)am_block_starting(device, target->start)
        : am_tree_find(am.pinned, target->start);
    struct am_block *block = (struct am_block *)node;
    return block != NULL && block->serial == target->serial ? block : NULL;
}

static void append(struct am_stream *stream, struct am_work *work)
{
    work->next = NULL;
    if (stream->tail != NULL)
        stream->tail->next = work;
    else
        stream->head = work;
    stream->tail = work;
}

/* The work leaves the index: the blocks it names (still live) stop counting it. */
static void unindex(struct am_work *work)
{
    if (work->kind == WORK_MARK)
        return;
    /* Atomic: bindings and acl_mem_fake_host_access read it without a lock. */
    __atomic_fetch_sub(&acl_mem_fake_queued_work, 1, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < work->target_count; i++) {
        struct am_block *block = live_block(&work->targets[i]);
        if (block != NULL && block->queued > 0)
            block->queued--;
    }
}

static void describe(const struct am_work *work, char *out, size_t size)
{
    if (work->kind == WORK_COPY)
        snprintf(out, size, "aclrtMemcpyAsync(%#llx <- %#llx, %llu)",
                 (unsigned long long)work->dst, (unsigned long long)work->src,
                 (unsigned long long)work->count);
    else
        snprintf(out, size, "aclrtMemsetAsync(%#llx, %#x, %llu)",
                 (unsigned long long)work->dst, (unsigned)work->value,
                 (unsigned long long)work->count);
}

static void run(const struct am_work *work)
{
    for (uint32_t i = 0; i < work->target_count; i++) {
        if (!target_live(&work->targets[i])) {
            char what[128];
            describe(work, what, sizeof what);
            am_hazard("queued-work-on-freed-memory", "a queued %s ran after its memory was "
                      "freed; on hardware it corrupts whatever lives there now, here it was "
                      "skipped", what);
            return;
        }
    }
    if (am.check) {
        am_check_bounds(work->dst, work->count, work->kind == WORK_COPY
                        ? "queued aclrtMemcpyAsync write" : "queued aclrtMemsetAsync");
        if (work->kind == WORK_COPY)
            am_check_bounds(work->src, work->count, "queued aclrtMemcpyAsync read");
    }
    if (work->kind == WORK_COPY)
        memmove(work->dst_host, work->src_host, work->count);
    else
        memset(work->dst_host, work->value, work->count);
}

static void pop(struct am_stream *stream)
{
    struct am_work *work = stream->head;
    stream->head = work->next;
    if (stream->head == NULL)
        stream->tail = NULL;
}

/* Run the stream's queued work in order, all of it or up to `until`. A wait runs the
 * other stream's work up to the record point first; waits only name record points
 * queued before them, so this always ends. Iterative, with the streams being run kept
 * in a list of its own: a chain of waits across many streams must not exhaust the C
 * stack. */
struct pending_drain {
    struct am_stream *stream;
    const struct am_marker *until;
};

static void drain(struct am_stream *stream, const struct am_marker *until)
{
    struct pending_drain first = {stream, until}, *frames = &first;
    size_t depth = 1, capacity = 1;
    while (depth > 0) {
        struct pending_drain *frame = &frames[depth - 1];
        struct am_work *work = frame->stream->head;
        if (work == NULL) {
            /* The stream ended without reaching `until`: nothing waits for it for ever. */
            if (frame->until != NULL)
                finish((struct am_marker *)frame->until);
            depth--;
            continue;
        }
        if (work->kind == WORK_MARK) {
            struct am_marker *marker = work->marker;
            struct am_marker *waited = marker->waits_for;
            if (waited != NULL && !waited->ran && waited->stream != NULL) {
                /* Run the recording stream up to the record first. */
                if (depth == capacity) {
                    size_t grown = capacity * 2;
                    struct pending_drain *more = malloc(grown * sizeof *more);
                    if (more == NULL) {
                        finish(waited); /* out of memory: the wait gives up waiting */
                        continue;
                    }
                    memcpy(more, frames, depth * sizeof *more);
                    if (frames != &first)
                        free(frames);
                    frames = more;
                    capacity = grown;
                }
                frames[depth++] = (struct pending_drain){waited->stream, waited};
                continue;
            }
            if (waited != NULL)
                finish(waited);
            pop(frame->stream);
            free(work);
            finish(marker);
            bool done = marker == frame->until;
            am_marker_put(marker);
            if (done)
                depth--;
            continue;
        }
        pop(frame->stream);
        unindex(work);
        run(work);
        free(work);
    }
    if (frames != &first)
        free(frames);
}

void am_reach(struct am_marker *marker)
{
    if (!marker->ran && marker->stream != NULL)
        drain(marker->stream, marker);
    finish(marker); /* its stream ended without it: nothing waits for ever */
}

bool am_queue_marker(struct am_stream *stream, struct am_marker *marker)
{
    struct am_work *work = calloc(1, sizeof *work);
    if (work == NULL)
        return false;
    work->kind = WORK_MARK;
    work->marker = marker;
    marker->refs++;
    append(stream, work);
    return true;
}

/* Drop the stream's queued work without running it; its markers complete, so nothing
 * waits for them for ever. Returns how many copies and memsets were dropped. */
static uint64_t discard(struct am_stream *stream)
{
    uint64_t lost = 0;
    while (stream->head != NULL) {
        struct am_work *work = stream->head;
        pop(stream);
        if (work->kind == WORK_MARK) {
            finish(work->marker);
            am_marker_put(work->marker);
        } else {
            unindex(work);
            lost++;
        }
        free(work);
    }
    return lost;
}

static uint64_t queued_in(const struct am_stream *stream)
{
    uint64_t count = 0;
    for (const struct am_work *work = stream->head; work != NULL; work = work->next)
        count += work->kind != WORK_MARK;
    return count;
}

void am_context_ended(uint64_t handle)
{
    struct am_context *context = am_context_of(handle);
    if (context == NULL)
        return;
    uint64_t lost = 0;
    struct am_stream *stream = am.all_streams;
    while (stream != NULL) {
        struct am_stream *next = stream->next_of_all;
        if (stream->context == handle) {
            lost += discard(stream);
            stream_free(stream);
        }
        stream = next;
    }
    context->default_stream = NULL;
    context->streams = 0;
    if (lost == 0)
        return;
    /* Reported after the effect: in raise mode the call fails with it done. */
    if (context->primary)
        am_hazard("reset-with-pending-work", "device %d released with %llu queued "
                  "operation(s) never synchronised; they never ran", (int)context->device,
                  (unsigned long long)lost);
    else
        am_hazard("destroy-context-with-pending-work", "context %#llx destroyed with %llu "
                  "queued operation(s) never synchronised; they never ran",
                  (unsigned long long)handle, (unsigned long long)lost);
}

void am_streams_clear(void)
{
    while (am.all_streams != NULL) {
        discard(am.all_streams);
        stream_free(am.all_streams);
    }
    for (size_t i = 1; i < am.context_count; i++) {
        am_context_at(i)->default_stream = NULL;
        am_context_at(i)->streams = 0;
    }
    __atomic_store_n(&acl_mem_fake_queued_work, 0, __ATOMIC_RELAXED);
}

void am_check_queued(uint64_t start, uint64_t size, bool write_only, const char *kind,
                     const char *what)
{
    struct am_located where = am_locate(start, size);
    if (where.block == NULL && where.mapping_start == 0)
        return;
    /* Only blocks some queued work names: the common case costs this test (mappings are
     * not counted: any queued work makes them scan). */
    bool named = where.block == NULL;
    if (named) {
    } else if (where.where == AM_ON_DEVICE) {
        struct am_device *device = &am.devices[where.device];
        for (struct am_node *node = &where.block->node; node != NULL && node->key < start + size;
             node = (struct am_node *)am_block_after(device, node->key)) {
            if (((struct am_block *)node)->queued != 0) {
                named = true;
                break;
            }
        }
    } else {
        named = where.block->queued != 0;
    }
    if (!named)
        return;
    uint64_t end = start + size;
    for (struct am_stream *stream = am.all_streams; stream != NULL;
         stream = stream->next_of_all) {
        for (struct am_work *work = stream->head; work != NULL; work = work->next) {
            if (work->kind == WORK_MARK)
                continue;
            bool writes = work->dst < end && start < work->dst + work->count;
            bool reads = work->kind == WORK_COPY && work->src < end &&
                         start < work->src + work->count;
            if (writes || (!write_only && reads)) {
                char queued[128];
                describe(work, queued, sizeof queued);
                am_hazard(kind, "%s while queued %s is pending; synchronise the stream "
                          "first", what, queued);
                return;
            }
        }
    }
}

/* Copies and memsets queued on any stream: changed under the engine lock, read by the
 * fast paths (under an arena lock the engine lock's holder waits for) and without a lock
 * by acl_mem_fake_host_access and bindings. */
ACL_MEM_FAKE_API unsigned long acl_mem_fake_queued_work;

int acl_mem_fake_host_access(uint64_t start, uint64_t size, int write, const char *what)
{
    if (what == NULL || size > UINT64_MAX - start)
        return AM_INVALID_PARAM;
    /* Nothing queued anywhere: no race to report, and no engine lock to take (a pool
     * asks this at every segment free). Work another thread queues meanwhile races with
     * this access in the program itself. */
    if (__atomic_load_n(&acl_mem_fake_queued_work, __ATOMIC_RELAXED) == 0)
        return 0;
    am_lock();
    am_check_queued(start, size, write == 0,
                    write == 2 ? "free-while-queued" : "access-before-synchronize", what);
    am_unlock();
    return 0;
}

/* ---- resolving a stream handle ---------------------------------------------------------- */

aclError am_stream_refused(aclError code, const char *call, const void *stream, const char *why)
{
    if (code == AM_CONTEXT_NULL)
        return am_fail(code, call, AM_NO_CONTEXT, "this thread");
    if (code == AM_STREAM_CONTEXT)
        return am_fail(code, call, AM_HINT_STREAM_CONTEXT);
    return am_fail(code, call, "stream %p: %s", stream, why);
}

struct am_stream *am_resolve_stream(uint64_t handle, aclError *code, const char **why)
{
    /* From 9.1.0 the handle is validated before anything else (107017); older releases
     * look the context up first (107002). */
    bool checked_first = am.cann->stream_handle_checked;
    if (checked_first && handle != 0 && !am_stream_handle_valid(handle)) {
        *code = AM_INVALID_HANDLE;
        *why = "the stream is not a live stream (destroyed, or its context ended)";
        return NULL;
    }
    uint64_t current = am_thread()->cur;
    struct am_context *context = am_context_of(current);
    if (context == NULL || !context->alive) {
        *code = AM_CONTEXT_NULL;
        *why = NULL; /* the shared hint (am_stream_refused) */
        return NULL;
    }
    if (handle == 0) {
        struct am_stream *stream = default_of(current);
        if (stream == NULL) {
            *code = AM_MEMORY_ALLOCATION;
            *why = "out of host memory";
        }
        return stream;
    }
    struct am_stream *stream = created(handle);
    if (stream == NULL) {
        *code = AM_INVALID_HANDLE;
        *why = "the stream is not a live stream (destroyed, or its context ended)";
        return NULL;
    }
    if (stream->context != current) {
        *code = AM_STREAM_CONTEXT;
        *why = NULL; /* the shared hint (am_stream_refused) */
        return NULL;
    }
    return stream;
}

/* ---- stream lifetime (§3.4) ------------------------------------------------------------- */

aclError aclrtCreateStream(aclrtStream *stream)
{
    AM_ARGS(aclrtCreateStream);
    ENTER("aclrtCreateStream");
    if (stream == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtCreateStream", "stream is NULL"));
    uint64_t current = am_thread()->cur;
    struct am_context *context = am_context_of(current);
    if (context == NULL || !context->alive)
        return unlock_with(am_fail(AM_CONTEXT_NULL, "aclrtCreateStream", AM_NO_CONTEXT, "this thread"));
    /* The default stream counts against the limit. */
    if (1 + (int)context->streams >= am.profile->max_streams)
        return unlock_with(am_fail(AM_NO_STREAM_RESOURCE, "aclrtCreateStream", "context "
                                   "%#llx has %d streams, the most %s allows (the default "
                                   "stream included)", (unsigned long long)current,
                                   am.profile->max_streams, am.profile->soc_name));
    uint64_t handle = AM_STREAM_BASE + (am.stream_sequence + 1) * AM_HANDLE_STEP;
    struct am_stream *made = stream_new(handle, current);
    if (made == NULL)
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtCreateStream",
                                   "out of host memory"));
    am.stream_sequence++;
    am_tree_insert(&am.streams, &made->node);
    context->streams++;
    *stream = (aclrtStream)(uintptr_t)handle;
    return unlock_with(AM_SUCCESS);
}

static aclError destroy_stream(aclrtStream stream, bool force, const char *call)
{
    ENTER(call);
    uint64_t handle = (uintptr_t)stream;
    if (handle == 0)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "stream is NULL (the default "
                                   "stream cannot be destroyed)"));
    struct am_stream *found = created(handle);
    if (found == NULL)
        return unlock_with(am_fail(AM_INVALID_HANDLE, call, "stream %p is not a live stream "
                                   "(destroyed, or its context ended)", stream));
    uint64_t current = am_thread()->cur;
    struct am_context *context = am_context_of(current);
    if (context != NULL && context->alive && current != found->context)
        return unlock_with(am_fail(AM_STREAM_CONTEXT, call, AM_HINT_STREAM_CONTEXT));
    if (force) {
        /* Queued work is recycled: it never runs, and records behind it complete. */
        discard(found);
    } else {
        uint64_t work = queued_in(found);
        if (work != 0)
            am_hazard("destroy-with-pending-work", "stream %p destroyed with %llu queued "
                      "operation(s); the runtime waits for them", stream,
                      (unsigned long long)work);
        drain(found, NULL);
    }
    am_context_of(found->context)->streams--;
    stream_free(found);
    return unlock_with(am_hazard_result(AM_SUCCESS, call));
}

aclError aclrtDestroyStream(aclrtStream stream)
{
    AM_ARGS(aclrtDestroyStream);
    return destroy_stream(stream, false, "aclrtDestroyStream");
}

aclError aclrtDestroyStreamForce(aclrtStream stream)
{
    AM_ARGS(aclrtDestroyStreamForce);
    return destroy_stream(stream, true, "aclrtDestroyStreamForce");
}

aclError aclrtSynchronizeStream(aclrtStream stream)
{
    AM_ARGS(aclrtSynchronizeStream);
    ENTER("aclrtSynchronizeStream");
    aclError code = AM_SUCCESS;
    const char *why = NULL;
    struct am_stream *found = am_resolve_stream((uintptr_t)stream, &code, &why);
    if (found == NULL)
        return unlock_with(am_stream_refused(code, "aclrtSynchronizeStream", stream,
                                             why));
    drain(found, NULL);
    if (am.check)
        am_check_all("synchronize");
    return unlock_with(am_hazard_result(AM_SUCCESS, "aclrtSynchronizeStream"));
}

aclError aclrtSynchronizeDevice(void)
{
    AM_ARGS(aclrtSynchronizeDevice);
    ENTER("aclrtSynchronizeDevice");
    uint64_t current = am_thread()->cur;
    struct am_context *context = am_context_of(current);
    if (context == NULL || !context->alive)
        return unlock_with(am_fail(AM_CONTEXT_NULL, "aclrtSynchronizeDevice", AM_NO_CONTEXT, "this thread"));
    /* The default stream first, then created streams oldest first. */
    if (context->default_stream != NULL)
        drain(context->default_stream, NULL);
    for (struct am_node *node = am_tree_after(am.streams, 0); node != NULL;
         node = am_tree_after(am.streams, node->key)) {
        struct am_stream *stream = (struct am_stream *)node;
        if (stream->context == current)
            drain(stream, NULL);
    }
    if (am.check)
        am_check_all("synchronize");
    return unlock_with(am_hazard_result(AM_SUCCESS, "aclrtSynchronizeDevice"));
}

/* ---- asynchronous copies and memsets (§3.10, §3.11) -------------------------------------- */

enum { H2H, H2D, D2H, D2D, DEFAULT_KIND, BUF };

/* The kind the runtime really uses for a pair of locations, or -1 when the pair refuses
 * `kind` (107000). */
static int corrected_kind(enum am_where src, enum am_where dst, int kind)
{
    if (kind == BUF)
        return kind;
    bool src_device = src == AM_ON_DEVICE, dst_device = dst == AM_ON_DEVICE;
    if (src != AM_PAGEABLE && dst != AM_PAGEABLE)
        return src_device ? (dst_device ? D2D : D2H) : (dst_device ? H2D : H2H);
    unsigned accepted;
    int fallback;
    if (dst_device) { /* pageable to device */
        accepted = 1u << H2D | 1u << D2D;
        fallback = H2D;
    } else if (src_device) { /* device to pageable */
        accepted = 1u << D2H | 1u << D2D;
        fallback = D2H;
    } else if (src == AM_PINNED_HOST) {
        accepted = 1u << H2H | 1u << H2D;
        fallback = H2H;
    } else if (dst == AM_PINNED_HOST) {
        accepted = 1u << H2H | 1u << D2H;
        fallback = H2H;
    } else { /* pageable to pageable */
        accepted = 1u << H2H | 1u << H2D | 1u << D2H | 1u << D2D;
        fallback = H2H;
    }
    if (kind == DEFAULT_KIND)
        return fallback;
    return accepted & (1u << kind) ? kind : -1;
}

/* The allocations one side of queued work covers: every block or mapping of the range,
 * written into `out` from `taken` on when `out` is not NULL; returns the new count. */
static size_t name_side(const struct am_located *where, uint64_t start, uint64_t count,
                        struct am_target *out, size_t taken)
{
    uint64_t end = start + count;
    if (where->mapping_start != 0) {
        uint64_t pair[1][2];
        for (uint64_t at = where->mapping_start; at < end;) {
            if (am_vmm_targets(at, 1, pair, 1) != 1)
                break;
            if (out != NULL)
                out[taken] = (struct am_target){pair[0][0], pair[0][1]};
            taken++;
            uint64_t next = 0, size = 0;
            int device = 0;
            uint32_t page = 0;
            if (!am_vmm_range(at, &next, &size, &device, &page))
                break;
            at = next + size;
        }
        return taken;
    }
    struct am_block *block = where->block;
    if (block == NULL)
        return taken;
    struct am_device *device = block->device >= 0 ? &am.devices[block->device] : NULL;
    for (struct am_node *node = &block->node; node != NULL && node->key < end;
         node = device != NULL
             ? (struct am_node *)am_block_starting(device, node->key + node->len) : NULL) {
        if (out != NULL)
            out[taken] = (struct am_target){node->key, ((struct am_block *)node)->serial};
        taken++;
    }
    return taken;
}

/* Queued work naming every allocation it touches (each is checked when it runs: work
 * on memory freed or unmapped since is skipped, never run into what lives there now). */
static struct am_work *work_for(const struct am_located *target, const struct am_located *source,
                                uint64_t dst, uint64_t src, uint64_t count)
{
    size_t total = name_side(target, dst, count, NULL, 0);
    if (source != NULL)
        total = name_side(source, src, count, NULL, total);
    if (total > UINT32_MAX)
        return NULL;
    struct am_work *work = calloc(1, sizeof *work + total * sizeof work->targets[0]);
    if (work == NULL)
        return NULL;
    size_t named = name_side(target, dst, count, work->targets, 0);
    if (source != NULL)
        named = name_side(source, src, count, work->targets, named);
    work->target_count = (uint32_t)named;
    return work;
}

static void enqueue(struct am_stream *stream, struct am_work *work)
{
    append(stream, work);
    __atomic_fetch_add(&acl_mem_fake_queued_work, 1, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < work->target_count; i++) {
        struct am_block *block = live_block(&work->targets[i]);
        if (block != NULL)
            block->queued++;
    }
}

#define MEMCPY_ASYNC_CALL "aclrtMemcpyAsync"

aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream stream)
{
    AM_ARGS(aclrtMemcpyAsync);
    ENTER(MEMCPY_ASYNC_CALL);
    if (am.cann->count_checked_first && count == 0)
        return unlock_with(AM_SUCCESS);
    if (dst == NULL || src == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, MEMCPY_ASYNC_CALL, "dst or src is NULL"));
    if ((uint32_t)kind > 5)
        return unlock_with(am_fail(AM_INVALID_PARAM, MEMCPY_ASYNC_CALL, "kind %d is not a "
                                   "copy direction", (int)kind));
    uint64_t handle = (uintptr_t)stream;
    if (am.cann->stream_handle_checked && handle != 0 && !am_stream_handle_valid(handle))
        return unlock_with(am_fail(AM_INVALID_HANDLE, MEMCPY_ASYNC_CALL, "stream %p is not a "
                                   "live stream (destroyed, or its context ended)", stream));
    if (count == 0 || count > destMax)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, MEMCPY_ASYNC_CALL, "count %zu must be "
                                   "at least 1 and at most destMax %zu", count, destMax));
    bool no_context = am_current_device() == NULL;
    if (am.cann->async_context_first && no_context)
        return unlock_with(am_fail(AM_CONTEXT_NULL, MEMCPY_ASYNC_CALL, AM_NO_CONTEXT, "this thread"));
    struct am_located target = am_locate((uintptr_t)dst, count);
    struct am_located source = am_locate((uintptr_t)src, count);
    if (target.where == AM_NOWHERE || source.where == AM_NOWHERE)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, MEMCPY_ASYNC_CALL, "%s %p + %zu bytes "
                                   "is not inside live memory", target.where == AM_NOWHERE ?
                                   "dst" : "src", target.where == AM_NOWHERE ? dst : src,
                                   count));
    if (target.device >= 0 && source.device >= 0 && target.device != source.device)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, MEMCPY_ASYNC_CALL, "dst is on device "
                                   "%d and src on device %d: copy between devices through "
                                   "the host", target.device, source.device));
    int real_kind = corrected_kind(source.where, target.where, (int)kind);
    if (real_kind < 0)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, MEMCPY_ASYNC_CALL, "kind %d does not "
                                   "fit where src and dst are", (int)kind));
    if (!am.cann->async_context_first && no_context)
        return unlock_with(am_fail(AM_CONTEXT_NULL, MEMCPY_ASYNC_CALL, AM_NO_CONTEXT, "this thread"));
    if (real_kind == H2H && am.profile->run_mode == 1)
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, MEMCPY_ASYNC_CALL, "an "
                                   "asynchronous host-to-host copy is not supported on %s",
                                   am.profile->soc_name));
    if (dst == src)
        return unlock_with(AM_SUCCESS);
    aclError code = AM_SUCCESS;
    const char *why = NULL;
    struct am_stream *found = am_resolve_stream(handle, &code, &why);
    if (found == NULL)
        return unlock_with(am_stream_refused(code, MEMCPY_ASYNC_CALL, stream, why));
    if (target.where == AM_PAGEABLE || source.where == AM_PAGEABLE) {
        /* Pageable memory: the runtime synchronises the stream and copies now. */
        drain(found, NULL);
        if (acl_mem_fake_queued_work != 0) {
            am_check_queued((uintptr_t)dst, count, false, "access-before-synchronize",
                            "aclrtMemcpyAsync writes");
            am_check_queued((uintptr_t)src, count, true, "access-before-synchronize",
                            "aclrtMemcpyAsync reads");
        }
        if (!am_copy_now(&target, &source, count))
            return unlock_with(am_fail(AM_RT_PARAM_INVALID, MEMCPY_ASYNC_CALL, "host memory "
                                       "%p + %zu bytes is not mapped %s", target.where ==
                                       AM_PAGEABLE ? dst : src, count, target.where ==
                                       AM_PAGEABLE ? "writable" : "readable"));
        return unlock_with(am_hazard_result(AM_SUCCESS, "aclrtMemcpyAsync"));
    }
    struct am_work *work = work_for(&target, &source, (uintptr_t)dst, (uintptr_t)src, count);
    if (work == NULL)
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, MEMCPY_ASYNC_CALL,
                                   "out of host memory"));
    work->kind = WORK_COPY;
    work->dst = (uintptr_t)dst;
    work->src = (uintptr_t)src;
    work->count = count;
    work->dst_host = target.host;
    work->src_host = source.host;
    enqueue(found, work);
    return unlock_with(AM_SUCCESS);
}

#define MEMSET_ASYNC_CALL "aclrtMemsetAsync"

aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
                          aclrtStream stream)
{
    AM_ARGS(aclrtMemsetAsync);
    ENTER(MEMSET_ASYNC_CALL);
    if (count == 0 && am.cann->zero_count_succeeds)
        return unlock_with(AM_SUCCESS);
    if (devPtr == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, MEMSET_ASYNC_CALL, "devPtr is NULL"));
    uint64_t handle = (uintptr_t)stream;
    if (am.cann->stream_handle_checked && handle != 0 && !am_stream_handle_valid(handle))
        return unlock_with(am_fail(AM_INVALID_HANDLE, MEMSET_ASYNC_CALL, "stream %p is not a "
                                   "live stream (destroyed, or its context ended)", stream));
    if (count == 0 || count > maxCount)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, MEMSET_ASYNC_CALL, "count %zu must be "
                                   "at least 1 and at most maxCount %zu", count, maxCount));
    aclError code = AM_SUCCESS;
    const char *why = NULL;
    struct am_stream *found = am_resolve_stream(handle, &code, &why);
    if (found == NULL)
        return unlock_with(am_stream_refused(code, MEMSET_ASYNC_CALL, stream, why));
    struct am_located target = am_locate((uintptr_t)devPtr, count);
    if (target.where == AM_NOWHERE || target.where == AM_PAGEABLE)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, MEMSET_ASYNC_CALL, "%p + %zu bytes is "
                                   "not inside live device or pinned host memory", devPtr,
                                   count));
    struct am_work *work = work_for(&target, NULL, (uintptr_t)devPtr, 0, count);
    if (work == NULL)
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, MEMSET_ASYNC_CALL,
                                   "out of host memory"));
    work->kind = WORK_SET;
    work->dst = (uintptr_t)devPtr;
    work->count = count;
    work->value = (uint8_t)(value & 0xFF);
    work->dst_host = target.host;
    enqueue(found, work);
    return unlock_with(AM_SUCCESS);
}
