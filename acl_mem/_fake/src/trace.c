/* Allocation traces from C programs (ACL_MEM_TRACE, docs/trace-format.md): the same file
 * a Python program records, so `acl-mem trace summary`, `replay` and `plot` read it.
 *
 * Each traced call (calls.h, generated from the format's table in acl_mem/trace/_lines.py)
 * is written when it leaves the engine (unlock_with), from the arguments it recorded on
 * entry (AM_ARGS) and its return code; outputs are read back through the pointers the
 * call wrote them to, only when it succeeded. While recording, the fast paths are off, so
 * every call leaves through there. Lines go to a buffer written out when it fills, every
 * 0.1 s of calls, before a fork and at exit (the `end` line); a forked child, which
 * often leaves with _exit, writes each record at once.
 *
 * The file: the first process of a recording writes ACL_MEM_TRACE (a regular file of the
 * user, emptied; never through a symlink, never blocking on a FIFO) and sets
 * ACL_MEM_TRACE_OWNER=<pid>:<run>; a forked child, or a program started with both
 * variables, writes a new <path>.<pid> (or <path>.<pid>.<n>) with the owner's run. A
 * Python process records its calls itself and turns this recorder off
 * (acl_mem_fake_set_trace). Nothing here ever fails a call: a file that cannot be
 * written is said once on stderr, and the calls after it are counted as lost.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../include/acl_mem_fake.h"
#include "engine.h"

#define FLUSH_AT (32 * 1024)
#define FLUSH_EVERY_NS 100000000ull
#define MAX_STACK 32
#define STACK_SLOTS 4096
#define NEW_FILE_TRIES 1000
/* More than one record with its thread and stack lines can take: strings are cut at
 * 4096 bytes, and an escaped byte takes six. */
#define RECORD_ROOM (160 * 1024)
#ifndef AM_VERSION
#define AM_VERSION "unknown"
#endif

static struct {
    pthread_mutex_t lock;
    bool wanted, started, failed, child, disabled;
    bool forked; /* a forked child: it often leaves with _exit, so nothing waits in memory */
    int fd;
    int depth;
    char path[PATH_MAX]; /* the named file (ACL_MEM_TRACE, absolute) */
    char run[17];
    pid_t pid, parent;
    uint64_t start_ns, last_flush_ns;
    unsigned long calls, lost;
    char *buffer;
    size_t used, capacity;
    int threads;
    uint64_t stacks[STACK_SLOTS]; /* hashes of stacks written; 0 free */
    int stack_ids;
} rec = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static _Thread_local int thread_number;
static _Thread_local pid_t thread_pid;

/* Capture (acl_mem_fake_trace_capture): a binding that writes the trace file itself (acl_mem
 * in Python) takes each call's record from here as a few fixed-size numbers, so that the
 * recording costs its program a copy of them, not a text line. Under rec.lock; switched
 * with the engine lock too. A call leaving through a fast path holds only its arena's
 * lock, so capture() looks at `on` again under rec.lock. */
#define CAPTURE_MAX ((size_t)64 << 20)
#define CAPTURE_VALUES 16
/* time, thread, device, the inputs, the NULL-outputs mask, the code, three outputs */
_Static_assert(CAPTURE_VALUES >= 2 + 1 + AM_MAX_ARGS + 1 + 1 + 3, "a record's values");
static struct {
    bool on;
    uint64_t since; /* when it was switched on: no record is timed before */
    unsigned char *buffer;
    size_t used, capacity;
    unsigned long lost;
} cap;
unsigned long acl_mem_fake_captured_bytes;
/* Calls of the binding's own (its queries for a trace's header) are not captured. */
static _Thread_local int quiet;

static uint64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

uint64_t am_trace_now(void)
{
    return now_ns();
}

/* ---- text ------------------------------------------------------------------------------- */

static bool grow(size_t more)
{
    if (rec.used + more <= rec.capacity)
        return true;
    size_t capacity = rec.capacity ? rec.capacity : 64 * 1024;
    while (capacity < rec.used + more)
        capacity *= 2;
    char *bigger = realloc(rec.buffer, capacity);
    if (bigger == NULL)
        return false;
    rec.buffer = bigger;
    rec.capacity = capacity;
    return true;
}

