/* acl_mem's fake libascendcl: the control API beside the ACL calls.
 *
 * A C or C++ program linked against the fake needs none of this: the ACL calls behave
 * as on an Atlas host. These functions let a test pick the device and release the fake
 * plays and start over between cases. Each returns 0, or 100000 for an argument it
 * refuses (nothing is changed then).
 */
#ifndef ACL_MEM_FAKE_H
#define ACL_MEM_FAKE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACL_MEM_FAKE_API __attribute__((visibility("default")))

/* What the fake plays now. */
struct acl_mem_fake_description {
    char profile[32];
    char soc_name[32];
    char cann[16];
    /* Why a setting (ACL_MEM_FAKE_PROFILE, ACL_MEM_FAKE_CANN) could not be used; "" if
     * none. While it is set every ACL call fails with 507000 and says so. */
    char setting_error[256];
    int32_t device_count;
    uint64_t capacity; /* bytes per device */
    int32_t address_space_reserved; /* device addresses can never be host addresses */
    /* Freed pinned blocks kept mapped (emptied) for a while, and their bytes. */
    uint32_t pinned_kept;
    uint64_t pinned_kept_bytes;
};

/* Forget every device, context, allocation and aclInit, as a new process would; the
 * settings are read again from the environment unless configure() chose them. */
ACL_MEM_FAKE_API int acl_mem_fake_reset(void);

/* Play `profile` (a profile name or SoC family) and `cann` ("8.5.0", "9.0.1", "9.1.0"),
 * NULL for the environment's choice (ACL_MEM_FAKE_PROFILE, ACL_MEM_FAKE_CANN) or the
 * default; device_count 0 and capacity 0 keep the profile's. Then reset(). */
ACL_MEM_FAKE_API int acl_mem_fake_configure(const char *profile, const char *cann,
                                            int device_count, uint64_t capacity);

/* The calling thread starts over with no current device or context, as a new thread
 * would (a trace replay runs many recorded threads, one after another, in one thread). */
ACL_MEM_FAKE_API int acl_mem_fake_forget_thread(void);

ACL_MEM_FAKE_API int acl_mem_fake_describe(struct acl_mem_fake_description *out);

/* The reason every call fails, or NULL when the settings are usable. */
ACL_MEM_FAKE_API const char *acl_mem_fake_setting_error(void);

/* Hazards, races with queued work (a free, copy or reset while a stream still has work
 * on that memory): always counted. `mode` "warn" writes each to stderr, "raise" also
 * fails the call that found it with 507000 once its effect is done, "count" only
 * counts; NULL goes back to ACL_MEM_HAZARDS (default "warn"). With queue_findings
 * non-zero they are queued for acl_mem_fake_next_finding instead (a binding that
 * reports them itself), whatever the mode. */
ACL_MEM_FAKE_API int acl_mem_fake_set_hazards(const char *mode, int queue_findings);

/* The host touches [start, start + size) itself (a binding reading or writing pinned host
 * memory through a view, not through a call): a hazard ("access-before-synchronize",
 * reported as the others are) when queued work writes there, or for a write (`write`
 * non-zero) when queued work reads or writes there. `write` 2 says the binding gives the
 * range to other use (a pool segment freed inside its block): "free-while-queued" when
 * queued work reads or writes there. `what` names the access in the report. 100000 for
 * NULL `what` or a range past the end of the address space. */
ACL_MEM_FAKE_API int acl_mem_fake_host_access(uint64_t start, uint64_t size, int write,
                                              const char *what);

/* Hazards and checker findings of `kind` counted since the last reset, or of every kind
 * for NULL. */
ACL_MEM_FAKE_API unsigned long acl_mem_fake_hazard_count(const char *kind);

/* Findings queued and not yet taken (a dropped count counts one): a binding reads this
 * (an atomic or volatile load) after each call and drains only when it is non-zero. */
extern ACL_MEM_FAKE_API unsigned long acl_mem_fake_findings_waiting;

/* Copies and memsets queued on any stream and not yet run: a binding about to touch host
 * memory itself (acl_mem_fake_host_access) may skip the call while this reads 0. */
extern ACL_MEM_FAKE_API unsigned long acl_mem_fake_queued_work;

/* Take the oldest queued finding: its kind and text (cut to fit), 1; 0 when none is
 * left, -100000 for NULL or empty buffers. When more were found than the queue holds,
 * the last one taken has kind "dropped" and says how many. */
ACL_MEM_FAKE_API int acl_mem_fake_next_finding(char *kind, size_t kind_size, char *text,
                                               size_t text_size);

/* The same, and the thread whose call made the finding (its pthread_self()) in *thread:
 * a binding with threads of its own reports each finding in the thread that made it. */
ACL_MEM_FAKE_API int acl_mem_fake_next_finding_of(char *kind, size_t kind_size, char *text,
                                                  size_t text_size, unsigned long *thread);

/* A block still allocated: what made it, where, and the return address of that call
 * (in the program or library that called; NULL when unknown). */
struct acl_mem_fake_leak {
    uint64_t address;
    uint64_t size; /* bytes asked for */
    int32_t device; /* -1: pinned host memory, a reservation, host physical memory */
    char api[40];   /* "aclrtMalloc", "aclrtMallocHost", "aclrtMapMem", ... */
    const void *caller;
    uint64_t extent;    /* bytes it takes of its page pool, padding included; 0: none */
    uint32_t page_size; /* of those bytes (4 KiB, 2 MiB, 1 GiB); 0 when it takes none */
};

