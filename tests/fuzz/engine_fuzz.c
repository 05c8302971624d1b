/* A fuzz target over the exported ABI of acl_mem's fake libascendcl (and the DVPP side
 * libraries): each input is a small program of ACL calls.
 *
 * Input layout (every byte string is a valid program; missing bytes read as 0):
 *   byte 0   the play: bits 0-1 profile (atlas-a2, atlas-inference, ascend950,
 *            atlas-200dk), bits 2-3 CANN (8.5.0, 9.0.1, 9.1.0, the default), bits 4-5
 *            device count (profile's, 1, 2, 32), bits 6-7 capacity (profile's, 48 MiB,
 *            1 GiB, 3 GiB + 6 MiB)
 *   byte 1   hazards: bit 0 raise (else count), bit 1 queue findings for us
 *   then     ops: one byte (opcode modulo OP_COUNT, see enum op) and its arguments.
 *
 * What the harness guarantees, so that anything going wrong is the library's fault:
 * output pointers are NULL or harness variables; a data pointer may be anything, but
 * never one that a *correct* runtime would write through into memory the harness or
 * the sanitizer runtime owns (a mapped wild page, the end of a heap buffer, a recycled
 * freed pinned block); and one input touches a bounded amount of real memory.
 *
 * What it checks (abort() on a violation): every return code is a documented aclError;
 * aclGetRecentErrMsg is NULL or a string under 1 KiB; a model of what is live (blocks,
 * pinned memory, contexts, reservations, mappings) agrees with what frees, resets,
 * address queries, allocations and acl_mem_fake_leaks say; a synchronous memset then
 * memcpy reads back what was set; queued work lands at the synchronisation, not before,
 * and never in memory freed (and allocated again) or unmapped since it was queued.
 * Real copies are at most 1 MiB, except the memset a span op queues over up to 24 MiB of
 * mappings (the bound of a whole input's touched bytes still holds).
 *
 * FUZZ_TRACE=1 prints each call and its result on stderr (to read a reproducer).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acl_api.h"
#include "acl_mem_fake.h"

/* Exported by the library but not in acl_api.h (the real one is in acl_base.h). */
const char *aclGetRecentErrMsg(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define TiB ((uint64_t)1 << 40)
#define PAGE ((uint64_t)4096)
/* The fake's device address space (docs/runtime-model.md §4.2); only used to tell which
 * device a pointer belongs to, never to decide what is valid. */
#define DEVICE_SPACE ((uint64_t)24 * TiB)
/* Virtual-memory reservations come from [16 TiB, 24 TiB) (runtime-model.md §4.2). */
#define VMM_BASE ((uint64_t)16 * TiB)
#define MAX_DEVICES 32

#define HEAP_BYTES (64 * KiB)
#define POOL 16
#define LEDGER_MAX 512
#define MAX_OPS 4096
/* Real bytes one input may copy or set: the device's backing is sparse, but what a
 * copy touches becomes resident. */
#define TOUCH_BUDGET (32 * MiB)
#define MAX_REAL_COUNT MiB
/* Pinned blocks are real mappings: a bound on each keeps the live total small. */
#define MAX_PINNED (4 * MiB)
/* The library keeps the last 64 freed pinned blocks mapped, or fewer when they hold
 * over 256 MiB; a block freed this many frees (or bytes) ago may have been unmapped and
 * its addresses given to someone else. */
#define QUARANTINE_SAFE 60
#define QUARANTINE_SAFE_BYTES (200 * MiB)
/* Pinned blocks the churn op frees at once: never touched, so they may be larger. */
#define MAX_CHURN_PINNED (16 * MiB)

/* ---- reading the program -------------------------------------------------------------- */

struct reader {
    const uint8_t *at, *end;
};

static uint8_t u8(struct reader *r)
{
    return r->at < r->end ? *r->at++ : 0;
}

static uint16_t u16(struct reader *r)
{
    uint16_t low = u8(r);
    return (uint16_t)(low | (uint16_t)u8(r) << 8);
}

static uint32_t u32(struct reader *r)
{
    uint32_t low = u16(r);
    return low | (uint32_t)u16(r) << 16;
}

static uint64_t u64(struct reader *r)
{
    uint64_t low = u32(r);
    return low | (uint64_t)u32(r) << 32;
}

/* ---- findings ---------------------------------------------------------------------------- */

static bool tracing;
static unsigned op_index;

#define TRACE(...)                                                                         \
    do {                                                                                   \
        if (tracing)                                                                       \
            fprintf(stderr, __VA_ARGS__);                                                  \
    } while (0)

static _Noreturn void broken(int line, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static _Noreturn void broken(int line, const char *format, ...)
{
    va_list args;
    fprintf(stderr, "engine_fuzz: invariant broken at op %u (engine_fuzz.c:%d): ", op_index,
            line);
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    const char *message = aclGetRecentErrMsg();
    fprintf(stderr, "\nengine_fuzz: last error text: %.1024s\n", message ? message : "(none)");
    abort();
}

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond))                                                                       \
            broken(__LINE__, __VA_ARGS__);                                                 \
    } while (0)

static bool documented(int rc)
{
    return rc == 0 || (rc >= 100000 && rc <= 100050) || (rc >= 107000 && rc <= 107020) ||
           (rc >= 207000 && rc <= 207020) || (rc >= 507000 && rc <= 507040) || rc == 500000;
}

/* Every call goes through here: its code must be documented and the error text sane. */
static int seen(const char *call, int rc)
{
    TRACE("  %s = %d\n", call, rc);
    CHECK(documented(rc), "%s returned %d, not a documented aclError", call, rc);
    const char *message = aclGetRecentErrMsg();
    if (message != NULL)
        CHECK(strnlen(message, 1024) < 1024, "aclGetRecentErrMsg is not a string under "
              "1 KiB after %s", call);
    return rc;
}

/* ---- the harness's own memory ---------------------------------------------------------- */

static unsigned char *heap;     /* malloc'ed: a write past its end corrupts the harness */
static unsigned char *readonly; /* one PROT_READ page */
static unsigned char *guard;    /* one PROT_NONE page */
static unsigned char *hole;     /* mapped then unmapped: may be reused, checked before use */
static unsigned char *edge;     /* a scratch page followed by a PROT_NONE page */
static char config_path[256], fifo_path[256], big_path[256], limit_path[256];

static void remove_files(void)
{
    unlink(config_path);
    unlink(fifo_path);
    unlink(big_path);
    unlink(limit_path);
}

/* A sparse file of `size` bytes (zeros: they read as empty JSON). */
static void make_sparse(char *path, size_t path_size, const char *tmp, const char *name,
                        off_t size)
{
    snprintf(path, path_size, "%s/engine_fuzz.%ld.%s", tmp, (long)getpid(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, size) != 0)
        path[0] = '\0';
    if (fd >= 0)
        close(fd);
}

