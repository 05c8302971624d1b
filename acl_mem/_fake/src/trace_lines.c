/* Trace lines of captured records (acl_mem_fake_trace_lines): the records trace.c's
 * capture() keeps for a binding, turned into the lines of docs/trace-format.md, for the
 * binding's writer process. Python formats a line in about a microsecond, slower than a
 * program makes calls; this does it in a tenth of that, so the writer keeps up.
 *
 * The lines are those acl_mem/trace/_lines.py writes for the same calls (the same fields,
 * in the same order). Nothing here touches the engine: the writer process loads the
 * library only for this. The records are read as untrusted bytes: a record that is not
 * whole, not of a call the library captures, or not of that call's size ends the work.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "../include/acl_mem_fake.h"
#include "engine.h"

static const struct am_trace_spec *const by_code[] = AM_TRACE_BY_CODE;
#define CODES (sizeof by_code / sizeof by_code[0])
/* The longest line: six numbers of 20 digits and a sign, field names of a few dozen
 * bytes each; checked against the room left before each line is made. */
#define LINE_MAX_BYTES 1024

struct line {
    char *at;
    char *end;
};

static void text(struct line *line, const char *what)
{
    size_t n = strlen(what);
    if ((size_t)(line->end - line->at) > n) {
        memcpy(line->at, what, n);
        line->at += n;
    } else {
        line->at = line->end; /* cut: the caller sees the line did not fit */
    }
}

static void number(struct line *line, uint64_t value, bool is_signed)
{
    char digits[24];
    char *at = digits + sizeof digits;
    bool negative = is_signed && (int64_t)value < 0;
    uint64_t left = negative ? 0 - value : value;
    do {
        *--at = (char)('0' + left % 10);
        left /= 10;
    } while (left != 0);
    if (negative)
        *--at = '-';
    size_t n = (size_t)(digits + sizeof digits - at);
    if ((size_t)(line->end - line->at) > n) {
        memcpy(line->at, at, n);
        line->at += n;
    } else {
        line->at = line->end;
    }
}

static void field(struct line *line, const char *name, uint64_t value, bool is_signed)
{
    text(line, ",\"");
    text(line, name);
    text(line, "\":");
    number(line, value, is_signed);
}

/* The number of `ident` in `threads` (index + 1); 0 when it is new: then it is added
 * (if the table has room), and the caller stops, so that the binding writes the thread's
 * line before its first call's. */
static uint32_t thread_number(uint64_t ident, uint64_t *threads, uint32_t *count,
                              uint32_t capacity)
{
    for (uint32_t i = *count; i > 0; i--)
        if (threads[i - 1] == ident)
            return i;
    if (*count < capacity)
        threads[(*count)++] = ident;
    return 0;
}

static size_t values_of(const struct am_trace_spec *spec)
{
    return 2 + (size_t)spec->device + spec->inputs + (spec->outputs > 0) + 1 + spec->outputs;
}

static bool captured_call(const struct am_trace_spec *spec)
{
    for (int i = 0; i < spec->inputs; i++)
        if (spec->in[i].kind != AM_TRACE_NUMBER)
            return false;
    return true;
}

long acl_mem_fake_trace_lines(const void *records, size_t size, size_t *used, int64_t t0,
                              uint64_t *threads, uint32_t *thread_count,
                              uint32_t thread_capacity, char *out, size_t capacity)
{
    if (used == NULL || (size > 0 && records == NULL) || thread_count == NULL ||
        (thread_capacity > 0 && threads == NULL) || *thread_count > thread_capacity ||
        (capacity > 0 && out == NULL))
        return -1;
    const unsigned char *data = records;
    size_t at = *used = 0;
    size_t written = 0;
    /* A record that is not one ends the text before it (the next call starts there and
     * gets -1). */
    long refused = -1;
    while (at < size) {
        if (size - at < 8)
            return written > 0 ? (long)written : refused;
        uint32_t sign;
        memcpy(&sign, data + at + 4, sizeof sign);
        unsigned code = data[at], count = data[at + 1];
        const struct am_trace_spec *spec = code < CODES ? by_code[code] : NULL;
        if (spec == NULL || !captured_call(spec) || count != values_of(spec) ||
            count > 32 || (size - at - 8) / 8 < count)
            return written > 0 ? (long)written : refused;
        if (capacity - written < LINE_MAX_BYTES)
            break; /* the caller takes this text and comes back for the rest */
        uint64_t v[32];
        memcpy(v, data + at + 8, 8 * (size_t)count);
        uint32_t th = thread_number(v[1], threads, thread_count, thread_capacity);
        if (th == 0)
            break; /* a new thread (or a full table): the caller comes back */
        struct line line = {out + written, out + capacity};
        unsigned n = 0;
        text(&line, "{\"t\":");
        /* a release that entered before the recording began: at its start (as Python) */
        number(&line, (int64_t)(v[n] - (uint64_t)t0) < 0 ? 0 : v[n] - (uint64_t)t0, true);
        n++;
        text(&line, ",\"th\":");
        number(&line, th, false);
        n++;
        if (spec->device) {
            text(&line, ",\"dev\":");
            if ((int64_t)v[n] < 0)
                text(&line, "null");
            else
                number(&line, v[n], false);
            n++;
        }
        text(&line, ",\"call\":\"");
        text(&line, spec->written);
        text(&line, "\"");
        for (int i = 0; i < spec->inputs; i++, n++)
            field(&line, spec->in[i].field, v[n], sign >> n & 1);
        if (spec->outputs > 0) {
            if (v[n] != 0)
                field(&line, "null_outputs", v[n], false);
            n++;
        }
        bool succeeded = v[n] == 0;
        field(&line, "rc", v[n], sign >> n & 1);
        n++;
        for (int i = 0; i < spec->outputs && succeeded; i++, n++)
            field(&line, spec->out[i].field, v[n], sign >> n & 1);
        text(&line, "}\n");
        if (line.at == line.end) /* cannot happen within LINE_MAX_BYTES */
            return written > 0 ? (long)written : refused;
        written = (size_t)(line.at - out);
        at += 8 + 8 * (size_t)count;
        *used = at;
    }
    return (long)written;
}
