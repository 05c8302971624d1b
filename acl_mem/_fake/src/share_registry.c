/* The share directory's records, read and changed under its lock (docs/fidelity.md rows
 * 52, 55 and 56).
 *
 * The directory may be a user's own, holding files acl_mem knows nothing of, so only
 * what provably came from acl_mem is ever removed: a regular file of the user, named like
 * a record or a temporary file, that starts with the record magic, and is still the file
 * that was checked when it is unlinked. Anything else at a record's name (a symlink, a
 * fifo, a user's file) is left alone and makes that shareable number unusable. Files are
 * opened relative to the directory's descriptor, never through a symlink and never
 * blocking; reads are capped. A record is written into an unnamed file (O_TMPFILE) and
 * linked or renamed into place whole, and every read-modify-write holds flock on the lock
 * file. The engine lock is held throughout, so no fork happens in the middle.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../include/acl_mem_fake.h"
#include "share.h"

#define LOCK_NAME ".acl_mem_fake.lock"
#define RECORD_PREFIX "acl_mem_fake-"
#define RECORD_SUFFIX ".record"
#define TEMP_PREFIX ".acl_mem_fake-tmp-"
#define OPEN_FLAGS (O_NOFOLLOW | O_CLOEXEC)

struct session {
    int dirfd, lockfd;
    char path[PATH_MAX];
};

static void record_name(uint64_t shareable, char *out, size_t size)
{
    snprintf(out, size, RECORD_PREFIX "%016" PRIx64 RECORD_SUFFIX, shareable);
}

uint64_t am_new_shareable(void)
{
    static atomic_uint_fast32_t counter;
    uint64_t n = (atomic_fetch_add(&counter, 1) + 1) & 0xFFFFFF;
    return ((uint64_t)getpid() << 24) | (n != 0 ? n : 1);
}

/* ---- the session ------------------------------------------------------------------------ */

static aclError open_session(struct session *s, struct am_why *why)
{
    s->lockfd = -1;
    s->dirfd = am_share_directory(s->path, sizeof s->path, why);
    if (s->dirfd < 0)
        return AM_RT_INTERNAL_ERROR;
    s->lockfd = openat(s->dirfd, LOCK_NAME,
                       O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | OPEN_FLAGS, 0600);
    const char *problem = NULL;
    struct stat info;
    if (s->lockfd < 0)
        problem = errno == ELOOP ? "a symlink" : strerror(errno);
    else if (fstat(s->lockfd, &info) != 0 || !S_ISREG(info.st_mode))
        problem = "not a regular file";
    if (problem == NULL) {
        while (flock(s->lockfd, LOCK_EX) != 0) {
            if (errno != EINTR) {
                problem = strerror(errno);
                break;
            }
        }
    }
    if (problem != NULL) {
        am_why_set(why, "the acl_mem fake will not share memory through %s: its lock file "
                   LOCK_NAME " cannot be used (%s). Remove it (it is recreated with mode 0700), "
                   "or set ACL_MEM_FAKE_SHARE_DIR to a directory of your own with mode 0700",
                   s->path, problem);
        if (s->lockfd >= 0)
            close(s->lockfd);
        close(s->dirfd);
        return AM_RT_INTERNAL_ERROR;
    }
    return AM_SUCCESS;
}

static void close_session(struct session *s)
{
    close(s->lockfd); /* releases the flock */
    close(s->dirfd);
}

static aclError write_failed(struct session *s, int error, struct am_why *why)
{
    am_why_set(why, "the acl_mem fake will not share memory through %s: writing a record "
               "failed (%s). Remove it (it is recreated with mode 0700), or set "
               "ACL_MEM_FAKE_SHARE_DIR to a directory of your own with mode 0700", s->path,
               strerror(error));
    return AM_RT_INTERNAL_ERROR;
}

/* ---- files ------------------------------------------------------------------------------ */

/* The bytes at `name` if acl_mem wrote it (1, NUL-terminated, malloc'ed); 0 when nothing
 * is there; -1 with the reason otherwise. */
