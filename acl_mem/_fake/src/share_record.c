/* One share record: who exported what, who may import it, who holds it (docs/fidelity.md
 * rows 52 and 56).
 *
 * The file is the magic line, then one JSON object: the exporter (pid and start time),
 * its memfd's number and inode, the range, device, flags and memAttr, the whitelist as
 * [pid, start, exact] triples, the holders as [pid, start] pairs and whether the exporter
 * has freed its handle. Reading is strict: anything but that object (bad JSON, a missing
 * or mistyped field, a number out of range) makes the record damaged. Keys it does not
 * know are skipped (a later version may add some).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "share.h"

/* ---- processes -------------------------------------------------------------------------- */

bool am_identity_of(int64_t pid, struct am_identity *out)
{
    if (pid <= 0 || pid > INT32_MAX)
        return false;
    char path[48], text[1024];
    snprintf(path, sizeof path, "/proc/%" PRId64 "/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    if (got <= 0)
        return false;
    text[got] = '\0';
    /* comm (field 2) may hold spaces and parentheses: fields 3.. follow the last ")". */
    char *rest = strrchr(text, ')');
    if (rest == NULL)
        return false;
    rest++;
    /* Fields 3.. follow, separated by spaces; no strtok: its state is the program's. */
    char state = 0;
    unsigned long long start = 0;
    int field = 3;
    const char *at = rest + strspn(rest, " ");
    while (*at != '\0' && field < 22) {
        if (field == 3)
            state = *at;
        at += strcspn(at, " \n");
        at += strspn(at, " \n");
        field++;
    }
    if (field != 22 || *at < '0' || *at > '9' || state == 'Z' || state == 'X' || state == 'x')
        return false;
    char *end;
    start = strtoull(at, &end, 10);
    if (*end != ' ' && *end != '\n' && *end != '\0')
        return false;
    out->pid = pid;
    out->start = start;
    return true;
}

struct am_identity am_self_identity(void)
{
    /* Keyed by pid: a forked child is another process. */
    static pid_t cached_pid;
    static struct am_identity cached;
    pid_t pid = getpid();
    if (cached_pid != pid) {
        struct am_identity me = {pid, 0};
        am_identity_of(pid, &me);
        cached = me;
        cached_pid = pid;
    }
    return cached;
}

bool am_same_identity(struct am_identity a, struct am_identity b)
{
    return a.pid == b.pid && a.start == b.start;
}

bool am_is_alive(struct am_identity who)
{
    struct am_identity now;
    return am_identity_of(who.pid, &now) && am_same_identity(now, who);
}

/* Now, in the clock of field 22: ticks since boot, suspend included. */
static uint64_t ticks_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_BOOTTIME, &now);
    long ticks = sysconf(_SC_CLK_TCK);
    return (uint64_t)now.tv_sec * (uint64_t)ticks +
           (uint64_t)now.tv_nsec * (uint64_t)ticks / 1000000000u;
}

/* ---- the record's rules ------------------------------------------------------------------ */

void am_record_free(struct am_record *record)
{
    free(record->allowed);
    free(record->holders);
    record->allowed = NULL;
    record->holders = NULL;
    record->allowed_count = record->holder_count = 0;
}

static bool entry_admits(const struct am_allowed *entry, struct am_identity who)
{
    if (who.pid != entry->pid)
        return false;
    return entry->exact ? who.start == entry->start : who.start >= entry->start;
}

bool am_record_admits(const struct am_record *record, struct am_identity who)
{
    for (size_t i = 0; i < record->allowed_count; i++)
        if (entry_admits(&record->allowed[i], who))
            return true;
    return false;
}

static int compare_allowed(const void *a, const void *b)
{
    const struct am_allowed *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return (int)x->exact - (int)y->exact;
}

