/* Device and host memory: the aclrtMalloc family and aclrtFree, DVPP memory, pinned host
 * memory, and the memory queries (docs/runtime-model.md §3.5-§3.9, §3.12, §4.8, §4.9). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"


const char *am_api_name(uint8_t api)
{
    switch (api) {
    case AM_API_MALLOC: return "aclrtMalloc";
    case AM_API_MALLOC_ALIGN32: return "aclrtMallocAlign32";
    case AM_API_MALLOC_CACHED: return "aclrtMallocCached";
    case AM_API_MALLOC_HOST: return "aclrtMallocHost";
    case AM_API_DVPP_MALLOC: return "acldvppMalloc";
    default: return "hi_mpi_dvpp_malloc";
    }
}

/* ---- blocks ------------------------------------------------------------------------- */

static uint64_t pool_free(const struct am_device *device, uint32_t kind)
{
    if (kind == AM_NORMAL_PAGE)
        return device->normal_total - device->normal_used;
    uint64_t huge_free = device->huge_total - device->huge_used;
    return kind == AM_HUGE_PAGE ? huge_free : huge_free / AM_GIANT_PAGE * AM_GIANT_PAGE;
}

static uint64_t pool_total(const struct am_device *device, uint32_t kind)
{
    if (kind == AM_NORMAL_PAGE)
        return device->normal_total;
    return kind == AM_HUGE_PAGE ? device->huge_total
                                : device->huge_total / AM_GIANT_PAGE * AM_GIANT_PAGE;
}

/* "huge-page pool X of Y, normal-page pool X of Y", as acl_mem/_hints.py says it. */
static struct am_pools_text {
    char text[320];
} pools_text(const struct am_device *device)
{
    struct am_pools_text out;
    snprintf(out.text, sizeof out.text, "huge-page pool %s of %s, normal-page pool %s of %s",
             am_human(pool_free(device, AM_HUGE_PAGE)).text,
             am_human(pool_total(device, AM_HUGE_PAGE)).text,
             am_human(pool_free(device, AM_NORMAL_PAGE)).text,
             am_human(pool_total(device, AM_NORMAL_PAGE)).text);
    return out;
}

static const char *kind_name(uint32_t kind)
{
    return kind == AM_NORMAL_PAGE ? "normal" : kind == AM_HUGE_PAGE ? "huge" : "giant";
}

/* The out-of-memory text of an allocation of `size` bytes, `padded` after padding and
 * rounding, tried on `kinds` (acl_mem/_hint_texts.py). */
static aclError out_of_memory(const char *call, const struct am_device *device, size_t size,
                              uint64_t padded, const uint32_t *kinds, int count)
{
    char pages[32];
    snprintf(pages, sizeof pages, "%s%s%s", kind_name(kinds[0]), count > 1 ? " then " : "",
             count > 1 ? kind_name(kinds[1]) : "");
    return am_fail(AM_MEMORY_ALLOCATION, call,
                   AM_HINT_OOM_REQUEST "; " AM_HINT_OOM_POOLS "; " AM_HINT_OOM_REMEDY_C,
                   am_human(size).text, am_human(padded).text, pages,
                   pools_text(device).text);
}

/* ---- the owner table ------------------------------------------------------------------ */

/* The entry of the granule holding address (a device address of `device`); NULL when its
 * leaf does not exist and `make` is false or it cannot be made. The granule comes from the
 * address alone: fast paths read this before they hold a lock, while a reset may be
 * laying the device out anew. */
static uint8_t *owner_entry(struct am_device *device, uint64_t address, bool make)
{
    uint64_t granule = (address - am_device_base()) % AM_DEVICE_SLOT / AM_GRANULE;
    uint8_t **leaf = &device->owners[granule / AM_OWNER_LEAF];
    uint8_t *entries = __atomic_load_n(leaf, __ATOMIC_ACQUIRE);
    if (entries == NULL && make) {
        entries = calloc(AM_OWNER_LEAF, 1);
        if (entries == NULL)
            return NULL;
        __atomic_store_n(leaf, entries, __ATOMIC_RELEASE);
        device->owners_made[device->owners_made_count++] =
            (uint16_t)(granule / AM_OWNER_LEAF);
    }
    return entries == NULL ? NULL : &entries[granule % AM_OWNER_LEAF];
}

static uint8_t owner_at(struct am_device *device, uint64_t address)
{
    const uint8_t *entry = owner_entry(device, address, false);
    return entry == NULL ? 0 : __atomic_load_n(entry, __ATOMIC_RELAXED);
}

/* Mark the granules of [start, start + size) (the engine lock held); false, with nothing
 * marked, when a leaf cannot be made. */
static bool set_owner(struct am_device *device, uint64_t start, uint64_t size, uint8_t value)
{
    for (uint64_t at = start; at < start + size; at += AM_GRANULE)
        if (owner_entry(device, at, value != 0) == NULL && value != 0)
            return false;
    for (uint64_t at = start; at < start + size; at += AM_GRANULE) {
        uint8_t *entry = owner_entry(device, at, false);
        if (entry != NULL)
            __atomic_store_n(entry, value, __ATOMIC_RELAXED);
    }
    return true;
}

/* The arena an owner-table entry names (`owner` not 0). */
static struct am_arena *arena_of(struct am_device *device, uint8_t owner)
{
    return &device->arenas[(owner & ~AM_OWNER_CHUNK) - 1];
}

static struct am_arena *arena_at(struct am_device *device, uint64_t address)
{
    uint8_t owner = owner_at(device, address);
    return owner == 0 ? NULL : arena_of(device, owner);
}

