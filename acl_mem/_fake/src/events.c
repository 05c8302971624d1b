/* Events (docs/runtime-model.md §3.15).
 *
 * Recording an event queues a marker on a stream; the record completes when the
 * stream's work reaches it. aclrtStreamWaitEvent queues a marker that waits for the
 * event's latest record, so a synchronisation reaching the wait first runs the recording
 * stream up to that point. The host polls with aclrtQueryEventStatus: a record with work
 * queued before it reports NOT_READY once while the device runs that work, and COMPLETE
 * at the next query (a polling loop ends; code that assumes completion sees NOT_READY).
 * Checks run in the runtime's order: NULL arguments (100000), handles (107017), flags,
 * the current context (107002), the stream's context (107003).
 */
#include <stdlib.h>

#include "engine.h"

enum {
    SYNC = 0x1, STREAM_MARK = 0x2, DDSYNC = 0x4, TIME_LINE = 0x8,
    DEVICE_USE_ONLY = 0x10, EXTERNAL = 0x20, IPC = 0x40,
    DEFAULT_FLAGS = DDSYNC | TIME_LINE | STREAM_MARK,
    /* A stream can wait for, or reset, only an event with one of these. */
    WAITABLE = SYNC | DDSYNC | EXTERNAL | IPC,
};

struct am_event {
    struct am_node node; /* key: the handle */
    uint32_t flags;
    int device;
    bool new_mode; /* made by aclrtCreateEventExWithFlag */
    struct am_marker *record; /* the latest record, NULL when none (or reset since) */
    struct am_marker *polled; /* the record a query already said NOT_READY for */
};

static struct am_event *event_of(aclrtEvent event)
{
    return (struct am_event *)am_tree_find(am.events, (uintptr_t)event);
}

static void event_free(struct am_event *event)
{
    am_marker_put(event->record);
    am_marker_put(event->polled);
    free(event);
}

static void free_event_node(struct am_node *node)
{
    event_free((struct am_event *)node);
}

void am_events_clear(void)
{
    am_tree_clear(&am.events, free_event_node);
}

void am_event_forget_record(uint64_t handle, const struct am_marker *record)
{
    struct am_event *event = (struct am_event *)am_tree_find(am.events, handle);
    if (event != NULL && event->record == record && record != NULL) {
        am_marker_put(event->record);
        event->record = NULL;
    }
}

/* Whether `flag` holds one of the `alone` bits together with another bit. */
static bool combined(uint32_t flag, uint32_t alone)
{
    for (uint32_t bit = 1; bit <= 0x40; bit <<= 1)
        if ((bit & alone) && (flag & bit) && flag != bit)
            return true;
    return false;
}

static aclError create(aclrtEvent *event, uint32_t flags, bool new_mode, const char *call)
{
    struct am_device *device = am_current_device();
    if (device == NULL)
        return am_fail(AM_CONTEXT_NULL, call, AM_NO_CONTEXT, "this thread");
    struct am_event *made = calloc(1, sizeof *made);
    if (made == NULL)
        return am_fail(AM_MEMORY_ALLOCATION, call, "out of host memory");
    am.event_sequence++;
    made->node.key = AM_EVENT_BASE + am.event_sequence * AM_HANDLE_STEP;
    made->flags = flags;
    made->device = device->id;
    made->new_mode = new_mode;
    am_tree_insert(&am.events, &made->node);
    *event = (aclrtEvent)(uintptr_t)made->node.key;
    return AM_SUCCESS;
}

aclError aclrtCreateEvent(aclrtEvent *event)
{
    AM_ARGS(aclrtCreateEvent);
    ENTER("aclrtCreateEvent");
    if (event == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtCreateEvent", "event is NULL"));
    return unlock_with(create(event, DEFAULT_FLAGS, false, "aclrtCreateEvent"));
}

aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag)
{
    AM_ARGS(aclrtCreateEventWithFlag);
    ENTER("aclrtCreateEventWithFlag");
    if (event == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtCreateEventWithFlag",
                                   "event is NULL"));
    /* 0 and ACL_EVENT_IPC alone are refused; DEVICE_USE_ONLY and EXTERNAL stand alone. */
    if ((flag & 0x3F) == 0 || flag > 0x3F || combined(flag, DEVICE_USE_ONLY | EXTERNAL))
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, "aclrtCreateEventWithFlag", "flag "
                                   "%#x is not an event flag combination this call takes",
                                   flag));
    return unlock_with(create(event, flag, false, "aclrtCreateEventWithFlag"));
}

aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag)
{
    AM_ARGS(aclrtCreateEventExWithFlag);
    ENTER("aclrtCreateEventExWithFlag");
    if (event == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtCreateEventExWithFlag",
                                   "event is NULL"));
    if (combined(flag, DEVICE_USE_ONLY | EXTERNAL | IPC) || (flag & 0x4F) == 0 || flag > 0x4F)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, "aclrtCreateEventExWithFlag", "flag "
                                   "%#x is not an event flag combination this call takes",
                                   flag));
    return unlock_with(create(event, flag, true, "aclrtCreateEventExWithFlag"));
}