bool am_record_allow(struct am_record *record, const int32_t *pids, size_t count)
{
    size_t total = record->allowed_count + count;
    struct am_allowed *entries = malloc((total ? total : 1) * sizeof *entries);
    if (entries == NULL)
        return false;
    if (record->allowed_count != 0)
        memcpy(entries, record->allowed, record->allowed_count * sizeof *entries);
    uint64_t now = ticks_now();
    for (size_t i = 0; i < count; i++) {
        struct am_identity who;
        struct am_allowed *entry = &entries[record->allowed_count + i];
        if (am_identity_of(pids[i], &who))
            *entry = (struct am_allowed){pids[i], who.start, true};
        else
            *entry = (struct am_allowed){pids[i], now, false};
    }
    qsort(entries, total, sizeof *entries, compare_allowed);
    /* Sorted, the first entry of a pid nothing ran under is its earliest, which admits
     * every later one's processes: keeping only it stops repeated calls from growing
     * the record. Exact entries are kept once each. */
    size_t kept = 0;
    for (size_t i = 0; i < total; i++) {
        const struct am_allowed *entry = &entries[i];
        bool redundant = false;
        for (size_t j = kept; j-- > 0 && entries[j].pid == entry->pid;) {
            if (entry->exact ? (entries[j].exact && entries[j].start == entry->start)
                             : !entries[j].exact) {
                redundant = true;
                break;
            }
        }
        if (!redundant)
            entries[kept++] = *entry;
    }
    free(record->allowed);
    record->allowed = entries;
    record->allowed_count = kept;
    return true;
}

bool am_record_add_holder(struct am_record *record, struct am_identity who)
{
    struct am_identity *grown = realloc(record->holders,
                                        (record->holder_count + 1) * sizeof *grown);
    if (grown == NULL)
        return false;
    grown[record->holder_count++] = who;
    record->holders = grown;
    return true;
}

void am_record_remove_holder(struct am_record *record, struct am_identity who)
{
    for (size_t i = 0; i < record->holder_count; i++) {
        if (am_same_identity(record->holders[i], who)) {
            memmove(&record->holders[i], &record->holders[i + 1],
                    (record->holder_count - i - 1) * sizeof *record->holders);
            record->holder_count--;
            return;
        }
    }
}

bool am_record_drop_dead_holders(struct am_record *record)
{
    size_t kept = 0;
    for (size_t i = 0; i < record->holder_count; i++)
        if (am_is_alive(record->holders[i]))
            record->holders[kept++] = record->holders[i];
    bool changed = kept != record->holder_count;
    record->holder_count = kept;
    return changed;
}

bool am_record_owner_gone(const struct am_record *record)
{
    return record->owner_freed || !am_is_alive(record->owner);
}

/* ---- writing ------------------------------------------------------------------------------ */

struct text {
    char *data;
    size_t length, capacity;
    bool failed;
};

static void put(struct text *out, const char *format, ...) __attribute__((format(printf, 2, 3)));

static void put(struct text *out, const char *format, ...)
{
    if (out->failed)
        return;
    for (;;) {
        va_list args;
        va_start(args, format);
        int n = vsnprintf(out->data + out->length, out->capacity - out->length, format, args);
        va_end(args);
        if (n < 0) {
            out->failed = true;
            return;
        }
        if ((size_t)n < out->capacity - out->length) {
            out->length += (size_t)n;
            return;
        }
        size_t capacity = out->capacity * 2 + (size_t)n + 1;
        char *grown = realloc(out->data, capacity);
        if (grown == NULL) {
            out->failed = true;
            return;
        }
        out->data = grown;
        out->capacity = capacity;
    }
}