int am_slot_of(uint64_t address, uint64_t count)
{
    uint64_t base = am_device_base();
    if (address < base || address - base >= AM_MAX_DEVICES * AM_DEVICE_SLOT)
        return -1;
    uint64_t index = (address - base) / AM_DEVICE_SLOT;
    uint64_t offset = (address - base) % AM_DEVICE_SLOT;
    if (count == 0)
        count = 1;
    if (count > AM_DEVICE_SLOT - offset)
        return -2;
    struct am_device *device = &am.devices[index];
    int owner = 0;
    for (uint64_t at = offset / AM_GRANULE * AM_GRANULE; at < offset + count; at += AM_GRANULE) {
        int here = owner_at(device, address - offset + at) & ~AM_OWNER_CHUNK;
        if (here == 0 || (owner != 0 && here != owner))
            return -2;
        owner = here;
    }
    return (int)index * AM_ARENAS + owner - 1;
}

struct am_block *am_block_starting(struct am_device *device, uint64_t start)
{
    struct am_arena *arena = arena_at(device, start);
    return arena == NULL ? NULL : (struct am_block *)am_tree_find(arena->blocks, start);
}

struct am_block *am_block_holding(struct am_device *device, uint64_t address)
{
    struct am_arena *arena = arena_at(device, address);
    return arena == NULL ? NULL : (struct am_block *)am_tree_containing(arena->blocks, address);
}

struct am_block *am_block_after(struct am_device *device, uint64_t address)
{
    struct am_node *next = NULL;
    for (int i = 0; i < AM_ARENAS; i++) {
        struct am_node *candidate = am_tree_after(device->arenas[i].blocks, address);
        if (candidate != NULL && (next == NULL || candidate->key < next->key))
            next = candidate;
    }
    return (struct am_block *)next;
}

static void free_node(struct am_node *node)
{
    free(node);
}

void am_arenas_clear(struct am_device *device)
{
    for (int i = 0; i < AM_ARENAS; i++) {
        struct am_arena *arena = &device->arenas[i];
        am_tree_clear(&arena->blocks, free_node);
        am_tree_clear(&arena->space.free, free_node);
        arena->chunk_count = 0;
        arena->quota = 0;
        arena->pending_count = 0;
        arena->pending_bytes = 0;
    }
    for (uint32_t i = 0; i < device->owners_made_count; i++) {
        uint8_t *entries = device->owners[device->owners_made[i]];
        for (size_t j = 0; j < AM_OWNER_LEAF; j++)
            __atomic_store_n(&entries[j], 0, __ATOMIC_RELAXED);
    }
}

/* ---- address space --------------------------------------------------------------------- */

/* The device's address space a large block at `address` came from. */
static struct am_space *device_space(struct am_device *device, uint64_t address)
{
    return am_in_dvpp(device, address) ? &device->dvpp_space : &device->heap_space;
}

/* Give every chunk no block holds back to the device's space (the engine lock held): a
 * large block may need the room. Returns how many went. */
static int reclaim_chunks(struct am_device *device)
{
    int reclaimed = 0;
    for (int i = 0; i < AM_ARENAS; i++) {
        struct am_arena *arena = &device->arenas[i];
        for (size_t j = 0; j < arena->chunk_count;) {
            uint64_t chunk = arena->chunks[j];
            if (!am_space_take_at(&arena->space, chunk, AM_CHUNK)) {
                j++;
                continue; /* a block (or the checker's hold) is in it */
            }
            set_owner(device, chunk, AM_CHUNK, 0);
            am_os_discard(am_host_of(device, chunk), AM_CHUNK);
            am_space_give(&device->heap_space, chunk, AM_CHUNK);
            arena->chunks[j] = arena->chunks[--arena->chunk_count];
            reclaimed++;
        }
    }
    return reclaimed;
}

static uint64_t take_space(struct am_device *device, struct am_space *space, uint64_t size,
                           uint64_t alignment)
{
    uint64_t start = am_space_take(space, size, alignment);
    if (start == 0 && space == &device->heap_space && reclaim_chunks(device) > 0)
        start = am_space_take(space, size, alignment);
    return start;
}

/* Another chunk of address space for the arena's small blocks (the engine lock held). */
static bool grow_arena(struct am_device *device, int index)
{
    struct am_arena *arena = &device->arenas[index];
    if (arena->chunk_count == arena->chunk_capacity) {
        size_t grown = arena->chunk_capacity ? 2 * arena->chunk_capacity : 8;
        uint64_t *chunks = realloc(arena->chunks, grown * sizeof *chunks);
        if (chunks == NULL)
            return false;
        arena->chunks = chunks;
        arena->chunk_capacity = grown;
    }
    uint64_t chunk = take_space(device, &device->heap_space, AM_CHUNK, AM_CHUNK);
    if (chunk == 0)
        return false;
    if (!set_owner(device, chunk, AM_CHUNK, (uint8_t)(index + 1) | AM_OWNER_CHUNK) ||
        !am_space_give(&arena->space, chunk, AM_CHUNK)) {
        set_owner(device, chunk, AM_CHUNK, 0);
        am_space_give(&device->heap_space, chunk, AM_CHUNK);
        return false;
    }
    arena->chunks[arena->chunk_count++] = chunk;
    return true;
}

static uint64_t round_up(uint64_t value, uint64_t to)
{
    return (value + to - 1) / to * to;
}

/* A small block: normal pages and at most AM_SMALL; it lives in an arena's chunk. */
static bool small_block(uint32_t kind, uint64_t extent, bool dvpp)
{
    return !dvpp && kind == AM_NORMAL_PAGE && extent <= AM_SMALL;
}

/* Allocate in arena `index` of the device. With `fast` only the arena's lock is held: a
 * block that needs more sets *needs_engine (nothing changed); the caller then takes the
 * engine lock and asks again. */