static int read_ours(struct session *s, const char *name, char **data, size_t *length,
                     struct am_why *why)
{
    /* O_NONBLOCK: a fifo planted at the name must not hang the reader. */
    int fd = openat(s->dirfd, name, O_RDONLY | O_NONBLOCK | OPEN_FLAGS);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        am_why_set(why, "%s", errno == ELOOP ? "a symlink" : strerror(errno));
        return -1;
    }
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        close(fd);
        am_why_set(why, "not a regular file");
        return -1;
    }
    size_t capacity = 4096, used = 0;
    char *buffer = malloc(capacity + 1);
    while (buffer != NULL && used <= AM_SHARE_MAX_RECORD) {
        if (used == capacity) {
            capacity *= 2;
            char *grown = realloc(buffer, capacity + 1);
            if (grown == NULL) {
                free(buffer);
                buffer = NULL;
                break;
            }
            buffer = grown;
        }
        ssize_t got = read(fd, buffer + used, capacity - used);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int error = errno;
            close(fd);
            free(buffer);
            am_why_set(why, "%s", strerror(error));
            return -1;
        }
        if (got == 0)
            break;
        used += (size_t)got;
    }
    close(fd);
    if (buffer == NULL) {
        am_why_set(why, "out of memory reading it");
        return -1;
    }
    buffer[used] = '\0';
    if (used < strlen(AM_SHARE_MAGIC) ||
        memcmp(buffer, AM_SHARE_MAGIC, strlen(AM_SHARE_MAGIC)) != 0) {
        free(buffer);
        am_why_set(why, "not written by the acl_mem fake");
        return -1;
    }
    if (used > AM_SHARE_MAX_RECORD) {
        free(buffer);
        am_why_set(why, "too long");
        return -1;
    }
    *data = buffer;
    *length = used;
    return 1;
}

/* Unlink `name` if it is provably acl_mem's: a regular file of this user that starts with
 * the magic (or that this call created), still the same file when unlinked. True once
 * nothing is at the name. */
static bool remove_ours(struct session *s, const char *name, bool created_here)
{
    int fd = openat(s->dirfd, name, O_RDONLY | O_NONBLOCK | OPEN_FLAGS);
    if (fd < 0)
        return errno == ENOENT;
    struct stat info, now;
    char magic[sizeof AM_SHARE_MAGIC];
    size_t want = strlen(AM_SHARE_MAGIC);
    bool ours = fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_uid == geteuid() &&
                (created_here || (read(fd, magic, want) == (ssize_t)want &&
                                  memcmp(magic, AM_SHARE_MAGIC, want) == 0));
    close(fd);
    if (!ours)
        return false;
    if (fstatat(s->dirfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT;
    if (now.st_dev != info.st_dev || now.st_ino != info.st_ino)
        return false;
    return unlinkat(s->dirfd, name, 0) == 0 || errno == ENOENT;
}

static bool write_all(int fd, const char *data, size_t length)
{
    while (length > 0) {
        ssize_t n = write(fd, data, length);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        data += n;
        length -= (size_t)n;
    }
    return true;
}

static void temp_name(char *out, size_t size)
{
    unsigned char random[6];
    if (getrandom(random, sizeof random, GRND_NONBLOCK) != (ssize_t)sizeof random) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t mix = (uint64_t)now.tv_nsec * 0x9E3779B97F4A7C15u ^ (uint64_t)(uintptr_t)out;
        memcpy(random, &mix, sizeof random);
    }
    snprintf(out, size, TEMP_PREFIX "%d-%02x%02x%02x%02x%02x%02x", (int)getpid(), random[0],
             random[1], random[2], random[3], random[4], random[5]);
}

/* `data` linked at `name`, whole: 0, EEXIST when the name is taken (never replaced nor
 * followed), another errno on failure. Written into an unnamed file where the file
 * system has them, else into a temporary file of this call, removed afterwards, so an
 * interrupted write leaves nothing half-written under a record's name. */
static bool no_unnamed_files;

int acl_mem_fake_share_unnamed_files(int on)
{
    __atomic_store_n(&no_unnamed_files, on == 0, __ATOMIC_RELAXED);
    return AM_SUCCESS;
}

static int link_whole(struct session *s, const char *data, size_t length, const char *name)
{
    int fd = -1;
    if (__atomic_load_n(&no_unnamed_files, __ATOMIC_RELAXED))
        errno = EOPNOTSUPP;
    else
        fd = openat(s->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) {
        int error = 0;
        char self[48];
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        if (!write_all(fd, data, length))
            error = errno ? errno : EIO;
        else if (linkat(AT_FDCWD, self, s->dirfd, name, AT_SYMLINK_FOLLOW) != 0)
            error = errno;
        close(fd);
        if (error != ENOENT)
            return error;
        /* No /proc to name the unnamed file by: a temporary file of our own instead. */
    } else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
        return errno;
    }
    char temp[64];
    temp_name(temp, sizeof temp);
    fd = openat(s->dirfd, temp, O_WRONLY | O_CREAT | O_EXCL | OPEN_FLAGS, 0600);
    if (fd < 0)
        return errno == EEXIST ? EAGAIN : errno;
    int error = write_all(fd, data, length) ? 0 : (errno ? errno : EIO);
    close(fd);
    if (error == 0 && linkat(s->dirfd, temp, s->dirfd, name, 0) != 0)
        error = errno;
    remove_ours(s, temp, true);
    return error;
}

