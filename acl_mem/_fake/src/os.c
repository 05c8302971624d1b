/* Every operating-system call of the engine: address space, backing memory and copies
 * the kernel checks (so a bad host address is an error code, never a crash). */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "engine.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

bool am_os_reserve(uint64_t base, uint64_t size)
{
    void *want = (void *)(uintptr_t)base;
    void *got = mmap(want, size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (got == MAP_FAILED)
        return false;
    if (got != want) { /* a kernel before 4.17 takes the flag as a hint */
        munmap(got, size);
        return false;
    }
    return true;
}

void *am_os_map(uint64_t size, bool noreserve)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (noreserve ? MAP_NORESERVE : 0);
    void *got = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    return got == MAP_FAILED ? NULL : got;
}

bool am_os_map_at(uint64_t base, uint64_t size)
{
    void *want = (void *)(uintptr_t)base;
    return mmap(want, size, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == want;
}

void am_os_unmap_at(uint64_t base, uint64_t size)
{
    mmap((void *)(uintptr_t)base, size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

void am_os_unmap(void *address, uint64_t size)
{
    munmap(address, size);
}

void am_os_discard(void *address, uint64_t size)
{
    uintptr_t first = ((uintptr_t)address + AM_HOST_PAGE - 1) / AM_HOST_PAGE * AM_HOST_PAGE;
    uintptr_t end = ((uintptr_t)address + size) / AM_HOST_PAGE * AM_HOST_PAGE;
    if (end > first)
        madvise((void *)first, end - first, MADV_DONTNEED);
}

/* Whether process_vm_readv/writev on this process are allowed here (seccomp may forbid
 * them): 1 yes, 0 no, -1 not known yet. */
static atomic_int kernel_copies = -1;

/* The mappings of /proc/self/maps cover [address, address + size) with `permission`
 * ('r' or 'w'): the fallback where the kernel will not copy for us. */
static bool permitted(uint64_t address, uint64_t size, char permission)
{
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL)
        return false;
    uint64_t cursor = address, end = address + size;
    char line[512];
    bool ok = false;
    while (fgets(line, sizeof line, maps) != NULL) {
        unsigned long long low, high;
        char perms[5];
        if (sscanf(line, "%llx-%llx %4s", &low, &high, perms) != 3)
            continue;
        if (low <= cursor && cursor < high) {
            if ((permission == 'r' && perms[0] != 'r') ||
                (permission == 'w' && perms[1] != 'w'))
                break;
            cursor = high;
            if (cursor >= end) {
                ok = true;
                break;
            }
        }
    }
    fclose(maps);
    return ok;
}

bool am_os_usable(const void *address, uint64_t count, bool write)
{
    enum { BATCH = 256 };
    unsigned char bytes[BATCH];
    struct iovec remote[BATCH];
    uint64_t start = (uintptr_t)address;
    if (count == 0 || kernel_copies == 0)
        return true;
    if (count > UINT64_MAX - start)
        return false;
    uint64_t end = start + count;
    uint64_t page = start / AM_HOST_PAGE * AM_HOST_PAGE;
    while (page < end) {
        unsigned long n = 0;
        for (; n < BATCH && page < end; n++, page += AM_HOST_PAGE) {
            remote[n].iov_base = (void *)(uintptr_t)(page < start ? start : page);
            remote[n].iov_len = 1;
        }
        struct iovec mine = {.iov_base = bytes, .iov_len = n};
        ssize_t moved;
        do
            moved = process_vm_readv(getpid(), &mine, 1, remote, n, 0);
        while (moved < 0 && errno == EINTR);
        if (moved < 0 && (errno == ENOSYS || errno == EPERM))
            return true; /* no kernel copies here: see above */
        if (moved != (ssize_t)n)
            return false;
        if (!write)
            continue;
        /* The same bytes back: racing only with a thread writing where this call is
         * about to write anyway. */
        do
            moved = process_vm_writev(getpid(), &mine, 1, remote, n, 0);
        while (moved < 0 && errno == EINTR);
        if (moved != (ssize_t)n)
            return false;
    }
    return true;
}

bool am_os_checked_copy(void *dst, const void *src, uint64_t count)
{
    if (kernel_copies != 0) {
        /* Both sides are this process's memory: the kernel reads the "remote" source and
         * writes the "local" destination with fault-safe copies. */
        struct iovec local = {.iov_base = dst, .iov_len = count};
        struct iovec remote = {.iov_base = (void *)(uintptr_t)src, .iov_len = count};
        uint64_t done = 0;
        while (done < count) {
            ssize_t moved = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
            if (moved < 0 && errno == EINTR)
                continue;
            if (moved < 0 && (errno == ENOSYS || errno == EPERM) && done == 0) {
                kernel_copies = 0;
                break;
            }
            if (moved <= 0)
                return false;
            kernel_copies = 1;
            done += (uint64_t)moved;
            local.iov_base = (char *)local.iov_base + moved;
            local.iov_len -= (size_t)moved;
            remote.iov_base = (char *)remote.iov_base + moved;
            remote.iov_len -= (size_t)moved;
        }
        if (kernel_copies != 0)
            return true;
    }
    if (!permitted((uintptr_t)src, count, 'r') || !permitted((uintptr_t)dst, count, 'w'))
        return false;
    memmove(dst, src, count);
    return true;
}

bool am_os_checked_set(void *dst, int value, uint64_t count)
{
    static const uint64_t chunk = 64 * AM_KiB;
    unsigned char pattern[4096];
    memset(pattern, value, sizeof pattern);
    struct iovec sources[16];
    for (int i = 0; i < 16; i++) {
        sources[i].iov_base = pattern;
        sources[i].iov_len = sizeof pattern;
    }
    for (uint64_t offset = 0; kernel_copies != 0 && offset < count;) {
        uint64_t length = count - offset < chunk ? count - offset : chunk;
        unsigned long pieces = (unsigned long)((length + sizeof pattern - 1) / sizeof pattern);
        sources[pieces - 1].iov_len = (size_t)(length - (pieces - 1) * sizeof pattern);
        struct iovec target = {.iov_base = (char *)dst + offset, .iov_len = (size_t)length};
        ssize_t written = process_vm_writev(getpid(), sources, pieces, &target, 1, 0);
        sources[pieces - 1].iov_len = sizeof pattern;
        if (written < 0 && errno == EINTR)
            continue;
        if (written < 0 && (errno == ENOSYS || errno == EPERM) && offset == 0) {
            kernel_copies = 0;
            break;
        }
        if (written != (ssize_t)length)
            return false;
        kernel_copies = 1;
        offset += length;
    }
    if (kernel_copies != 0)
        return true;
    if (!permitted((uintptr_t)dst, count, 'w'))
        return false;
    memset(dst, value, count);
    return true;
}

/* ---- copies guarded against faults ------------------------------------------------------
 * The kernel's copies cost a system call and page pinning each (about 1.6 us for 4 KiB,
 * against 40 ns for memmove). Host ranges a kernel copy proved usable are remembered
 * (copies.c) and later copied with memmove under a fault guard: a SIGSEGV or SIGBUS
 * inside the guarded copy jumps back and the copy reports failure, so memory the program
 * unmapped or protected since is still an error code, not a crash. Any other fault goes
 * to the handler that was there before. Under AddressSanitizer and ThreadSanitizer,
 * whose runtimes own the fault handlers, nothing is guarded: every copy goes through the
 * kernel. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define AM_GUARD_POSSIBLE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define AM_GUARD_POSSIBLE 0
#endif
#endif
#ifndef AM_GUARD_POSSIBLE
#define AM_GUARD_POSSIBLE 1
#endif

static struct sigaction previous_segv, previous_bus;
/* Guarded copies running in any thread. The handler looks at its thread's guard state
 * only while this is not 0: a library loaded by dlopen has its thread-local storage
 * allocated at the first touch in a thread (malloc, not for a signal handler), and a
 * thread that never called the library must not touch it when it faults. */
static int active_guards;
static _Thread_local volatile sig_atomic_t guarding;
static _Thread_local sigjmp_buf guard_exit;
/* The ranges the guarded copy touches: (start, length) of its destination and source. */
static _Thread_local uintptr_t guard_ranges[2][2];

/* A fault of the guarded copy: raised by the kernel (not sent by kill or raise) at an
 * address the copy touches. Anything else is not ours to swallow. */
static bool guarded_fault(const siginfo_t *info)
{
    if (__atomic_load_n(&active_guards, __ATOMIC_ACQUIRE) == 0 || info == NULL ||
        info->si_code <= 0 || !guarding)
        return false;
    uintptr_t at = (uintptr_t)info->si_addr;
    for (int i = 0; i < 2; i++)
        if (at - guard_ranges[i][0] < guard_ranges[i][1])
            return true;
    return false;
}

/* What the handler before ours would have done with the signal, as the kernel would have
 * run it: with its mask (the signal itself blocked unless SA_NODEFER) and SA_RESETHAND. */
static void pass_on(int signal_number, siginfo_t *info, void *context)
{
    const struct sigaction *before = signal_number == SIGBUS ? &previous_bus : &previous_segv;
    bool sent = info == NULL || info->si_code <= 0;
    if (before->sa_handler == SIG_DFL || before->sa_handler == SIG_IGN) {
        if (before->sa_handler == SIG_IGN && sent)
            return; /* an ignored signal someone sent */
        /* Back to the disposition that was there: a fault happens again on return, a
         * sent signal is sent again (at once: this handler does not block it). */
        sigaction(signal_number, before, NULL);
        if (sent)
            raise(signal_number);
        return;
    }
    sigset_t mask = before->sa_mask, saved;
    if (!(before->sa_flags & SA_NODEFER))
        sigaddset(&mask, signal_number);
    pthread_sigmask(SIG_BLOCK, &mask, &saved);
    /* SA_RESETHAND: the kernel would have put the default back for the next signal. Done
     * to the saved disposition, not the installed one: the guard stays. Copied first,
     * as the saved one changes. */
    struct sigaction handler = *before;
    if (before->sa_flags & SA_RESETHAND) {
        struct sigaction *saved_one = signal_number == SIGBUS ? &previous_bus : &previous_segv;
        memset(saved_one, 0, sizeof *saved_one);
        saved_one->sa_handler = SIG_DFL;
        sigemptyset(&saved_one->sa_mask);
    }
    if (handler.sa_flags & SA_SIGINFO)
        handler.sa_sigaction(signal_number, info, context);
    else
        handler.sa_handler(signal_number);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
}

static void on_fault(int signal_number, siginfo_t *info, void *context)
{
    if (guarded_fault(info)) {
        guarding = 0;
        siglongjmp(guard_exit, 1);
    }
    pass_on(signal_number, info, context);
}

/* 1 when the fault handler is installed, 0 when it cannot be (or must not be). */
static int guard_installed = -1;

static void install_guard(void)
{
    guard_installed = 0;
    if (!AM_GUARD_POSSIBLE)
        return;
    struct sigaction ours;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = on_fault;
    /* SA_NODEFER: the jump out of the handler leaves the signal unblocked without a
     * sigprocmask call per copy (pass_on blocks it for a handler that wants it blocked).
     * SA_ONSTACK: a program's stack-overflow handler gets the alternate stack it set up. */
    ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    if (sigaction(SIGSEGV, &ours, &previous_segv) != 0)
        return;
    if (sigaction(SIGBUS, &ours, &previous_bus) != 0) {
        sigaction(SIGSEGV, &previous_segv, NULL);
        return;
    }
    guard_installed = 1;
}

bool am_os_guard_ready(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_guard);
    return guard_installed == 1;
}

/* A copy (src not NULL) or a set of count bytes with `guarding` set; noinline keeps the
 * jump target's frame simple. */
__attribute__((noinline)) static bool guarded(void *dst, const void *src, int value,
                                              uint64_t count)
{
    guard_ranges[0][0] = (uintptr_t)dst;
    guard_ranges[0][1] = count;
    guard_ranges[1][0] = (uintptr_t)src;
    guard_ranges[1][1] = src != NULL ? count : 0;
    __atomic_add_fetch(&active_guards, 1, __ATOMIC_ACQ_REL);
    if (sigsetjmp(guard_exit, 0) != 0) {
        __atomic_sub_fetch(&active_guards, 1, __ATOMIC_ACQ_REL);
        return false;
    }
    guarding = 1;
    if (src != NULL)
        memmove(dst, src, count);
    else
        memset(dst, value, count);
    guarding = 0;
    __atomic_sub_fetch(&active_guards, 1, __ATOMIC_ACQ_REL);
    return true;
}

bool am_os_guarded_copy(void *dst, const void *src, uint64_t count)
{
    return guarded(dst, src, 0, count);
}

bool am_os_guarded_set(void *dst, int value, uint64_t count)
{
    return guarded(dst, NULL, value, count);
}