static struct am_block *block_allocate(struct am_device *device, int index, uint8_t api,
                                       uint64_t padded, const uint32_t *kinds,
                                       int kind_count, bool dvpp, uint64_t requested,
                                       const void *caller, bool fast, bool *needs_engine)
{
    struct am_arena *arena = &device->arenas[index];
    for (int i = 0; i < kind_count; i++) {
        uint32_t kind = kinds[i];
        uint64_t extent = round_up(padded, kind);
        if (extent < padded)
            continue;
        bool small = small_block(kind, extent, dvpp);
        if (fast && (!small || extent > arena->quota)) {
            *needs_engine = true;
            return NULL;
        }
        if (!fast && extent > pool_free(device, kind))
            continue;
        struct am_block *block = calloc(1, sizeof *block);
        if (block == NULL)
            return NULL;
        uint64_t start = 0;
        if (small) {
            start = am_space_take(&arena->space, extent, kind);
            if (start == 0 && fast) {
                free(block);
                *needs_engine = true;
                return NULL;
            }
            if (start == 0 && grow_arena(device, index))
                start = am_space_take(&arena->space, extent, kind);
        } else {
            uint64_t span = round_up(extent, AM_GRANULE);
            struct am_space *space = dvpp ? &device->dvpp_space : &device->heap_space;
            start = take_space(device, space, span, kind > AM_GRANULE ? kind : AM_GRANULE);
            if (start != 0 && !set_owner(device, start, span, (uint8_t)(index + 1))) {
                am_space_give(space, start, span);
                start = 0;
            }
        }
        if (start == 0) {
            free(block);
            continue;
        }
        block->node.key = start;
        block->node.len = extent;
        block->padded = padded;
        block->requested = requested;
        block->page_size = kind;
        block->api = api;
        block->device = (int8_t)device->id;
        block->serial = (uint64_t)(device->id + 1) << 48 | (uint64_t)index << 44 |
                        ++arena->serial;
        block->caller = caller;
        if (fast)
            arena->quota -= extent;
        else if (kind == AM_NORMAL_PAGE)
            device->normal_used += extent;
        else
            device->huge_used += extent;
        if (!fast && small) {
            /* Bytes for this arena's next small blocks, so they need no engine lock; never
             * more than a share of what is free, so that every arena can hold some when
             * the pool is small (else each would take it back from the others in turn). */
            uint64_t grant = pool_free(device, AM_NORMAL_PAGE) / (2 * AM_ARENAS);
            grant = grant < AM_QUOTA ? grant : AM_QUOTA;
            device->normal_used += grant;
            arena->quota += grant;
        }
        am_tree_insert(&arena->blocks, &block->node);
        return block;
    }
    return NULL;
}

/* Give a range held back or freed to the space it came from. */
static void give_back(struct am_device *device, uint64_t start, uint64_t extent)
{
    uint8_t owner = owner_at(device, start);
    if (owner & AM_OWNER_CHUNK)
        am_space_give(&arena_of(device, owner)->space, start, extent);
    else
        am_space_give(device_space(device, start), start, extent);
}

/* Hold the freed range back (the checker's quarantine); the oldest goes back to its
 * address space once the device holds AM_QUARANTINE of them. */
static void quarantine_address(struct am_device *device, uint64_t start, uint64_t extent)
{
    if (device->quarantined == AM_QUARANTINE) {
        give_back(device, device->quarantine[0][0], device->quarantine[0][1]);
        memmove(device->quarantine[0], device->quarantine[1],
                sizeof device->quarantine[0] * (AM_QUARANTINE - 1));
        device->quarantined--;
    }
    device->quarantine[device->quarantined][0] = start;
    device->quarantine[device->quarantined][1] = extent;
    device->quarantined++;
}

void am_quarantine_release(void)
{
    for (int i = 0; i < am.device_count; i++) {
        struct am_device *device = &am.devices[i];
        for (int j = 0; j < device->quarantined; j++)
            give_back(device, device->quarantine[j][0], device->quarantine[j][1]);
        device->quarantined = 0;
    }
}

static int by_start(const void *a, const void *b)
{
    uint64_t x = ((const uint64_t *)a)[0], y = ((const uint64_t *)b)[0];
    return x < y ? -1 : x > y;
}

/* Give back the host pages of the small blocks freed since the last time: of each free
 * range holding one (its neighbours freed too make one range, one system call); a block
 * allocated again since is not free and keeps its pages. */
static void discard_pending(struct am_device *device, struct am_arena *arena)
{
    qsort(arena->pending, (size_t)arena->pending_count, sizeof arena->pending[0], by_start);
    uint64_t done_end = 0;
    for (int i = 0; i < arena->pending_count; i++) {
        uint64_t start = arena->pending[i][0], extent = arena->pending[i][1];
        if (start < done_end)
            continue; /* inside the range discarded just before */
        struct am_node *free_range = am_tree_floor(arena->space.free, start);
        if (free_range == NULL || free_range->key + free_range->len < start + extent)
            continue; /* allocated again, held back by the checker, or its chunk went */
        am_os_discard(am_host_of(device, free_range->key), free_range->len);
        done_end = free_range->key + free_range->len;
    }
    arena->pending_count = 0;
    arena->pending_bytes = 0;
}

static void discard_later(struct am_device *device, struct am_arena *arena, uint64_t start,
                          uint64_t extent)
{
    if (arena->pending == NULL &&
        (arena->pending = malloc(AM_PENDING_DISCARDS * sizeof *arena->pending)) == NULL) {
        am_os_discard(am_host_of(device, start), extent); /* no room to wait: now */
        return;
    }
    int last = arena->pending_count - 1;
    if (last >= 0 && arena->pending[last][0] == start && arena->pending[last][1] == extent)
        return; /* the same block freed again (allocated and freed in a loop) */
    arena->pending[arena->pending_count][0] = start;
    arena->pending[arena->pending_count][1] = extent;
    arena->pending_bytes += extent;
    if (++arena->pending_count == AM_PENDING_DISCARDS ||
        arena->pending_bytes >= AM_PENDING_BYTES)
        discard_pending(device, arena);
}