static bool put(const char *format, ...) __attribute__((format(printf, 1, 2)));

static bool put(const char *format, ...)
{
    for (;;) {
        va_list args;
        va_start(args, format);
        int n = vsnprintf(rec.buffer + rec.used, rec.capacity - rec.used, format, args);
        va_end(args);
        if (n < 0)
            return false;
        if (rec.buffer != NULL && (size_t)n < rec.capacity - rec.used) {
            rec.used += (size_t)n;
            return true;
        }
        if (!grow((size_t)n + 1))
            return false;
    }
}

/* A JSON string of at most `limit` bytes of `text`: every byte outside printable ASCII
 * escaped, so the line is UTF-8 whatever the bytes were. */
static bool put_string(const char *text, size_t limit)
{
    if (!put("\""))
        return false;
    for (size_t i = 0; i < limit && text[i] != '\0'; i++) {
        unsigned char c = (unsigned char)text[i];
        bool ok = c == '"' || c == '\\' ? put("\\%c", c)
                  : c < 0x20 || c >= 0x7f ? put("\\u%04x", c)
                                          : put("%c", c);
        if (!ok)
            return false;
    }
    return put("\"");
}

/* ---- the file ----------------------------------------------------------------------------- */

static void say(const char *format, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "acl_mem: ");
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n");
    va_end(args);
}

/* A descriptor to write `path` from its start: a regular file of this user, emptied
 * unless `exclusive` (then a new file); -1 with errno and *why otherwise. */
static int open_file(const char *path, bool exclusive, const char **why)
{
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                (exclusive ? O_EXCL : 0);
    int fd = open(path, flags, 0644);
    if (fd < 0) {
        *why = errno == ELOOP ? "a symbolic link: not followed"
             : errno == ENXIO ? "a FIFO: a trace is written only to a regular file"
                              : strerror(errno);
        return -1;
    }
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        *why = "not a regular file: a trace is written only to a regular file";
    } else if (info.st_uid != geteuid()) {
        *why = "owned by another user: not written";
    } else if (!exclusive && ftruncate(fd, 0) != 0) {
        *why = strerror(errno);
    } else {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        return fd;
    }
    close(fd);
    errno = EINVAL;
    return -1;
}

static void write_out(void)
{
    size_t done = 0;
    while (rec.fd >= 0 && done < rec.used) {
        ssize_t n = write(rec.fd, rec.buffer + done, rec.used - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            say("the trace %s cannot be written (%s): recording stops here", rec.path,
                n < 0 ? strerror(errno) : "no space");
            close(rec.fd);
            rec.fd = -1;
            rec.failed = true;
            break;
        }
        done += (size_t)n;
    }
    rec.used = 0;
    rec.last_flush_ns = now_ns();
}

static void header(void)
{
    char started[64];
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    struct tm utc;
    gmtime_r(&wall.tv_sec, &utc);
    size_t length = strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%S", &utc);
    snprintf(started + length, sizeof started - length, ".%03ld+00:00",
             wall.tv_nsec / 1000000);
    put("{\"type\":\"header\",\"format\":\"acl_mem.trace\",\"version\":1,\"acl_mem\":\"%s\","
        "\"pid\":%d,\"parent_pid\":", AM_VERSION, (int)rec.pid);
    put(rec.parent > 0 ? "%d" : "null", (int)rec.parent);
    put(",\"run\":\"%s\",\"argv\":[", rec.run);
    char args[4096];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd < 0 ? -1 : read(fd, args, sizeof args - 1);
    if (fd >= 0)
        close(fd);
    for (ssize_t at = 0; at < got; at += (ssize_t)strlen(args + at) + 1) {
        args[got] = '\0';
        put(at ? "," : "");
        put_string(args + at, 200);
    }
    uint32_t padding = am.cann->soc_padding ? am.profile->padding : 32;
    put("],\"started\":\"%s\",\"stack_depth\":%d,\"backend\":\"fake\",\"soc\":", started,
        rec.depth);
    put_string(am.profile->soc_name, 64);
    put(",\"cann\":\"%s\",\"acl\":\"%d.%d.%d\",\"padding\":%u,\"device_count\":%d,"
        "\"memory\":\"%s\",\"capacity\":%" PRIu64 ",\"set_counts\":{},\"current_device\":null,"
        "\"details\":{\"profile\":\"%s\",\"library\":\"acl_mem's fake libascendcl (C)\"}}\n",
        am.cann->name, am.cann->acl_version[0], am.cann->acl_version[1],
        am.cann->acl_version[2], padding, am.device_count, am.profile->ddr ? "DDR" : "HBM",
        am.capacity, am.profile->name);
}