aclError aclrtDestroyEvent(aclrtEvent event)
{
    AM_ARGS(aclrtDestroyEvent);
    ENTER("aclrtDestroyEvent");
    if (event == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtDestroyEvent", "event is NULL"));
    struct am_event *found = event_of(event);
    if (found == NULL)
        return unlock_with(am_fail(AM_INVALID_HANDLE, "aclrtDestroyEvent", "event %p is not "
                                   "a live event", event));
    /* Queued work naming the event holds its own reference to the marker: it still runs. */
    am_tree_remove(&am.events, found->node.key);
    event_free(found);
    return unlock_with(AM_SUCCESS);
}

/* The checks record, wait and reset share, in the runtime's order. */
static struct am_stream *event_on_stream(struct am_event **event_out, aclrtEvent event,
                                         aclrtStream stream, bool waitable, uint32_t refused,
                                         const char *call, aclError *code)
{
    struct am_event *found = event_of(event);
    uint64_t handle = (uintptr_t)stream;
    if (found == NULL) {
        *code = am_fail(AM_INVALID_HANDLE, call, "event %p is not a live event", event);
        return NULL;
    }
    if (am.cann->stream_handle_checked && handle != 0 && !am_stream_handle_valid(handle)) {
        *code = am_fail(AM_INVALID_HANDLE, call, "stream %p is not a live stream "
                        "(destroyed, or its context ended)", stream);
        return NULL;
    }
    if (found->flags == DEVICE_USE_ONLY) {
        *code = am_fail(AM_RT_PARAM_INVALID, call, "event %p is ACL_EVENT_DEVICE_USE_ONLY",
                        event);
        return NULL;
    }
    if ((found->flags & refused) || (waitable && !(found->flags & WAITABLE))) {
        *code = am_fail(AM_FEATURE_NOT_SUPPORT, call, "event %p (flags %#x) cannot be used "
                        "by this call", event, found->flags);
        return NULL;
    }
    const char *why = NULL;
    struct am_stream *target = am_resolve_stream(handle, code, &why);
    if (target == NULL) {
        *code = am_stream_refused(*code, call, stream, why);
        return NULL;
    }
    *event_out = found;
    return target;
}

aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)
{
    AM_ARGS(aclrtRecordEvent);
    ENTER("aclrtRecordEvent");
    if (event == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtRecordEvent", "event is NULL"));
    struct am_event *found = NULL;
    aclError code = AM_SUCCESS;
    struct am_stream *target = event_on_stream(&found, event, stream, false, 0,
                                               "aclrtRecordEvent", &code);
    if (target == NULL)
        return unlock_with(code);
    struct am_marker *marker = am_marker_new(target);
    if (marker == NULL || !am_queue_marker(target, marker)) {
        am_marker_put(marker);
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtRecordEvent",
                                   "out of host memory"));
    }
    am_marker_put(found->record);
    found->record = marker; /* the event's reference */
    return unlock_with(AM_SUCCESS);
}

aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)
{
    AM_ARGS(aclrtStreamWaitEvent);
    ENTER("aclrtStreamWaitEvent");
    if (event == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtStreamWaitEvent",
                                   "event is NULL"));
    struct am_event *found = NULL;
    aclError code = AM_SUCCESS;
    struct am_stream *target = event_on_stream(&found, event, stream, true, 0,
                                               "aclrtStreamWaitEvent", &code);
    if (target == NULL)
        return unlock_with(code);
    if (found->record == NULL) {
        /* Never recorded: aclrtCreateEvent's events refuse; the others do not wait. */
        if (!found->new_mode && found->flags == DEFAULT_FLAGS)
            return unlock_with(am_fail(AM_RT_PARAM_INVALID, "aclrtStreamWaitEvent", "event "
                                       "%p was never recorded", event));
        return unlock_with(AM_SUCCESS);
    }
    if (!found->record->ran) {
        struct am_marker *wait = am_marker_new(target);
        if (wait == NULL)
            return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtStreamWaitEvent",
                                       "out of host memory"));
        wait->waits_for = found->record;
        found->record->refs++;
        bool queued = am_queue_marker(target, wait);
        am_marker_put(wait);
        if (!queued)
            return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtStreamWaitEvent",
                                       "out of host memory"));
    }
    return unlock_with(AM_SUCCESS);
}

aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream)
{
    AM_ARGS(aclrtResetEvent);
    ENTER("aclrtResetEvent");
    if (event == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtResetEvent", "event is NULL"));
    struct am_event *found = NULL;
    aclError code = AM_SUCCESS;
    struct am_stream *target = event_on_stream(&found, event, stream, true, IPC,
                                               "aclrtResetEvent", &code);
    if (target == NULL)
        return unlock_with(code);
    if (found->new_mode)
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, "aclrtResetEvent", "event %p was "
                                   "made by aclrtCreateEventExWithFlag, which cannot be "
                                   "reset", event));
    struct am_marker *reset = am_marker_new(target);
    if (reset == NULL)
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtResetEvent",
                                   "out of host memory"));
    reset->resets = found->node.key;
    reset->reset_record = found->record;
    if (found->record != NULL)
        found->record->refs++;
    bool queued = am_queue_marker(target, reset);
    am_marker_put(reset);
    if (!queued)
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtResetEvent",
                                   "out of host memory"));
    return unlock_with(AM_SUCCESS);
}

