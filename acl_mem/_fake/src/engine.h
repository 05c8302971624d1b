/* The engine's shared state and the internal interfaces between its files.
 *
 * Layers, top to bottom (docs/runtime-model.md): the exported ACL calls (runtime.c,
 * memory.c, copies.c) check their arguments in the runtime's order and work on the
 * model (devices, contexts, blocks: state.c, tree.c); every operating-system call goes
 * through os.c. Nothing here calls back into a language runtime.
 */
#ifndef ACL_MEM_ENGINE_H
#define ACL_MEM_ENGINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl_api.h"
#include "hints.h"
#include "../include/acl_mem_fake.h" /* acl_mem_fake_queued_work, read on the fast paths */

/* The text of a 107002 in the calling thread (its argument: "this thread"). */
#define AM_NO_CONTEXT AM_HINT_CONTEXT_NULL ". " AM_HINT_CONTEXT_NULL_REMEDY_C

#define AM_HIDDEN __attribute__((visibility("hidden")))

/* aclError values (docs/runtime-model.md §1.1). */
enum {
    AM_SUCCESS = 0,
    AM_INVALID_PARAM = 100000,
    AM_REPEAT_INITIALIZE = 100002,
    AM_INVALID_FILE = 100003,
    AM_PARSE_FILE = 100006,
    AM_REPEAT_FINALIZE = 100037,
    AM_FEATURE_UNSUPPORTED = 200006,
    AM_INTERNAL_ERROR = 500000,
    AM_RT_PARAM_INVALID = 107000,
    AM_INVALID_DEVICEID = 107001,
    AM_CONTEXT_NULL = 107002,
    AM_STREAM_CONTEXT = 107003,
    AM_EVENT_TIMESTAMP_INVALID = 107006,
    AM_INVALID_MEMORY_TYPE = 107016,
    AM_INVALID_HANDLE = 107017,
    AM_FEATURE_NOT_SUPPORT = 207000,
    AM_MEMORY_ALLOCATION = 207001,
    AM_NO_STREAM_RESOURCE = 207008,
    AM_RT_INTERNAL_ERROR = 507000,
    AM_CONTEXT_RELEASE_ERROR = 507007,
};

#define AM_KiB ((uint64_t)1 << 10)
#define AM_MiB ((uint64_t)1 << 20)
#define AM_GiB ((uint64_t)1 << 30)
#define AM_TiB ((uint64_t)1 << 40)
#define AM_NORMAL_PAGE (4 * AM_KiB)
#define AM_HUGE_PAGE (2 * AM_MiB)
#define AM_GIANT_PAGE AM_GiB
#define AM_HOST_PAGE ((uint64_t)4096)
#define AM_MAX_DEVICES 32
/* Freed device blocks whose addresses the checker holds back, per device. */
#define AM_QUARANTINE 64
/* Copies from this size on move their bytes with the arena locks released. */
#define AM_UNLOCKED_COPY AM_MiB
/* Small freed device blocks whose host pages wait to be given back, at most. */
#define AM_PENDING_DISCARDS 256
#define AM_PENDING_BYTES (4 * AM_MiB)
#define AM_KEPT_LARGE (32 * AM_MiB)
/* The fake's device address space: slot d starts at am.device_base + d TiB, the first of
 * AM_DEVICE_BASES whose AM_MAX_DEVICES TiB are free when the library starts (else the
 * first, not reserved: device memory is then not at its device address in the host);
 * [16, 24) TiB is kept for the virtual-memory window (docs/runtime-model.md §4.2). The
 * second stays clear of where x86-64 Linux loads position-independent programs (about
 * 85 TiB) and of the shared libraries and stacks (just under 128 TiB). */
#define AM_DEVICE_BASES {24 * AM_TiB, 88 * AM_TiB}
#define AM_DEVICE_SLOT AM_TiB
#define AM_DVPP_WINDOW (16 * AM_GiB)
/* Virtual-memory reservations come from [16 TiB, 24 TiB); the bytes of a mapped address
 * are at its mirror, am.mirror_offset higher (docs/runtime-model.md §4.2): the first of
 * these offsets whose 8 TiB range is free when the library starts and clear of the
 * device space. The later ones make room for what got there first: another copy of the
 * library (the process's second engine, acl_mem.fake.make_backend(private=True)) or a
 * sanitizer. */
#define AM_VMM_BASE (16 * AM_TiB)
#define AM_VMM_END (24 * AM_TiB)
#define AM_MIRROR_OFFSETS {40 * AM_TiB, 48 * AM_TiB, 56 * AM_TiB}
/* No user-space host address reaches this (x86-64 and AArch64, 5-level tables). */
#define AM_USER_SPACE_END ((uint64_t)1 << 56)