static void random_run(char out[17])
{
    unsigned char bytes[8];
    if (getrandom(bytes, sizeof bytes, GRND_NONBLOCK) != (ssize_t)sizeof bytes) {
        uint64_t mix = now_ns() * 0x9E3779B97F4A7C15u ^ (uint64_t)getpid();
        memcpy(bytes, &mix, sizeof bytes);
    }
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", bytes[i]);
}

/* The first record of this process: decide which file, open it, write the header. */
static bool start(void)
{
    if (rec.started)
        return rec.fd >= 0;
    rec.started = true;
    rec.pid = getpid();
    char path[PATH_MAX + 32];
    const char *why = NULL;
    int fd;
    if (rec.child) {
        snprintf(path, sizeof path, "%s.%d", rec.path, (int)rec.pid);
        size_t base = strlen(path);
        fd = open_file(path, true, &why);
        for (int n = 1; fd < 0 && errno == EEXIST && n <= NEW_FILE_TRIES; n++) {
            snprintf(path + base, sizeof path - base, ".%d", n);
            fd = open_file(path, true, &why);
        }
    } else {
        snprintf(path, sizeof path, "%s", rec.path);
        fd = open_file(path, false, &why);
    }
    if (fd < 0) {
        say("ACL_MEM_TRACE=%s: not recording into %s: %s", rec.path, path, why);
        rec.failed = true;
        return false;
    }
    rec.fd = fd;
    header();
    write_out(); /* the file is a trace from its first call on */
    return true;
}

/* ACL_MEM_TRACE and ACL_MEM_TRACE_STACK, read once when the library starts. */
void am_trace_read_settings(void)
{
    const char *path = secure_getenv("ACL_MEM_TRACE");
    if (path == NULL || path[strspn(path, " \t\n")] == '\0' || rec.disabled)
        return;
    const char *stack = secure_getenv("ACL_MEM_TRACE_STACK");
    long depth = 0;
    if (stack != NULL && stack[strspn(stack, " \t\n")] != '\0') {
        const char *digits = stack + strspn(stack, " \t\n");
        size_t n = strspn(digits, "0123456789");
        if (n == 0 || n > 6 || digits[n + strspn(digits + n, " \t\n")] != '\0') {
            say("not recording: ACL_MEM_TRACE_STACK=%.40s is not a whole number from 0 to "
                "%d", stack, MAX_STACK);
            return;
        }
        depth = strtol(digits, NULL, 10);
        if (depth > MAX_STACK)
            depth = MAX_STACK;
    }
    rec.depth = (int)depth;
    char here[PATH_MAX] = "";
    if (path[0] != '/' && getcwd(here, sizeof here) == NULL) {
        say("ACL_MEM_TRACE=%s: not recording: the working directory is unknown", path);
        return;
    }
    /* Room for ".<pid>.<n>" too; a path cut short would be another file. */
    int length = snprintf(rec.path, sizeof rec.path, "%s%s%s", here, here[0] ? "/" : "", path);
    if (length < 0 || (size_t)length + 24 >= sizeof rec.path) {
        say("ACL_MEM_TRACE=%.80s...: not recording: the path is too long", path);
        return;
    }
    /* Any owner means another recording came first (also one with this very pid: a
     * program it exec'd), so this process writes a new file of its own. */
    const char *owner = getenv("ACL_MEM_TRACE_OWNER");
    const char *colon = owner == NULL ? NULL : strchr(owner, ':');
    rec.child = owner != NULL && owner[0] != '\0';
    if (rec.child) {
        rec.parent = (pid_t)atoi(owner);
        bool valid = colon != NULL && strlen(colon + 1) == 16 &&
                     strspn(colon + 1, "0123456789abcdef") == 16;
        snprintf(rec.run, sizeof rec.run, "%s", valid ? colon + 1 : "");
    } else {
        random_run(rec.run);
        char value[64];
        snprintf(value, sizeof value, "%d:%s", (int)getpid(), rec.run);
        /* At the first ACL call; a program's other threads reading the environment at
         * that very moment are the risk setenv always carries. */
        setenv("ACL_MEM_TRACE_OWNER", value, 1);
        setenv("ACL_MEM_TRACE", rec.path, 1);
    }
    rec.wanted = true;
    rec.start_ns = now_ns(); /* before any call's time */
    __atomic_store_n(&am.trace_file, true, __ATOMIC_RELAXED);
    __atomic_store_n(&am.tracing, true, __ATOMIC_RELAXED);
}