/* ---- the host side: synchronise, query, time ------------------------------------------- */

static struct am_event *known(aclrtEvent event, const char *call, aclError *code)
{
    struct am_event *found = event_of(event);
    if (found == NULL)
        *code = am_fail(AM_INVALID_HANDLE, call, "event %p is not a live event", event);
    return found;
}

aclError aclrtSynchronizeEvent(aclrtEvent event)
{
    AM_ARGS(aclrtSynchronizeEvent);
    ENTER("aclrtSynchronizeEvent");
    if (event == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtSynchronizeEvent",
                                   "event is NULL"));
    aclError code = AM_SUCCESS;
    struct am_event *found = known(event, "aclrtSynchronizeEvent", &code);
    if (found == NULL)
        return unlock_with(code);
    if (found->flags & EXTERNAL)
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, "aclrtSynchronizeEvent", "event "
                                   "%p is ACL_EVENT_EXTERNAL", event));
    if (found->record != NULL)
        am_reach(found->record);
    return unlock_with(am_hazard_result(AM_SUCCESS, "aclrtSynchronizeEvent"));
}

/* Whether the latest record completed; the first poll of a pending record says no and
 * lets the device run up to it. */
static bool poll_record(struct am_event *event)
{
    struct am_marker *record = event->record;
    if (record->ran)
        return true;
    if (event->polled != record) {
        am_marker_put(event->polled);
        event->polled = record;
        record->refs++;
        am_reach(record);
        return false;
    }
    return true;
}

aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status)
{
    AM_ARGS(aclrtQueryEventStatus);
    ENTER("aclrtQueryEventStatus");
    if (event == NULL || status == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtQueryEventStatus",
                                   "event or status is NULL"));
    aclError code = AM_SUCCESS;
    struct am_event *found = known(event, "aclrtQueryEventStatus", &code);
    if (found == NULL)
        return unlock_with(code);
    if (found->flags & EXTERNAL)
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, "aclrtQueryEventStatus", "event "
                                   "%p is ACL_EVENT_EXTERNAL", event));
    bool complete = found->record == NULL ? found->new_mode : poll_record(found);
    *status = complete ? ACL_EVENT_RECORDED_STATUS_COMPLETE
                       : ACL_EVENT_RECORDED_STATUS_NOT_READY;
    return unlock_with(am_hazard_result(AM_SUCCESS, "aclrtQueryEventStatus"));
}

aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status)
{
    AM_ARGS(aclrtQueryEvent);
    ENTER("aclrtQueryEvent");
    if (event == NULL || status == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtQueryEvent",
                                   "event or status is NULL"));
    aclError code = AM_SUCCESS;
    struct am_event *found = known(event, "aclrtQueryEvent", &code);
    if (found == NULL)
        return unlock_with(code);
    if (found->new_mode || (found->flags & (EXTERNAL | IPC)))
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, "aclrtQueryEvent", "event %p "
                                   "cannot be queried by this deprecated call: use "
                                   "aclrtQueryEventStatus", event));
    bool complete = found->record == NULL || poll_record(found);
    *status = complete ? ACL_EVENT_STATUS_COMPLETE : ACL_EVENT_STATUS_NOT_READY;
    return unlock_with(am_hazard_result(AM_SUCCESS, "aclrtQueryEvent"));
}

aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent)
{
    AM_ARGS(aclrtEventElapsedTime);
    ENTER("aclrtEventElapsedTime");
    if (ms == NULL || startEvent == NULL || endEvent == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtEventElapsedTime",
                                   "ms, startEvent or endEvent is NULL"));
    struct am_event *start = event_of(startEvent), *end = event_of(endEvent);
    if (start == NULL || end == NULL)
        return unlock_with(am_fail(AM_INVALID_HANDLE, "aclrtEventElapsedTime", "event %p is "
                                   "not a live event", start == NULL ? startEvent : endEvent));
    if ((start->flags | end->flags) & (EXTERNAL | IPC))
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, "aclrtEventElapsedTime", "an "
                                   "external or IPC event has no timestamps"));
    if (start->record == NULL || end->record == NULL)
        return unlock_with(am_fail(AM_RT_INTERNAL_ERROR, "aclrtEventElapsedTime", "event %p "
                                   "was never recorded", start->record == NULL ? startEvent :
                                   endEvent));
    if (!start->record->ran || !end->record->ran)
        return unlock_with(am_fail(AM_EVENT_TIMESTAMP_INVALID, "aclrtEventElapsedTime",
                                   "a record has not completed yet: synchronise first"));
    if (!(start->flags & TIME_LINE) || !(end->flags & TIME_LINE)) {
        *ms = 0.0f; /* no timestamps taken */
        return unlock_with(AM_SUCCESS);
    }
    *ms = (float)(((double)end->record->time_ns - (double)start->record->time_ns) / 1e6);
    return unlock_with(AM_SUCCESS);
}