/* The host pages of [start, start + extent) if it is still free (a large block's). */
static void discard_if_free(struct am_device *device, uint64_t start, uint64_t extent)
{
    struct am_node *free_range = am_tree_floor(device_space(device, start)->free, start);
    if (free_range != NULL && free_range->key + free_range->len >= start + extent)
        am_os_discard(am_host_of(device, start), extent);
}

static void keep_large(struct am_device *device, uint64_t start, uint64_t extent)
{
    uint64_t old = device->kept_large[0], old_extent = device->kept_large[1];
    if (old != 0 && (old != start || old_extent != extent))
        discard_if_free(device, old, old_extent);
    device->kept_large[0] = start;
    device->kept_large[1] = extent;
}

/* Free a block whose owner-table entry is `owner`. With `fast` only its arena's lock is
 * held: it is a small block and no pool segment exists. */
static void block_release(struct am_device *device, struct am_block *block, uint8_t owner,
                          bool fast)
{
    uint64_t start = block->node.key, extent = block->node.len;
    struct am_arena *arena = arena_of(device, owner);
    am_tree_remove(&arena->blocks, start);
    if (fast)
        arena->quota += extent;
    else if (block->page_size == AM_NORMAL_PAGE)
        device->normal_used -= extent;
    else
        device->huge_used -= extent;
    if (owner & AM_OWNER_CHUNK) {
        /* Its host pages go back to the system a few blocks at a time, unless the same
         * addresses are allocated again first. */
        if (am.check) {
            quarantine_address(device, start, extent);
        } else {
            am_space_give(&arena->space, start, extent);
            discard_later(device, arena, start, extent);
        }
    } else {
        /* A large block's pages go at once, but the last one freed up to AM_KEPT_LARGE
         * keeps them until the next one is. */
        uint64_t span = round_up(extent, AM_GRANULE);
        set_owner(device, start, span, 0);
        bool keep = !am.check && extent <= AM_KEPT_LARGE;
        if (!keep)
            am_os_discard(am_host_of(device, start), extent);
        if (am.check) {
            quarantine_address(device, start, span);
        } else {
            am_space_give(device_space(device, start), start, span);
            if (keep)
                keep_large(device, start, span);
        }
    }
    if (am.segments != NULL || am.freed_segments != NULL)
        am_check_forget(start, extent); /* the block's pool segments went with it */
    free(block);
}

struct am_device *am_device_of(uint64_t address)
{
    if (address < am_device_base())
        return NULL;
    uint64_t index = (address - am_device_base()) / AM_DEVICE_SLOT;
    return index < (uint64_t)am.device_count ? &am.devices[index] : NULL;
}

/* ---- the aclrtMalloc family (§3.5, §3.6) --------------------------------------------- */

static bool giant(uint32_t policy)
{
    return policy == ACL_MEM_MALLOC_HUGE1G_ONLY || policy == ACL_MEM_MALLOC_HUGE1G_ONLY_P2P;
}

/* The page policy the runtime really uses: 0-7 for aclrtMalloc(Align32); aclrtMallocCached
 * keeps only HUGE_FIRST, HUGE_ONLY, NORMAL_ONLY and HUGE1G_ONLY; anything else, OR-ed flags
 * included, becomes HUGE_FIRST. */
static uint32_t effective_policy(uint8_t api, uint32_t policy)
{
    if (policy <= 7) {
        if (api != AM_API_MALLOC_CACHED || policy == 0 || policy == 1 || policy == 2 ||
            policy == 6)
            return policy;
    }
    return ACL_MEM_MALLOC_HUGE_FIRST;
}

static int page_kinds(uint64_t padded, uint32_t chosen, uint32_t kinds[2])
{
    switch (chosen) {
    case ACL_MEM_MALLOC_HUGE_FIRST:
    case ACL_MEM_MALLOC_HUGE_FIRST_P2P:
        if (padded > AM_MiB) {
            kinds[0] = AM_HUGE_PAGE;
            kinds[1] = AM_NORMAL_PAGE;
            return 2;
        }
        kinds[0] = AM_NORMAL_PAGE;
        return 1;
    case ACL_MEM_MALLOC_HUGE_ONLY:
    case ACL_MEM_MALLOC_HUGE_ONLY_P2P:
        kinds[0] = AM_HUGE_PAGE;
        return 1;
    case ACL_MEM_MALLOC_NORMAL_ONLY:
    case ACL_MEM_MALLOC_NORMAL_ONLY_P2P:
        kinds[0] = AM_NORMAL_PAGE;
        return 1;
    default:
        kinds[0] = AM_GIANT_PAGE;
        return 1;
    }
}

/* What a fast path returns when the call needs the engine lock (before it changed
 * anything); never an exported call's result. */
#define NEEDS_ENGINE ((aclError)-1)

/* The malloc family's checks and allocation; `device` is the thread's current one, NULL
 * when it has none. With `fast` only the thread's arena lock on it is held. */
