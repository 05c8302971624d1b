/* Virtual memory (docs/runtime-model.md §4): reservations, physical handles, mappings,
 * access, the handle queries and sharing between processes (the registry: share*.c).
 *
 * Reservations come from the window [16 TiB, 24 TiB), which the host never maps.
 * Physical memory is a range of a per-location memfd (sparse: pages exist once written);
 * a mapping shows that range at the reservation address's mirror, 40 TiB higher, with
 * MAP_SHARED | MAP_FIXED, so every mapping of one handle shows the same bytes and a copy
 * across neighbouring mappings is one memmove. Checks run in the runtime's order per
 * release; driver-only checks use the codes the runtime model suggests (§8).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "share.h"

#define MAX_RESERVATION (128 * AM_GiB)
#define HOST_POOL_SIZE AM_TiB
#define PHYSICAL_BASE ((uint64_t)0x4A0000000000)
/* Offsets in a pool start here: am_space hands out 0 for "none". */
#define POOL_BASE AM_GiB
#define HOST_POOL (AM_MAX_DEVICES)

enum { LOCATION_HOST = 0, LOCATION_DEVICE = 1, LOCATION_UNREGISTERED = 2, LOCATION_MANAGED = 3,
       LOCATION_HOST_NUMA = 4 };

struct am_physical {
    struct am_node node; /* key: the handle */
    uint64_t size, offset;
    aclrtPhysicalMemProp prop;
    int device; /* -1: host memory */
    uint32_t kind; /* the page pool: normal, huge or giant */
    uint32_t mappings;
    bool freed;
    uint64_t exported;      /* its shareable handle, 0 if none */
    uint64_t imported_from; /* the shareable handle it was imported from, 0 if none */
    int import_fd;          /* for an import: its descriptor of the exporter's memfd */
    struct am_physical *next_shared; /* in still_shared */
};

/* Exported memory its exporter freed while another process still held it: out of the
 * handle tree, its pool range still taken until the last holder lets go. */
static struct am_physical *still_shared;
#define MAX_PIDS 65535
/* Fresh shareable numbers an export tries before giving up (docs/fidelity.md row 55). */
#define SHAREABLE_TRIES 16

struct am_mapping {
    struct am_node node; /* key: the address, len: the size */
    struct am_physical *physical;
    uint64_t serial;
    uint32_t queued;
};

struct am_reservation {
    struct am_node node; /* key: the base, len: the span (whole 2 MiB pages) */
    uint64_t size;
    struct am_node *mappings;
    bool bound; /* a mapping fixed the device its handles must be on */
    int bound_device;
};

/* ---- attributes -------------------------------------------------------------------------- */

static bool attr_in(uint32_t attr, const uint32_t *set, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (set[i] == attr)
            return true;
    return false;
}

static const uint32_t supported_attrs[] = {2, 3, 4, 5, 6, 7, 10, 12, 13, 14, 15, 16, 17};
static const uint32_t host_only_attrs[] = {2, 3, 6, 7};
static const uint32_t giant_attrs[] = {10, 14, 17};
static const uint32_t normal_pool_attrs[] = {12, 15};
/* What 8.5.0's aclrtMemGetAllocationGranularity takes; the device memory 8.5.0's
 * aclrtMemGetAllocationPropertiesFromHandle describes. */
static const uint32_t granularity_850_attrs[] = {4, 5, 10};
static const uint32_t hbm_attrs[] = {4, 5, 10, 12, 13, 14};
#define COUNT(array) (sizeof array / sizeof array[0])

static uint32_t page_kind(uint32_t attr)
{
    if (attr_in(attr, giant_attrs, COUNT(giant_attrs)))
        return (uint32_t)AM_GIANT_PAGE;
    return attr_in(attr, normal_pool_attrs, COUNT(normal_pool_attrs)) ? (uint32_t)AM_NORMAL_PAGE
                                                                       : (uint32_t)AM_HUGE_PAGE;
}

static uint64_t granularity_of(uint32_t attr)
{
    return attr_in(attr, giant_attrs, COUNT(giant_attrs)) ? AM_GIANT_PAGE : AM_HUGE_PAGE;
}

static bool valid_device(uint32_t id)
{
    return id < (uint32_t)am.device_count;
}

/* Steps 7-9 of §4.3 (the ACL layer), then the device id (the runtime). */
static aclError check_prop(const aclrtPhysicalMemProp *prop, bool allocating)
{
    uint32_t location = (uint32_t)prop->location.type, attr = (uint32_t)prop->memAttr;
    if (location == LOCATION_UNREGISTERED)
        return AM_INVALID_PARAM;
    if (allocating && location == LOCATION_MANAGED && am.cann->physical_rejects_managed)
        return AM_INVALID_PARAM;
    if (location == LOCATION_DEVICE && attr_in(attr, host_only_attrs, COUNT(host_only_attrs)))
        return AM_INVALID_PARAM;
    if (!attr_in(attr, supported_attrs, COUNT(supported_attrs)))
        return AM_INVALID_PARAM;
    if (location == LOCATION_DEVICE && !valid_device(prop->location.id))
        return AM_INVALID_DEVICEID;
    return AM_SUCCESS;
}