/* ---- data: device profiles and CANN releases (data.c) ------------------------------- */
struct am_profile {
    const char *name;
    const char *soc_name;
    const char *description;
    uint32_t padding;
    bool ddr; /* the device's memory is DDR, not HBM */
    uint64_t capacity;
    uint32_t normal_sixteenths; /* the normal-page pool's share of the capacity, /16 */
    bool giant_pages, p2p_policies, dvpp, mpi_dvpp;
    int device_count;
    int max_streams;
    int run_mode; /* 1 ACL_HOST (EP), 0 ACL_DEVICE (RC) */
};

struct am_release {
    const char *name;
    int32_t acl_version[3];
    bool soc_padding, zero_count_succeeds, count_checked_first, async_context_first,
        stream_handle_checked;
    int meminfo_max_attr;
    bool granularity_all_attrs, retain_checks_output, properties_v2, has_address_range,
        physical_rejects_managed, host_location_id_zero, contexts_checked;
};

/* The release a build plays when ACL_MEM_FAKE_CANN does not say: the newest, or the one
 * a release build (AM_ONLY_CANN_8_5_0, lib64/cann-8.5.0) exists for. */
#ifdef AM_ONLY_CANN_8_5_0
#define AM_DEFAULT_RELEASE "8.5.0"
#else
#define AM_DEFAULT_RELEASE "9.1.0"
#endif

AM_HIDDEN const struct am_profile *am_profile_named(const char *name);
AM_HIDDEN const struct am_release *am_release_named(const char *name);
AM_HIDDEN extern const struct am_profile am_profiles[];
AM_HIDDEN extern const size_t am_profile_count;
AM_HIDDEN extern const struct am_release am_releases[];
AM_HIDDEN extern const size_t am_release_count;

/* ---- ordered trees (tree.c) --------------------------------------------------------- */
/* An intrusive treap keyed by an address; `len` is the extent it covers and
 * `max_len` the largest `len` in its subtree (for first-fit searches). */
struct am_node {
    uint64_t key, len, max_len;
    struct am_node *left, *right;
    uint32_t prio;
};

AM_HIDDEN void am_tree_insert(struct am_node **root, struct am_node *node);
AM_HIDDEN void am_tree_remove(struct am_node **root, uint64_t key);
AM_HIDDEN struct am_node *am_tree_find(struct am_node *root, uint64_t key);
/* The node with the greatest key <= key, or NULL. */
AM_HIDDEN struct am_node *am_tree_floor(struct am_node *root, uint64_t key);
/* The node with the smallest key > key, or NULL. */
AM_HIDDEN struct am_node *am_tree_after(struct am_node *root, uint64_t key);
/* The node whose [key, key + len) holds address, or NULL. */
AM_HIDDEN struct am_node *am_tree_containing(struct am_node *root, uint64_t address);
/* Every node, children before parents, then the root set to NULL: free_node(node). */
AM_HIDDEN void am_tree_clear(struct am_node **root, void (*free_node)(struct am_node *));

/* Free address ranges of one window; allocations are aligned to their page size. */
struct am_space {
    uint64_t base, size;
    struct am_node *free;
};

AM_HIDDEN void am_space_init(struct am_space *space, uint64_t base, uint64_t size);
/* 0 when no aligned range of `size` bytes is free, or when the bookkeeping cannot
 * get memory. */
AM_HIDDEN uint64_t am_space_take(struct am_space *space, uint64_t size, uint64_t alignment);
/* false when the bookkeeping cannot get memory (the range is then lost, not reused). */
AM_HIDDEN bool am_space_give(struct am_space *space, uint64_t start, uint64_t size);
/* Take exactly [start, start + size) if it is free; false if not (or no memory). */
AM_HIDDEN bool am_space_take_at(struct am_space *space, uint64_t start, uint64_t size);
AM_HIDDEN void am_space_reset(struct am_space *space);

/* ---- operating-system primitives (os.c) -------------------------------------------- */
AM_HIDDEN bool am_os_reserve(uint64_t base, uint64_t size);
AM_HIDDEN void *am_os_map(uint64_t size, bool noreserve);
/* Map [base, base + size) of our own reservation read-write, or back to PROT_NONE. */
AM_HIDDEN bool am_os_map_at(uint64_t base, uint64_t size);
AM_HIDDEN void am_os_unmap_at(uint64_t base, uint64_t size);
AM_HIDDEN void am_os_unmap(void *address, uint64_t size);
AM_HIDDEN void am_os_discard(void *address, uint64_t size);
/* Copy count bytes where the kernel checks both sides: false for an address that is
 * unmapped or lacks the permission (never a crash). */