static int encode_and_link(struct session *s, const struct am_record *record,
                           const char *name)
{
    size_t length;
    char *data = am_record_encode(record, &length);
    if (data == NULL)
        return ENOMEM;
    int error = link_whole(s, data, length, name);
    free(data);
    return error;
}

/* Replace the record (loaded, so acl_mem's) at once: readers see the old or the new. */
static aclError store(struct session *s, uint64_t shareable, const struct am_record *record,
                      struct am_why *why)
{
    char temp[64], name[64];
    temp_name(temp, sizeof temp);
    record_name(shareable, name, sizeof name);
    int error = encode_and_link(s, record, temp);
    if (error == 0 && renameat(s->dirfd, temp, s->dirfd, name) != 0) {
        error = errno;
        remove_ours(s, temp, false);
    }
    return error == 0 ? AM_SUCCESS : write_failed(s, error, why);
}

static aclError damaged(struct session *s, uint64_t shareable, const char *reason,
                        struct am_why *why)
{
    char name[64];
    record_name(shareable, name, sizeof name);
    am_why_set(why, "shareable handle %#" PRIx64 " cannot be used: its record %s/%s is damaged "
               "or not the fake's (%s); the exporting process removes a damaged record of its "
               "own by freeing its handle; anything else there is left for you to delete",
               shareable, s->path, name, reason);
    return AM_RT_PARAM_INVALID;
}

/* The record of `shareable` into `record` (*found), or 107000 for one that cannot be read
 * or parsed, or a file acl_mem did not write. */
static aclError load(struct session *s, uint64_t shareable, struct am_record *record,
                     bool *found, struct am_why *why)
{
    char name[64], *data = NULL;
    size_t length = 0;
    struct am_why reason;
    record_name(shareable, name, sizeof name);
    *found = false;
    int got = read_ours(s, name, &data, &length, &reason);
    if (got == 0)
        return AM_SUCCESS;
    if (got < 0)
        return damaged(s, shareable, reason.text, why);
    bool parsed = am_record_decode(data, length, record, &reason);
    free(data);
    if (!parsed)
        return damaged(s, shareable, reason.text, why);
    *found = true;
    return AM_SUCCESS;
}

static bool remove_record(struct session *s, uint64_t shareable)
{
    char name[64];
    record_name(shareable, name, sizeof name);
    return remove_ours(s, name, false);
}

/* The record with dead holders dropped; not found (and removed) when nobody is left. */
static aclError current(struct session *s, uint64_t shareable, struct am_record *record,
                        bool *found, struct am_why *why)
{
    aclError code = load(s, shareable, record, found, why);
    if (code != AM_SUCCESS || !*found)
        return code;
    bool changed = am_record_drop_dead_holders(record);
    if (!am_is_alive(record->owner) && record->holder_count == 0) {
        remove_record(s, shareable);
        am_record_free(record);
        *found = false;
        return AM_SUCCESS;
    }
    return changed ? store(s, shareable, record, why) : AM_SUCCESS;
}