/* ---- records ------------------------------------------------------------------------------ */

static uint64_t hash_stack(void *const *frames, int count)
{
    uint64_t h = 1469598103934665603u;
    for (int i = 0; i < count; i++)
        h = (h ^ (uint64_t)(uintptr_t)frames[i]) * 1099511628211u;
    return h ? h : 1;
}

/* The caller's frames outside this library, innermost first: its id (written with a
 * `stack` line the first time), or -1. */
static int stack_id(void)
{
    void *frames[MAX_STACK + 16];
    int count = backtrace(frames, MAX_STACK + 16);
    Dl_info self, where;
    if (dladdr((void *)stack_id, &self) == 0)
        return -1;
    int first = 0;
    while (first < count && dladdr(frames[first], &where) != 0 &&
           where.dli_fbase == self.dli_fbase)
        first++;
    int used = count - first < rec.depth ? count - first : rec.depth;
    if (used <= 0)
        return -1;
    uint64_t h = hash_stack(frames + first, used);
    size_t slot = h % STACK_SLOTS;
    for (size_t probe = 0; probe < STACK_SLOTS; probe++, slot = (slot + 1) % STACK_SLOTS) {
        if (rec.stacks[slot] == h)
            return (int)slot;
        if (rec.stacks[slot] == 0)
            break;
    }
    if (rec.stacks[slot] != 0)
        return -1; /* the table is full: the call goes without its stack */
    rec.stacks[slot] = h;
    put("{\"type\":\"stack\",\"id\":%d,\"frames\":[", (int)slot);
    for (int i = 0; i < used; i++) {
        char name[256];
        const char *file = "?";
        void *at = (char *)frames[first + i] - 1; /* the call, not the return address */
        if (dladdr(at, &where) != 0) {
            file = where.dli_fname ? where.dli_fname : "?";
            if (where.dli_sname != NULL)
                snprintf(name, sizeof name, "%s+%#lx", where.dli_sname,
                         (unsigned long)((char *)at - (char *)where.dli_saddr));
            else
                snprintf(name, sizeof name, "+%#lx",
                         (unsigned long)((char *)at - (char *)where.dli_fbase));
        } else {
            snprintf(name, sizeof name, "%p", at);
        }
        put(i ? ",[" : "[");
        put_string(file, 200);
        put(",0,");
        put_string(name, 200);
        put("]");
    }
    put("]}\n");
    return (int)slot;
}

static int this_thread(void)
{
    if (thread_number != 0 && thread_pid == rec.pid)
        return thread_number;
    thread_number = ++rec.threads;
    thread_pid = rec.pid;
    char name[32] = "", path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)gettid());
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, name, sizeof name - 1);
        close(fd);
        name[got > 0 ? got : 0] = '\0';
        name[strcspn(name, "\n")] = '\0';
    }
    put("{\"type\":\"thread\",\"th\":%d,\"ident\":%" PRIu64 ",\"name\":", thread_number,
        (uint64_t)pthread_self());
    put_string(name, 32);
    put("}\n");
    return thread_number;
}