AM_HIDDEN bool am_os_checked_copy(void *dst, const void *src, uint64_t count);
AM_HIDDEN bool am_os_checked_set(void *dst, int value, uint64_t count);
/* Whether every page of [address, address + count) can be read (and, with `write`,
 * written), proven through the kernel before a checked copy or set moves its first byte:
 * the kernel stops at the first bad page, so without this a range that ends in an
 * unmapped or read-only page would get a prefix written before the error. Nothing is
 * changed (a written page gets back the byte just read from it). True where the kernel
 * will not copy for us: the checked calls then check the whole range themselves. */
AM_HIDDEN bool am_os_usable(const void *address, uint64_t count, bool write);
/* The fault guard for memory a kernel copy proved (false when it cannot be had, e.g.
 * under a sanitizer); then copies and sets that fail on a fault instead of crashing. */
AM_HIDDEN bool am_os_guard_ready(void);
AM_HIDDEN bool am_os_guarded_copy(void *dst, const void *src, uint64_t count);
AM_HIDDEN bool am_os_guarded_set(void *dst, int value, uint64_t count);

/* ---- the model (state.c) ------------------------------------------------------------ */
enum am_api {
    AM_API_MALLOC = 1,
    AM_API_MALLOC_ALIGN32,
    AM_API_MALLOC_CACHED,
    AM_API_MALLOC_HOST,
    AM_API_DVPP_MALLOC,
    AM_API_HI_MPI_DVPP_MALLOC,
};

struct am_block {
    struct am_node node; /* key: start, len: extent (whole pages) */
    uint64_t padded, requested;
    uint64_t serial;  /* unique for the process: queued work names a block by it */
    uint32_t queued;  /* queued operations naming this block */
    const void *caller; /* the return address of the allocating call (leak reports) */
    bool checked; /* made while the checker was on: canaries to verify */
    uint32_t page_size;
    uint8_t api;
    int8_t device; /* -1: pinned host memory */
};

struct am_region {
    uint64_t base, size;
    unsigned char *backing; /* host bytes of [base, base + size), made on first open */
    /* RC mode: the backing is mapped at the device addresses themselves (the control CPU
     * reads device memory directly); else it lies elsewhere, `skew` bytes into a page. */
    bool in_place;
    uint64_t skew;
};

/* Threads allocate from arenas (the README's "The fake library in C"): each device has
 * AM_ARENAS, each with its own lock on its own cache lines; a thread uses the same one on every
 * device, so threads on one device do not wait for each other on their allocation and
 * copy paths. Every block lives in the arena of the thread that allocated it; which one
 * an address is in, the owner table says (by granule). */
#define AM_ARENAS 4
/* The owner table's unit: large blocks start on one and take whole ones. */
#define AM_GRANULE (2 * AM_MiB)
/* Small blocks (normal pages, extent up to AM_SMALL) come from address space an arena
 * takes AM_CHUNK at a time, and from normal-pool bytes granted up to AM_QUOTA at a
 * time: the arena's lock alone covers them. Anything else takes the engine lock. */
#define AM_SMALL AM_MiB
#define AM_CHUNK (32 * AM_MiB)
#define AM_QUOTA (64 * AM_MiB)
/* An owner-table entry: the arena + 1; with AM_OWNER_CHUNK the granule is in an arena's
 * chunk (small blocks), else in a large block. 0: nothing. */
#define AM_OWNER_CHUNK 0x80
/* The table has a leaf per GiB of a device slot, made when first needed and kept (fast
 * paths read it before they hold any lock). */
#define AM_OWNER_LEAF (AM_GiB / AM_GRANULE)
#define AM_OWNER_LEAVES (AM_DEVICE_SLOT / AM_GiB)

struct am_arena {
    _Alignas(64) pthread_mutex_t lock;
    uint64_t serial; /* blocks made in this arena: kept across resets (block serials) */
    /* Threads have used it (set under the engine lock, __atomic): the engine lock waits
     * for the fast paths in it to end. A fast path in an arena not yet active takes the
     * engine lock instead (the thread's first call on this device and arena). */
    bool active;
    /* Normal-pool bytes granted to the arena and not used: counted as used in the
     * device's pool until the engine lock is next taken, which takes them back. */
    uint64_t quota;
    struct am_space space; /* the free ranges of its chunks */
    struct am_node *blocks;
    uint64_t *chunks; /* chunk starts: count of them, room for capacity */
    size_t chunk_count, chunk_capacity;
    /* Small freed blocks whose host pages are still resident: discarded together once
     * there are AM_PENDING_DISCARDS of them or AM_PENDING_BYTES (one system call per
     * free would cost more than the free). Made on first use. */
    uint64_t (*pending)[2]; /* start, extent */
    int pending_count;
    uint64_t pending_bytes;
};