/* ---- the window, pools and lookups --------------------------------------------------------- */

static bool window_ready(void)
{
    if (!am.vmm_ready) {
        am_space_init(&am.vmm_space, AM_VMM_BASE, AM_VMM_END - AM_VMM_BASE);
        am.vmm_ready = am.vmm_space.free != NULL;
    }
    return am.vmm_ready;
}

static int pool_fd(int device)
{
    int slot = device < 0 ? HOST_POOL : device;
    if (am.pool_fd[slot] != 0)
        return am.pool_fd[slot] - 1;
    uint64_t size = device < 0 ? HOST_POOL_SIZE : am.capacity;
    char name[32];
    snprintf(name, sizeof name, "acl_mem_fake_%s%d", device < 0 ? "host" : "dev",
             device < 0 ? 0 : device);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)(POOL_BASE + size)) != 0) {
        close(fd);
        return -1;
    }
    am_space_init(&am.pool_space[slot], POOL_BASE, size);
    if (am.pool_space[slot].free == NULL) {
        close(fd);
        return -1;
    }
    am.pool_fd[slot] = fd + 1; /* 0 is "none": descriptor 0 is a descriptor too */
    return fd;
}

static struct am_reservation *reservation_of(uint64_t address)
{
    struct am_node *node = am_tree_floor(am.reservations, address);
    return node != NULL && address - node->key < node->len ? (struct am_reservation *)node : NULL;
}

static struct am_mapping *mapping_in(struct am_reservation *reservation, uint64_t address)
{
    return (struct am_mapping *)am_tree_containing(reservation->mappings, address);
}

static struct am_mapping *mapping_at(uint64_t address)
{
    struct am_reservation *reservation = reservation_of(address);
    return reservation == NULL ? NULL : mapping_in(reservation, address);
}

static struct am_physical *physical_of(uint64_t handle)
{
    return (struct am_physical *)am_tree_find(am.physicals, handle);
}

bool am_vmm_find(uint64_t address, uint64_t count, struct am_located *found)
{
    struct am_reservation *reservation = reservation_of(address);
    if (reservation == NULL || address + count < address)
        return false;
    struct am_mapping *mapping = mapping_in(reservation, address);
    if (mapping == NULL)
        return false;
    struct am_mapping *last = mapping;
    while (last->node.key + last->node.len < address + count) {
        last = (struct am_mapping *)am_tree_find(reservation->mappings,
                                                 last->node.key + last->node.len);
        if (last == NULL)
            return false;
    }
    int device = mapping->physical->device;
    found->where = device >= 0 ? AM_ON_DEVICE : AM_PINNED_HOST;
    found->host = (unsigned char *)(uintptr_t)(address + am.mirror_offset);
    found->device = device;
    found->block = NULL;
    found->mapping_start = mapping->node.key;
    return true;
}

size_t am_vmm_targets(uint64_t address, uint64_t count, uint64_t (*out)[2], size_t max)
{
    struct am_reservation *reservation = reservation_of(address);
    size_t taken = 0;
    for (struct am_mapping *mapping = reservation == NULL ? NULL : mapping_in(reservation, address);
         mapping != NULL && mapping->node.key < address + count && taken < max;
         mapping = (struct am_mapping *)am_tree_find(reservation->mappings,
                                                     mapping->node.key + mapping->node.len)) {
        out[taken][0] = mapping->node.key;
        out[taken][1] = mapping->serial;
        taken++;
    }
    return taken;
}

bool am_vmm_live(uint64_t address, uint64_t serial)
{
    struct am_mapping *mapping = mapping_at(address);
    return mapping != NULL && mapping->node.key == address && mapping->serial == serial;
}

bool am_vmm_range(uint64_t address, uint64_t *start, uint64_t *size, int *device,
                  uint32_t *page)
{
    struct am_mapping *mapping = mapping_at(address);
    if (mapping == NULL)
        return false;
    *start = mapping->node.key;
    *size = mapping->node.len;
    *device = mapping->physical->device;
    *page = (uint32_t)granularity_of((uint32_t)mapping->physical->prop.memAttr);
    return true;
}

static void each_node(struct am_node *node, void (*visit)(struct am_node *, void *),
                      void *context)
{
    for (struct am_node *at = am_tree_after(node, 0); at != NULL; at = am_tree_after(node, at->key))
        visit(at, context);
}

