/* Which directory share records live in, and whether it can be trusted (docs/fidelity.md
 * rows 52 and 55).
 *
 * ACL_MEM_FAKE_SHARE_DIR names it outright: it is used, or every sharing call refuses.
 * Otherwise the places tried, in order, depend on the user id only, never on the
 * environment, so every process of one user meets in the same one:
 *   1. /dev/shm/acl_mem_fake_<uid> (/tmp/... where there is no /dev/shm);
 *   2. /run/user/<uid>/acl_mem_fake, when /run/user/<uid> is the user's private directory;
 *   3. <home from the password database>/.cache/acl_mem/share.
 * The first is in a directory everyone can write to, so another user may have taken the
 * name; the next place is then used, and that is said once per process on stderr.
 *
 * A directory is trusted only if it is a real directory (not a symlink) owned by the
 * user with mode 0700, checked through the descriptor that is then used.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../include/acl_mem_fake.h"
#include "share.h"

#define OPEN_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* The parents of the default places (acl_mem_fake_share_places moves them for tests). */
static char shm_parent[256] = "/dev/shm", run_parent[256] = "/run/user", home_override[256];
static pid_t noticed_pid;
static char noticed_path[512];

/* snprintf that says whether everything fitted: a cut path is never used. */
static bool format_into(char *out, size_t size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static bool format_into(char *out, size_t size, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    int n = vsnprintf(out, size, format, args);
    va_end(args);
    return n >= 0 && (size_t)n < size;
}

void am_why_set(struct am_why *why, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(why->text, sizeof why->text, format, args);
    va_end(args);
}

static bool copy_place(char *to, size_t size, const char *from, const char *fallback)
{
    const char *value = from != NULL ? from : fallback;
    if (value[0] != '/' && value[0] != '\0')
        return false;
    if (strlen(value) >= size)
        return false;
    strcpy(to, value);
    return true;
}

int acl_mem_fake_share_places(const char *shm, const char *run_user, const char *home)
{
    char a[sizeof shm_parent], b[sizeof run_parent], c[sizeof home_override];
    if (!copy_place(a, sizeof a, shm, "/dev/shm") ||
        !copy_place(b, sizeof b, run_user, "/run/user") ||
        !copy_place(c, sizeof c, home, ""))
        return AM_INVALID_PARAM;
    am_lock();
    memcpy(shm_parent, a, sizeof a);
    memcpy(run_parent, b, sizeof b);
    memcpy(home_override, c, sizeof c);
    am_unlock();
    return AM_SUCCESS;
}

static bool is_directory(const char *path)
{
    struct stat info;
    return stat(path, &info) == 0 && S_ISDIR(info.st_mode);
}

static bool is_symlink(const char *path)
{
    struct stat info;
    return lstat(path, &info) == 0 && S_ISLNK(info.st_mode);
}

/* mkdir -p of the parent (mode 0700 for what is made), then the directory itself; true
 * if this call made it (someone else may have been first). */
static bool create(const char *path, struct am_why *why, bool *failed)
{
    char parent[PATH_MAX];
    if (!format_into(parent, sizeof parent, "%s", path)) {
        *failed = true;
        am_why_set(why, "%s: the path is too long", path);
        return false;
    }
    for (char *slash = strchr(parent + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (mkdir(parent, 0700) != 0 && errno != EEXIST) {
            *failed = true;
            am_why_set(why, "%s: it cannot be created (%s)", path, strerror(errno));
            return false;
        }
        *slash = '/';
    }
    if (mkdir(path, 0700) == 0)
        return true;
    if (errno != EEXIST) {
        *failed = true;
        am_why_set(why, "%s: it cannot be created (%s)", path, strerror(errno));
    }
    return false;
}

static int refuse(int fd, struct am_why *why, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(int fd, struct am_why *why, const char *format, ...)
{
    if (fd >= 0)
        close(fd);
    va_list args;
    va_start(args, format);
    vsnprintf(why->text, sizeof why->text, format, args);
    va_end(args);
    return -1;
}

/* A descriptor of `path` if it can be trusted, else -1 and why. */
/* `given` without trailing slashes or "/." (O_NOFOLLOW does not hold for a path ending
 * in "/": a symlink there would be followed); false for a path ending in "..". */
static bool plain_path(const char *given, char *out, size_t size)
{
    if (!format_into(out, size, "%s", given))
        return false;
    size_t length = strlen(out);
    for (;;) {
        while (length > 1 && out[length - 1] == '/')
            out[--length] = '\0';
        if (length > 2 && strcmp(out + length - 2, "/.") == 0)
            out[length -= 2] = '\0';
        else
            break;
    }
    const char *last = strrchr(out, '/');
    last = last == NULL ? out : last + 1;
    return length > 0 && strcmp(last, "..") != 0 && strcmp(last, ".") != 0;
}

static int open_trusted(const char *given, struct am_why *why)
{
    char path[PATH_MAX];
    if (!plain_path(given, path, sizeof path))
        return refuse(-1, why, "%s: it is not a plain directory path (no trailing \"..\", "
                      "no longer than %d bytes)", given, PATH_MAX - 1);
    bool created = false, failed = false;
    int fd = open(path, OPEN_FLAGS);
    if (fd < 0 && errno == ENOENT) {
        created = create(path, why, &failed);
        if (failed)
            return -1;
        fd = open(path, OPEN_FLAGS);
    }
    if (fd < 0) {
        int error = errno;
        /* O_DIRECTORY|O_NOFOLLOW on a symlink gives ENOTDIR, not ELOOP: ask the link. */
        if (error == ELOOP || is_symlink(path))
            return refuse(-1, why, "%s: it is a symlink", path);
        if (error == ENOTDIR)
            return refuse(-1, why, "%s: it is not a directory", path);
        return refuse(-1, why, "%s: it cannot be opened (%s)", path, strerror(error));
    }
    struct stat info, named;
    if (fstat(fd, &info) != 0)
        return refuse(fd, why, "%s: it cannot be examined (%s)", path, strerror(errno));
    /* The name still leads to the directory opened, and not through a symlink. */
    if (lstat(path, &named) != 0 || !S_ISDIR(named.st_mode) || named.st_dev != info.st_dev ||
        named.st_ino != info.st_ino)
        return refuse(fd, why, "%s: it changed while it was opened, or is a symlink", path);
    if (info.st_uid != geteuid())
        return refuse(fd, why, "%s: it belongs to uid %u, not to uid %u", path,
                      (unsigned)info.st_uid, (unsigned)geteuid());
    if (created && (info.st_mode & 07777) != 0700) {
        /* The umask may have taken bits away. */
        if (fchmod(fd, 0700) != 0 || fstat(fd, &info) != 0)
            return refuse(fd, why, "%s: its mode cannot be set (%s)", path, strerror(errno));
    }
    if ((info.st_mode & 07777) != 0700)
        return refuse(fd, why, "%s: its mode is %#o, not 0700, so another user could read or "
                      "replace its records", path, (unsigned)(info.st_mode & 07777));
    return fd;
}

/* The home directory from the password database (not $HOME: the same for every process
 * of the user), or false. */
static bool home_of(uid_t uid, char *out, size_t size)
{
    if (home_override[0] != '\0')
        return format_into(out, size, "%s", home_override);
    struct passwd entry, *found = NULL;
    char buffer[4096];
    if (getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) != 0 || found == NULL)
        return false;
    const char *home = found->pw_dir;
    if (home == NULL || home[0] != '/' || strcmp(home, "/") == 0 || strlen(home) >= size)
        return false;
    return format_into(out, size, "%s", home);
}

static bool private_run_directory(const char *path, uid_t uid)
{
    struct stat info;
    return lstat(path, &info) == 0 && S_ISDIR(info.st_mode) && info.st_uid == uid &&
           (info.st_mode & 077) == 0;
}

static void notice_fallback(const char *path, const char *refused)
{
    /* Once per process (a forked child says it again). */
    if (noticed_pid == getpid() && strcmp(noticed_path, path) == 0)
        return;
    noticed_pid = getpid();
    format_into(noticed_path, sizeof noticed_path, "%s", path);
    fprintf(stderr, "acl_mem fake: sharing memory through %s, not through %s\n", path, refused);
}

int am_share_directory(char *path, size_t path_size, struct am_why *why)
{
    const char *explicit = secure_getenv("ACL_MEM_FAKE_SHARE_DIR");
    if (explicit != NULL && explicit[strspn(explicit, " \t\n\r\f\v")] != '\0') {
        format_into(path, path_size, "%s", explicit);
        int fd = open_trusted(explicit, why);
        if (fd < 0) {
            char reason[sizeof why->text];
            format_into(reason, sizeof reason, "%s", why->text);
            am_why_set(why, "the acl_mem fake will not share memory through %s. Fix or remove "
                       "it (it is recreated with mode 0700), or set ACL_MEM_FAKE_SHARE_DIR to "
                       "a directory of your own with mode 0700", reason);
        }
        return fd;
    }
    uid_t uid = geteuid();
    char candidates[3][PATH_MAX];
    int count = 0;
    if (format_into(candidates[count], PATH_MAX, "%s/acl_mem_fake_%u",
                    is_directory(shm_parent) ? shm_parent : "/tmp", (unsigned)uid))
        count++;
    char run[PATH_MAX];
    if (format_into(run, sizeof run, "%s/%u", run_parent, (unsigned)uid) &&
        private_run_directory(run, uid) &&
        format_into(candidates[count], PATH_MAX, "%s/acl_mem_fake", run))
        count++;
    char home[PATH_MAX];
    if (home_of(uid, home, sizeof home) &&
        format_into(candidates[count], PATH_MAX, "%s/.cache/acl_mem/share", home))
        count++;
    char refused[sizeof why->text] = "";
    for (int i = 0; i < count; i++) {
        int fd = open_trusted(candidates[i], why);
        if (fd >= 0) {
            format_into(path, path_size, "%s", candidates[i]);
            if (refused[0] != '\0')
                notice_fallback(candidates[i], refused);
            return fd;
        }
        size_t used = strlen(refused);
        format_into(refused + used, sizeof refused - used, "%s%s", used ? "; " : "", why->text);
    }
    format_into(path, path_size, "%s", count > 0 ? candidates[0] : "");
    am_why_set(why, "the acl_mem fake will not share memory through %s. Remove the first of "
               "them if it is yours (it is recreated with mode 0700), or set "
               "ACL_MEM_FAKE_SHARE_DIR to a directory of your own with mode 0700", refused);
    return -1;
}