char *am_record_encode(const struct am_record *record, size_t *length)
{
    struct text out = {malloc(512), 0, 512, false};
    if (out.data == NULL)
        return NULL;
    put(&out, "%s{\"pid\": %" PRId64 ", \"start\": %" PRIu64 ", \"fd\": %" PRIu64
        ", \"dev\": %" PRIu64 ", \"ino\": %" PRIu64 ", \"offset\": %" PRIu64 ", \"size\": %"
        PRIu64 ", \"device\": %" PRIu64 ", \"flags\": %" PRIu64 ", \"memAttr\": %" PRIu64
        ", \"pids\": [", AM_SHARE_MAGIC, record->owner.pid, record->owner.start, record->fd,
        record->dev, record->ino, record->offset, record->size, record->device, record->flags,
        record->mem_attr);
    for (size_t i = 0; i < record->allowed_count; i++)
        put(&out, "%s[%" PRId64 ", %" PRIu64 ", %s]", i ? ", " : "", record->allowed[i].pid,
            record->allowed[i].start, record->allowed[i].exact ? "true" : "false");
    put(&out, "], \"holders\": [");
    for (size_t i = 0; i < record->holder_count; i++)
        put(&out, "%s[%" PRId64 ", %" PRIu64 "]", i ? ", " : "", record->holders[i].pid,
            record->holders[i].start);
    put(&out, "], \"owner_freed\": %s}", record->owner_freed ? "true" : "false");
    if (out.failed) {
        free(out.data);
        return NULL;
    }
    *length = out.length;
    return out.data;
}

/* ---- reading ------------------------------------------------------------------------------ */

#define MAX_DEPTH 64

struct parser {
    const char *at, *end;
    struct am_why *why;
    bool failed;
};

static bool fail(struct parser *p, const char *what)
{
    if (!p->failed)
        am_why_set(p->why, "%s", what);
    p->failed = true;
    return false;
}

static void blanks(struct parser *p)
{
    while (p->at < p->end && (*p->at == ' ' || *p->at == '\t' || *p->at == '\n' ||
                              *p->at == '\r'))
        p->at++;
}

static bool next_is(struct parser *p, char c)
{
    blanks(p);
    if (p->at < p->end && *p->at == c) {
        p->at++;
        return true;
    }
    return false;
}