struct each {
    void (*visit)(const struct am_held *, void *);
    void *context;
};

static void visit_reservation(struct am_node *node, void *context)
{
    struct each *each = context;
    struct am_reservation *reservation = (struct am_reservation *)node;
    struct am_held held = {"aclrtReserveMemAddress", node->key, reservation->size, -1, NULL,
                           true, 0, 0};
    each->visit(&held, each->context);
}

static void visit_physical(struct am_node *node, void *context)
{
    struct each *each = context;
    struct am_physical *physical = (struct am_physical *)node;
    if (physical->freed)
        return;
    struct am_held held = {physical->imported_from != 0 ? "aclrtMemImportFromShareableHandle"
                                                        : "aclrtMallocPhysical",
                           node->key, physical->size, physical->device, NULL, true,
                           physical->size, physical->kind};
    each->visit(&held, each->context);
}

static void visit_mapping(struct am_node *node, void *context)
{
    struct each *each = context;
    struct am_mapping *mapping = (struct am_mapping *)node;
    struct am_held held = {"aclrtMapMem", node->key, node->len, mapping->physical->device, NULL,
                           true, 0, 0};
    each->visit(&held, each->context);
}

static void visit_mappings_of(struct am_node *node, void *context)
{
    each_node(((struct am_reservation *)node)->mappings, visit_mapping, context);
}

void am_vmm_each(void (*visit)(const struct am_held *, void *), void *context)
{
    struct each each = {visit, context};
    each_node(am.reservations, visit_reservation, &each);
    each_node(am.physicals, visit_physical, &each);
    each_node(am.reservations, visit_mappings_of, &each);
}

/* ---- releasing ------------------------------------------------------------------------------ */