/* A field of the record; `readable`: the call succeeded, so what an input points to was
 * read by the call itself and may be read here (a refused call's pointer may be wild). */
static void put_field(const struct am_trace_field *field, uint64_t value, unsigned char kind,
                      bool readable)
{
    put(",\"%s\":", field->field);
    if ((field->kind == AM_TRACE_STRING || field->kind == AM_TRACE_PROP) && !readable) {
        put("null");
    } else if (field->kind == AM_TRACE_STRING) {
        if (value == 0)
            put("null");
        else
            put_string((const char *)(uintptr_t)value, 4096);
    } else if (field->kind == AM_TRACE_PROP) {
        const aclrtPhysicalMemProp *prop = (const aclrtPhysicalMemProp *)(uintptr_t)value;
        if (prop == NULL)
            put("null");
        else
            put("{\"handleType\":%d,\"allocationType\":%d,\"memAttr\":%d,\"location\":"
                "{\"id\":%u,\"type\":%d},\"reserve\":%" PRIu64 "}", (int)prop->handleType,
                (int)prop->allocationType, (int)prop->memAttr, prop->location.id,
                (int)prop->location.type, (uint64_t)prop->reserve);
    } else if (kind == AM_ARG_SIGNED) {
        put("%" PRId64, (int64_t)value);
    } else {
        put("%" PRIu64, value);
    }
}

/* ---- capture ------------------------------------------------------------------------------ */

/* Whether a call's record is only numbers (a string or a structure an input points to is
 * written by the binding itself). */
static bool capturable(const struct am_trace_spec *spec)
{
    for (int i = 0; i < spec->inputs; i++)
        if (spec->in[i].kind != AM_TRACE_NUMBER)
            return false;
    return true;
}

/* One record, as acl_mem/trace/_lines.py reads it (Consumer._captured): a head of 8 bytes (the
 * call's code, the count of values, two zero bytes, a mask of the values that are signed)
 * and that many 8-byte values in the machine's order: time, thread (pthread_self), the
 * current device (-1: none) if the call has one, the inputs, the mask of NULL outputs if
 * it has outputs, the return code, and the outputs (0 unless it succeeded). With rec.lock. */
static void capture(const struct am_call *call, const struct am_thread *self, uint64_t t,
                    int device, aclError code)
{
    const struct am_trace_spec *spec = call->trace;
    if (!cap.on)
        return; /* switched off since the call looked (a fast path holds no engine lock) */
    uint64_t values[CAPTURE_VALUES];
    uint32_t sign = 0;
    int n = 0;
    /* A release is timed at its entry, which may come before the capture (it waited for
     * the lock the switch held): then at the capture's start. */
    values[n++] = t < cap.since ? cap.since : t;
    values[n++] = (uint64_t)pthread_self();
    if (spec->device) {
        sign |= 1u << n;
        values[n++] = (uint64_t)(int64_t)device;
    }
    for (int i = 0; i < spec->inputs; i++) {
        if (call->args[spec->in[i].arg].kind == AM_ARG_SIGNED)
            sign |= 1u << n;
        values[n++] = self->args[spec->in[i].arg];
    }
    if (spec->outputs > 0) {
        uint64_t null_outputs = 0;
        for (int i = 0; i < spec->outputs; i++)
            if (self->args[spec->out[i].arg] == 0)
                null_outputs |= 1u << i;
        values[n++] = null_outputs;
    }
    sign |= 1u << n;
    values[n++] = (uint64_t)(int64_t)code;
    for (int i = 0; i < spec->outputs; i++) {
        const void *where = (const void *)(uintptr_t)self->args[spec->out[i].arg];
        uint64_t value = 0;
        if (where != NULL && code == AM_SUCCESS)
            memcpy(&value, where, sizeof value);
        values[n++] = value;
    }
    size_t size = 8 + 8 * (size_t)n;
    if (cap.used + size > cap.capacity) {
        size_t capacity = cap.capacity ? cap.capacity * 2 : 64 * 1024;
        unsigned char *bigger = capacity > CAPTURE_MAX ? NULL : realloc(cap.buffer, capacity);
        if (bigger == NULL) { /* the binding has not taken them for long: this one goes */
            cap.lost++;
            return;
        }
        cap.buffer = bigger;
        cap.capacity = capacity;
    }
    unsigned char *at = cap.buffer + cap.used;
    at[0] = spec->code;
    at[1] = (unsigned char)n;
    at[2] = at[3] = 0;
    memcpy(at + 4, &sign, sizeof sign);
    memcpy(at + 8, values, 8 * (size_t)n);
    cap.used += size;
    __atomic_store_n(&acl_mem_fake_captured_bytes, cap.used, __ATOMIC_RELAXED);
}