static bool word(struct parser *p, const char *text)
{
    size_t n = strlen(text);
    if ((size_t)(p->end - p->at) >= n && memcmp(p->at, text, n) == 0) {
        p->at += n;
        return true;
    }
    return false;
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A JSON string; its raw bytes between the quotes in [*start, *stop). */
static bool string(struct parser *p, const char **start, const char **stop)
{
    if (!next_is(p, '"'))
        return fail(p, "not JSON (a string was expected)");
    *start = p->at;
    while (p->at < p->end) {
        unsigned char c = (unsigned char)*p->at;
        if (c == '"') {
            *stop = p->at++;
            return true;
        }
        if (c < 0x20)
            return fail(p, "not JSON (a control character in a string)");
        if (c == '\\') {
            p->at++;
            if (p->at >= p->end)
                break;
            char e = *p->at;
            if (e == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (p->at + i >= p->end || !is_hex(p->at[i]))
                        return fail(p, "not JSON (a bad \\u escape)");
                p->at += 4;
            } else if (e == '\0' || strchr("\"\\/bfnrt", e) == NULL) {
                return fail(p, "not JSON (a bad escape)");
            }
        }
        p->at++;
    }
    return fail(p, "not JSON (a string does not end)");
}

/* A JSON number that is a whole number in [low, 2^64 - 1]; a fraction or exponent makes it
 * not whole. `*is_number` says whether a number was there at all. */
static bool whole(struct parser *p, int64_t low, uint64_t *magnitude, bool *negative,
                  const char *what)
{
    blanks(p);
    const char *at = p->at;
    bool minus = at < p->end && *at == '-';
    if (minus)
        at++;
    if (at >= p->end || *at < '0' || *at > '9') {
        am_why_set(p->why, "%s is not a whole number", what);
        p->failed = true;
        return false;
    }
    if (*at == '0' && at + 1 < p->end && at[1] >= '0' && at[1] <= '9')
        return fail(p, "not JSON (a number with a leading zero)");
    uint64_t value = 0;
    bool overflow = false;
    for (; at < p->end && *at >= '0' && *at <= '9'; at++) {
        unsigned digit = (unsigned)(*at - '0');
        if (value > (UINT64_MAX - digit) / 10)
            overflow = true;
        value = value * 10 + digit;
    }
    p->at = at;
    bool fraction = at < p->end && (*at == '.' || *at == 'e' || *at == 'E');
    bool below = minus && value != 0 &&
                 (low >= 0 || value > (uint64_t)(-(low + 1)) + 1);
    if (overflow || fraction || below) {
        am_why_set(p->why, "%s is not a whole number in range", what);
        p->failed = true;
        return false;
    }
    *magnitude = value;
    *negative = minus && value != 0;
    return true;
}

static bool unsigned_field(struct parser *p, uint64_t *out, const char *what)
{
    bool negative;
    return whole(p, 0, out, &negative, what);
}

static bool signed_field(struct parser *p, int64_t low, int64_t *out, const char *what)
{
    uint64_t magnitude;
    bool negative;
    if (!whole(p, low, &magnitude, &negative, what))
        return false;
    if (!negative && magnitude > (uint64_t)INT64_MAX) {
        am_why_set(p->why, "%s is not a whole number in range", what);
        p->failed = true;
        return false;
    }
    *out = negative ? -(int64_t)(magnitude - 1) - 1 : (int64_t)magnitude;
    return true;
}

static bool boolean(struct parser *p, bool *out, const char *what)
{
    blanks(p);
    if (word(p, "true")) {
        *out = true;
        return true;
    }
    if (word(p, "false")) {
        *out = false;
        return true;
    }
    am_why_set(p->why, "%s is not true or false", what);
    p->failed = true;
    return false;
}

/* Any JSON value, skipped (the value of a key the record does not have). */
static bool skip_value(struct parser *p, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(p, "not JSON (nested too deep)");
    blanks(p);
    if (p->at >= p->end)
        return fail(p, "not JSON (a value was expected)");
    const char *start, *stop;
    switch (*p->at) {
    case '"':
        return string(p, &start, &stop);
    case '{':
        p->at++;
        if (next_is(p, '}'))
            return true;
        do {
            if (!string(p, &start, &stop) || !next_is(p, ':'))
                return fail(p, "not JSON (a bad object)");
            if (!skip_value(p, depth + 1))
                return false;
        } while (next_is(p, ','));
        return next_is(p, '}') || fail(p, "not JSON (an object does not end)");
    case '[':
        p->at++;
        if (next_is(p, ']'))
            return true;
        do {
            if (!skip_value(p, depth + 1))
                return false;
        } while (next_is(p, ','));
        return next_is(p, ']') || fail(p, "not JSON (a list does not end)");
    default:
        if (word(p, "true") || word(p, "false") || word(p, "null"))
            return true;
        if (*p->at == '-' || (*p->at >= '0' && *p->at <= '9')) {
            const char *start_of_number = p->at += *p->at == '-';
            while (p->at < p->end && *p->at != '\0' && strchr("0123456789.eE+-", *p->at))
                p->at++;
            return p->at > start_of_number || fail(p, "not JSON (a bad number)");
        }
        return fail(p, "not JSON (an unknown value)");
    }
}

/* [[a, b(, exact)], ...]: `width` 3 for the whitelist, 2 for holders. */
static bool entries(struct parser *p, int width, struct am_record *record)
{
    const char *why = width == 3 ? "'pids' is not a list of [pid, start, exact]"
                                 : "'holders' is not a list of [pid, start]";
    if (!next_is(p, '['))
        return fail(p, why);
    size_t count = 0, capacity = 0;
    struct am_allowed *allowed = NULL;
    bool ok = true;
    if (!next_is(p, ']')) {
        do {
            if (count == capacity) {
                capacity = capacity ? capacity * 2 : 8;
                struct am_allowed *grown = realloc(allowed, capacity * sizeof *grown);
                if (grown == NULL) {
                    ok = fail(p, "too big to read");
                    break;
                }
                allowed = grown;
            }
            struct am_allowed *entry = &allowed[count];
            entry->exact = false;
            uint64_t start = 0;
            if (!next_is(p, '[')) {
                ok = fail(p, why);
                break;
            }
            if (!signed_field(p, width == 3 ? -((int64_t)1 << 31) : 0, &entry->pid,
                              width == 3 ? "a whitelisted pid" : "a holder's pid") ||
                !next_is(p, ',') ||
                !unsigned_field(p, &start, width == 3 ? "a whitelisted start"
                                                      : "a holder's start")) {
                ok = fail(p, why);
                break;
            }
            entry->start = start;
            if (width == 3 && (!next_is(p, ',') ||
                               !boolean(p, &entry->exact, "a whitelist entry's 'exact'"))) {
                ok = fail(p, why);
                break;
            }
            if (!next_is(p, ']')) {
                ok = fail(p, why);
                break;
            }
            count++;
        } while (next_is(p, ','));
        if (ok && !next_is(p, ']'))
            ok = fail(p, why);
    }
    if (!ok) {
        free(allowed);
        return false;
    }
    if (width == 3) {
        free(record->allowed);
        record->allowed = allowed;
        record->allowed_count = count;
        return true;
    }
    struct am_identity *holders = malloc((count ? count : 1) * sizeof *holders);
    if (holders == NULL) {
        free(allowed);
        return fail(p, "too big to read");
    }
    for (size_t i = 0; i < count; i++)
        holders[i] = (struct am_identity){allowed[i].pid, allowed[i].start};
    free(allowed);
    free(record->holders);
    record->holders = holders;
    record->holder_count = count;
    return true;
}

enum { F_PID, F_START, F_FD, F_DEV, F_INO, F_OFFSET, F_SIZE, F_DEVICE, F_FLAGS, F_ATTR,
       F_PIDS, F_HOLDERS, F_FREED, F_COUNT };
static const char *const field_names[F_COUNT] = {
    "pid", "start", "fd", "dev", "ino", "offset", "size", "device", "flags", "memAttr",
    "pids", "holders", "owner_freed"};

static bool field(struct parser *p, int which, struct am_record *r)
{
    uint64_t *numbers[] = {NULL, &r->owner.start, &r->fd, &r->dev, &r->ino, &r->offset,
                           &r->size, &r->device, &r->flags, &r->mem_attr};
    switch (which) {
    case F_PID:
        return signed_field(p, 0, &r->owner.pid, "pid");
    case F_PIDS:
        return entries(p, 3, r);
    case F_HOLDERS:
        return entries(p, 2, r);
    case F_FREED:
        return boolean(p, &r->owner_freed, "'owner_freed'");
    default:
        return unsigned_field(p, numbers[which], field_names[which]);
    }
}

bool am_record_decode(const char *data, size_t length, struct am_record *out,
                      struct am_why *why)
{
    size_t magic = strlen(AM_SHARE_MAGIC);
    struct parser p = {data + magic, data + length, why, false};
    struct am_record r = {0};
    bool seen[F_COUNT] = {false};
    if (length < magic || memchr(data, '\0', length) != NULL) {
        am_why_set(why, "not JSON (it holds NUL bytes)");
        return false;
    }
    if (!next_is(&p, '{')) {
        fail(&p, "not a JSON object");
    } else if (!next_is(&p, '}')) {
        do {
            const char *start, *stop;
            if (!string(&p, &start, &stop) || !next_is(&p, ':')) {
                fail(&p, "not JSON (a bad key)");
                break;
            }
            int which = -1;
            for (int i = 0; i < F_COUNT; i++)
                if ((size_t)(stop - start) == strlen(field_names[i]) &&
                    memcmp(start, field_names[i], (size_t)(stop - start)) == 0)
                    which = i;
            if (which < 0 ? !skip_value(&p, 1) : !field(&p, which, &r))
                break;
            if (which >= 0)
                seen[which] = true;
        } while (next_is(&p, ','));
        if (!p.failed && !next_is(&p, '}'))
            fail(&p, "not JSON (the object does not end)");
    }
    blanks(&p);
    if (!p.failed && p.at != p.end)
        fail(&p, "not JSON (something follows the object)");
    for (int i = 0; i < F_COUNT && !p.failed; i++) {
        if (!seen[i]) {
            am_why_set(why, "'%s' is missing", field_names[i]);
            p.failed = true;
        }
    }
    if (p.failed) {
        am_record_free(&r);
        return false;
    }
    *out = r;
    return true;
}