struct am_device {
    struct am_arena arenas[AM_ARENAS];
    /* Owner-table leaves (AM_OWNER_LEAVES pointers, __atomic), and which exist (a reset
     * clears those, touching none of the others' pages). */
    uint8_t *owners[AM_OWNER_LEAVES];
    uint16_t owners_made[AM_OWNER_LEAVES];
    uint32_t owners_made_count;
    /* Everything from here is laid out anew by a reset. */
    _Alignas(64) int id;
    int references; /* aclrtSetDevice minus aclrtResetDevice */
    int created;    /* live contexts made by aclrtCreateContext */
    uint64_t primary; /* the default context's handle, 0 when none */
    /* Pool bytes used, arena quotas included (the engine lock's holder sees none). */
    uint64_t normal_total, huge_total, normal_used, huge_used;
    /* Of the used bytes, what physical memory (aclrtMallocPhysical) holds: it outlives
     * the device's contexts. */
    uint64_t normal_physical, huge_physical;
    struct am_region heap, dvpp;
    /* Address space for large blocks and arena chunks (engine lock). */
    struct am_space heap_space, dvpp_space;
    /* With the checker on, the addresses of freed blocks wait here (oldest first) before
     * they can be allocated again, so a stale pointer does not reach a new block. */
    uint64_t quarantine[AM_QUARANTINE][2]; /* start, extent */
    int quarantined;
    /* The last freed block of 1 MiB to AM_KEPT_LARGE keeps its host pages until another
     * such block is freed: a buffer freed and allocated again in a loop (a training
     * step's) does not fault its pages in anew each time. start, extent; 0 when none. */
    uint64_t kept_large[2];
};

struct am_stream;

#define AM_CONTEXT_CHUNK 1024
#define AM_CONTEXT_CHUNKS 4096

struct am_context {
    int32_t device; /* read without the lock by the fast paths: __atomic loads */
    /* Bumped each time the slot is given to a context (it is in the handle): a handle
     * of a context that ended never names the slot's next context. __atomic loads. */
    uint32_t generation;
    uint32_t next_free; /* the next free slot + 1 while this one is free; 0 otherwise */
    bool alive, primary;
    uint32_t streams;               /* created streams alive */
    struct am_stream *default_stream; /* made on first use */
};

/* A freed pinned block kept mapped (emptied) a while, so a stale view reads zeros and
 * a copy through it is refused rather than reaching a later allocation. */
struct am_pinned_freed {
    struct am_node node;
    /* With the checker on: the block was poisoned at its free; a write through a pointer
     * that outlived it shows (reported once). */
    uint64_t requested;
    const void *caller;
    bool poisoned;
};

/* A pool segment a binding's pool carved out of a block (acl_mem_fake_segment_*), known
 * while the checker is on: canaries after its requested bytes, poison once freed. */
struct am_segment {
    struct am_node node; /* key: start, len: the bytes it takes */
    uint64_t parent, requested;
    const void *caller;
};

#define AM_PINNED_QUARANTINE 64
#define AM_PINNED_QUARANTINE_BYTES (256 * AM_MiB)