/* What is still held: device blocks by device and address, pinned host blocks, then
 * virtual memory (aclrtReserveMemAddress, aclrtMallocPhysical not freed, aclrtMapMem;
 * caller NULL): fills at most `max` entries of `out` and returns how many there are.
 * ACL_MEM_LEAK_REPORT=1 prints the same list on stderr when the program exits. */
ACL_MEM_FAKE_API size_t acl_mem_fake_leaks(struct acl_mem_fake_leak *out, size_t max);

/* Whether ACL_MEM_LEAK_REPORT=1 prints the leak report when the program exits: a binding
 * that prints its own (acl_mem in Python, with Python stacks) turns it off. */
ACL_MEM_FAKE_API int acl_mem_fake_set_leak_report(int on);

/* Make the `nth` next call of `call` that passes its argument checks fail with `code`,
 * once, as the driver would (out of memory: 207001). `call` is one of aclrtMalloc,
 * aclrtMallocAlign32, aclrtMallocCached, aclrtMallocHost, aclrtReserveMemAddress,
 * aclrtMallocPhysical, aclrtMapMem; a new plan for a call replaces its old one; reset()
 * forgets every plan. 100000 for another call, nth 0 or code 0. */
ACL_MEM_FAKE_API int acl_mem_fake_inject_fault(const char *call, uint32_t nth, int32_t code);

/* The memory checker: 1 on, 0 off, -1 back to ACL_MEM_CHECK. With it on, blocks get
 * canaries after their requested bytes (verified at free, at synchronisations and by
 * acl_mem_fake_check) and poison at allocation, and copies or memsets running past a
 * block's requested size are reported ("boundary-crossed"); findings are reported as
 * hazards are (acl_mem_fake_set_hazards), and counted by acl_mem_fake_hazard_count. */
ACL_MEM_FAKE_API int acl_mem_fake_set_check(int on);

/* A binding's pool carved [start, start + size) out of block `parent` for `requested`
 * bytes, or gave the segment at `start` back. With the checker on, a segment gets
 * canaries and poison like a block, a copy past its requested bytes is reported, and a
 * freed segment is poisoned: any copy touching it is a use after free. Nothing happens
 * with the checker off. 100000 for requested > size. */
ACL_MEM_FAKE_API int acl_mem_fake_segment_allocated(uint64_t parent, uint64_t start,
                                                    uint64_t requested, uint64_t size);
ACL_MEM_FAKE_API int acl_mem_fake_segment_freed(uint64_t start);

/* Verify every live block's and segment's canaries and the poison of freed pinned memory
 * now: how many findings that made. */
ACL_MEM_FAKE_API unsigned long acl_mem_fake_check(void);

/* Whether this process's calls are recorded into ACL_MEM_TRACE (docs/trace-format.md):
 * a C program's are, when the variable is set; a binding that records them itself (acl_mem
 * in Python) turns this off before its first call, so that nothing is written twice. */
ACL_MEM_FAKE_API int acl_mem_fake_set_trace(int on);

/* Capture, for a binding that writes the trace file itself (acl_mem in Python): while on,
 * each traced call whose inputs are numbers leaves a record of fixed-size numbers here
 * (laid out in trace.c, read by acl_mem/trace/_lines.py), whichever thread made it; off
 * drops what was not taken. Calls a thread makes between quiet(1) and quiet(0) are not
 * captured (the binding's own queries). A forked child starts with nothing captured. */
ACL_MEM_FAKE_API int acl_mem_fake_trace_capture(int on);
ACL_MEM_FAKE_API int acl_mem_fake_trace_quiet(int on);
/* Move the oldest whole records, at most `capacity` bytes, to `out`: the bytes moved.
 * `*lost` (if not NULL) gets the records dropped since the last take (64 MiB waiting). */
ACL_MEM_FAKE_API size_t acl_mem_fake_trace_take(void *out, size_t capacity,
                                                unsigned long *lost);
/* Bytes of captured records waiting: a binding reads this before each take. */
extern ACL_MEM_FAKE_API unsigned long acl_mem_fake_captured_bytes;
/* The trace lines (docs/trace-format.md) of taken records, for the binding's writer:
 * times less `t0`; a thread is numbered by its place in `threads` (number = index + 1).
 * Stops before a line that might not fit `capacity`, before the first call of a thread
 * not in the table (added at its end if there is room: `*thread_count` grows, and the
 * caller writes the thread's line and calls again), or before bytes that are not a whole
 * record of a captured call: the bytes of text written, with `*used` the bytes of records
 * done; -1 when the first record is not one (or for NULL arguments). */
ACL_MEM_FAKE_API long acl_mem_fake_trace_lines(const void *records, size_t size, size_t *used,
                                               int64_t t0, uint64_t *threads,
                                               uint32_t *thread_count,
                                               uint32_t thread_capacity, char *out,
                                               size_t capacity);

/* Where the default share directories are looked for (docs/fidelity.md row 52): the
 * world-writable parent ("/dev/shm"), the parent of the users' runtime directories
 * ("/run/user") and the home directory (from the password database); NULL restores each
 * default. For tests and sandboxes; ACL_MEM_FAKE_SHARE_DIR, when set, wins over all three.
 * 100000 for a path that is not absolute or too long. */
ACL_MEM_FAKE_API int acl_mem_fake_share_places(const char *shm, const char *run_user,
                                               const char *home);

/* Whether share records are written through unnamed files (O_TMPFILE) where the file
 * system has them (on, the default); off, they are written into named temporary files and
 * linked, as on a file system without unnamed files. For tests of that path. */
ACL_MEM_FAKE_API int acl_mem_fake_share_unnamed_files(int on);

#ifdef __cplusplus
}
#endif

#endif