static aclError malloc_locked(uint8_t api, void **devPtr, size_t size, uint32_t policy,
                              struct am_device *device, const void *caller, bool fast,
                              int arena)
{
    /* The call's text is made only when it fails. */
#define MALLOC_CALL am_api_name(api)
    if (devPtr == NULL)
        return (am_fail(AM_INVALID_PARAM, MALLOC_CALL, "devPtr is NULL"));
    if (size == 0)
        return (am_fail(AM_INVALID_PARAM, MALLOC_CALL, "size is 0: ask for at least "
                                   "one byte"));
    uint32_t chosen = effective_policy(api, policy);
    /* Before 9.1.0 the padding is a fixed 32 whatever the SoC, and the overflow check
     * adds 64 before the padding is chosen (docs/runtime-model.md §3.5). */
    uint64_t pad = api == AM_API_MALLOC_ALIGN32 || giant(policy) ? 0
                   : am.cann->soc_padding ? am.profile->padding : 32;
    uint64_t overhead = am.cann->soc_padding ? 32 + pad : 64;
    if (size > SIZE_MAX - overhead)
        return (am_fail(AM_INVALID_PARAM, MALLOC_CALL, "size %zu plus the runtime's "
                                   "%llu bytes of padding does not fit a size_t", size,
                                   (unsigned long long)overhead));
    if (device == NULL)
        return (am_fail(AM_CONTEXT_NULL, MALLOC_CALL, AM_NO_CONTEXT, "this thread"));
    aclError fault = am.fault_count == 0 ? AM_SUCCESS : am_fault(am_api_name(api));
    if (fault != AM_SUCCESS)
        return am_fail(fault, MALLOC_CALL, "a failure planned by acl_mem_fake_inject_fault");
    if (giant(chosen) && !am.profile->giant_pages)
        return (am_fail(AM_FEATURE_NOT_SUPPORT, MALLOC_CALL, "1 GiB pages (policy %u) "
                                   "do not exist on %s", policy, am.profile->soc_name));
    if ((chosen == 3 || chosen == 4 || chosen == 5 || chosen == 7) &&
        !am.profile->p2p_policies)
        return (am_fail(AM_FEATURE_NOT_SUPPORT, MALLOC_CALL, "P2P policies (policy %u) "
                                   "do not exist on %s", policy, am.profile->soc_name));
    uint64_t rounding = api == AM_API_MALLOC_ALIGN32 ? 31 : 31 + pad;
    uint64_t padded = ((uint64_t)size + rounding) / 32 * 32;
    uint32_t kinds[2];
    int count = page_kinds(padded, chosen, kinds);
    if (!fast)
        am_arena_activate(device, arena);
    bool needs_engine = false;
    struct am_block *block = block_allocate(device, arena, api, padded, kinds, count, false,
                                            size, caller, fast, &needs_engine);
    if (needs_engine)
        return NEEDS_ENGINE;
    if (block != NULL && am.check)
        am_check_allocated(block, am_host_of(device, block->node.key));
    if (block == NULL)
        return out_of_memory(MALLOC_CALL, device, size, padded, kinds, count);
    *devPtr = (void *)(uintptr_t)block->node.key;
    return (AM_SUCCESS);
}

static aclError device_malloc(uint8_t api, void **devPtr, size_t size,
                              aclrtMemMallocPolicy policy_value, const void *caller)
{
    uint32_t policy = (uint32_t)policy_value;
    struct am_thread *self = am_thread();
    int arena = self->arena != 0 ? self->arena - 1 : am_thread_arena();
    struct am_context *context = am_context_of(self->cur);
    int current = context == NULL ? -1 : __atomic_load_n(&context->device, __ATOMIC_RELAXED);
    int slot = current < 0 ? -1 : current * AM_ARENAS + arena;
    if (am_fast_lock(slot, -1)) {
        /* Again under the lock: the context may have ended and its slot been reused. */
        context = am_context_of(self->cur);
        aclError code = NEEDS_ENGINE;
        if (context != NULL && context->alive && context->device == current)
            code = malloc_locked(api, devPtr, size, policy, &am.devices[current], caller, true,
                                 arena);
        if (__builtin_expect(__atomic_load_n(&am.tracing, __ATOMIC_RELAXED), 0) &&
            code != NEEDS_ENGINE)
            am_trace_exit(code); /* captured (a file's recording keeps fast paths off) */
        am_fast_unlock(slot, -1);
        if (code != NEEDS_ENGINE)
            return code;
    }
    ENTER(MALLOC_CALL);
    return unlock_with(malloc_locked(api, devPtr, size, policy, am_current_device(), caller,
                                     false, arena));
}

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    AM_ARGS(aclrtMalloc);
    return device_malloc(AM_API_MALLOC, devPtr, size, policy, __builtin_return_address(0));
}

aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    AM_ARGS(aclrtMallocAlign32);
    return device_malloc(AM_API_MALLOC_ALIGN32, devPtr, size, policy, __builtin_return_address(0));
}

aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    AM_ARGS(aclrtMallocCached);
    return device_malloc(AM_API_MALLOC_CACHED, devPtr, size, policy, __builtin_return_address(0));
}

/* Freeing memory queued work still names: the hazard, reported before the memory goes
 * (the work is skipped when it runs). */
static void freed_while_queued(const struct am_block *block)
{
    char what[96];
    snprintf(what, sizeof what, "%s block %#llx freed", am_api_name(block->api),
             (unsigned long long)block->node.key);
    am_check_queued(block->node.key, block->node.len, false, "free-while-queued", what);
}

/* Free the block starting at ptr if one of `apis` made it (the engine lock held). */
static aclError free_locked(const char *name, void *ptr, bool dvpp_family)
{
#define FREE_CALL name
    uint64_t address = (uintptr_t)ptr;
    if (address == 0)
        return (am_fail(AM_INVALID_PARAM, FREE_CALL, "the pointer is NULL"));
    struct am_device *device = am_device_of(address);
    uint8_t owner = device == NULL ? 0 : owner_at(device, address);
    struct am_block *block = owner == 0 ? NULL
        : (struct am_block *)am_tree_find(arena_of(device, owner)->blocks, address);
    bool family = block != NULL &&
        (dvpp_family ? block->api == AM_API_DVPP_MALLOC || block->api == AM_API_HI_MPI_DVPP_MALLOC
                     : block->api <= AM_API_MALLOC_CACHED);
    if (!family)
        return (am_fail(AM_RT_PARAM_INVALID, FREE_CALL, AM_HINT_FREE_NOT_LIVE,
                                   dvpp_family ? "acldvppMalloc or hi_mpi_dvpp_malloc" :
                                   "aclrtMalloc, aclrtMallocAlign32 or aclrtMallocCached"));
    if (block->queued != 0)
        freed_while_queued(block);
    if (am.check)
        am_check_freeing(block, am_host_of(device, address), "free");
    block_release(device, block, owner, false);
    return (am_hazard_result(AM_SUCCESS, name));
}