static void unmap_mirror(uint64_t va, uint64_t size)
{
    /* The reserved placeholder goes back over the mirror. */
    mmap((void *)(uintptr_t)(va + am.mirror_offset), size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

static void return_to_pools(struct am_physical *physical)
{
    int slot = physical->device < 0 ? HOST_POOL : physical->device;
    if (am.pool_fd[slot] != 0) {
        fallocate(am.pool_fd[slot] - 1, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)physical->offset, (off_t)physical->size);
        am_space_give(&am.pool_space[slot], physical->offset, physical->size);
    }
    if (physical->device >= 0) {
        struct am_device *device = &am.devices[physical->device];
        uint64_t *used = physical->kind == AM_NORMAL_PAGE ? &device->normal_used
                                                          : &device->huge_used;
        uint64_t *held = physical->kind == AM_NORMAL_PAGE ? &device->normal_physical
                                                          : &device->huge_physical;
        *used = *used >= physical->size ? *used - physical->size : 0;
        *held = *held >= physical->size ? *held - physical->size : 0;
    }
}

static void release_physical(struct am_physical *physical)
{
    am_tree_remove(&am.physicals, physical->node.key);
    if (physical->imported_from != 0) {
        am_share_release(physical->imported_from, physical->import_fd, physical->offset,
                         physical->size);
        close(physical->import_fd);
    } else if (physical->exported != 0 && !am_share_release_owner(physical->exported)) {
        /* Another process still holds it: the range stays taken until the last holder
         * lets go (docs/runtime-model.md §4.3); reap_shared() asks again. */
        physical->next_shared = still_shared;
        still_shared = physical;
        return;
    } else {
        return_to_pools(physical);
    }
    free(physical);
}

/* Give back exported memory whose importers have freed it or died meanwhile. */
static void reap_shared(void)
{
    if (still_shared == NULL)
        return;
    for (struct am_physical **link = &still_shared; *link != NULL;) {
        struct am_physical *physical = *link;
        if (!am_share_release_owner(physical->exported)) {
            link = &physical->next_shared;
            continue;
        }
        *link = physical->next_shared;
        return_to_pools(physical); /* a killed importer never punched its pages out */
        free(physical);
    }
}

/* The last unmap of freed memory releases it. */
static void release_if_unmapped(struct am_physical *physical)
{
    if (physical->freed && physical->mappings == 0)
        release_physical(physical);
}

static void free_mapping(struct am_node *node)
{
    struct am_mapping *mapping = (struct am_mapping *)node;
    unmap_mirror(mapping->node.key, mapping->node.len);
    free(mapping);
}

static void free_reservation(struct am_node *node)
{
    struct am_reservation *reservation = (struct am_reservation *)node;
    am_tree_clear(&reservation->mappings, free_mapping);
    free(reservation);
}

static void free_node(struct am_node *node)
{
    free(node);
}

/* A forked child: the parent's records are the parent's; only our descriptors go. */
static void free_forgotten(struct am_node *node)
{
    struct am_physical *physical = (struct am_physical *)node;
    if (physical->imported_from != 0)
        close(physical->import_fd);
    free(node);
}

/* A reset: this process lets go of what it shared, as if it had freed it. */
static void let_go(struct am_node *node)
{
    struct am_physical *physical = (struct am_physical *)node;
    if (physical->imported_from != 0)
        am_share_release(physical->imported_from, physical->import_fd, physical->offset,
                         physical->size);
    else if (physical->exported != 0)
        am_share_release_owner(physical->exported);
    free_forgotten(node);
}

void am_vmm_clear(bool in_child)
{
    am_check_forget(AM_VMM_BASE, AM_VMM_END - AM_VMM_BASE); /* segments of the mappings */
    am_tree_clear(&am.reservations, free_reservation);
    am_tree_clear(&am.physicals, in_child ? free_forgotten : let_go);
    while (still_shared != NULL) {
        struct am_physical *physical = still_shared;
        still_shared = physical->next_shared;
        if (!in_child)
            am_share_release_owner(physical->exported);
        free(physical);
    }
    for (int slot = 0; slot <= HOST_POOL; slot++) {
        if (am.pool_fd[slot] != 0) {
            close(am.pool_fd[slot] - 1);
            am_tree_clear(&am.pool_space[slot].free, free_node);
        }
        am.pool_fd[slot] = 0;
    }
    if (am.vmm_ready)
        am_tree_clear(&am.vmm_space.free, free_node);
    am.vmm_ready = false;
    for (int i = 0; i < AM_MAX_DEVICES; i++) {
        struct am_device *device = &am.devices[i];
        device->normal_used -= device->normal_used >= device->normal_physical
                                   ? device->normal_physical : device->normal_used;
        device->huge_used -= device->huge_used >= device->huge_physical
                                 ? device->huge_physical : device->huge_used;
        device->normal_physical = device->huge_physical = 0;
    }
}

void am_vmm_reap_shared(void)
{
    reap_shared();
}

/* ---- reservations (§4.2) --------------------------------------------------------------------- */

/* "Asked to reserve 2 GiB of", the start of the address-space hint. */
static struct am_phrase reserve_text(uint64_t size)
{
    struct am_phrase out;
    snprintf(out.text, sizeof out.text, "Asked to reserve %s of", am_human(size).text);
    return out;
}

static uint64_t fixed_alignment(uint64_t size)
{
    if (size > 512 * AM_MiB)
        return AM_GIANT_PAGE;
    uint64_t power = 1;
    while (power < size)
        power <<= 1;
    return power < AM_HUGE_PAGE ? AM_HUGE_PAGE : power;
}

aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr,
                                uint64_t flags)
{
    AM_ARGS(aclrtReserveMemAddress);
    static const char *const call = "aclrtReserveMemAddress";
    ENTER(call);
    if (virPtr == NULL || size == 0 || flags > 1)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "virPtr is NULL, size is 0 or "
                                   "flags %llu is not 0 or 1", (unsigned long long)flags));
    if (alignment != 0)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "alignment %zu: only 0 is "
                                   "supported", alignment));
    if (size > MAX_RESERVATION)
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "%s is more than one "
                                   "reservation may hold (128 GiB)", am_human(size).text));
    uint64_t span = ((uint64_t)size + AM_HUGE_PAGE - 1) / AM_HUGE_PAGE * AM_HUGE_PAGE;
    uint64_t wanted = (uintptr_t)expectPtr, base = 0;
    aclError fault = am_fault(call);
    if (fault != AM_SUCCESS)
        return unlock_with(am_fail(fault, call, "a failure planned by acl_mem_fake_inject_fault"));
    if (!window_ready())
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "out of host memory"));
    if (wanted != 0) {
        if (!am.profile->dvpp && am.profile->padding == 0)
            return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, call, "%s takes no expectPtr: "
                                       "pass NULL", am.profile->soc_name));
        if (wanted % fixed_alignment(size) != 0)
            return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "expectPtr %p is not "
                                       "aligned to %llu bytes", expectPtr,
                                       (unsigned long long)fixed_alignment(size)));
        if (wanted < AM_VMM_BASE || wanted > AM_VMM_END || AM_VMM_END - wanted < size ||
            !am_space_take_at(&am.vmm_space, wanted, span))
            return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "expectPtr %p + %zu bytes "
                                       "is not free reservation space", expectPtr, size));
        base = wanted;
    } else {
        base = am_space_take(&am.vmm_space, span, size >= AM_GIANT_PAGE ? AM_GIANT_PAGE
                                                                         : AM_HUGE_PAGE);
        if (base == 0)
            return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, AM_HINT_ADDRESS_SPACE,
                                       reserve_text(size).text, ""));
    }
    struct am_reservation *reservation = calloc(1, sizeof *reservation);
    if (reservation == NULL) {
        am_space_give(&am.vmm_space, base, span);
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "out of host memory"));
    }
    reservation->node.key = base;
    reservation->node.len = span;
    reservation->size = size;
    am_tree_insert(&am.reservations, &reservation->node);
    *virPtr = (void *)(uintptr_t)base;
    return unlock_with(AM_SUCCESS);
}