struct am_engine {
    pthread_mutex_t lock;
    /* Set while the engine lock is held (__atomic): fast paths that see it take the
     * engine lock instead, and the holder, having passed through every active arena's
     * lock once, knows none is running. On a line of its own: every fast path reads it. */
    _Alignas(64) int engine_held;
    /* Large copies of the fast path move their bytes with no lock held (another thread
     * can use the device meanwhile); while any runs, am_lock() waits, so nothing a copy
     * may touch is unmapped under it (those changes all take the engine lock). A line of
     * its own too: copies write it. */
    _Alignas(64) unsigned long unlocked_copies;
    /* From here: read by the fast paths, written under the engine lock only. Bumped by
     * reset and in a forked child: thread-local state of an older generation is stale
     * (no current context). */
    _Alignas(64) uint64_t generation;
    const struct am_profile *profile;
    const struct am_release *cann;
    int device_count;
    uint64_t capacity;
    /* A setting that could not be used (ACL_MEM_FAKE_*): every call fails with it. */
    char setting_error[256];
    bool space_reserved;
    int init_count;
    bool finalized, have_config;
    uint64_t config_digest;
    struct am_device devices[AM_MAX_DEVICES];
    /* Contexts by sequence number (index 0 unused), in chunks that never move or go: the
     * fast paths read a thread's context before they know which lock to take. */
    struct am_context *context_chunks[AM_CONTEXT_CHUNKS];
    size_t context_count; /* slots ever used; __atomic: read by the fast paths */
    size_t context_free;  /* the first free slot + 1 (slots of ended contexts), 0: none */
    struct am_node *pinned;
    struct am_node *pinned_freed;
    struct am_node *segments, *freed_segments; /* the checker's pool segments */
    /* start, extent: oldest first; one slot more for the newest before the oldest goes */
    uint64_t quarantine[AM_PINNED_QUARANTINE + 1][2];
    int quarantine_count;
    uint64_t block_serial;
    /* Streams and events (streams.c, events.c). */
    struct am_node *streams;     /* created streams by handle */
    struct am_stream *all_streams; /* created and default streams, newest first */
    uint64_t stream_sequence, event_sequence;
    struct am_node *events;      /* live events by handle */
    /* Planned failures (acl_mem_fake_inject_fault): while any is planned the fast paths
     * stay off, so a plan is counted down under the engine lock only. */
    struct {
        char call[32];
        uint32_t nth;
        aclError code;
    } faults[8];
    int fault_count;
    bool check; /* the memory checker (ACL_MEM_CHECK): fast paths stay off while on */
    bool abort_on_unsupported; /* ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED */
    bool tracing;    /* calls are recorded (a file or a capture): they take their entry time */
    bool trace_file; /* ACL_MEM_TRACE records this process's calls: fast paths stay off */
    /* Virtual memory (vmm.c). */
    bool vmm_ready, mirror_reserved;
    uint64_t mirror_offset; /* the mirror of VMM address va is at va + mirror_offset */
    uint64_t device_base; /* device d's slot starts here + d TiB; __atomic, set at start */
    struct am_space vmm_space;
    struct am_node *reservations, *physicals;
    uint64_t physical_sequence, mapping_serial;
    /* memfds of physical memory (descriptor + 1; 0: none); the last is the host's */
    int pool_fd[AM_MAX_DEVICES + 1];
    struct am_space pool_space[AM_MAX_DEVICES + 1];
};

AM_HIDDEN extern struct am_engine am;

/* Where device slot 0 starts (read by fast paths that may come before the start). */
static inline uint64_t am_device_base(void)
{
    return __atomic_load_n(&am.device_base, __ATOMIC_RELAXED);
}

/* An exported call's arguments, as its failure message shows them (calls.h). */
enum { AM_ARG_POINTER = 1, AM_ARG_HEX, AM_ARG_SIGNED, AM_ARG_UNSIGNED };
#define AM_MAX_ARGS 6
/* How a trace records a call (trace.c, docs/trace-format.md): each field names the
 * argument it comes from; an output's argument is the pointer it was written through. */
enum { AM_TRACE_NUMBER = 1, AM_TRACE_STRING, AM_TRACE_PROP };
struct am_trace_field {
    const char *field;
    unsigned char arg, kind;
};
struct am_trace_spec {
    const char *written;
    unsigned char code; /* its position in the format's table (a captured record's code) */
    bool release; /* its time is taken before the call: it gives something back */
    bool device;  /* the record carries the thread's current device */
    unsigned char inputs;
    struct am_trace_field in[AM_MAX_ARGS];
    unsigned char outputs;
    struct am_trace_field out[3];
};
struct am_call {
    const char *name;
    unsigned char count;
    struct {
        const char *name;
        unsigned char kind;
    } args[AM_MAX_ARGS];
    const struct am_trace_spec *trace; /* NULL: not traced */
};

/* The calling thread's view: current contexts and last error. */
struct am_thread {
    uint64_t generation;
    uint64_t ref; /* default context set by aclrtSetDevice */
    uint64_t ctx; /* context created or set explicitly */
    uint64_t cur; /* the one calls use */
    int last_error;
    bool has_message;
    char message[512];
    const struct am_call *call; /* the exported call running, for its failure message */
    uint64_t args[AM_MAX_ARGS];
    uint64_t entry_ns; /* while tracing: when it entered */
    bool traced;       /* its trace record is written */
    int arena; /* + 1: the arena it allocates from on every device; 0 until it asks */
};

AM_HIDDEN struct am_thread *am_thread(void);

/* A size as acl_mem's hints write it: "2 MiB", "1.50 GiB (1610612736 bytes)". */
struct am_human {
    char text[48];
};
AM_HIDDEN struct am_human am_human(uint64_t n);
/* A few words around such a size ("Asked for 2 GiB of"). */
struct am_phrase {
    char text[96];
};
/* The thread's state as it is (no check for a reset or fork since). */
AM_HIDDEN struct am_thread *am_thread_raw(void);