/* A free on the fast path, arena `slot` locked: a small aclrtMalloc-family block found in
 * that arena's tree (so it is the arena's, whatever the owner table said before the
 * lock), while no pool segment exists. Anything else, failures included, needs the
 * engine lock (which words the failure). */
static aclError free_fast(void *ptr, bool dvpp_family, int slot)
{
    if (dvpp_family || am.segments != NULL || am.freed_segments != NULL)
        return NEEDS_ENGINE;
    struct am_device *device = &am.devices[slot / AM_ARENAS];
    int index = slot % AM_ARENAS;
    struct am_block *block =
        (struct am_block *)am_tree_find(device->arenas[index].blocks, (uintptr_t)ptr);
    if (block == NULL || block->api > AM_API_MALLOC_CACHED ||
        !small_block(block->page_size, block->node.len, false))
        return NEEDS_ENGINE;
    block_release(device, block, (uint8_t)(index + 1) | AM_OWNER_CHUNK, true);
    return AM_SUCCESS; /* no hazard or finding: the fast path runs without either */
}

static aclError device_free(const char *name, void *ptr, bool dvpp_family)
{
    int slot = am_slot_of((uintptr_t)ptr, 1);
    if (slot >= 0 && am_fast_lock(slot, -1)) {
        aclError code = free_fast(ptr, dvpp_family, slot);
        if (__builtin_expect(__atomic_load_n(&am.tracing, __ATOMIC_RELAXED), 0) &&
            code != NEEDS_ENGINE)
            am_trace_exit(code);
        am_fast_unlock(slot, -1);
        if (code != NEEDS_ENGINE)
            return code;
    }
    ENTER(FREE_CALL);
    return unlock_with(free_locked(name, ptr, dvpp_family));
}

aclError aclrtFree(void *devPtr)
{
    AM_ARGS(aclrtFree);
    return device_free("aclrtFree", devPtr, false);
}

/* ---- DVPP (§3.8, §3.9): the entry points of libacl_dvpp.so and libacl_dvpp_mpi.so -- */

static aclError dvpp_malloc(uint8_t api, void **devPtr, size_t size, const void *caller)
{
    const char *call = am_api_name(api);
    ENTER(call);
    if (devPtr == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "devPtr is NULL"));
    if (size > SIZE_MAX - 63)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "size %zu plus 63 does not fit a "
                                   "size_t", size));
    struct am_device *device = am_current_device();
    if (device == NULL)
        return unlock_with(am_fail(AM_CONTEXT_NULL, call, AM_NO_CONTEXT, "this thread"));
    if (!am.profile->dvpp)
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, call, "%s has no separate DVPP "
                                   "memory", am.profile->soc_name));
    if (api == AM_API_HI_MPI_DVPP_MALLOC && !am.profile->mpi_dvpp)
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, call, "DVPP V2 "
                                   "(hi_mpi_dvpp_malloc) does not exist on %s",
                                   am.profile->soc_name));
    uint64_t padded = ((uint64_t)size + 63) / 32 * 32;
    uint32_t kinds[1] = {AM_HUGE_PAGE};
    int arena = am_thread_arena();
    am_arena_activate(device, arena);
    bool needs_engine = false;
    struct am_block *block = block_allocate(device, arena, api, padded, kinds, 1, true, size,
                                            caller, false, &needs_engine);
    if (block != NULL && am.check)
        am_check_allocated(block, am_host_of(device, block->node.key));
    if (block == NULL)
        return unlock_with(out_of_memory(call, device, size, padded, kinds, 1));
    *devPtr = (void *)(uintptr_t)block->node.key;
    return unlock_with(AM_SUCCESS);
}

/* The DVPP libraries pass their caller's return address: the program's, for reports. */
__attribute__((visibility("default"))) aclError acl_mem_engine_dvpp_malloc(void **devPtr,
                                                                         size_t size,
                                                                         const void *caller)
{
    AM_ARGS(acldvppMalloc);
    return dvpp_malloc(AM_API_DVPP_MALLOC, devPtr, size, caller);
}

__attribute__((visibility("default"))) aclError acl_mem_engine_dvpp_free(void *devPtr)
{
    AM_ARGS(acldvppFree);
    return device_free("acldvppFree", devPtr, true);
}

__attribute__((visibility("default"))) int32_t acl_mem_engine_mpi_malloc(uint32_t dev_id,
                                                                       void **dev_ptr,
                                                                       uint64_t size,
                                                                       const void *caller)
{
    AM_ARGS(hi_mpi_dvpp_malloc);
    (void)dev_id; /* the runtime allocates on the current device whatever dev_id says */
    if (size > SIZE_MAX)
        return am_fail(AM_INVALID_PARAM, "hi_mpi_dvpp_malloc", "size does not fit a size_t");
    return dvpp_malloc(AM_API_HI_MPI_DVPP_MALLOC, dev_ptr, (size_t)size, caller);
}

__attribute__((visibility("default"))) int32_t acl_mem_engine_mpi_free(void *dev_ptr)
{
    AM_ARGS(hi_mpi_dvpp_free);
    return device_free("hi_mpi_dvpp_free", dev_ptr, true);
}

/* ---- pinned host memory (§3.7) -------------------------------------------------------- */

/* "Asked for 2 GiB of", the start of a hint about the memory a size asked for. */
static struct am_phrase asked_of(uint64_t size)
{
    struct am_phrase out;
    snprintf(out.text, sizeof out.text, "Asked for %s of", am_human(size).text);
    return out;
}