aclError aclrtReleaseMemAddress(void *virPtr)
{
    AM_ARGS(aclrtReleaseMemAddress);
    static const char *const call = "aclrtReleaseMemAddress";
    ENTER(call);
    if (virPtr == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "virPtr is NULL"));
    struct am_reservation *reservation =
        (struct am_reservation *)am_tree_find(am.reservations, (uintptr_t)virPtr);
    if (reservation == NULL || reservation->mappings != NULL)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call,
                                   AM_HINT_RELEASE_RESERVATION));
    am_tree_remove(&am.reservations, reservation->node.key);
    am_space_give(&am.vmm_space, reservation->node.key, reservation->node.len);
    free(reservation);
    return unlock_with(AM_SUCCESS);
}

/* ---- physical memory (§4.3, §4.5) -------------------------------------------------------------- */

aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size,
                             const aclrtPhysicalMemProp *prop, uint64_t flags)
{
    AM_ARGS(aclrtMallocPhysical);
    static const char *const call = "aclrtMallocPhysical";
    ENTER(call);
    if (handle == NULL || prop == NULL || size == 0 || flags != 0)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "handle or prop is NULL, size is 0 "
                                   "or flags is not 0"));
    if (prop->handleType != 0 || prop->allocationType != 0)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "handleType and allocationType "
                                   "must be 0"));
    aclError refused = check_prop(prop, true);
    if (refused != AM_SUCCESS)
        return unlock_with(am_fail(refused, call, "prop: location type %d id %u, memAttr %d "
                                   "is not memory this call allocates",
                                   (int)prop->location.type, prop->location.id,
                                   (int)prop->memAttr));
    uint32_t location = (uint32_t)prop->location.type;
    if (location == LOCATION_HOST_NUMA)
        return unlock_with(am_current_device() == NULL
            ? am_fail(AM_CONTEXT_NULL, call, AM_NO_CONTEXT, "this thread")
            : am_fail(AM_FEATURE_NOT_SUPPORT, call, "host NUMA memory is not supported"));
    if (location != LOCATION_HOST && location != LOCATION_DEVICE)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "location type %u",
                                   location));
    aclError fault = am_fault(call);
    if (fault != AM_SUCCESS)
        return unlock_with(am_fail(fault, call, "a failure planned by acl_mem_fake_inject_fault"));
    reap_shared();
    uint32_t kind = page_kind((uint32_t)prop->memAttr);
    if (kind == AM_GIANT_PAGE && !am.profile->giant_pages)
        return unlock_with(am_fail(AM_FEATURE_NOT_SUPPORT, call, "1 GiB pages do not exist "
                                   "on %s", am.profile->soc_name));
    uint64_t granularity = granularity_of((uint32_t)prop->memAttr);
    if (size % granularity != 0)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, AM_HINT_GRANULARITY ": "
                                   AM_HINT_GRANULARITY_ROUND, am_human(granularity).text,
                                   (unsigned long long)size, (unsigned long long)
                                   ((size + granularity - 1) / granularity * granularity)));
    int device_id = location == LOCATION_DEVICE ? (int)prop->location.id : -1;
    struct am_device *device = device_id >= 0 ? &am.devices[device_id] : NULL;
    if (device != NULL) {
        uint64_t free_bytes = kind == AM_NORMAL_PAGE ? device->normal_total - device->normal_used
                                                     : device->huge_total - device->huge_used;
        if (kind == AM_GIANT_PAGE)
            free_bytes = free_bytes / AM_GIANT_PAGE * AM_GIANT_PAGE;
        if (size > free_bytes)
            return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "device %d has %llu bytes "
                                       "free in the pool memAttr %d uses", device_id,
                                       (unsigned long long)free_bytes, (int)prop->memAttr));
    }
    struct am_physical *physical = calloc(1, sizeof *physical);
    int fd = physical == NULL ? -1 : pool_fd(device_id);
    int slot = device_id < 0 ? HOST_POOL : device_id;
    uint64_t offset = fd < 0 ? 0 : am_space_take(&am.pool_space[slot], size, granularity);
    if (offset == 0) {
        free(physical);
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "no room for %zu bytes of "
                                   "physical memory", size));
    }
    if (device != NULL) {
        if (kind == AM_NORMAL_PAGE) {
            device->normal_used += size;
            device->normal_physical += size;
        } else {
            device->huge_used += size;
            device->huge_physical += size;
        }
    }
    am.physical_sequence++;
    physical->node.key = PHYSICAL_BASE + am.physical_sequence * AM_HANDLE_STEP;
    physical->size = size;
    physical->offset = offset;
    physical->prop = *prop;
    if (device_id < 0)
        physical->prop.location.id = 0;
    physical->device = device_id;
    physical->kind = kind;
    am_tree_insert(&am.physicals, &physical->node);
    *handle = (aclrtDrvMemHandle)(uintptr_t)physical->node.key;
    return unlock_with(AM_SUCCESS);
}