/* Record the arguments of the exported call now running in this thread (AM_ARGS). */
AM_HIDDEN void am_args(const struct am_call *call, uint64_t a0, uint64_t a1, uint64_t a2,
                       uint64_t a3, uint64_t a4, uint64_t a5);
#include "calls.h"

/* Take the engine lock (initialising the engine on first use): the whole engine, once
 * the fast paths running have ended (and with new ones kept out: engine_held); the
 * arenas' quotas go back to their pools. */
AM_HIDDEN void am_lock(void);
AM_HIDDEN void am_unlock(void);
/* am_lock, giving up after about `milliseconds` (at exit another thread may hold it). */
AM_HIDDEN bool am_lock_within(int milliseconds);
/* The fast paths (small allocations, frees, synchronous copies) take only the locks of
 * the arenas they touch, and only while the engine lock is free, no queued work exists
 * and the settings are usable; everything they read besides their arenas changes only
 * under the engine lock, whose holder waits for them first. Lock order: the engine lock,
 * then arenas by slot (device * AM_ARENAS + arena). These take slots `first` and
 * `second` (-1: none; equal slots once) and say whether the fast path may run; on false
 * nothing is held and the caller takes the engine lock. */
AM_HIDDEN bool am_fast_lock(int first, int second);
AM_HIDDEN void am_fast_unlock(int first, int second);
/* The device of the calling thread's current context, read without a lock (-1: none);
 * am_fast_lock then checks it still holds. */
AM_HIDDEN int am_fast_current_device(void);
/* The calling thread's arena (the same index on every device). */
AM_HIDDEN int am_thread_arena(void);
/* Take arena `index` of `device` into the engine lock's holding (the engine lock held). */
AM_HIDDEN struct am_arena *am_arena_activate(struct am_device *device, int index);
/* The context in slot `sequence` (0 < sequence < count), or NULL; and its handle. */
AM_HIDDEN struct am_context *am_context_at(size_t sequence);
AM_HIDDEN uint64_t am_context_handle(size_t sequence);
/* The engine, initialised; for calls that do not take the lock. */
AM_HIDDEN void am_ready(void);

/* Take the lock in an exported call; a setting that cannot be used fails the call. */
#define ENTER(call)                                                                        \
    do {                                                                                   \
        am_lock();                                                                         \
        if (am.setting_error[0] != '\0') {                                                \
            am_unlock();                                                                   \
            return am_fail(AM_RT_INTERNAL_ERROR, call, "%s", am.setting_error);            \
        }                                                                                  \
    } while (0)

/* Traces (trace.c): the settings, read when the library starts; a call's record, written
 * as it leaves the engine (with the engine lock); the end line at exit; fork. */
AM_HIDDEN void am_trace_read_settings(void);
AM_HIDDEN void am_trace_exit(aclError code);
AM_HIDDEN uint64_t am_trace_now(void);
AM_HIDDEN void am_trace_before_fork(void);
AM_HIDDEN void am_trace_after_fork(bool child);

static inline aclError unlock_with(aclError code)
{
    if (__builtin_expect(am.tracing, 0))
        am_trace_exit(code);
    am_unlock();
    return code;
}

/* The code a planned failure of `call` returns now, or 0 (with the engine lock). */
AM_HIDDEN aclError am_fault(const char *call);