static void update_tracing(void)
{
    /* Read without the engine lock: by every call's entry (am_args) and fast paths. */
    bool file = rec.wanted && !rec.disabled;
    __atomic_store_n(&am.trace_file, file, __ATOMIC_RELAXED);
    __atomic_store_n(&am.tracing, file || cap.on, __ATOMIC_RELAXED);
}

int acl_mem_fake_trace_capture(int on)
{
    am_lock();
    pthread_mutex_lock(&rec.lock);
    if (on != 0 && !cap.on)
        cap.since = now_ns();
    __atomic_store_n(&cap.on, on != 0, __ATOMIC_RELAXED);
    if (!cap.on) {
        free(cap.buffer);
        cap.buffer = NULL;
        cap.used = cap.capacity = 0;
        cap.lost = 0;
        __atomic_store_n(&acl_mem_fake_captured_bytes, 0, __ATOMIC_RELAXED);
    }
    update_tracing();
    pthread_mutex_unlock(&rec.lock);
    am_unlock();
    return AM_SUCCESS;
}

size_t acl_mem_fake_trace_take(void *out, size_t capacity, unsigned long *lost)
{
    pthread_mutex_lock(&rec.lock);
    size_t taken = 0;
    while (out != NULL && taken + 8 <= cap.used) {
        size_t size = 8 + 8 * (size_t)cap.buffer[taken + 1];
        if (taken + size > capacity)
            break;
        taken += size;
    }
    if (taken > 0) {
        memcpy(out, cap.buffer, taken);
        memmove(cap.buffer, cap.buffer + taken, cap.used - taken);
        cap.used -= taken;
        __atomic_store_n(&acl_mem_fake_captured_bytes, cap.used, __ATOMIC_RELAXED);
    }
    if (lost != NULL) {
        *lost = cap.lost;
        cap.lost = 0;
    }
    pthread_mutex_unlock(&rec.lock);
    return taken;
}

int acl_mem_fake_trace_quiet(int on)
{
    quiet += on ? 1 : (quiet > 0 ? -1 : 0);
    return AM_SUCCESS;
}

/* The call leaving the engine (unlock_with, with the engine lock; or a fast path, with
 * its arena's lock, only while nothing is written to a file): its record. */