aclError aclrtFreePhysical(aclrtDrvMemHandle handle)
{
    AM_ARGS(aclrtFreePhysical);
    static const char *const call = "aclrtFreePhysical";
    ENTER(call);
    if (handle == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "handle is NULL"));
    struct am_physical *physical = physical_of((uintptr_t)handle);
    if (physical == NULL || physical->freed)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, AM_HINT_FREE_PHYSICAL));
    physical->freed = true; /* still mapped: it goes with its last mapping */
    release_if_unmapped(physical);
    return unlock_with(AM_SUCCESS);
}

aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
                                          aclrtMemGranularityOptions option, size_t *granularity)
{
    AM_ARGS(aclrtMemGetAllocationGranularity);
    static const char *const call = "aclrtMemGetAllocationGranularity";
    (void)option;
    ENTER(call);
    if (prop == NULL || granularity == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "prop or granularity is NULL"));
    uint32_t attr = (uint32_t)prop->memAttr;
    if (!am.cann->granularity_all_attrs) {
        /* 8.5.0: three device attributes, and location.id taken for a device id whatever
         * the location. */
        if (!attr_in(attr, granularity_850_attrs, COUNT(granularity_850_attrs)))
            return unlock_with(am_fail(AM_INVALID_PARAM, call, "memAttr %u is not one this "
                                       "release answers for", attr));
        if (!valid_device(prop->location.id))
            return unlock_with(am_fail(AM_INVALID_DEVICEID, call, "location.id %u is not a "
                                       "device", prop->location.id));
    } else {
        aclError refused = check_prop(prop, false);
        if (refused != AM_SUCCESS)
            return unlock_with(am_fail(refused, call, "prop: location type %d id %u, memAttr "
                                       "%u", (int)prop->location.type, prop->location.id,
                                       attr));
    }
    *granularity = (size_t)granularity_of(attr);
    return unlock_with(AM_SUCCESS);
}

/* ---- mappings (§4.4) ------------------------------------------------------------------------ */

aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
                     uint64_t flags)
{
    AM_ARGS(aclrtMapMem);
    static const char *const call = "aclrtMapMem";
    ENTER(call);
    uint64_t va = (uintptr_t)virPtr;
    if (va == 0 || handle == NULL || size == 0 || flags != 0)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "virPtr or handle is NULL, size is "
                                   "0 or flags is not 0"));
    struct am_physical *physical = physical_of((uintptr_t)handle);
    if (physical == NULL || physical->freed || offset != 0 || size != physical->size)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "handle %p is not live physical "
                                   "memory of %zu bytes, or offset %zu is not 0", handle, size,
                                   offset));
    struct am_reservation *reservation = reservation_of(va);
    uint64_t granularity = granularity_of((uint32_t)physical->prop.memAttr);
    if (reservation == NULL || va % granularity != 0 ||
        va + size > reservation->node.key + reservation->node.len)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "%p + %zu bytes is not inside one "
                                   "reservation at a multiple of %llu bytes", virPtr, size,
                                   (unsigned long long)granularity));
    struct am_node *before = am_tree_floor(reservation->mappings, va + size - 1);
    if (before != NULL && before->key + before->len > va)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "%p + %zu bytes overlaps a "
                                   "mapping", virPtr, size));
    if (reservation->bound && reservation->bound_device != physical->device)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "the reservation holds memory "
                                   "of another device already"));
    aclError fault = am_fault(call);
    if (fault != AM_SUCCESS)
        return unlock_with(am_fail(fault, call, "a failure planned by acl_mem_fake_inject_fault"));
    struct am_mapping *mapping = calloc(1, sizeof *mapping);
    int fd = physical->imported_from != 0 ? physical->import_fd : pool_fd(physical->device);
    void *want = (void *)(uintptr_t)(va + am.mirror_offset);
    if (mapping == NULL || fd < 0 || !am.mirror_reserved ||
        mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
             (off_t)physical->offset) != want) {
        free(mapping);
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "the host refused the mapping "
                                   "(address space: ulimit -v)"));
    }
    mapping->node.key = va;
    mapping->node.len = size;
    mapping->physical = physical;
    mapping->serial = ++am.mapping_serial;
    am_tree_insert(&reservation->mappings, &mapping->node);
    reservation->bound = true;
    reservation->bound_device = physical->device;
    physical->mappings++;
    return unlock_with(AM_SUCCESS);
}