aclError aclrtMallocHost(void **hostPtr, size_t size)
{
    AM_ARGS(aclrtMallocHost);
    ENTER("aclrtMallocHost");
    if (hostPtr == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtMallocHost", "hostPtr is NULL"));
    if (size == 0 || size > SIZE_MAX - 31)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtMallocHost", "size %zu is 0 or "
                                   "does not fit a size_t once rounded to 32", size));
    if (am_current_device() == NULL)
        return unlock_with(am_fail(AM_CONTEXT_NULL, "aclrtMallocHost", AM_NO_CONTEXT, "this thread"));
    aclError fault = am_fault("aclrtMallocHost");
    if (fault != AM_SUCCESS)
        return unlock_with(am_fail(fault, "aclrtMallocHost", "a failure planned by "
                                   "acl_mem_fake_inject_fault"));
    uint64_t padded = ((uint64_t)size + 31) / 32 * 32;
    uint64_t extent = (padded + AM_HOST_PAGE - 1) / AM_HOST_PAGE * AM_HOST_PAGE;
    struct am_block *block = calloc(1, sizeof *block);
    unsigned char *mapped = extent < padded ? NULL : am_os_map(extent, false);
    if (block == NULL || mapped == NULL) {
        free(block);
        if (mapped != NULL)
            am_os_unmap(mapped, extent); /* the bookkeeping failed: nothing is kept */
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, "aclrtMallocHost", AM_HINT_HOST_OOM,
                                   asked_of(size).text));
    }
    block->node.key = (uintptr_t)mapped;
    block->node.len = extent;
    block->padded = padded;
    block->requested = size;
    block->page_size = AM_HOST_PAGE;
    block->api = AM_API_MALLOC_HOST;
    block->device = -1;
    block->caller = __builtin_return_address(0);
    block->serial = ++am.block_serial;
    /* An address of a quarantined block cannot come back while it is mapped. */
    am_tree_insert(&am.pinned, &block->node);
    if (am.check)
        am_check_allocated(block, mapped);
    *hostPtr = mapped;
    return unlock_with(AM_SUCCESS);
}

/* Keep a freed pinned block mapped, emptied, for the next frees: a view that outlived
 * aclrtFreeHost reads zeros and writes where no later allocation lives. */
static void quarantine(uint64_t start, uint64_t extent, const struct am_block *block)
{
    am_check_forget(start, extent); /* its pool segments went with it */
    am_os_discard((void *)(uintptr_t)start, extent);
    struct am_pinned_freed *freed = calloc(1, sizeof *freed);
    if (freed == NULL) {
        am_os_unmap((void *)(uintptr_t)start, extent);
        return;
    }
    freed->node.key = start;
    freed->node.len = extent;
    if (am.check && block->checked)
        am_check_pinned_freed(freed, block);
    am_tree_insert(&am.pinned_freed, &freed->node);
    am.quarantine[am.quarantine_count][0] = start;
    am.quarantine[am.quarantine_count][1] = extent;
    am.quarantine_count++;
    uint64_t kept = 0;
    for (int i = 0; i < am.quarantine_count - 1; i++)
        kept += am.quarantine[i][1];
    while (am.quarantine_count > AM_PINNED_QUARANTINE ||
           (am.quarantine_count > 1 && kept > AM_PINNED_QUARANTINE_BYTES)) {
        uint64_t old = am.quarantine[0][0], old_extent = am.quarantine[0][1];
        kept -= old_extent;
        memmove(am.quarantine[0], am.quarantine[1],
                (size_t)(am.quarantine_count - 1) * sizeof am.quarantine[0]);
        am.quarantine_count--;
        struct am_node *node = am_tree_find(am.pinned_freed, old);
        if (node != NULL)
            am_check_pinned_unmapping((struct am_pinned_freed *)node);
        am_tree_remove(&am.pinned_freed, old);
        free(node);
        am_os_unmap((void *)(uintptr_t)old, old_extent);
    }
}

aclError aclrtFreeHost(void *hostPtr)
{
    AM_ARGS(aclrtFreeHost);
#define FREE_HOST_CALL "aclrtFreeHost"
    ENTER(FREE_HOST_CALL);
    uint64_t address = (uintptr_t)hostPtr;
    if (address == 0)
        return unlock_with(am_fail(AM_INVALID_PARAM, FREE_HOST_CALL, "hostPtr is NULL"));
    struct am_node *node = am_tree_find(am.pinned, address);
    if (node == NULL)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, FREE_HOST_CALL, AM_HINT_FREE_NOT_LIVE,
                                   "aclrtMallocHost"));
    if (((struct am_block *)node)->queued != 0)
        freed_while_queued((struct am_block *)node);
    if (am.check)
        am_check_freeing((struct am_block *)node, hostPtr, "free");
    uint64_t extent = node->len;
    am_tree_remove(&am.pinned, address);
    quarantine(address, extent, (struct am_block *)node);
    free(node);
    return unlock_with(am_hazard_result(AM_SUCCESS, "aclrtFreeHost"));
}

/* ---- queries (§3.12, §4.8, §4.9) ------------------------------------------------------ */

static bool in(int value, const int *set, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (set[i] == value)
            return true;
    return false;
}

aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total)
{
    AM_ARGS(aclrtGetMemInfo);
    static const int giant_attrs[] = {10, 11, 14, 17};
    static const int ddr_attrs[] = {0, 2, 3, 6, 7};
    static const int huge_attrs[] = {2, 4, 6, 8, 13, 16};
    int type = (int)attr;
    ENTER("aclrtGetMemInfo");
    if (free == NULL || total == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtGetMemInfo",
                                   "free or total is NULL"));
    if ((uint32_t)type > (uint32_t)am.cann->meminfo_max_attr)
        return unlock_with(am_fail(AM_INVALID_MEMORY_TYPE, "aclrtGetMemInfo", "attr %d is not "
                                   "a memory type CANN %s knows", type, am.cann->name));
    struct am_device *device = am_current_device();
    if (device == NULL)
        return unlock_with(am_fail(AM_CONTEXT_NULL, "aclrtGetMemInfo", AM_NO_CONTEXT, "this thread"));
    if (in(type, giant_attrs, 4) && !am.profile->giant_pages)
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, "aclrtGetMemInfo", "1 GiB pages "
                                   "do not exist on %s", am.profile->soc_name));
    if (in(type, ddr_attrs, 5) && !am.profile->ddr) {
        *free = *total = 0;
        return unlock_with(AM_SUCCESS);
    }
    am_vmm_reap_shared();
    uint32_t kinds[2];
    int count = 1;
    if (type == 0 || type == 1) {
        kinds[0] = AM_NORMAL_PAGE;
        kinds[1] = AM_HUGE_PAGE;
        count = 2;
    } else if (in(type, huge_attrs, 6)) {
        kinds[0] = AM_HUGE_PAGE;
    } else if (in(type, giant_attrs, 4)) {
        kinds[0] = AM_GIANT_PAGE;
    } else {
        kinds[0] = AM_NORMAL_PAGE;
    }
    uint64_t f = 0, t = 0;
    for (int i = 0; i < count; i++) {
        f += pool_free(device, kinds[i]);
        t += pool_total(device, kinds[i]);
    }
    *free = (size_t)f;
    *total = (size_t)t;
    return unlock_with(AM_SUCCESS);
}

/* The device or pinned block holding address, or NULL. */
static struct am_block *block_at(uint64_t address)
{
    struct am_device *device = am_device_of(address);
    if (device != NULL)
        return am_block_holding(device, address);
    return (struct am_block *)am_tree_containing(am.pinned, address);
}

#ifndef AM_ONLY_CANN_8_5_0 /* CANN 8.5.0's runtime has no such function */
aclError aclrtMemGetAddressRange(void *ptr, void **pbase, size_t *psize)
{
    AM_ARGS(aclrtMemGetAddressRange);
    ENTER("aclrtMemGetAddressRange");
    if (!am.cann->has_address_range)
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, "aclrtMemGetAddressRange", "CANN %s "
                                   "has no aclrtMemGetAddressRange; a program linked against "
                                   "its library would not link (the fake's CANN 8.5.0 library "
                                   "is in lib64/cann-8.5.0)", am.cann->name));
    if (ptr == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtMemGetAddressRange",
                                   "ptr is NULL"));
    if (pbase == NULL && psize == NULL)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, "aclrtMemGetAddressRange",
                                   "pbase and psize are both NULL"));
    uint64_t start = 0, extent = 0;
    int mapped_device = 0;
    uint32_t page = 0;
    struct am_block *block = block_at((uintptr_t)ptr);
    if (am_vmm_range((uintptr_t)ptr, &start, &extent, &mapped_device, &page)) {
        (void)mapped_device;
    } else if (block != NULL) {
        start = block->node.key;
        extent = block->node.len;
    } else {
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, "aclrtMemGetAddressRange", "%p is in "
                                   "no live allocation", ptr));
    }
    if (pbase != NULL)
        *pbase = (void *)(uintptr_t)start;
    if (psize != NULL)
        *psize = (size_t)extent;
    return unlock_with(AM_SUCCESS);
}
#endif

aclError aclrtPointerGetAttributes(const void *ptr, aclrtPtrAttributes *attributes)
{
    AM_ARGS(aclrtPointerGetAttributes);
    ENTER("aclrtPointerGetAttributes");
    uint64_t address = (uintptr_t)ptr;
    if (address == 0 || attributes == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, "aclrtPointerGetAttributes",
                                   "ptr or attributes is NULL"));
    uint64_t start = 0, extent = 0;
    int mapped_device = 0;
    uint32_t page = 0;
    if (am_vmm_range(address, &start, &extent, &mapped_device, &page)) {
        struct am_device *current = am_current_device();
        memset(attributes, 0, sizeof *attributes);
        attributes->location.type = mapped_device >= 0 ? ACL_MEM_LOCATION_TYPE_DEVICE
                                                       : ACL_MEM_LOCATION_TYPE_HOST;
        attributes->location.id = mapped_device >= 0 ? (uint32_t)mapped_device
            : am.cann->host_location_id_zero || current == NULL ? 0 : (uint32_t)current->id;
        attributes->pageSize = page;
        return unlock_with(AM_SUCCESS);
    }
    if (address >= AM_VMM_BASE && address < AM_VMM_END)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, "aclrtPointerGetAttributes",
                                   "%p is in no mapping", ptr));
    struct am_block *block = block_at(address);
    memset(attributes, 0, sizeof *attributes);
    if (block != NULL && block->device >= 0) {
        attributes->location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
        attributes->location.id = (uint32_t)block->device;
        attributes->pageSize = block->page_size;
    } else if (block != NULL) {
        struct am_device *current = am_current_device();
        attributes->location.type = ACL_MEM_LOCATION_TYPE_HOST;
        attributes->location.id = am.cann->host_location_id_zero || current == NULL
                                      ? 0 : (uint32_t)current->id;
        attributes->pageSize = (uint32_t)AM_HOST_PAGE;
    } else if (address >= am_device_base() &&
               address < am_device_base() + AM_MAX_DEVICES * AM_DEVICE_SLOT) {
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, "aclrtPointerGetAttributes",
                                   "%p is device address space no allocation holds", ptr));
    } else {
        attributes->location.type = ACL_MEM_LOCATION_TYPE_UNREGISTERED;
        attributes->pageSize = (uint32_t)AM_HOST_PAGE;
    }
    return unlock_with(AM_SUCCESS);
}