void am_trace_exit(aclError code)
{
    struct am_thread *self = am_thread_raw();
    const struct am_call *call = self->call;
    if (call == NULL || call->trace == NULL || self->traced)
        return;
    self->traced = true;
    const struct am_trace_spec *spec = call->trace;
    bool to_file = rec.wanted && !rec.disabled;
    bool to_capture = __atomic_load_n(&cap.on, __ATOMIC_RELAXED) && quiet == 0 &&
                      capturable(spec);
    if (!to_file && !to_capture)
        return;
    uint64_t t = spec->release && self->entry_ns != 0 ? self->entry_ns : now_ns();
    int device = -1;
    if (spec->device) {
        struct am_device *current = am_current_device();
        device = current == NULL ? -1 : current->id;
    }
    pthread_mutex_lock(&rec.lock);
    if (to_capture)
        capture(call, self, t, device, code);
    if (!to_file) {
        pthread_mutex_unlock(&rec.lock);
        return;
    }
    /* Room for the longest record (escaped strings, a deep stack) first: once it is there
     * no line below can be cut short, so the file never holds half a line. */
    if (rec.failed || !start() || !grow(RECORD_ROOM)) {
        rec.lost++;
        pthread_mutex_unlock(&rec.lock);
        return;
    }
    size_t mark = rec.used;
    int th = this_thread();
    int stack = rec.depth > 0 ? stack_id() : -1;
    put("{\"t\":%" PRId64 ",\"th\":%d,\"call\":\"%s\"", (int64_t)(t - rec.start_ns), th,
        spec->written);
    for (int i = 0; i < spec->inputs; i++)
        put_field(&spec->in[i], self->args[spec->in[i].arg], call->args[spec->in[i].arg].kind,
                  code == AM_SUCCESS);
    put(",\"rc\":%d", (int)code);
    unsigned null_outputs = 0;
    for (int i = 0; i < spec->outputs; i++) {
        const void *where = (const void *)(uintptr_t)self->args[spec->out[i].arg];
        if (where == NULL) {
            null_outputs |= 1u << i;
        } else if (code == AM_SUCCESS) {
            uint64_t value;
            memcpy(&value, where, sizeof value);
            put_field(&spec->out[i], value, AM_ARG_UNSIGNED, true);
        }
    }
    if (spec->device)
        put(device < 0 ? ",\"dev\":null" : ",\"dev\":%d", device);
    if (null_outputs != 0)
        put(",\"null_outputs\":%u", null_outputs);
    if (stack >= 0)
        put(",\"stack\":%d", stack);
    if (!put("}\n")) {
        rec.used = mark; /* out of memory: this record goes, the others stay whole */
        rec.lost++;
    } else {
        rec.calls++;
    }
    if (rec.forked || rec.used >= FLUSH_AT || now_ns() - rec.last_flush_ns >= FLUSH_EVERY_NS)
        write_out();
    pthread_mutex_unlock(&rec.lock);
}

/* ---- the process's life -------------------------------------------------------------------- */

static void am_trace_at_exit(void)
{
    pthread_mutex_lock(&rec.lock);
    if (rec.fd >= 0 && rec.pid == getpid()) {
        put("{\"type\":\"end\",\"t\":%" PRId64 ",\"calls\":%lu,\"lost\":%lu}\n",
            (int64_t)(now_ns() - rec.start_ns), rec.calls, rec.lost);
        write_out();
        close(rec.fd);
        rec.fd = -1;
    }
    pthread_mutex_unlock(&rec.lock);
}

/* At load, before the program's own constructors register their exit handlers: the end
 * line comes after them (C++ globals that free device memory in their destructors). */
__attribute__((constructor)) static void arm_end_line(void)
{
    const char *path = secure_getenv("ACL_MEM_TRACE");
    if (path != NULL && path[strspn(path, " \t\n")] != '\0')
        atexit(am_trace_at_exit);
}

void am_trace_before_fork(void)
{
    pthread_mutex_lock(&rec.lock);
    if (rec.fd >= 0)
        write_out();
}

void am_trace_after_fork(bool child)
{
    /* In the child too the lock is released, not made anew: this thread took it in
     * before_fork, and a checker (ThreadSanitizer) must see the child holding nothing. */
    if (child) {
        /* The parent's captured records are the parent's to write. */
        cap.used = 0;
        cap.lost = 0;
        acl_mem_fake_captured_bytes = 0;
        if (rec.wanted && !rec.disabled) {
            /* The child continues the recording in a file of its own, made at its first
             * call; the parent's lines are the parent's. */
            if (rec.fd >= 0)
                close(rec.fd);
            rec.fd = -1;
            rec.parent = rec.pid;
            rec.child = rec.forked = true;
            rec.started = rec.failed = false;
            rec.calls = rec.lost = 0;
            rec.used = 0;
            rec.threads = 0;
            memset(rec.stacks, 0, sizeof rec.stacks);
        }
    }
    pthread_mutex_unlock(&rec.lock);
}

int acl_mem_fake_set_trace(int on)
{
    am_lock();
    pthread_mutex_lock(&rec.lock);
    rec.disabled = !on;
    if (!on && rec.fd >= 0) {
        write_out();
        close(rec.fd);
        rec.fd = -1;
    }
    update_tracing();
    pthread_mutex_unlock(&rec.lock);
    am_unlock();
    return AM_SUCCESS;
}