aclError aclrtUnmapMem(void *virPtr)
{
    AM_ARGS(aclrtUnmapMem);
    static const char *const call = "aclrtUnmapMem";
    ENTER(call);
    uint64_t va = (uintptr_t)virPtr;
    if (va == 0)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "virPtr is NULL"));
    struct am_reservation *reservation = reservation_of(va);
    struct am_mapping *mapping = reservation == NULL ? NULL
        : (struct am_mapping *)am_tree_find(reservation->mappings, va);
    if (mapping == NULL)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, AM_HINT_UNMAP));
    if (acl_mem_fake_queued_work != 0) {
        char what[64];
        snprintf(what, sizeof what, "mapping %p unmapped", virPtr);
        am_check_queued(va, mapping->node.len, false, "free-while-queued", what);
    }
    struct am_physical *physical = mapping->physical;
    am_check_forget(va, mapping->node.len);
    am_tree_remove(&reservation->mappings, va);
    free_mapping(&mapping->node);
    if (reservation->mappings == NULL)
        reservation->bound = false;
    physical->mappings--;
    release_if_unmapped(physical);
    return unlock_with(am_hazard_result(AM_SUCCESS, call));
}

/* ---- access (§4.7) and handle queries (§4) ---------------------------------------------------- */

aclError aclrtMemSetAccess(void *virPtr, size_t size, aclrtMemAccessDesc *desc, size_t count)
{
    AM_ARGS(aclrtMemSetAccess);
    static const char *const call = "aclrtMemSetAccess";
    ENTER(call);
    if (virPtr == NULL || desc == NULL)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "virPtr or desc is NULL"));
    struct am_mapping *mapping = mapping_at((uintptr_t)virPtr);
    if (mapping == NULL || mapping->node.key != (uintptr_t)virPtr || mapping->node.len != size)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "%p + %zu bytes is not exactly "
                                   "one mapping", virPtr, size));
    for (size_t i = 0; i < count; i++) {
        const aclrtMemAccessDesc *entry = &desc[i];
        bool reserved_clear = true;
        for (size_t r = 0; r < sizeof entry->rsv; r++)
            reserved_clear = reserved_clear && entry->rsv[r] == 0;
        if ((uint32_t)entry->flags != 3 || (uint32_t)entry->location.type > 1 || !reserved_clear)
            return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "desc[%zu]: flags must be "
                                       "read-write (3), location host or device, rsv zero", i));
        if (entry->location.type == 1 && !valid_device(entry->location.id))
            return unlock_with(am_fail(AM_INVALID_DEVICEID, call, "desc[%zu]: %u is not a "
                                       "device", i, entry->location.id));
    }
    return unlock_with(AM_SUCCESS);
}

aclError aclrtMemRetainAllocationHandle(void *virPtr, aclrtDrvMemHandle *handle)
{
    AM_ARGS(aclrtMemRetainAllocationHandle);
    static const char *const call = "aclrtMemRetainAllocationHandle";
    ENTER(call);
    if (virPtr == NULL || (handle == NULL && am.cann->retain_checks_output))
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "virPtr or handle is NULL"));
    struct am_mapping *mapping = mapping_at((uintptr_t)virPtr);
    if (mapping == NULL || handle == NULL)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "%p is in no mapping", virPtr));
    *handle = (aclrtDrvMemHandle)(uintptr_t)mapping->physical->node.key;
    return unlock_with(AM_SUCCESS);
}

aclError aclrtMemGetAllocationPropertiesFromHandle(aclrtDrvMemHandle handle,
                                                   aclrtPhysicalMemProp *prop)
{
    AM_ARGS(aclrtMemGetAllocationPropertiesFromHandle);
    static const char *const call = "aclrtMemGetAllocationPropertiesFromHandle";
    ENTER(call);
    bool v2 = am.cann->properties_v2;
    if (handle == NULL || (prop == NULL && v2))
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "handle or prop is NULL"));
    struct am_physical *physical = physical_of((uintptr_t)handle);
    if (physical == NULL || prop == NULL)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "handle %p is not physical "
                                   "memory", handle));
    if (!v2 && ((uint32_t)physical->prop.location.type != LOCATION_DEVICE ||
                !attr_in((uint32_t)physical->prop.memAttr, hbm_attrs, COUNT(hbm_attrs))))
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "this release describes device "
                                   "HBM memory only"));
    *prop = physical->prop;
    return unlock_with(AM_SUCCESS);
}

/* ---- sharing between processes (§4.6) --------------------------------------------------------- */