static bool hex_name(const char *text, size_t digits)
{
    for (size_t i = 0; i < digits; i++)
        if (!((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f')))
            return false;
    return true;
}

static bool is_temp_name(const char *name)
{
    size_t prefix = strlen(TEMP_PREFIX);
    if (strncmp(name, TEMP_PREFIX, prefix) != 0)
        return false;
    const char *at = name + prefix;
    size_t digits = strspn(at, "0123456789");
    return digits > 0 && at[digits] == '-' && strlen(at + digits + 1) == 12 &&
           hex_name(at + digits + 1, 12);
}

static bool is_record_name(const char *name, uint64_t *shareable)
{
    size_t prefix = strlen(RECORD_PREFIX);
    if (strncmp(name, RECORD_PREFIX, prefix) != 0 || strlen(name) != prefix + 16 + 7 ||
        strcmp(name + prefix + 16, RECORD_SUFFIX) != 0 || !hex_name(name + prefix, 16))
        return false;
    *shareable = strtoull(name + prefix, NULL, 16);
    return true;
}

/* Remove what dead processes left (their records nobody holds) and temporary files of
 * interrupted writes, where they are provably acl_mem's. */
static void sweep(struct session *s)
{
    int fd = dup(s->dirfd);
    DIR *listing = fd < 0 ? NULL : fdopendir(fd);
    if (listing == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    int64_t me = getpid();
    char (*names)[64] = NULL;
    size_t count = 0, capacity = 0;
    for (struct dirent *entry = readdir(listing); entry != NULL; entry = readdir(listing)) {
        if (strlen(entry->d_name) >= 64)
            continue;
        if (count == capacity) {
            capacity = capacity ? capacity * 2 : 16;
            char (*grown)[64] = realloc(names, capacity * sizeof *names);
            if (grown == NULL)
                break;
            names = grown;
        }
        strcpy(names[count++], entry->d_name);
    }
    closedir(listing);
    for (size_t i = 0; i < count; i++) {
        uint64_t shareable;
        if (is_temp_name(names[i])) {
            remove_ours(s, names[i], false); /* written only under the lock: abandoned */
            continue;
        }
        if (!is_record_name(names[i], &shareable) || (int64_t)(shareable >> 24) == me)
            continue; /* not a record, or ours: our own frees keep them tidy */
        struct am_record record = {0};
        struct am_why why;
        bool found;
        struct am_identity exporter;
        if (current(s, shareable, &record, &found, &why) != AM_SUCCESS) {
            if (!am_identity_of((int64_t)(shareable >> 24), &exporter))
                remove_record(s, shareable);
        }
        am_record_free(&record);
    }
    free(names);
}

/* ---- what the calls need ------------------------------------------------------------------ */

aclError am_share_publish(uint64_t shareable, const struct am_record *record, bool *taken,
                          struct am_why *why)
{
    struct session s;
    aclError code = open_session(&s, why);
    if (code != AM_SUCCESS)
        return code;
    char name[64];
    record_name(shareable, name, sizeof name);
    sweep(&s);
    *taken = false;
    int error = encode_and_link(&s, record, name);
    if (error == EEXIST) {
        /* Only a record of ours that nobody uses any more is reclaimed; anything else (a
         * live record, a user's file, a symlink) stays and another number is tried. */
        struct am_record existing = {0};
        struct am_why ignored;
        bool found = true;
        if (current(&s, shareable, &existing, &found, &ignored) == AM_SUCCESS && !found)
            error = encode_and_link(&s, record, name);
        am_record_free(&existing);
        *taken = error == EEXIST;
    }
    if (error != 0 && error != EEXIST)
        code = write_failed(&s, error, why);
    close_session(&s);
    return code;
}

aclError am_share_allow(uint64_t shareable, const int32_t *pids, size_t count,
                        struct am_why *why)
{
    struct session s;
    aclError code = open_session(&s, why);
    if (code != AM_SUCCESS)
        return code;
    struct am_record record = {0};
    bool found;
    code = load(&s, shareable, &record, &found, why);
    if (code == AM_SUCCESS && (!found || !am_same_identity(record.owner, am_self_identity()))) {
        am_why_set(why, "shareable handle %#" PRIx64 " is not an export of this process",
                   shareable);
        code = AM_RT_PARAM_INVALID;
    }
    if (code == AM_SUCCESS && !am_record_allow(&record, pids, count))
        code = write_failed(&s, ENOMEM, why);
    if (code == AM_SUCCESS) {
        /* A record its readers would refuse as too long is not written. */
        size_t length = 0;
        char *data = am_record_encode(&record, &length);
        free(data);
        if (data == NULL) {
            code = write_failed(&s, ENOMEM, why);
        } else if (length > AM_SHARE_MAX_RECORD) {
            am_why_set(why, "the whitelist of shareable handle %#" PRIx64 " would outgrow what "
                       "a share record holds (4 MiB, about 100 000 processes); it is left as "
                       "it was", shareable);
            code = AM_RT_PARAM_INVALID;
        }
    }
    if (code == AM_SUCCESS)
        code = store(&s, shareable, &record, why);
    am_record_free(&record);
    close_session(&s);
    return code;
}

/* The exporter's memfd, opened anew; -1 unless it is still the exported one. */
static int open_memfd(const struct am_record *record)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%" PRId64 "/fd/%" PRIu64, record->owner.pid, record->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat info;
    /* The exporter may have closed the memfd and reused the number for another file. */
    if (fstat(fd, &info) != 0 || (uint64_t)info.st_dev != record->dev ||
        (uint64_t)info.st_ino != record->ino || !am_is_alive(record->owner)) {
        close(fd);
        return -1;
    }
    return fd;
}

aclError am_share_acquire(uint64_t shareable, int *fd, struct am_record *record,
                          struct am_why *why)
{
    struct session s;
    aclError code = open_session(&s, why);
    if (code != AM_SUCCESS)
        return code;
    struct am_identity me = am_self_identity();
    bool found;
    *fd = -1;
    code = current(&s, shareable, record, &found, why);
    if (code == AM_SUCCESS) {
        if (!found || am_record_owner_gone(record)) {
            am_why_set(why, "shareable handle %#" PRIx64 " is not exported memory (never "
                       "exported, or freed by its exporter)", shareable);
            code = AM_RT_PARAM_INVALID;
        } else if (am_same_identity(record->owner, me)) {
            am_why_set(why, "shareable handle %#" PRIx64 " was exported by this process: "
                       "only another process can import it", shareable);
            code = AM_FEATURE_NOT_SUPPORT;
        } else if (record->flags == 0 && !am_record_admits(record, me)) {
            am_why_set(why, "this process (pid %d) is not on the whitelist of shareable handle "
                       "%#" PRIx64 " (aclrtMemSetPidToShareableHandle)", (int)me.pid,
                       shareable);
            code = AM_RT_PARAM_INVALID;
        } else if ((*fd = open_memfd(record)) < 0) {
            am_why_set(why, "the memory of shareable handle %#" PRIx64 " cannot be opened: its "
                       "exporter (pid %" PRId64 ") has let go of it", shareable,
                       record->owner.pid);
            code = AM_RT_PARAM_INVALID;
        } else if (!am_record_add_holder(record, me)) {
            code = write_failed(&s, ENOMEM, why);
        } else {
            code = store(&s, shareable, record, why);
        }
    }
    if (code != AM_SUCCESS) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        am_record_free(record);
    }
    close_session(&s);
    return code;
}

void am_share_release(uint64_t shareable, int fd, uint64_t offset, uint64_t size)
{
    struct session s;
    struct am_why why;
    if (open_session(&s, &why) != AM_SUCCESS)
        return; /* the exporter sees us gone when we exit */
    struct am_record record = {0};
    bool found;
    /* A damaged record: the exporter decides. None: it took its memory back already. */
    if (load(&s, shareable, &record, &found, &why) == AM_SUCCESS && found) {
        am_record_remove_holder(&record, am_self_identity());
        am_record_drop_dead_holders(&record);
        if (am_record_owner_gone(&record) && record.holder_count == 0) {
            /* Before the record goes, so the exporter cannot reuse the range first. */
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset,
                      (off_t)size);
            remove_record(&s, shareable);
        } else {
            store(&s, shareable, &record, &why);
        }
    }
    am_record_free(&record);
    close_session(&s);
}

bool am_share_release_owner(uint64_t shareable)
{
    struct session s;
    struct am_why why;
    if (open_session(&s, &why) != AM_SUCCESS)
        return false; /* unusable now: kept, and asked again later */
    struct am_record record = {0};
    bool found, free_now = true;
    if (load(&s, shareable, &record, &found, &why) != AM_SUCCESS) {
        /* Its holders are unknowable: a damaged record of ours goes, anything else stays. */
        remove_record(&s, shareable);
    } else if (found) {
        bool changed = am_record_drop_dead_holders(&record) || !record.owner_freed;
        record.owner_freed = true;
        if (record.holder_count == 0)
            remove_record(&s, shareable);
        else {
            free_now = false;
            if (changed)
                store(&s, shareable, &record, &why);
        }
    }
    am_record_free(&record);
    close_session(&s);
    return free_now;
}