static void *map_page(size_t pages, int protection)
{
    void *got = mmap(NULL, pages * PAGE, protection, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (got == MAP_FAILED) {
        perror("engine_fuzz: mmap");
        abort();
    }
    return got;
}

static void setup_once(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    const char *trace = getenv("FUZZ_TRACE");
    tracing = trace != NULL && trace[0] != '\0' && trace[0] != '0';
    heap = malloc(HEAP_BYTES);
    if (heap == NULL)
        abort();
    memset(heap, 0xA5, HEAP_BYTES);
    readonly = map_page(1, PROT_READ);
    guard = map_page(1, PROT_NONE);
    hole = map_page(1, PROT_READ | PROT_WRITE);
    munmap(hole, PAGE);
    edge = map_page(2, PROT_READ | PROT_WRITE);
    mprotect(edge + PAGE, PAGE, PROT_NONE);
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    snprintf(config_path, sizeof config_path, "%s/engine_fuzz.%ld.json", tmp, (long)getpid());
    snprintf(fifo_path, sizeof fifo_path, "%s/engine_fuzz.%ld.fifo", tmp, (long)getpid());
    unlink(fifo_path);
    if (mkfifo(fifo_path, 0600) != 0)
        fifo_path[0] = '\0';
    /* aclInit takes files up to 10 MiB: one just past the limit, one at it. */
    make_sparse(big_path, sizeof big_path, tmp, "big.json", (off_t)(10 * MiB + 1));
    make_sparse(limit_path, sizeof limit_path, tmp, "limit.json", (off_t)(10 * MiB));
    atexit(remove_files);
}

/* Whether any of [page of address] is mapped in this process now. */
static bool mapped(uint64_t address)
{
    unsigned char vector;
    void *page = (void *)(uintptr_t)(address & ~(PAGE - 1));
    return mincore(page, PAGE, &vector) == 0 || errno != ENOMEM;
}

/* ---- the model ---------------------------------------------------------------------------- */

enum family { FAM_DEVICE, FAM_DVPP, FAM_PINNED };

struct alloc {
    uint64_t start, size;
    int device; /* -1: pinned, or a device pointer we cannot place (then not checked) */
    uint8_t family;
    bool live;
    uint64_t freed_at, freed_bytes_at; /* pinned: the free count and bytes before it */
};

struct vmm_range {
    uint64_t start, size; /* physicals: start is the handle */
    int device;           /* -1: host memory */
    bool live;
};

struct context_entry {
    uint64_t handle;
    int device;
    bool alive;
};

static struct {
    int device_count;
    bool raise_mode;
    uint64_t budget;
    struct alloc ledger[LEDGER_MAX];
    size_t ledger_count;
    struct context_entry contexts[LEDGER_MAX];
    size_t context_count;
    int references[MAX_DEVICES], created[MAX_DEVICES];
    uint64_t pinned_frees, pinned_freed_bytes;
    uint64_t streams[POOL], events[POOL], primaries[POOL];
    unsigned stream_next, event_next, primary_next;
    /* Virtual memory: reservations and mappings (live or gone), physical handles. */
    struct vmm_range reservations[LEDGER_MAX], mappings[LEDGER_MAX];
    size_t reservation_count, mapping_count;
    struct vmm_range physicals[POOL];
    unsigned physical_next;
} m;

/* A call that frees or resets has had its effect when it succeeds, or in raise mode when
 * it reports a hazard (507000 with the effect done). */
static bool effect_done(int rc)
{
    return rc == 0 || (m.raise_mode && rc == 507000);
}

static int device_of(uint64_t address)
{
    if (address < DEVICE_SPACE || address - DEVICE_SPACE >= (uint64_t)MAX_DEVICES * TiB)
        return -1;
    return (int)((address - DEVICE_SPACE) / TiB);
}

static void release_device_model(int device)
{
    for (size_t i = 0; i < m.ledger_count; i++)
        if (m.ledger[i].family != FAM_PINNED && m.ledger[i].device == device)
            m.ledger[i].live = false;
}

static void maybe_release(int device)
{
    if (m.references[device] == 0 && m.created[device] == 0)
        release_device_model(device);
}

static struct alloc *live_at(uint64_t start, bool pinned, bool dvpp)
{
    for (size_t i = m.ledger_count; i-- > 0;) {
        struct alloc *a = &m.ledger[i];
        if (!a->live || a->start != start)
            continue;
        if (pinned ? a->family == FAM_PINNED
                   : (dvpp ? a->family == FAM_DVPP : a->family == FAM_DEVICE))
            return a;
    }
    return NULL;
}

static struct alloc *live_containing(uint64_t address)
{
    for (size_t i = m.ledger_count; i-- > 0;) {
        struct alloc *a = &m.ledger[i];
        if (a->live && address - a->start < a->size)
            return a;
    }
    return NULL;
}

static uint64_t pinned_extent(uint64_t size)
{
    return ((size + 31) / 32 * 32 + PAGE - 1) / PAGE * PAGE;
}

static void pinned_freed(struct alloc *a)
{
    a->freed_at = m.pinned_frees++;
    a->freed_bytes_at = m.pinned_freed_bytes;
    m.pinned_freed_bytes += pinned_extent(a->size);
}

/* Whether a freed pinned block is surely still in the library's quarantine (mapped,
 * refused by every call), not unmapped and maybe someone else's memory now. */
static bool still_quarantined(const struct alloc *a)
{
    return m.pinned_frees - a->freed_at < QUARANTINE_SAFE &&
           m.pinned_freed_bytes - a->freed_bytes_at < QUARANTINE_SAFE_BYTES;
}

static struct vmm_range *vmm_live_containing(struct vmm_range *set, size_t count,
                                             uint64_t address)
{
    for (size_t i = count; i-- > 0;)
        if (set[i].live && address - set[i].start < set[i].size)
            return &set[i];
    return NULL;
}

static void reclaim_pinned(void)
{
    /* The library unmaps its quarantine of freed pinned blocks at a reset (a long run
     * would otherwise run out of address space); the harness holds no views of them. */
    int rc = acl_mem_fake_reset();
    CHECK(rc == 0, "acl_mem_fake_reset = %d", rc);
}

/* A successful allocation: it must not overlap anything live, and its device must be
 * one that a context keeps open. */
static void record(uint64_t start, uint64_t size, uint8_t family, const char *call)
{
    CHECK(start != 0, "%s succeeded with a NULL pointer", call);
    for (size_t i = 0; i < m.ledger_count; i++) {
        struct alloc *a = &m.ledger[i];
        if (a->live && start < a->start + a->size && a->start < start + size)
            broken(__LINE__, "%s returned %#llx + %llu, overlapping live %#llx + %llu",
                   call, (unsigned long long)start, (unsigned long long)size,
                   (unsigned long long)a->start, (unsigned long long)a->size);
    }
    int device = family == FAM_PINNED ? -1 : device_of(start);
    if (device >= 0)
        CHECK(device < m.device_count && (m.references[device] > 0 || m.created[device] > 0),
              "%s allocated %#llx on device %d, which no context keeps open", call,
              (unsigned long long)start, device);
    m.ledger[m.ledger_count++] = (struct alloc){.start = start, .size = size,
                                                .device = device, .family = family,
                                                .live = true};
}

/* One of the last POOL entries (live or freed) of the families in `mask`, or NULL. */
static struct alloc *pick_alloc(struct reader *r, unsigned mask, bool live_only)
{
    unsigned want = u8(r) % POOL, seen_count = 0;
    struct alloc *last = NULL;
    for (size_t i = m.ledger_count; i-- > 0 && seen_count < POOL;) {
        struct alloc *a = &m.ledger[i];
        if (!(mask & (1u << a->family)) || (live_only && !a->live))
            continue;
        last = a;
        if (seen_count++ == want)
            return a;
    }
    return last;
}

/* ---- choosing arguments ------------------------------------------------------------------ */

static const uint64_t sizes[] = {
    0, 1, 2, 31, 32, 33, 63, 64, 65, 4064, 4065, 4095, 4096, 4097, 8192,
    MiB - 64, MiB - 1, MiB, MiB + 1, 2 * MiB - 64, 2 * MiB - 33, 2 * MiB - 32, 2 * MiB - 1,
    2 * MiB, 2 * MiB + 1, GiB - 32, GiB, GiB + 1, 16 * GiB, 64 * GiB, 128 * GiB,
    SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 31, SIZE_MAX - 32, SIZE_MAX - 63, SIZE_MAX - 64,
    SIZE_MAX - 65, SIZE_MAX / 2, (uint64_t)1 << 62,
};
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t pick_size(struct reader *r)
{
    uint8_t how = u8(r);
    if (how < 96)
        return u16(r);
    if (how < 200)
        return sizes[how % COUNT_OF(sizes)];
    if (how < 240)
        return u32(r);
    return u64(r);
}

/* Pinned sizes are real mappings: small, or ones the library must refuse. */
static uint64_t pick_pinned_size(struct reader *r)
{
    uint64_t size = pick_size(r);
    if (size <= MAX_PINNED || size >= SIZE_MAX - 31 || size >= (uint64_t)1 << 62)
        return size;
    return size % MAX_PINNED + 1;
}

static uint32_t pick_policy(struct reader *r)
{
    static const uint32_t policies[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0x100, 0x101,
                                        0x1000, 0x1001, 0x100000, 0x100002, 0x80000000u,
                                        0xFFFFFFFFu};
    uint8_t how = u8(r);
    return how < 240 ? policies[how % COUNT_OF(policies)] : u32(r);
}

static int32_t pick_device(struct reader *r)
{
    static const int32_t odd[] = {-1, -2, 8, 31, 32, 33, 1000, INT32_MIN, INT32_MAX};
    uint8_t how = u8(r);
    if (how < 160)
        return how % (m.device_count + 1);
    if (how < 250)
        return odd[how % COUNT_OF(odd)];
    return (int32_t)u32(r);
}

/* A handle-like value no call made (the library must refuse it by lookup alone). */
static uint64_t pick_garbage_handle(struct reader *r)
{
    static const uint64_t bases[] = {0x5A0000000000ull, 0x5B0000000000ull,
                                     0x5C0000000000ull};
    uint8_t how = u8(r);
    if (how < 128)
        return bases[how % 3] + (uint64_t)(u8(r) % 8) * 0x40 + (how & 0x40 ? 1 : 0);
    if (how < 192)
        return DEVICE_SPACE + (uint64_t)u8(r) * 0x40;
    return u64(r);
}

static void remember(uint64_t *pool, unsigned *next, uint64_t handle)
{
    pool[*next % POOL] = handle;
    (*next)++;
}

static uint64_t pick_handle(struct reader *r, const uint64_t *pool, unsigned filled)
{
    uint8_t how = u8(r);
    if (how < 160 && filled > 0)
        return pool[how % (filled < POOL ? filled : POOL)];
    if (how < 200)
        return 0;
    if (how < 215) /* a handle of another kind */
        return how & 1 ? m.events[how % POOL] : m.streams[how % POOL];
    return pick_garbage_handle(r);
}

static uint64_t pick_stream(struct reader *r)
{
    return pick_handle(r, m.streams, m.stream_next);
}

static uint64_t pick_event(struct reader *r)
{
    return pick_handle(r, m.events, m.event_next);
}

static uint64_t pick_context(struct reader *r)
{
    uint8_t how = u8(r);
    if (how < 128 && m.context_count > 0)
        return m.contexts[m.context_count - 1 - how % (m.context_count < POOL ?
                                                       m.context_count : POOL)].handle;
    if (how < 176 && m.primary_next > 0)
        return m.primaries[how % (m.primary_next < POOL ? m.primary_next : POOL)];
    if (how < 192)
        return 0;
    return pick_garbage_handle(r);
}

/* Where a data pointer points. `limit`: the most bytes a write through it may reach
 * without harming the harness (UINT64_MAX: the library bounds it or must refuse);
 * `room`: the bytes of the thing it points into, from the pointer (a count hint). */
struct target {
    uint64_t address, limit, room;
};

static uint64_t pick_offset(struct reader *r, uint64_t size)
{
    uint8_t how = u8(r);
    switch (how % 8) {
    case 0: case 1: case 2: return 0;
    case 3: return size == 0 ? 0 : size - 1;
    case 4: return size;
    case 5: return size + 1 + u8(r);
    case 6: return (uint64_t)(how / 8) * 32 + (how & 1);
    default: return size == 0 ? 0 : u32(r) % size;
    }
}

/* A pointer that a correct runtime would take as pageable host memory and write into
 * must not be mapped: the guard page stands in when it is. */
static uint64_t unmapped_or_guard(uint64_t address, bool for_write)
{
    /* The VMM window and the device space are the library's: never pageable memory. */
    if (address >= 16 * TiB && address < DEVICE_SPACE + (uint64_t)MAX_DEVICES * TiB)
        return address;
    if (for_write && address < ((uint64_t)1 << 56) && mapped(address))
        return (uintptr_t)guard + (address & (PAGE - 1));
    return address;
}

static struct target pick_pointer(struct reader *r, bool for_write)
{
    static const uint64_t small[] = {1, 0x10, 0xFFF, 0x1000, 0x1001, 0x8000, 0xFFFF};
    static const uint64_t wild[] = {0x8000000000000000ull, 0xFFFFFFFFFFFFFFFFull,
                                    0xFFFF800000000000ull, (uint64_t)1 << 56,
                                    ((uint64_t)1 << 56) - 1, (uint64_t)1 << 47,
                                    0x00007FFFFFFFF000ull, 16 * TiB, 16 * TiB + 4096,
                                    DEVICE_SPACE - 1, DEVICE_SPACE,
                                    DEVICE_SPACE + 56 * TiB, DEVICE_SPACE + 32 * TiB - 1};
    struct target t = {.address = 0, .limit = UINT64_MAX, .room = 4096};
    uint8_t how = u8(r);
    switch (how % 12) {
    case 2: /* virtual memory: a mapping, live or gone, else a reservation */
        if (m.mapping_count > 0 || m.reservation_count > 0) {
            uint8_t which = u8(r);
            const struct vmm_range *v = which & 1 && m.mapping_count > 0
                ? &m.mappings[m.mapping_count - 1 - which / 2 % m.mapping_count]
                : m.reservation_count > 0
                ? &m.reservations[m.reservation_count - 1 - which / 2 % m.reservation_count]
                : &m.mappings[m.mapping_count - 1];
            uint64_t offset = pick_offset(r, v->size);
            t.address = v->start + offset;
            t.room = offset < v->size ? v->size - offset : 1;
            return t;
        }
        __attribute__((fallthrough));
    case 0: case 1: { /* device or DVPP memory, live or freed */
        struct alloc *a = pick_alloc(r, 1u << FAM_DEVICE | 1u << FAM_DVPP, false);
        if (a == NULL)
            break;
        uint64_t offset = pick_offset(r, a->size);
        t.address = a->start + offset;
        t.room = offset < a->size ? a->size - offset : 1;
        return t;
    }
    case 3: { /* pinned memory, live or freed */
        struct alloc *a = pick_alloc(r, 1u << FAM_PINNED, false);
        if (a == NULL)
            break;
        uint64_t offset = pick_offset(r, a->size);
        uint64_t extent = pinned_extent(a->size);
        /* Past the block's pages lies someone else's mapping, maybe the harness's. */
        if (for_write && offset >= extent)
            offset = extent - 1;
        t.address = a->start + offset;
        t.room = offset < a->size ? a->size - offset : 1;
        if (for_write && !a->live && !still_quarantined(a)) {
            struct alloc *now = live_containing(t.address);
            if (now == NULL || now->family != FAM_PINNED)
                t.address = unmapped_or_guard(t.address, true);
        }
        return t;
    }
    case 4: { /* the harness's heap buffer */
        uint64_t offset = u16(r) % HEAP_BYTES;
        t.address = (uintptr_t)heap + offset;
        t.limit = t.room = HEAP_BYTES - offset;
        return t;
    }
    case 5:
        t.address = (uintptr_t)readonly + u16(r) % PAGE;
        return t;
    case 6: {
        t.address = unmapped_or_guard((uintptr_t)hole + u16(r) % PAGE, for_write);
        return t;
    }
    case 7:
        t.address = (uintptr_t)guard + u16(r) % PAGE;
        return t;
    case 8: { /* a scratch page running into PROT_NONE: a copy stops part way */
        uint64_t back = 1 + u16(r) % (2 * PAGE);
        t.address = (uintptr_t)edge + 2 * PAGE - back;
        t.room = back > PAGE ? back - PAGE : back;
        return t;
    }
    case 9:
        break; /* NULL */
    case 10:
        t.address = small[u8(r) % COUNT_OF(small)];
        return t;
    default: {
        uint8_t which = u8(r);
        if (which < 160)
            t.address = wild[which % COUNT_OF(wild)];
        else if (which < 200) /* device space where nothing (or something) was allocated */
            t.address = DEVICE_SPACE + (uint64_t)(which % 3) * TiB + u32(r) * (uint64_t)64;
        else
            t.address = u64(r);
        t.address = unmapped_or_guard(t.address, for_write);
        return t;
    }
    }
    return t;
}

/* What a free gets: mostly the start of an allocation of its family (live or freed),
 * else any pointer. */
static struct target pick_freeable(struct reader *r, unsigned families)
{
    if (u8(r) < 128) {
        struct alloc *a = pick_alloc(r, families, false);
        if (a != NULL)
            return (struct target){.address = a->start, .limit = UINT64_MAX, .room = 1};
    }
    return pick_pointer(r, false);
}

/* A count for a copy or memset into `dst` bounded by what the harness can afford. */
static uint64_t pick_count(struct reader *r, const struct target *dst, uint64_t room)
{
    static const uint64_t edges[] = {31, 32, 33, 4095, 4096, 4097, 2 * MiB - 1, 2 * MiB,
                                     2 * MiB + 1};
    static const uint64_t huge[] = {SIZE_MAX, SIZE_MAX - 1, (uint64_t)1 << 63,
                                    (uint64_t)1 << 40, (uint64_t)1 << 47};
    uint8_t how = u8(r);
    uint64_t count;
    switch (how % 8) {
    case 0: count = 0; break;
    case 1: count = 1; break;
    case 2: count = u8(r); break;
    case 3: count = u16(r); break;
    case 4: {
        static const int64_t deltas[] = {0, 0, -1, 1, 32, -32};
        count = room + (uint64_t)deltas[(how / 8) % COUNT_OF(deltas)];
        break;
    }
    case 5: count = edges[(how / 8) % COUNT_OF(edges)]; break;
    case 6: count = u32(r) % (MAX_REAL_COUNT + 1); break;
    default:
        /* More than any block or mapping: the library must refuse before touching. */
        if (dst->limit == UINT64_MAX)
            return huge[(how / 8) % COUNT_OF(huge)];
        count = u16(r);
        break;
    }
    if (count > MAX_REAL_COUNT)
        count = MAX_REAL_COUNT;
    if (count > m.budget)
        count %= 4097;
    m.budget -= count < m.budget ? count : m.budget;
    return count;
}

static uint64_t pick_max(struct reader *r, uint64_t count)
{
    uint8_t how = u8(r);
    switch (how % 8) {
    case 0: return count - 1;
    case 1: return count + 1;
    case 2: return SIZE_MAX;
    case 3: return 0;
    case 4: return u32(r);
    default: return count;
    }
}

/* A write whose count the harness must bound: counts past `limit` are cut when the call
 * would get as far as writing. */
static uint64_t bounded(uint64_t count, uint64_t max, const struct target *dst)
{
    if (count <= max && count > dst->limit)
        return dst->limit;
    return count;
}

/* ---- findings the library queues ---------------------------------------------------------- */

static void drain_findings(struct reader *r)
{
    static const size_t kind_sizes[] = {40, 1, 8, 40};
    while (__atomic_load_n(&acl_mem_fake_findings_waiting, __ATOMIC_ACQUIRE) != 0) {
        char kind[40], text[400];
        size_t kind_size = kind_sizes[u8(r) % COUNT_OF(kind_sizes)];
        memset(kind, 'x', sizeof kind);
        memset(text, 'x', sizeof text);
        int got = acl_mem_fake_next_finding(kind, kind_size, text, sizeof text);
        CHECK(got == 0 || got == 1, "acl_mem_fake_next_finding returned %d", got);
        if (got == 0)
            break;
        CHECK(memchr(kind, 0, kind_size) != NULL && memchr(text, 0, sizeof text) != NULL,
              "a queued finding is not NUL-terminated within its buffer");
        TRACE("  finding %s: %s\n", kind, text);
    }
}

/* ---- the ops ------------------------------------------------------------------------------- */

enum op {
    OP_INIT, OP_FINALIZE, OP_SET_DEVICE, OP_RESET_DEVICE, OP_RESET_DEVICE_FORCE,
    OP_CREATE_CONTEXT, OP_DESTROY_CONTEXT, OP_SET_CONTEXT, OP_GET_CONTEXT,
    OP_MALLOC, OP_FREE, OP_MALLOC_HOST, OP_FREE_HOST, OP_DVPP_MALLOC, OP_DVPP_FREE,
    OP_MPI_MALLOC, OP_MPI_FREE, OP_MEMCPY, OP_MEMCPY_ASYNC, OP_MEMSET, OP_MEMSET_ASYNC,
    OP_CREATE_STREAM, OP_DESTROY_STREAM, OP_DESTROY_STREAM_FORCE, OP_SYNC_STREAM,
    OP_SYNC_DEVICE, OP_CREATE_EVENT, OP_RECORD_EVENT, OP_WAIT_EVENT, OP_RESET_EVENT,
    OP_SYNC_EVENT, OP_QUERY_EVENT_STATUS, OP_QUERY_EVENT, OP_ELAPSED, OP_DESTROY_EVENT,
    OP_MEM_INFO, OP_ADDRESS_RANGE, OP_POINTER_ATTRIBUTES, OP_LAST_ERROR, OP_QUERIES,
    OP_VERIFY, OP_HAZARD_MODE, OP_PINNED_CHURN, OP_STREAM_FLOOD,
    OP_ASYNC_VERIFY, OP_VMM_RESERVE, OP_VMM_RELEASE, OP_VMM_MALLOC_PHYSICAL,
    OP_VMM_FREE_PHYSICAL, OP_VMM_MAP, OP_VMM_UNMAP, OP_VMM_QUERIES, OP_SPAN_BLOCKS,
    OP_SPAN_MAPPINGS, OP_LEAKS, OP_COUNT
};

static void op_init(struct reader *r)
{
    const char *paths[] = {NULL, "", "/nonexistent/acl.json", "/", "/dev/null",
                           "/dev/zero", "/proc/self/stat", fifo_path, big_path,
                           config_path};
    uint8_t how = u8(r);
    /* The file at the limit is read and hashed whole (tens of ms): rarely. */
    const char *path = how == 255 ? limit_path : paths[how % COUNT_OF(paths)];
    if (path == config_path) {
        /* The file's text comes from the input: a length, then that many bytes. */
        size_t length = u8(r) % 96;
        char text[96];
        for (size_t i = 0; i < length; i++)
            text[i] = (char)u8(r);
        int fd = open(config_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            return;
        ssize_t wrote = write(fd, text, length);
        close(fd);
        if (wrote != (ssize_t)length)
            return;
    }
    TRACE("aclInit(%s)\n", path ? path : "NULL");
    seen("aclInit", aclInit(path));
}

static void op_finalize(void)
{
    TRACE("aclFinalize()\n");
    int rc = seen("aclFinalize", aclFinalize());
    if (effect_done(rc)) {
        for (int d = 0; d < MAX_DEVICES; d++) {
            m.references[d] = m.created[d] = 0;
            release_device_model(d);
        }
        for (size_t i = 0; i < m.context_count; i++)
            m.contexts[i].alive = false;
    }
}

static void op_set_device(struct reader *r)
{
    int32_t id = pick_device(r);
    TRACE("aclrtSetDevice(%d)\n", (int)id);
    int rc = seen("aclrtSetDevice", aclrtSetDevice(id));
    CHECK(rc == 0 || id < 0 || id >= m.device_count, "aclrtSetDevice(%d) of a device that "
          "exists failed", (int)id);
    if (rc == 0) {
        CHECK(id >= 0 && id < m.device_count, "aclrtSetDevice(%d) accepted a device that "
              "does not exist", (int)id);
        m.references[id]++;
        aclrtContext current = NULL;
        if (seen("aclrtGetCurrentContext", aclrtGetCurrentContext(&current)) == 0 &&
            current != NULL)
            remember(m.primaries, &m.primary_next, (uintptr_t)current);
    }
}

static void op_reset_device(struct reader *r, bool force)
{
    int32_t id = pick_device(r);
    const char *call = force ? "aclrtResetDeviceForce" : "aclrtResetDevice";
    TRACE("%s(%d)\n", call, (int)id);
    int rc = seen(call, force ? aclrtResetDeviceForce(id) : aclrtResetDevice(id));
    bool valid = id >= 0 && id < m.device_count;
    if (valid)
        CHECK(effect_done(rc) == (m.references[id] > 0), "%s(%d) = %d with %d references",
              call, (int)id, rc, m.references[id]);
    if (effect_done(rc) && valid) {
        m.references[id] = force ? 0 : m.references[id] - 1;
        maybe_release(id);
    }
}

static void op_create_context(struct reader *r)
{
    aclrtContext context = NULL;
    bool null_out = u8(r) % 16 == 0;
    int32_t id = pick_device(r);
    if (m.context_count == LEDGER_MAX)
        return;
    TRACE("aclrtCreateContext(%s, %d)\n", null_out ? "NULL" : "&context", (int)id);
    int rc = seen("aclrtCreateContext", aclrtCreateContext(null_out ? NULL : &context, id));
    if (rc == 0) {
        CHECK(!null_out && id >= 0 && id < m.device_count && context != NULL,
              "aclrtCreateContext(%d) succeeded where it cannot", (int)id);
        m.created[id]++;
        m.contexts[m.context_count++] = (struct context_entry){(uintptr_t)context, id, true};
    }
}

static struct context_entry *context_entry(uint64_t handle)
{
    for (size_t i = 0; i < m.context_count; i++)
        if (m.contexts[i].handle == handle)
            return &m.contexts[i];
    return NULL;
}

static void op_destroy_context(struct reader *r)
{
    uint64_t handle = pick_context(r);
    TRACE("aclrtDestroyContext(%#llx)\n", (unsigned long long)handle);
    int rc = seen("aclrtDestroyContext", aclrtDestroyContext((aclrtContext)(uintptr_t)handle));
    struct context_entry *entry = context_entry(handle);
    CHECK(effect_done(rc) == (entry != NULL && entry->alive), "aclrtDestroyContext(%#llx) = "
          "%d for a context %s", (unsigned long long)handle, rc,
          entry == NULL ? "it never made" : entry->alive ? "alive" : "destroyed");
    if (effect_done(rc)) {
        entry->alive = false;
        m.created[entry->device]--;
        maybe_release(entry->device);
    }
}

static void op_set_context(struct reader *r)
{
    uint64_t handle = pick_context(r);
    TRACE("aclrtSetCurrentContext(%#llx)\n", (unsigned long long)handle);
    seen("aclrtSetCurrentContext", aclrtSetCurrentContext((aclrtContext)(uintptr_t)handle));
}

static void op_get_context(struct reader *r)
{
    aclrtContext context = NULL;
    bool null_out = u8(r) % 8 == 0;
    TRACE("aclrtGetCurrentContext()\n");
    int rc = seen("aclrtGetCurrentContext", aclrtGetCurrentContext(null_out ? NULL : &context));
    if (rc == 0 && context != NULL)
        remember(m.primaries, &m.primary_next, (uintptr_t)context);
}

static void op_malloc(struct reader *r)
{
    static const char *const names[] = {"aclrtMalloc", "aclrtMallocAlign32",
                                        "aclrtMallocCached"};
    uint8_t which = u8(r) % 3;
    bool null_out = u8(r) % 32 == 0;
    uint64_t size = pick_size(r);
    uint32_t policy = pick_policy(r);
    if (m.ledger_count == LEDGER_MAX)
        return;
    void *p = NULL, **out = null_out ? NULL : &p;
    TRACE("%s(size=%llu, policy=%#x)\n", names[which], (unsigned long long)size, policy);
    aclrtMemMallocPolicy chosen = (aclrtMemMallocPolicy)policy;
    int rc = which == 0 ? aclrtMalloc(out, size, chosen)
           : which == 1 ? aclrtMallocAlign32(out, size, chosen)
                        : aclrtMallocCached(out, size, chosen);
    seen(names[which], rc);
    if (rc == 0) {
        CHECK(!null_out && size != 0, "%s succeeded with devPtr NULL or size 0", names[which]);
        TRACE("    -> %p\n", p);
        record((uintptr_t)p, size, FAM_DEVICE, names[which]);
    }
}

static void op_free(struct reader *r, enum op op)
{
    bool dvpp = op != OP_FREE;
    const char *call = op == OP_FREE ? "aclrtFree" : op == OP_DVPP_FREE ? "acldvppFree"
                                                                      : "hi_mpi_dvpp_free";
    struct target t = pick_freeable(r, dvpp ? 1u << FAM_DVPP : 1u << FAM_DEVICE);
    TRACE("%s(%#llx)\n", call, (unsigned long long)t.address);
    void *p = (void *)(uintptr_t)t.address;
    int rc = op == OP_FREE ? aclrtFree(p) : op == OP_DVPP_FREE ? acldvppFree(p)
                                                               : hi_mpi_dvpp_free(p);
    seen(call, rc);
    CHECK(rc != 507000 || m.raise_mode, "%s = 507000 outside raise mode", call);
    struct alloc *a = live_at(t.address, false, dvpp);
    if (a != NULL && a->device < 0)
        return; /* a pointer we cannot place: no claim either way */
    CHECK(effect_done(rc) == (a != NULL), "%s(%#llx) = %d, but the model says it is %s", call,
          (unsigned long long)t.address, rc, a != NULL ? "live" : "not the start of live "
          "memory of this family");
    if (a != NULL)
        a->live = false;
}

static void op_malloc_host(struct reader *r)
{
    bool null_out = u8(r) % 32 == 0;
    uint64_t size = pick_pinned_size(r);
    if (m.ledger_count == LEDGER_MAX)
        return;
    void *p = NULL;
    TRACE("aclrtMallocHost(size=%llu)\n", (unsigned long long)size);
    int rc = seen("aclrtMallocHost", aclrtMallocHost(null_out ? NULL : &p, size));
    if (rc == 0) {
        CHECK(!null_out && size != 0 && size <= MAX_PINNED, "aclrtMallocHost(%llu) "
              "succeeded where it cannot", (unsigned long long)size);
        TRACE("    -> %p\n", p);
        record((uintptr_t)p, size, FAM_PINNED, "aclrtMallocHost");
    }
}

static void op_free_host(struct reader *r)
{
    struct target t = pick_freeable(r, 1u << FAM_PINNED);
    TRACE("aclrtFreeHost(%#llx)\n", (unsigned long long)t.address);
    int rc = seen("aclrtFreeHost", aclrtFreeHost((void *)(uintptr_t)t.address));
    CHECK(rc != 507000 || m.raise_mode, "aclrtFreeHost = 507000 outside raise mode");
    struct alloc *a = live_at(t.address, true, false);
    CHECK(effect_done(rc) == (a != NULL), "aclrtFreeHost(%#llx) = %d, but the model says it "
          "is %s", (unsigned long long)t.address, rc, a != NULL ? "live" : "not live");
    if (a != NULL) {
        a->live = false;
        pinned_freed(a);
    }
}

static void op_dvpp_malloc(struct reader *r, bool mpi)
{
    bool null_out = u8(r) % 32 == 0;
    uint32_t dev_id = mpi ? (uint32_t)pick_device(r) : 0;
    uint64_t size = pick_size(r);
    if (m.ledger_count == LEDGER_MAX)
        return;
    void *p = NULL;
    const char *call = mpi ? "hi_mpi_dvpp_malloc" : "acldvppMalloc";
    TRACE("%s(size=%llu)\n", call, (unsigned long long)size);
    int rc = mpi ? hi_mpi_dvpp_malloc(dev_id, null_out ? NULL : &p, size)
                 : acldvppMalloc(null_out ? NULL : &p, size);
    seen(call, rc);
    if (rc == 0) {
        CHECK(!null_out, "%s succeeded with a NULL output", call);
        TRACE("    -> %p\n", p);
        record((uintptr_t)p, size ? size : 1, FAM_DVPP, call);
    }
}

static aclrtMemcpyKind pick_kind(struct reader *r)
{
    uint8_t how = u8(r);
    if (how < 200)
        return (aclrtMemcpyKind)(how % 8);
    return (aclrtMemcpyKind)u32(r);
}

static void op_memcpy(struct reader *r, bool async)
{
    struct target dst = pick_pointer(r, true), src = pick_pointer(r, false);
    uint64_t room = dst.room < src.room ? dst.room : src.room;
    uint64_t count = pick_count(r, &dst, room);
    uint64_t max = pick_max(r, count);
    count = bounded(count, max, &dst);
    aclrtMemcpyKind kind = pick_kind(r);
    uint64_t stream = async ? pick_stream(r) : 0;
    void *d = (void *)(uintptr_t)dst.address;
    const void *s = (const void *)(uintptr_t)src.address;
    TRACE("%s(%p, %llu, %p, %llu, kind=%d, stream=%#llx)\n",
          async ? "aclrtMemcpyAsync" : "aclrtMemcpy", d, (unsigned long long)max, s,
          (unsigned long long)count, (int)kind, (unsigned long long)stream);
    if (async)
        seen("aclrtMemcpyAsync", aclrtMemcpyAsync(d, max, s, count, kind,
                                                  (aclrtStream)(uintptr_t)stream));
    else
        seen("aclrtMemcpy", aclrtMemcpy(d, max, s, count, kind));
}

static void op_memset(struct reader *r, bool async)
{
    struct target dst = pick_pointer(r, true);
    uint64_t count = pick_count(r, &dst, dst.room);
    uint64_t max = pick_max(r, count);
    count = bounded(count, max, &dst);
    int32_t value = (int32_t)(u8(r) < 200 ? u8(r) : u32(r));
    uint64_t stream = async ? pick_stream(r) : 0;
    void *d = (void *)(uintptr_t)dst.address;
    TRACE("%s(%p, %llu, %d, %llu, stream=%#llx)\n", async ? "aclrtMemsetAsync" : "aclrtMemset",
          d, (unsigned long long)max, (int)value, (unsigned long long)count,
          (unsigned long long)stream);
    if (async)
        seen("aclrtMemsetAsync", aclrtMemsetAsync(d, max, value, count,
                                                  (aclrtStream)(uintptr_t)stream));
    else
        seen("aclrtMemset", aclrtMemset(d, max, value, count));
}

static void op_create_stream(struct reader *r)
{
    aclrtStream stream = NULL;
    bool null_out = u8(r) % 16 == 0;
    TRACE("aclrtCreateStream()\n");
    int rc = seen("aclrtCreateStream", aclrtCreateStream(null_out ? NULL : &stream));
    if (rc == 0) {
        CHECK(!null_out && stream != NULL, "aclrtCreateStream made a NULL stream");
        remember(m.streams, &m.stream_next, (uintptr_t)stream);
    }
}

static void op_stream_call(struct reader *r, enum op op)
{
    uint64_t stream = pick_stream(r);
    aclrtStream s = (aclrtStream)(uintptr_t)stream;
    TRACE("stream op %d(%#llx)\n", (int)op, (unsigned long long)stream);
    switch (op) {
    case OP_DESTROY_STREAM: seen("aclrtDestroyStream", aclrtDestroyStream(s)); break;
    case OP_DESTROY_STREAM_FORCE:
        seen("aclrtDestroyStreamForce", aclrtDestroyStreamForce(s));
        break;
    case OP_SYNC_STREAM: seen("aclrtSynchronizeStream", aclrtSynchronizeStream(s)); break;
    default: seen("aclrtSynchronizeDevice", aclrtSynchronizeDevice()); break;
    }
}

static void op_create_event(struct reader *r)
{
    static const uint32_t flags[] = {0, 1, 2, 4, 8, 0xE, 0x10, 0x20, 0x40, 0x41, 0x11, 0x21,
                                     0x3F, 0x4F, 0x7F, 0x80, 0x5, 0x9};
    uint8_t how = u8(r);
    bool null_out = u8(r) % 16 == 0;
    uint8_t pick = u8(r);
    uint32_t flag = pick < 230 ? flags[pick % COUNT_OF(flags)] : u32(r);
    aclrtEvent event = NULL, *out = null_out ? NULL : &event;
    int rc;
    TRACE("create event variant %d flag %#x\n", how % 3, flag);
    switch (how % 3) {
    case 0: rc = seen("aclrtCreateEvent", aclrtCreateEvent(out)); break;
    case 1: rc = seen("aclrtCreateEventWithFlag", aclrtCreateEventWithFlag(out, flag)); break;
    default:
        rc = seen("aclrtCreateEventExWithFlag", aclrtCreateEventExWithFlag(out, flag));
        break;
    }
    if (rc == 0) {
        CHECK(!null_out && event != NULL, "an event was made with a NULL output");
        remember(m.events, &m.event_next, (uintptr_t)event);
    }
}

static void op_event_call(struct reader *r, enum op op)
{
    aclrtEvent event = (aclrtEvent)(uintptr_t)pick_event(r);
    TRACE("event op %d(%p)\n", (int)op, event);
    switch (op) {
    case OP_RECORD_EVENT:
        seen("aclrtRecordEvent", aclrtRecordEvent(event, (aclrtStream)(uintptr_t)
                                                  pick_stream(r)));
        break;
    case OP_WAIT_EVENT:
        seen("aclrtStreamWaitEvent", aclrtStreamWaitEvent((aclrtStream)(uintptr_t)
                                                          pick_stream(r), event));
        break;
    case OP_RESET_EVENT:
        seen("aclrtResetEvent", aclrtResetEvent(event, (aclrtStream)(uintptr_t)
                                                pick_stream(r)));
        break;
    case OP_SYNC_EVENT: seen("aclrtSynchronizeEvent", aclrtSynchronizeEvent(event)); break;
    case OP_QUERY_EVENT_STATUS: {
        aclrtEventRecordedStatus status = (aclrtEventRecordedStatus)77;
        bool null_out = u8(r) % 16 == 0;
        int rc = seen("aclrtQueryEventStatus",
                      aclrtQueryEventStatus(event, null_out ? NULL : &status));
        if (rc == 0)
            CHECK(status == ACL_EVENT_RECORDED_STATUS_COMPLETE ||
                  status == ACL_EVENT_RECORDED_STATUS_NOT_READY,
                  "aclrtQueryEventStatus gave status %d", (int)status);
        break;
    }
    case OP_QUERY_EVENT: {
        aclrtEventStatus status = (aclrtEventStatus)77;
        bool null_out = u8(r) % 16 == 0;
        int rc = seen("aclrtQueryEvent", aclrtQueryEvent(event, null_out ? NULL : &status));
        if (rc == 0)
            CHECK(status == ACL_EVENT_STATUS_COMPLETE || status == ACL_EVENT_STATUS_NOT_READY,
                  "aclrtQueryEvent gave status %d", (int)status);
        break;
    }
    case OP_ELAPSED: {
        float ms = -7.0f;
        bool null_out = u8(r) % 16 == 0;
        aclrtEvent end = (aclrtEvent)(uintptr_t)pick_event(r);
        int rc = seen("aclrtEventElapsedTime",
                      aclrtEventElapsedTime(null_out ? NULL : &ms, event, end));
        if (rc == 0)
            CHECK(!isnan(ms) && !isinf(ms), "aclrtEventElapsedTime gave %f", (double)ms);
        break;
    }
    default: seen("aclrtDestroyEvent", aclrtDestroyEvent(event)); break;
    }
}

static void op_mem_info(struct reader *r)
{
    uint8_t how = u8(r);
    aclrtMemAttr attr = (aclrtMemAttr)(how < 200 ? how % 20 : (uint8_t)u32(r) | 0x80000000u);
    size_t free_bytes = 1, total = 0;
    uint8_t nulls = u8(r) % 16;
    TRACE("aclrtGetMemInfo(%d)\n", (int)attr);
    int rc = seen("aclrtGetMemInfo", aclrtGetMemInfo(attr, nulls == 1 ? NULL : &free_bytes,
                                                     nulls == 2 ? NULL : &total));
    if (rc == 0)
        CHECK(free_bytes <= total, "aclrtGetMemInfo(%d): free %zu > total %zu", (int)attr,
              free_bytes, total);
}

static void op_address_range(struct reader *r)
{
    struct target t = pick_pointer(r, false);
    uint8_t nulls = u8(r) % 8;
    void *base = NULL;
    size_t size = 0;
    TRACE("aclrtMemGetAddressRange(%#llx)\n", (unsigned long long)t.address);
    int rc = seen("aclrtMemGetAddressRange",
                  aclrtMemGetAddressRange((void *)(uintptr_t)t.address,
                                          nulls == 1 || nulls == 3 ? NULL : &base,
                                          nulls == 2 || nulls == 3 ? NULL : &size));
    if (t.address >= VMM_BASE && t.address < DEVICE_SPACE) {
        struct vmm_range *v = vmm_live_containing(m.mappings, m.mapping_count, t.address);
        if (v != NULL && nulls != 3)
            CHECK(rc == 0 || rc == 207000, "aclrtMemGetAddressRange refused %#llx inside "
                  "live mapping %#llx + %llu", (unsigned long long)t.address,
                  (unsigned long long)v->start, (unsigned long long)v->size);
        if (rc == 0)
            CHECK(v != NULL && (nulls != 0 || ((uintptr_t)base == v->start && size == v->size)),
                  "aclrtMemGetAddressRange(%#llx) gave %p + %zu for %s",
                  (unsigned long long)t.address, base, size,
                  v == NULL ? "no live mapping" : "a live mapping elsewhere");
        return;
    }
    struct alloc *a = live_containing(t.address);
    if (rc == 0 && nulls == 0) {
        uint64_t b = (uintptr_t)base;
        CHECK(t.address >= b && t.address - b < size, "aclrtMemGetAddressRange(%#llx) gave "
              "%#llx + %zu, which does not hold it", (unsigned long long)t.address,
              (unsigned long long)b, size);
        struct alloc *owner = NULL;
        for (size_t i = 0; i < m.ledger_count; i++)
            if (m.ledger[i].live && m.ledger[i].start == b)
                owner = &m.ledger[i];
        CHECK(owner != NULL && size >= owner->size, "aclrtMemGetAddressRange(%#llx) gave "
              "%#llx + %zu, which is not a live allocation", (unsigned long long)t.address,
              (unsigned long long)b, size);
    }
    if (a == NULL || (a->family != FAM_PINNED && a->device < 0))
        return;
    if (nulls != 3)
        CHECK(rc == 0 || rc == 207000, "aclrtMemGetAddressRange refused %#llx inside live "
              "%#llx + %llu",
              (unsigned long long)t.address, (unsigned long long)a->start,
              (unsigned long long)a->size);
    if (rc == 0 && nulls != 1 && nulls != 3)
        CHECK((uintptr_t)base == a->start, "aclrtMemGetAddressRange(%#llx) gave base %p, "
              "not %#llx", (unsigned long long)t.address, base, (unsigned long long)a->start);
}

static void op_pointer_attributes(struct reader *r)
{
    struct target t = pick_pointer(r, false);
    bool null_out = u8(r) % 16 == 0;
    aclrtPtrAttributes attributes;
    memset(&attributes, 0x5A, sizeof attributes);
    TRACE("aclrtPointerGetAttributes(%#llx)\n", (unsigned long long)t.address);
    int rc = seen("aclrtPointerGetAttributes",
                  aclrtPointerGetAttributes((const void *)(uintptr_t)t.address,
                                            null_out ? NULL : &attributes));
    if (t.address >= VMM_BASE && t.address < DEVICE_SPACE) {
        struct vmm_range *v = vmm_live_containing(m.mappings, m.mapping_count, t.address);
        if (v != NULL && !null_out)
            CHECK(rc == 0, "aclrtPointerGetAttributes refused %#llx in a live mapping",
                  (unsigned long long)t.address);
        if (rc != 0)
            return;
        CHECK(v != NULL, "aclrtPointerGetAttributes answered for %#llx, in no live mapping",
              (unsigned long long)t.address);
        if (v->device >= 0)
            CHECK(attributes.location.type == ACL_MEM_LOCATION_TYPE_DEVICE &&
                  attributes.location.id == (uint32_t)v->device, "mapping %#llx of device %d "
                  "has location %d/%u", (unsigned long long)t.address, v->device,
                  (int)attributes.location.type, attributes.location.id);
        else if (v->device == -1)
            CHECK(attributes.location.type == ACL_MEM_LOCATION_TYPE_HOST, "mapping %#llx of "
                  "host memory has location type %d", (unsigned long long)t.address,
                  (int)attributes.location.type);
        return;
    }
    struct alloc *a = live_containing(t.address);
    if (rc != 0 || a == NULL)
        return;
    if (a->family == FAM_PINNED)
        CHECK(attributes.location.type == ACL_MEM_LOCATION_TYPE_HOST, "live pinned %#llx has "
              "location type %d", (unsigned long long)t.address,
              (int)attributes.location.type);
    else if (a->device >= 0)
        CHECK(attributes.location.type == ACL_MEM_LOCATION_TYPE_DEVICE &&
              attributes.location.id == (uint32_t)a->device, "live device memory %#llx "
              "(device %d) has location type %d id %u", (unsigned long long)t.address,
              a->device, (int)attributes.location.type, attributes.location.id);
}

static void op_last_error(struct reader *r)
{
    uint8_t how = u8(r);
    aclrtLastErrLevel level = (aclrtLastErrLevel)(how & 2 ? (how & 4 ? u32(r) : 1) : 0);
    TRACE("last error (%d, level %d)\n", how & 1, (int)level);
    if (how & 1)
        seen("aclrtGetLastError", aclrtGetLastError(level));
    else
        seen("aclrtPeekAtLastError", aclrtPeekAtLastError(level));
    const char *text = aclGetRecentErrMsg();
    if (text != NULL)
        TRACE("  text: %zu bytes\n", strlen(text));
}

static void op_queries(struct reader *r)
{
    uint8_t how = u8(r);
    bool null_out = how & 0x80;
    switch (how % 6) {
    case 0: {
        int32_t id = -5;
        int rc = seen("aclrtGetDevice", aclrtGetDevice(null_out ? NULL : &id));
        if (rc == 0)
            CHECK(id >= 0 && id < m.device_count, "aclrtGetDevice gave %d", (int)id);
        break;
    }
    case 1: {
        uint32_t count = 0;
        int rc = seen("aclrtGetDeviceCount", aclrtGetDeviceCount(null_out ? NULL : &count));
        if (rc == 0)
            CHECK(count == (uint32_t)m.device_count, "aclrtGetDeviceCount gave %u, not %d",
                  count, m.device_count);
        break;
    }
    case 2: {
        aclrtRunMode mode = (aclrtRunMode)9;
        int rc = seen("aclrtGetRunMode", aclrtGetRunMode(null_out ? NULL : &mode));
        if (rc == 0)
            CHECK(mode == ACL_DEVICE || mode == ACL_HOST, "aclrtGetRunMode gave %d", (int)mode);
        break;
    }
    case 3: {
        const char *name = aclrtGetSocName();
        CHECK(name == NULL || strnlen(name, 1024) < 1024, "aclrtGetSocName is no string");
        break;
    }
    case 4: {
        int32_t version[3];
        seen("aclrtGetVersion", aclrtGetVersion(&version[0], null_out ? NULL : &version[1],
                                                &version[2]));
        break;
    }
    default: {
        static const char *const names[] = {"runtime", "cann", "RUNTIME", "run_time", "",
                                            "runtime-extra-long-package-name"};
        char name[40], version[128];
        uint8_t pick = u8(r);
        if (pick < 200) {
            snprintf(name, sizeof name, "%s", names[pick % COUNT_OF(names)]);
        } else {
            size_t length = u8(r) % (sizeof name - 1);
            for (size_t i = 0; i < length; i++)
                name[i] = (char)u8(r);
            name[length] = '\0';
        }
        memset(version, 'v', sizeof version);
        int rc = seen("aclsysGetVersionStr", aclsysGetVersionStr(name, null_out ? NULL :
                                                                 version));
        if (rc == 0)
            CHECK(memchr(version, 0, sizeof version) != NULL, "aclsysGetVersionStr wrote no "
                  "string into 128 bytes");
        break;
    }
    }
}

/* A synchronous memset then a synchronous copy back must read what was set. */
static void op_verify(struct reader *r)
{
    struct alloc *a = pick_alloc(r, 7, true);
    uint8_t value = u8(r);
    uint64_t length = 1 + u16(r) % (4 * KiB);
    if (a == NULL || (a->family != FAM_PINNED && a->device < 0))
        return;
    if (length > a->size)
        length = a->size;
    uint64_t offset = a->size > length ? u32(r) % (a->size - length + 1) : 0;
    if (2 * length > m.budget)
        return;
    m.budget -= 2 * length;
    void *p = (void *)(uintptr_t)(a->start + offset);
    TRACE("verify %p + %llu = %#x\n", p, (unsigned long long)length, value);
    int set = seen("aclrtMemset", aclrtMemset(p, length, value, length));
    memset(heap, value ^ 0xFF, length);
    int copied = seen("aclrtMemcpy", aclrtMemcpy(heap, HEAP_BYTES, p, length,
                                                 ACL_MEMCPY_DEFAULT));
    if (set != 0 || copied != 0)
        return;
    for (uint64_t i = 0; i < length; i++)
        CHECK(heap[i] == value, "byte %llu of %p reads %#x after a memset to %#x",
              (unsigned long long)i, p, heap[i], value);
}

static void expect_bytes(uint64_t length, uint8_t value, const char *when)
{
    for (uint64_t i = 0; i < length; i++)
        CHECK(heap[i] == value, "byte %llu reads %#x %s, not %#x", (unsigned long long)i,
              heap[i], when, value);
}

/* Streams defer: a memset queued on a new stream on a new block lands at the stream's
 * synchronisation, not before (nothing else names the block, so nothing else can). */
static void op_async_verify(struct reader *r)
{
    uint64_t length = 1 + u16(r) % (4 * KiB);
    uint8_t before = u8(r), after = (uint8_t)(before ^ (1 + u8(r) % 255));
    if (m.ledger_count == LEDGER_MAX || 4 * length > m.budget)
        return;
    m.budget -= 4 * length;
    void *p = NULL;
    TRACE("async verify %llu bytes %#x then %#x\n", (unsigned long long)length, before,
          after);
    if (seen("aclrtMalloc", aclrtMalloc(&p, length, ACL_MEM_MALLOC_HUGE_FIRST)) != 0)
        return;
    record((uintptr_t)p, length, FAM_DEVICE, "aclrtMalloc");
    aclrtStream stream = NULL;
    if (seen("aclrtCreateStream", aclrtCreateStream(&stream)) != 0)
        return;
    remember(m.streams, &m.stream_next, (uintptr_t)stream);
    int rc = seen("aclrtMemset", aclrtMemset(p, length, before, length));
    CHECK(effect_done(rc), "aclrtMemset of a block just made = %d", rc);
    rc = seen("aclrtMemsetAsync", aclrtMemsetAsync(p, length, after, length, stream));
    CHECK(rc == 0, "aclrtMemsetAsync of a block just made on a stream just made = %d", rc);
    memset(heap, 0, length);
    rc = seen("aclrtMemcpy", aclrtMemcpy(heap, HEAP_BYTES, p, length,
                                         ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(effect_done(rc), "aclrtMemcpy from a block just made = %d", rc);
    expect_bytes(length, before, "while the memset is queued");
    rc = seen("aclrtSynchronizeStream", aclrtSynchronizeStream(stream));
    CHECK(effect_done(rc), "aclrtSynchronizeStream of a stream just made = %d", rc);
    rc = seen("aclrtMemcpy", aclrtMemcpy(heap, HEAP_BYTES, p, length,
                                         ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(effect_done(rc), "aclrtMemcpy from a block just made = %d", rc);
    expect_bytes(length, after, "after the stream's synchronisation");
}

/* Many pinned blocks made and freed at once: the quarantine of freed pinned memory fills
 * and lets the oldest go (by count, or by bytes with the larger blocks). */
static void op_pinned_churn(struct reader *r)
{
    unsigned rounds = 1 + u8(r) % 128;
    uint64_t size = 1 + (u8(r) & 1 ? u32(r) % MAX_CHURN_PINNED : u16(r));
    TRACE("pinned churn: %u x %llu bytes\n", rounds, (unsigned long long)size);
    for (unsigned i = 0; i < rounds; i++) {
        void *p = NULL;
        if (seen("aclrtMallocHost", aclrtMallocHost(&p, size)) != 0)
            return;
        struct alloc *gone = NULL;
        /* The first and the last stay in the ledger, freed: stale pointers for later ops. */
        if ((i == 0 || i == rounds - 1) && m.ledger_count < LEDGER_MAX) {
            record((uintptr_t)p, size, FAM_PINNED, "aclrtMallocHost");
            gone = &m.ledger[m.ledger_count - 1];
        }
        int rc = seen("aclrtFreeHost", aclrtFreeHost(p));
        CHECK(effect_done(rc), "aclrtFreeHost of the block just made = %d", rc);
        if (gone != NULL) {
            gone->live = false;
            pinned_freed(gone);
        } else {
            struct alloc passing = {.size = size};
            passing.start = (uintptr_t)p;
            pinned_freed(&passing);
        }
    }
}

/* Streams up to the profile's limit (and one more) in the current context. */
static void op_stream_flood(struct reader *r)
{
    bool destroy = u8(r) & 1;
    aclrtStream made[2100];
    unsigned count = 0;
    int rc = 0;
    TRACE("stream flood (destroy %d)\n", destroy);
    while (count < 2100 && (rc = aclrtCreateStream(&made[count])) == 0)
        count++;
    seen("aclrtCreateStream", rc);
    TRACE("  %u streams made\n", count);
    if (count > 0)
        remember(m.streams, &m.stream_next, (uintptr_t)made[count - 1]);
    for (unsigned i = 0; destroy && i < count; i++)
        seen("aclrtDestroyStream", aclrtDestroyStream(made[i]));
}

/* ---- virtual memory ------------------------------------------------------------------------ */

static uint64_t pick_reservation_address(struct reader *r)
{
    uint8_t how = u8(r);
    if (how < 200 && m.reservation_count > 0) {
        const struct vmm_range *v =
            &m.reservations[m.reservation_count - 1 - how % (m.reservation_count < POOL ?
                                                             m.reservation_count : POOL)];
        uint8_t at = u8(r);
        return v->start + (at < 160 ? (uint64_t)(at % 16) * 2 * MiB
                                    : at < 200 ? (uint64_t)(at % 4) * GiB : u32(r));
    }
    return pick_pointer(r, false).address;
}

static uint64_t pick_physical(struct reader *r)
{
    uint8_t how = u8(r);
    if (how < 200 && m.physical_next > 0)
        return m.physicals[how % (m.physical_next < POOL ? m.physical_next : POOL)].start;
    return how < 220 ? 0 : pick_garbage_handle(r);
}

static uint64_t pick_vmm_size(struct reader *r)
{
    uint8_t how = u8(r);
    switch (how % 5) {
    case 0: case 1: return (1 + (uint64_t)u8(r) % 16) * 2 * MiB;
    case 2: return (1 + (uint64_t)u8(r) % 3) * GiB;
    case 3: return pick_size(r);
    default: return 128 * GiB + (how & 8 ? 2 * MiB : 0);
    }
}

static void op_vmm_reserve(struct reader *r)
{
    uint64_t size = pick_vmm_size(r);
    uint64_t alignment = u8(r) < 240 ? 0 : u64(r);
    uint8_t how = u8(r);
    uint64_t expect = how % 8 < 5 ? 0
                    : how % 8 == 5 ? VMM_BASE + (uint64_t)u8(r) * 2 * MiB
                    : how % 8 == 6 ? VMM_BASE + (uint64_t)(u8(r) % 8) * GiB
                                   : pick_reservation_address(r);
    uint64_t flags = u8(r) < 240 ? 0 : u8(r) % 3;
    bool null_out = u8(r) % 32 == 0;
    void *base = NULL;
    if (m.reservation_count == LEDGER_MAX)
        return;
    TRACE("aclrtReserveMemAddress(size=%llu, alignment=%llu, expect=%#llx, flags=%llu)\n",
          (unsigned long long)size, (unsigned long long)alignment,
          (unsigned long long)expect, (unsigned long long)flags);
    int rc = seen("aclrtReserveMemAddress", aclrtReserveMemAddress(
        null_out ? NULL : &base, size, alignment, (void *)(uintptr_t)expect, flags));
    if (rc != 0)
        return;
    uint64_t start = (uintptr_t)base;
    TRACE("    -> %#llx\n", (unsigned long long)start);
    CHECK(!null_out && size != 0, "aclrtReserveMemAddress succeeded with no output or size");
    CHECK(expect == 0 || start == expect, "aclrtReserveMemAddress asked for %#llx gave %#llx",
          (unsigned long long)expect, (unsigned long long)start);
    for (size_t i = 0; i < m.reservation_count; i++) {
        const struct vmm_range *v = &m.reservations[i];
        CHECK(!v->live || start + size <= v->start || v->start + v->size <= start,
              "reservation %#llx + %llu overlaps live %#llx + %llu", (unsigned long long)start,
              (unsigned long long)size, (unsigned long long)v->start,
              (unsigned long long)v->size);
    }
    /* The model keeps the span: whole 2 MiB pages, where mappings may go. */
    m.reservations[m.reservation_count++] =
        (struct vmm_range){start, (size + 2 * MiB - 1) / (2 * MiB) * (2 * MiB), -1, true};
}

static void op_vmm_release(struct reader *r)
{
    uint64_t address = pick_reservation_address(r);
    TRACE("aclrtReleaseMemAddress(%#llx)\n", (unsigned long long)address);
    int rc = seen("aclrtReleaseMemAddress", aclrtReleaseMemAddress((void *)(uintptr_t)address));
    struct vmm_range *v = NULL;
    for (size_t i = 0; i < m.reservation_count; i++)
        if (m.reservations[i].live && m.reservations[i].start == address)
            v = &m.reservations[i];
    bool mapped = false;
    for (size_t i = 0; v != NULL && i < m.mapping_count; i++)
        mapped |= m.mappings[i].live && m.mappings[i].start - v->start < v->size;
    if (v != NULL && !mapped)
        CHECK(rc == 0, "aclrtReleaseMemAddress of an empty reservation %#llx = %d",
              (unsigned long long)address, rc);
    if (rc == 0) {
        CHECK(v != NULL && !mapped, "aclrtReleaseMemAddress(%#llx) succeeded on %s",
              (unsigned long long)address, v == NULL ? "no reservation's start"
                                                    : "a reservation with mappings");
        v->live = false;
    }
}

static void pick_prop(struct reader *r, aclrtPhysicalMemProp *prop)
{
    static const uint32_t locations[] = {0, 1, 1, 1, 2, 3, 4, 7};
    memset(prop, 0, sizeof *prop);
    uint8_t how = u8(r);
    prop->handleType = (aclrtMemHandleType)(how < 240 ? 0 : how % 4);
    how = u8(r);
    prop->allocationType = (aclrtMemAllocationType)(how < 240 ? 0 : how % 3);
    how = u8(r);
    prop->memAttr = (aclrtMemAttr)(how < 220 ? how % 19 : u32(r));
    prop->location.type = (aclrtMemLocationType)locations[u8(r) % COUNT_OF(locations)];
    prop->location.id = (uint32_t)pick_device(r);
    prop->reserve = u8(r) < 250 ? 0 : u64(r);
}

static void op_vmm_malloc_physical(struct reader *r)
{
    uint64_t size = pick_vmm_size(r);
    aclrtPhysicalMemProp prop;
    pick_prop(r, &prop);
    uint64_t flags = u8(r) < 240 ? 0 : 1;
    uint8_t nulls = u8(r) % 32;
    aclrtDrvMemHandle handle = NULL;
    TRACE("aclrtMallocPhysical(size=%llu, attr=%d, location=%d/%u)\n",
          (unsigned long long)size, (int)prop.memAttr, (int)prop.location.type,
          prop.location.id);
    int rc = seen("aclrtMallocPhysical", aclrtMallocPhysical(nulls == 1 ? NULL : &handle, size,
                                                             nulls == 2 ? NULL : &prop, flags));
    if (rc != 0)
        return;
    CHECK(nulls != 1 && nulls != 2 && handle != NULL, "aclrtMallocPhysical succeeded with a "
          "NULL argument or result");
    int device = prop.location.type == ACL_MEM_LOCATION_TYPE_DEVICE ? (int)prop.location.id
                                                                     : -1;
    m.physicals[m.physical_next++ % POOL] =
        (struct vmm_range){(uintptr_t)handle, size, device, true};
}

static void op_vmm_free_physical(struct reader *r)
{
    uint64_t handle = pick_physical(r);
    TRACE("aclrtFreePhysical(%#llx)\n", (unsigned long long)handle);
    seen("aclrtFreePhysical", aclrtFreePhysical((aclrtDrvMemHandle)(uintptr_t)handle));
}

static const struct vmm_range *physical_entry(uint64_t handle)
{
    for (unsigned i = 0; i < POOL && i < m.physical_next; i++)
        if (m.physicals[i].start == handle)
            return &m.physicals[i];
    return NULL;
}

static void op_vmm_map(struct reader *r)
{
    uint64_t va = pick_reservation_address(r);
    uint64_t handle = pick_physical(r);
    const struct vmm_range *physical = physical_entry(handle);
    uint8_t how = u8(r);
    uint64_t size = how < 200 && physical != NULL ? physical->size : pick_vmm_size(r);
    uint64_t offset = u8(r) < 240 ? 0 : u32(r);
    uint64_t flags = u8(r) < 240 ? 0 : 1;
    if (m.mapping_count == LEDGER_MAX)
        return;
    TRACE("aclrtMapMem(%#llx, %llu, %llu, %#llx)\n", (unsigned long long)va,
          (unsigned long long)size, (unsigned long long)offset, (unsigned long long)handle);
    int rc = seen("aclrtMapMem", aclrtMapMem((void *)(uintptr_t)va, size, offset,
                                             (aclrtDrvMemHandle)(uintptr_t)handle, flags));
    if (rc != 0)
        return;
    CHECK(vmm_live_containing(m.reservations, m.reservation_count, va) != NULL,
          "aclrtMapMem succeeded at %#llx, in no live reservation", (unsigned long long)va);
    for (size_t i = 0; i < m.mapping_count; i++) {
        const struct vmm_range *v = &m.mappings[i];
        CHECK(!v->live || va + size <= v->start || v->start + v->size <= va,
              "mapping %#llx + %llu overlaps live mapping %#llx + %llu",
              (unsigned long long)va, (unsigned long long)size,
              (unsigned long long)v->start, (unsigned long long)v->size);
    }
    m.mappings[m.mapping_count++] =
        (struct vmm_range){va, size, physical != NULL ? physical->device : -2, true};
}

static void op_vmm_unmap(struct reader *r)
{
    uint64_t va;
    uint8_t how = u8(r);
    if (how < 160 && m.mapping_count > 0)
        va = m.mappings[m.mapping_count - 1 - how % m.mapping_count].start;
    else
        va = pick_reservation_address(r);
    TRACE("aclrtUnmapMem(%#llx)\n", (unsigned long long)va);
    int rc = seen("aclrtUnmapMem", aclrtUnmapMem((void *)(uintptr_t)va));
    struct vmm_range *v = NULL;
    for (size_t i = 0; i < m.mapping_count; i++)
        if (m.mappings[i].live && m.mappings[i].start == va)
            v = &m.mappings[i];
    CHECK(effect_done(rc) == (v != NULL), "aclrtUnmapMem(%#llx) = %d, but the model says it "
          "is %s", (unsigned long long)va, rc, v != NULL ? "a live mapping's start"
                                                         : "no live mapping's start");
    if (v != NULL)
        v->live = false;
}

static void op_vmm_queries(struct reader *r)
{
    uint8_t how = u8(r);
    aclrtPhysicalMemProp prop;
    pick_prop(r, &prop);
    aclrtDrvMemHandle handle = NULL;
    switch (how % 4) {
    case 0: {
        size_t granularity = 0;
        int rc = seen("aclrtMemGetAllocationGranularity", aclrtMemGetAllocationGranularity(
            how & 0x80 ? NULL : &prop, (aclrtMemGranularityOptions)(u8(r) % 3),
            how & 0x40 ? NULL : &granularity));
        if (rc == 0)
            CHECK(granularity != 0 && (granularity & (granularity - 1)) == 0,
                  "aclrtMemGetAllocationGranularity gave %zu", granularity);
        break;
    }
    case 1: {
        aclrtMemAccessDesc desc[2];
        memset(desc, 0, sizeof desc);
        for (int i = 0; i < 2; i++) {
            uint8_t pick = u8(r);
            desc[i].flags = (aclrtMemAccessFlags)(pick < 200 ? 3 : pick % 5);
            desc[i].location.type = (aclrtMemLocationType)(u8(r) % 3);
            desc[i].location.id = (uint32_t)pick_device(r);
            desc[i].rsv[0] = u8(r) < 250 ? 0 : 1;
        }
        uint64_t va = pick_reservation_address(r);
        struct vmm_range *v = vmm_live_containing(m.mappings, m.mapping_count, va);
        uint64_t size = u8(r) < 200 && v != NULL ? v->size : pick_vmm_size(r);
        seen("aclrtMemSetAccess", aclrtMemSetAccess((void *)(uintptr_t)va, size,
                                                    how & 0x80 ? NULL : desc, u8(r) % 3));
        break;
    }
    case 2: {
        uint64_t va = pick_reservation_address(r);
        int rc = seen("aclrtMemRetainAllocationHandle", aclrtMemRetainAllocationHandle(
            (void *)(uintptr_t)va, how & 0x80 ? NULL : &handle));
        if (rc == 0)
            CHECK(vmm_live_containing(m.mappings, m.mapping_count, va) != NULL,
                  "aclrtMemRetainAllocationHandle(%#llx) answered for no live mapping",
                  (unsigned long long)va);
        break;
    }
    default: {
        uint64_t chosen = pick_physical(r);
        seen("aclrtMemGetAllocationPropertiesFromHandle",
             aclrtMemGetAllocationPropertiesFromHandle((aclrtDrvMemHandle)(uintptr_t)chosen,
                                                       how & 0x80 ? NULL : &prop));
        break;
    }
    }
}

/* ---- queued work over many allocations -------------------------------------------------------
 * A queued memset over back-to-back blocks or mappings, one of which goes (freed or
 * unmapped) before the stream runs: the work must be skipped (a hazard), never write into
 * what lives there now, and never touch memory that is gone. */

static int current_device(void)
{
    int32_t id = -1;
    return seen("aclrtGetDevice", aclrtGetDevice(&id)) == 0 ? id : -1;
}

static void op_span_blocks(struct reader *r)
{
    unsigned count = 2 + u8(r) % 23;
    uint8_t queued = u8(r), now = (uint8_t)(queued ^ 0x5A);
    if (m.ledger_count + count + 1 > LEDGER_MAX)
        return;
    void *blocks[24];
    TRACE("span of %u blocks\n", count);
    for (unsigned i = 0; i < count; i++) {
        if (seen("aclrtMalloc", aclrtMalloc(&blocks[i], 4000, ACL_MEM_MALLOC_NORMAL_ONLY)) != 0)
            return;
        record((uintptr_t)blocks[i], 4000, FAM_DEVICE, "aclrtMalloc");
        if (i > 0 && (uintptr_t)blocks[i] != (uintptr_t)blocks[i - 1] + PAGE)
            return; /* not back to back: nothing to learn */
    }
    aclrtStream stream = NULL;
    if (seen("aclrtCreateStream", aclrtCreateStream(&stream)) != 0)
        return;
    remember(m.streams, &m.stream_next, (uintptr_t)stream);
    uint64_t span = count * PAGE;
    int rc = seen("aclrtMemsetAsync", aclrtMemsetAsync(blocks[0], span, queued, span, stream));
    CHECK(rc == 0, "aclrtMemsetAsync over %u live blocks = %d", count, rc);
    void *last = blocks[count - 1], *again = NULL;
    rc = seen("aclrtFree", aclrtFree(last));
    CHECK(effect_done(rc), "aclrtFree of a live block = %d", rc);
    live_at((uintptr_t)last, false, false)->live = false;
    if (seen("aclrtMalloc", aclrtMalloc(&again, 4000, ACL_MEM_MALLOC_NORMAL_ONLY)) != 0)
        return;
    record((uintptr_t)again, 4000, FAM_DEVICE, "aclrtMalloc");
    if (again != last)
        return;
    rc = seen("aclrtMemset", aclrtMemset(again, 4000, now, 4000));
    CHECK(effect_done(rc), "aclrtMemset of a live block = %d", rc);
    rc = seen("aclrtSynchronizeStream", aclrtSynchronizeStream(stream));
    CHECK(effect_done(rc), "aclrtSynchronizeStream = %d", rc);
    rc = seen("aclrtMemcpy", aclrtMemcpy(heap, HEAP_BYTES, again, 4000,
                                         ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(effect_done(rc), "aclrtMemcpy from a live block = %d", rc);
    expect_bytes(4000, now, "in a block made after the block there was freed with a memset "
                 "queued over it");
}

static void op_span_mappings(struct reader *r)
{
    unsigned count = 2 + u8(r) % 11;
    uint8_t value = u8(r);
    uint64_t span = count * 2 * MiB;
    int device = current_device();
    if (device < 0 || span > m.budget || m.reservation_count == LEDGER_MAX ||
        m.mapping_count + count > LEDGER_MAX)
        return;
    m.budget -= span;
    void *base = NULL;
    TRACE("span of %u mappings\n", count);
    if (seen("aclrtReserveMemAddress", aclrtReserveMemAddress(&base, span, 0, NULL, 0)) != 0)
        return;
    m.reservations[m.reservation_count++] = (struct vmm_range){(uintptr_t)base, span, -1,
                                                               true};
    aclrtPhysicalMemProp prop;
    memset(&prop, 0, sizeof prop);
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (uint32_t)device;
    for (unsigned i = 0; i < count; i++) {
        aclrtDrvMemHandle handle = NULL;
        uint64_t va = (uintptr_t)base + i * 2 * MiB;
        if (seen("aclrtMallocPhysical", aclrtMallocPhysical(&handle, 2 * MiB, &prop, 0)) != 0)
            return;
        m.physicals[m.physical_next++ % POOL] =
            (struct vmm_range){(uintptr_t)handle, 2 * MiB, device, true};
        if (seen("aclrtMapMem", aclrtMapMem((void *)(uintptr_t)va, 2 * MiB, 0, handle, 0)) != 0)
            return;
        m.mappings[m.mapping_count++] = (struct vmm_range){va, 2 * MiB, device, true};
    }
    aclrtStream stream = NULL;
    if (seen("aclrtCreateStream", aclrtCreateStream(&stream)) != 0)
        return;
    remember(m.streams, &m.stream_next, (uintptr_t)stream);
    int rc = seen("aclrtMemsetAsync", aclrtMemsetAsync(base, span, value, span, stream));
    CHECK(rc == 0, "aclrtMemsetAsync over %u live mappings = %d", count, rc);
    rc = seen("aclrtUnmapMem", aclrtUnmapMem((char *)base + span - 2 * MiB));
    CHECK(effect_done(rc), "aclrtUnmapMem of a live mapping = %d", rc);
    m.mappings[m.mapping_count - 1].live = false;
    /* The unmapped range must not be written: a crash here is the finding. */
    rc = seen("aclrtSynchronizeStream", aclrtSynchronizeStream(stream));
    CHECK(effect_done(rc), "aclrtSynchronizeStream = %d", rc);
}

/* acl_mem_fake_leaks lists what is held: every live block of the model, with its size
 * and device, and nothing else; every live reservation and mapping. */
static void op_leaks(struct reader *r)
{
    static struct acl_mem_fake_leak out[3 * LEDGER_MAX + POOL];
    uint8_t how = u8(r);
    size_t max = how & 1 ? COUNT_OF(out) : how / 2 % 4;
    size_t total = acl_mem_fake_leaks(max != 0 ? out : NULL, max);
    TRACE("acl_mem_fake_leaks(max %zu) = %zu\n", max, total);
    size_t blocks = 0, reservations = 0, mappings = 0;
    for (size_t i = 0; i < m.ledger_count; i++)
        blocks += m.ledger[i].live;
    for (size_t i = 0; i < m.reservation_count; i++)
        reservations += m.reservations[i].live;
    for (size_t i = 0; i < m.mapping_count; i++)
        mappings += m.mappings[i].live;
    CHECK(total >= blocks + reservations + mappings, "acl_mem_fake_leaks counts %zu, the "
          "model holds %zu blocks, %zu reservations, %zu mappings", total, blocks,
          reservations, mappings);
    if (max < total)
        return;
    size_t listed_blocks = 0;
    for (size_t i = 0; i < total; i++) {
        const struct acl_mem_fake_leak *leak = &out[i];
        CHECK(memchr(leak->api, 0, sizeof leak->api) != NULL, "a leak's api is no string");
        if (strcmp(leak->api, "aclrtReserveMemAddress") == 0) {
            CHECK(vmm_live_containing(m.reservations, m.reservation_count, leak->address) !=
                  NULL, "acl_mem_fake_leaks lists reservation %#llx, not live",
                  (unsigned long long)leak->address);
            continue;
        }
        if (strcmp(leak->api, "aclrtMapMem") == 0) {
            struct vmm_range *v = vmm_live_containing(m.mappings, m.mapping_count,
                                                      leak->address);
            CHECK(v != NULL && v->start == leak->address && v->size == leak->size,
                  "acl_mem_fake_leaks lists mapping %#llx + %llu, not a live mapping",
                  (unsigned long long)leak->address, (unsigned long long)leak->size);
            continue;
        }
        if (strcmp(leak->api, "aclrtMallocPhysical") == 0)
            continue; /* the model keeps only a few handles */
        listed_blocks++;
        bool pinned = strcmp(leak->api, "aclrtMallocHost") == 0;
        bool dvpp = strcmp(leak->api, "acldvppMalloc") == 0 ||
                    strcmp(leak->api, "hi_mpi_dvpp_malloc") == 0;
        struct alloc *a = live_at(leak->address, pinned, dvpp);
        CHECK(a != NULL, "acl_mem_fake_leaks lists %s %#llx, which the model says is not "
              "live", leak->api, (unsigned long long)leak->address);
        CHECK(leak->size == a->size || (dvpp && leak->size == 0 && a->size == 1),
              "acl_mem_fake_leaks gives %s %#llx %llu bytes, not %llu", leak->api,
              (unsigned long long)leak->address, (unsigned long long)leak->size,
              (unsigned long long)a->size);
        CHECK(a->device < 0 ? leak->device == -1 || !pinned : leak->device == a->device,
              "acl_mem_fake_leaks gives %s %#llx device %d, not %d", leak->api,
              (unsigned long long)leak->address, (int)leak->device, a->device);
    }
    CHECK(listed_blocks == blocks, "acl_mem_fake_leaks lists %zu blocks, the model holds %zu",
          listed_blocks, blocks);
}

static void set_hazards(uint8_t bits)
{
    m.raise_mode = bits & 1;
    int rc = acl_mem_fake_set_hazards(m.raise_mode ? "raise" : "count", bits & 2);
    CHECK(rc == 0, "acl_mem_fake_set_hazards = %d", rc);
}

static void run_op(struct reader *r, enum op op)
{
    switch (op) {
    case OP_INIT: op_init(r); break;
    case OP_FINALIZE: op_finalize(); break;
    case OP_SET_DEVICE: op_set_device(r); break;
    case OP_RESET_DEVICE: op_reset_device(r, false); break;
    case OP_RESET_DEVICE_FORCE: op_reset_device(r, true); break;
    case OP_CREATE_CONTEXT: op_create_context(r); break;
    case OP_DESTROY_CONTEXT: op_destroy_context(r); break;
    case OP_SET_CONTEXT: op_set_context(r); break;
    case OP_GET_CONTEXT: op_get_context(r); break;
    case OP_MALLOC: op_malloc(r); break;
    case OP_FREE: case OP_DVPP_FREE: case OP_MPI_FREE: op_free(r, op); break;
    case OP_MALLOC_HOST: op_malloc_host(r); break;
    case OP_FREE_HOST: op_free_host(r); break;
    case OP_DVPP_MALLOC: op_dvpp_malloc(r, false); break;
    case OP_MPI_MALLOC: op_dvpp_malloc(r, true); break;
    case OP_MEMCPY: op_memcpy(r, false); break;
    case OP_MEMCPY_ASYNC: op_memcpy(r, true); break;
    case OP_MEMSET: op_memset(r, false); break;
    case OP_MEMSET_ASYNC: op_memset(r, true); break;
    case OP_CREATE_STREAM: op_create_stream(r); break;
    case OP_DESTROY_STREAM: case OP_DESTROY_STREAM_FORCE: case OP_SYNC_STREAM:
    case OP_SYNC_DEVICE:
        op_stream_call(r, op);
        break;
    case OP_CREATE_EVENT: op_create_event(r); break;
    case OP_RECORD_EVENT: case OP_WAIT_EVENT: case OP_RESET_EVENT: case OP_SYNC_EVENT:
    case OP_QUERY_EVENT_STATUS: case OP_QUERY_EVENT: case OP_ELAPSED: case OP_DESTROY_EVENT:
        op_event_call(r, op);
        break;
    case OP_MEM_INFO: op_mem_info(r); break;
    case OP_ADDRESS_RANGE: op_address_range(r); break;
    case OP_POINTER_ATTRIBUTES: op_pointer_attributes(r); break;
    case OP_LAST_ERROR: op_last_error(r); break;
    case OP_QUERIES: op_queries(r); break;
    case OP_VERIFY: op_verify(r); break;
    case OP_HAZARD_MODE: set_hazards(u8(r)); break;
    case OP_PINNED_CHURN: op_pinned_churn(r); break;
    case OP_STREAM_FLOOD: op_stream_flood(r); break;
    case OP_ASYNC_VERIFY: op_async_verify(r); break;
    case OP_VMM_RESERVE: op_vmm_reserve(r); break;
    case OP_VMM_RELEASE: op_vmm_release(r); break;
    case OP_VMM_MALLOC_PHYSICAL: op_vmm_malloc_physical(r); break;
    case OP_VMM_FREE_PHYSICAL: op_vmm_free_physical(r); break;
    case OP_VMM_MAP: op_vmm_map(r); break;
    case OP_VMM_UNMAP: op_vmm_unmap(r); break;
    case OP_VMM_QUERIES: op_vmm_queries(r); break;
    case OP_SPAN_BLOCKS: op_span_blocks(r); break;
    case OP_SPAN_MAPPINGS: op_span_mappings(r); break;
    case OP_LEAKS: op_leaks(r); break;
    case OP_COUNT: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const profiles[] = {"atlas-a2", "atlas-inference", "ascend950",
                                           "atlas-200dk"};
    static const char *const releases[] = {"8.5.0", "9.0.1", "9.1.0", NULL};
    static const int device_counts[] = {0, 1, 2, 32};
    static const uint64_t capacities[] = {0, 48 * MiB, GiB, 3 * GiB + 6 * MiB};
    setup_once();
    struct reader r = {data, data + size};
    uint8_t play = u8(&r), hazards = u8(&r);

    reclaim_pinned();
    int rc = acl_mem_fake_configure(profiles[play & 3], releases[(play >> 2) & 3],
                                device_counts[(play >> 4) & 3], capacities[play >> 6]);
    CHECK(rc == 0, "acl_mem_fake_configure = %d", rc);
    struct acl_mem_fake_description description;
    rc = acl_mem_fake_describe(&description);
    CHECK(rc == 0, "acl_mem_fake_describe = %d", rc);
    memset(&m, 0, sizeof m);
    m.device_count = description.device_count;
    m.budget = TOUCH_BUDGET;
    set_hazards(hazards);
    TRACE("play %s, CANN %s, %d devices of %llu bytes, hazards %#x\n", description.profile,
          description.cann, m.device_count, (unsigned long long)description.capacity,
          hazards);

    for (op_index = 0; r.at < r.end && op_index < MAX_OPS; op_index++) {
        run_op(&r, (enum op)(u8(&r) % OP_COUNT));
        drain_findings(&r);
    }

    /* Pinned blocks outlive a reset (their mappings stay): free them, so that a long run
     * does not keep every input's touched pinned pages resident, and so that the next
     * input's reset lets the harness unmap them. */
    for (size_t i = 0; i < m.ledger_count; i++) {
        struct alloc *a = &m.ledger[i];
        if (a->family == FAM_PINNED && a->live) {
            rc = seen("aclrtFreeHost", aclrtFreeHost((void *)(uintptr_t)a->start));
            CHECK(effect_done(rc), "aclrtFreeHost of live pinned %#llx = %d at the end",
                  (unsigned long long)a->start, rc);
            a->live = false;
            pinned_freed(a);
        }
    }
    drain_findings(&r);
    return 0;
}
