/* Sharing physical memory between processes (docs/runtime-model.md §4.6; docs/fidelity.md
 * rows 50, 52, 55 to 57).
 *
 * An export writes a record into the user's share directory; an importer reads it and
 * opens the exporter's memfd through /proc/<pid>/fd. Every process on acl_mem's library
 * (a C program, Python on the fake backend, another build of the library) keeps the same
 * records in the same directory, so they share memory with each other and keep the
 * directory tidy for each other.
 *
 * share_dir.c chooses and checks the directory, share_record.c reads and writes one
 * record, share_registry.c does the read-modify-write of each call under the lock.
 * Nothing here takes the engine lock: vmm.c calls in with it held.
 */
#ifndef ACL_MEM_SHARE_H
#define ACL_MEM_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* Why a share call failed, for am_fail: filled by whoever refuses. */
struct am_why {
    char text[400];
};

AM_HIDDEN void am_why_set(struct am_why *why, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- share_dir.c ------------------------------------------------------------------------ */

/* A descriptor of the directory to share through now (its path in `path`), or -1 with
 * the reason in `why` (the calls then fail with 507000). */
AM_HIDDEN int am_share_directory(char *path, size_t path_size, struct am_why *why);

/* ---- share_record.c --------------------------------------------------------------------- */

/* A process: its pid and its start time (field 22 of /proc/<pid>/stat), so that a pid
 * reused by a later process is never taken for the one meant. */
struct am_identity {
    int64_t pid;
    uint64_t start;
};

/* One whitelisted pid: the process that ran under it when it was whitelisted (exact),
 * or, when none ran, any process started under it at or after `start`. */
struct am_allowed {
    int64_t pid;
    uint64_t start;
    bool exact;
};

struct am_record {
    struct am_identity owner;
    uint64_t fd, dev, ino, offset, size, device, flags, mem_attr;
    struct am_allowed *allowed;
    size_t allowed_count;
    struct am_identity *holders;
    size_t holder_count;
    bool owner_freed;
};

#define AM_SHARE_MAGIC "acl_mem fake share record 2\n"
#define AM_SHARE_MAX_RECORD ((size_t)4 << 20)

AM_HIDDEN bool am_identity_of(int64_t pid, struct am_identity *out);
AM_HIDDEN struct am_identity am_self_identity(void);
AM_HIDDEN bool am_is_alive(struct am_identity who);
AM_HIDDEN bool am_same_identity(struct am_identity a, struct am_identity b);

AM_HIDDEN void am_record_free(struct am_record *record);
/* Whether `who` may import under the whitelist. */
AM_HIDDEN bool am_record_admits(const struct am_record *record, struct am_identity who);
/* Whitelist `pids` as they run now; false when out of memory (nothing changed). */
AM_HIDDEN bool am_record_allow(struct am_record *record, const int32_t *pids, size_t count);
AM_HIDDEN bool am_record_add_holder(struct am_record *record, struct am_identity who);
AM_HIDDEN void am_record_remove_holder(struct am_record *record, struct am_identity who);
/* Forget holders that no longer run; true if any went. */
AM_HIDDEN bool am_record_drop_dead_holders(struct am_record *record);
AM_HIDDEN bool am_record_owner_gone(const struct am_record *record);

/* The file's bytes (magic included), malloc'ed; NULL when out of memory. */
AM_HIDDEN char *am_record_encode(const struct am_record *record, size_t *length);
/* Parse `data` (which starts with the magic) into `out`; false with the reason in `why`. */
AM_HIDDEN bool am_record_decode(const char *data, size_t length, struct am_record *out,
                                struct am_why *why);

/* ---- share_registry.c ------------------------------------------------------------------- */

AM_HIDDEN uint64_t am_new_shareable(void);

/* Publish a new export's record; `*taken` when the number is in use (pick another). */
AM_HIDDEN aclError am_share_publish(uint64_t shareable, const struct am_record *record,
                                    bool *taken, struct am_why *why);
/* Whitelist `pids` on this process's export `shareable`. */
AM_HIDDEN aclError am_share_allow(uint64_t shareable, const int32_t *pids, size_t count,
                                  struct am_why *why);
/* Take the exporter's memory for an import: a new descriptor of its memfd and the record
 * (the caller frees it); this process is a holder until am_share_release. */
AM_HIDDEN aclError am_share_acquire(uint64_t shareable, int *fd, struct am_record *record,
                                    struct am_why *why);
/* An importer lets go; when nobody holds the memory any more its pages are punched out
 * of `fd` (the importer's descriptor of the exporter's memfd) before the record goes. */
AM_HIDDEN void am_share_release(uint64_t shareable, int fd, uint64_t offset, uint64_t size);
/* The exporter has freed its handle: true once no live importer holds the memory. */
AM_HIDDEN bool am_share_release_owner(uint64_t shareable);

#endif