aclError aclrtMemExportToShareableHandle(aclrtDrvMemHandle handle, aclrtMemHandleType handleType,
                                         uint64_t flags, uint64_t *shareableHandle)
{
    AM_ARGS(aclrtMemExportToShareableHandle);
    static const char *const call = "aclrtMemExportToShareableHandle";
    ENTER(call);
    if (handle == NULL || handleType != 0 || shareableHandle == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "handle or shareableHandle is NULL, "
                                   "or handleType %d is not 0", (int)handleType));
    if (flags > 1)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "flags %llu is not 0 or 1 "
                                   "(DISABLE_PID_VALIDATION)", (unsigned long long)flags));
    struct am_physical *physical = physical_of((uintptr_t)handle);
    if (physical == NULL || physical->freed || physical->exported != 0 ||
        physical->imported_from != 0 || physical->device < 0)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "handle %p is not live device "
                                   "memory of aclrtMallocPhysical that was not exported yet",
                                   handle));
    int fd = pool_fd(physical->device);
    struct stat info;
    if (fd < 0 || fstat(fd, &info) != 0)
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "the memory cannot be shared"));
    struct am_record record = {
        .owner = am_self_identity(), .fd = (uint64_t)fd, .dev = (uint64_t)info.st_dev,
        .ino = (uint64_t)info.st_ino, .offset = physical->offset, .size = physical->size,
        .device = (uint64_t)physical->device, .flags = flags,
        .mem_attr = (uint64_t)physical->prop.memAttr};
    struct am_why why;
    for (int i = 0; i < SHAREABLE_TRIES; i++) {
        uint64_t shareable = am_new_shareable();
        bool taken = false;
        aclError code = am_share_publish(shareable, &record, &taken, &why);
        if (code != AM_SUCCESS)
            return unlock_with(am_fail(code, call, "%s", why.text));
        if (!taken) {
            physical->exported = shareable;
            *shareableHandle = shareable;
            return unlock_with(AM_SUCCESS);
        }
    }
    return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "%d fresh shareable numbers were "
                               "all taken in the share directory", SHAREABLE_TRIES));
}

aclError aclrtMemSetPidToShareableHandle(uint64_t shareableHandle, int32_t *pid, size_t pidNum)
{
    AM_ARGS(aclrtMemSetPidToShareableHandle);
    static const char *const call = "aclrtMemSetPidToShareableHandle";
    ENTER(call);
    if (pid == NULL || pidNum == 0)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "pid is NULL or pidNum is 0"));
    if (pidNum > MAX_PIDS)
        return unlock_with(am_fail(AM_RT_PARAM_INVALID, call, "pidNum %zu is more than %d",
                                   pidNum, MAX_PIDS));
    struct am_why why;
    aclError code = am_share_allow(shareableHandle, pid, pidNum, &why);
    return unlock_with(code == AM_SUCCESS ? code : am_fail(code, call, "%s", why.text));
}

aclError aclrtMemImportFromShareableHandle(uint64_t shareableHandle, int32_t deviceId,
                                           aclrtDrvMemHandle *handle)
{
    AM_ARGS(aclrtMemImportFromShareableHandle);
    static const char *const call = "aclrtMemImportFromShareableHandle";
    ENTER(call);
    if (handle == NULL)
        return unlock_with(am_fail(AM_INVALID_PARAM, call, "handle is NULL"));
    if (deviceId < 0 || !valid_device((uint32_t)deviceId))
        return unlock_with(am_fail(AM_INVALID_DEVICEID, call, AM_HINT_DEVICE_IDS,
                                   am.device_count - 1, am.device_count));
    struct am_physical *physical = calloc(1, sizeof *physical);
    if (physical == NULL)
        return unlock_with(am_fail(AM_MEMORY_ALLOCATION, call, "out of host memory"));
    struct am_record record = {0};
    struct am_why why;
    int fd = -1;
    aclError code = am_share_acquire(shareableHandle, &fd, &record, &why);
    if (code != AM_SUCCESS) {
        free(physical);
        return unlock_with(am_fail(code, call, "%s", why.text));
    }
    am.physical_sequence++;
    physical->node.key = PHYSICAL_BASE + am.physical_sequence * AM_HANDLE_STEP;
    physical->size = record.size;
    physical->offset = record.offset;
    physical->prop.handleType = 0;
    physical->prop.allocationType = 0;
    physical->prop.memAttr = (aclrtMemAttr)record.mem_attr;
    physical->prop.location.type = (aclrtMemLocationType)LOCATION_DEVICE;
    physical->prop.location.id = (uint32_t)deviceId;
    physical->device = deviceId;
    physical->kind = page_kind((uint32_t)record.mem_attr);
    physical->imported_from = shareableHandle;
    physical->import_fd = fd;
    am_record_free(&record);
    am_tree_insert(&am.physicals, &physical->node);
    *handle = (aclrtDrvMemHandle)(uintptr_t)physical->node.key;
    return unlock_with(AM_SUCCESS);
}