/* Record a failed call for aclrtGetLastError and aclGetRecentErrMsg; returns code. */
AM_HIDDEN aclError am_fail(aclError code, const char *call, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

#define AM_CONTEXT_BASE ((uint64_t)0x5C0000000000)
#define AM_CONTEXT_STEP ((uint64_t)0x40)

AM_HIDDEN struct am_context *am_context_of(uint64_t handle);
AM_HIDDEN uint64_t am_context_new(int device, bool primary);
/* The calling thread's device, or NULL when its context is unset or gone. */
AM_HIDDEN struct am_device *am_current_device(void);
AM_HIDDEN bool am_backing_ready(struct am_device *device);
AM_HIDDEN void am_release_device_memory(struct am_device *device);
AM_HIDDEN void am_end_context(uint64_t handle);

/* Blocks (memory.c) */
AM_HIDDEN const char *am_api_name(uint8_t api);
/* The checker's held-back addresses of every device go back to their spaces. */
AM_HIDDEN void am_quarantine_release(void);
AM_HIDDEN struct am_device *am_device_of(uint64_t address);
/* The arena slot (device * AM_ARENAS + arena) whose blocks hold every granule of
 * [address, address + count), by the owner table and without a lock: -1 when the range
 * is not device memory, -2 when some granule has no owner or another one. */
AM_HIDDEN int am_slot_of(uint64_t address, uint64_t count);
/* The block starting at / holding / next after an address of a device (any arena; the
 * caller holds the lock of the arena the address is in, or the engine lock). */
AM_HIDDEN struct am_block *am_block_starting(struct am_device *device, uint64_t start);
AM_HIDDEN struct am_block *am_block_holding(struct am_device *device, uint64_t address);
AM_HIDDEN struct am_block *am_block_after(struct am_device *device, uint64_t address);
/* Forget every block and chunk of the device's arenas (the engine lock held); the
 * owner table with them. */
AM_HIDDEN void am_arenas_clear(struct am_device *device);
AM_HIDDEN unsigned char *am_host_of(struct am_device *device, uint64_t address);
/* Whether a device address is in the device's DVPP window (else its heap). */
static inline bool am_in_dvpp(const struct am_device *device, uint64_t address)
{
    return address - device->dvpp.base < device->dvpp.size;
}

/* ---- streams and events (streams.c, events.c) --------------------------------------- */
#define AM_STREAM_BASE ((uint64_t)0x5A0000000000)
#define AM_EVENT_BASE ((uint64_t)0x5B0000000000)
#define AM_HANDLE_STEP ((uint64_t)0x40)

/* A point in a stream's queue: an event's record, a wait for another stream's record,
 * or an event's reset. Shared by the queue, events and waits (counted references). */
struct am_marker {
    struct am_stream *stream; /* NULL once it ran */
    struct am_marker *waits_for;
    uint64_t resets;               /* a reset: the event whose record it forgets */
    struct am_marker *reset_record; /* ... if that record is still this one */
    uint64_t time_ns;
    uint32_t refs;
    bool ran;
};

/* Where the bytes of a range are (copies.c). */
enum am_where { AM_NOWHERE, AM_ON_DEVICE, AM_PINNED_HOST, AM_PAGEABLE };

struct am_located {
    enum am_where where;
    unsigned char *host; /* where the bytes are in this process */
    int device;
    struct am_block *block; /* the (first) block holding it; NULL for pageable memory */
    uint64_t mapping_start;  /* a virtual-memory mapping holding it: its address; else 0 */
};

AM_HIDDEN struct am_located am_locate(uint64_t address, uint64_t count);
/* Copy or set now what am_locate found; false when pageable memory refused it. */
AM_HIDDEN bool am_copy_now(const struct am_located *target, const struct am_located *source,
                           uint64_t count);
AM_HIDDEN bool am_set_pageable(unsigned char *host, int value, uint64_t count);
/* Forget every proven host range (a reset: the tests map and unmap memory between). */
AM_HIDDEN void am_proven_clear(void);

AM_HIDDEN struct am_marker *am_marker_new(struct am_stream *stream);
AM_HIDDEN void am_marker_put(struct am_marker *marker);
/* Run the marker's stream up to it (the device reaches it). */
AM_HIDDEN void am_reach(struct am_marker *marker);
/* Queue a marker on a stream (takes a reference); false when out of memory. */
AM_HIDDEN bool am_queue_marker(struct am_stream *stream, struct am_marker *marker);
/* A refused stream handle's failure: the shared hint for 107002 and 107003, else `why`. */
AM_HIDDEN aclError am_stream_refused(aclError code, const char *call, const void *stream,
                                     const char *why);
/* The stream `handle` names for the calling thread (0: the current context's default
 * stream), checked in the release's order; NULL with *code set when refused (*why NULL
 * for 107002 and 107003, whose text is the shared hint). */
AM_HIDDEN struct am_stream *am_resolve_stream(uint64_t handle, aclError *code,
                                              const char **why);
AM_HIDDEN bool am_stream_handle_valid(uint64_t handle);
/* A context ended: its streams go with their queued work (which never runs). */
AM_HIDDEN void am_context_ended(uint64_t handle);
/* Queued work touching [start, start + size): a hazard when `what` races with it. */
AM_HIDDEN void am_check_queued(uint64_t start, uint64_t size, bool write_only,
                               const char *kind, const char *what);
/* Forget every stream and event (reset, and a forked child). */
AM_HIDDEN void am_streams_clear(void);
/* A reset marker ran: the event forgets its record if that is still `record`. */
AM_HIDDEN void am_event_forget_record(uint64_t handle, const struct am_marker *record);
AM_HIDDEN void am_events_clear(void);

/* ---- virtual memory (vmm.c) ------------------------------------------------------------ */
/* [address, address + count) inside mappings end to end: *found says where. */
AM_HIDDEN bool am_vmm_find(uint64_t address, uint64_t count, struct am_located *found);
/* The mappings [address, address + count) covers: (address, serial) pairs, at most max. */
AM_HIDDEN size_t am_vmm_targets(uint64_t address, uint64_t count, uint64_t (*out)[2],
                                size_t max);
/* Whether the mapping at `address` is still the one of `serial`. */
AM_HIDDEN bool am_vmm_live(uint64_t address, uint64_t serial);
/* The mapping holding address: its start, size, device (-1 host) and page size. */
AM_HIDDEN bool am_vmm_range(uint64_t address, uint64_t *start, uint64_t *size, int *device,
                            uint32_t *page);
/* What the process holds of virtual memory, for leak reports. */
struct am_held {
    const char *api;
    uint64_t address, size;
    int device; /* -1: none or the host */
    const void *caller;
    bool vmm; /* virtual memory: no caller is kept */
    uint64_t extent;    /* the bytes it takes of its pool (0: none of its own) */
    uint32_t page_size; /* of those bytes; 0 for reservations and mappings */
};
/* Reservations, then physical handles not freed, then mappings. */
AM_HIDDEN void am_vmm_each(void (*visit)(const struct am_held *, void *), void *context);
/* Forget all virtual memory; a reset lets go of what was shared, a forked child
 * (`in_child`) only of its descriptors: the records are the parent's. */
AM_HIDDEN void am_vmm_clear(bool in_child);
/* Give back exported memory no other process holds any more (its pools then count it
 * free): before answering how much memory is free. */
AM_HIDDEN void am_vmm_reap_shared(void);

/* ---- leaks (leaks.c) ------------------------------------------------------------------ */
/* ACL_MEM_LEAK_REPORT: read when the library loads (so the report, registered then, runs
 * after every exit handler and C++ global destructor of the program). */
AM_HIDDEN bool am_leak_report_wanted(void);
/* A yes/no setting's text: 1 (1, true, yes, on), 0 (0, false, no, off, blank) or -1. */
AM_HIDDEN int am_yes_or_no(const char *value);

/* ---- hazards (hazards.c) ------------------------------------------------------------ */
/* A race with queued work: counted, and said on stderr, queued for the binding, or
 * turned into the call's failure, as configured (ACL_MEM_HAZARDS). */
AM_HIDDEN void am_hazard(const char *kind, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* `code`, or 507000 naming the hazard when one was reported in raise mode during this
 * call. */
AM_HIDDEN aclError am_hazard_result(aclError code, const char *call);
AM_HIDDEN void am_hazards_read_setting(void);
/* Findings of `kind` (every kind for NULL) since the last reset (with the lock). */
AM_HIDDEN unsigned long am_count_of(const char *kind);
/* A finding of the memory checker: reported as hazards are (the same mode and queue). */
AM_HIDDEN void am_check_report(const char *kind, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- the memory checker (checker.c) --------------------------------------------------- */
/* ACL_MEM_CHECK (yes/no): read with the settings; acl_mem_fake_set_check changes it. */
AM_HIDDEN void am_check_read_setting(void);
/* A block was allocated / is being freed (checker on): canaries and poison. */
AM_HIDDEN void am_check_allocated(struct am_block *block, unsigned char *host);
AM_HIDDEN void am_check_freeing(const struct am_block *block, const unsigned char *host,
                                const char *when);
/* A copy or memset of [address, address + count) (checker on): past a block's end? */
AM_HIDDEN void am_check_bounds(uint64_t address, uint64_t count, const char *what);
/* Every live block's canaries now (synchronisations, acl_mem_fake_check). */
AM_HIDDEN void am_check_all(const char *when);
/* Poison freed pinned memory (checker on), and verify it before it is unmapped. */
AM_HIDDEN void am_check_pinned_freed(struct am_pinned_freed *freed, const struct am_block *block);
AM_HIDDEN void am_check_pinned_unmapping(struct am_pinned_freed *freed);
/* The pool segments, live or freed, in [start, start + size) go (their memory did). */
AM_HIDDEN void am_check_forget(uint64_t start, uint64_t size);
/* "  File \"object\", line 0, in symbol+0xoffset" for a return address. */
AM_HIDDEN void am_describe_caller(const void *caller, char *out, size_t size);
AM_HIDDEN void am_hazards_clear(void);

/* Config file (config_file.c): the code aclInit's reading of `path` gives, and the
 * content's digest in *digest. */
AM_HIDDEN aclError am_read_config(const char *path, uint64_t *digest, aclError *checked);

#endif
