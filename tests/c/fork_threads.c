/* fork() from a multithreaded C program on the shim: 4 threads allocate and free device
 * memory in a loop while the main thread forks 20 times. Each child sets its device,
 * allocates, frees and _exit()s; the parent waits for it with a deadline (a child that
 * hangs, e.g. on a lock or the GIL a busy thread held at the fork, is killed and
 * reported). Then two more children use a block the parent allocated before the fork:
 * the parent's pointers are not valid in a child (docs/fidelity.md row 60), so freeing
 * one returns ACL_ERROR_RT_PARAM_INVALID (107000), before aclrtSetDevice and after it,
 * as in a child forked by a Python program (tests/test_fork.py).
 *
 * With the argument "during-start" it forks instead while another thread makes the
 * process's first call (the fake is starting: Python and acl_mem loading): a child
 * forked before the start finished cannot finish it (the thread doing it does not exist
 * there) and its calls return 500000 at once; one forked after it works normally.
 * Either way the child ends.
 *
 * tests/test_shim_programs.py runs it and checks the output and exit status.
 *
 * Output: "forks 20 ok", "parent-pointer <code before set device> <code after>",
 * "workers <rounds> ok", "done"; with "during-start": "child <n> <code>" per child, then
 * "done". A failure prints "FAIL ..." and exits with status 1. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "acl/acl.h"

#define THREADS 4
#define FORKS 20
#define DEADLINE_MS 10000

static volatile int stopping;
static long rounds[THREADS];
static int failures[THREADS];

static void *Worker(void *arg)
{
    int index = (int)(size_t)arg;
    if (aclrtSetDevice(0) != ACL_SUCCESS) {
        failures[index] = 1;
        return NULL;
    }
    while (!__atomic_load_n(&stopping, __ATOMIC_RELAXED)) {
        void *block = NULL;
        if (aclrtMalloc(&block, 4096 * (size_t)(index + 1), ACL_MEM_MALLOC_HUGE_FIRST)
                != ACL_SUCCESS || aclrtFree(block) != ACL_SUCCESS) {
            failures[index] = 1;
            return NULL;
        }
        ++rounds[index];
    }
    return NULL;
}

static void SleepMs(long ms)
{
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

/* The child's exit status, or -1 (and the child killed) if it did not end in time. */
static int Wait(pid_t pid)
{
    int status = 0;
    long waited;
    for (waited = 0; waited < DEADLINE_MS; waited += 5) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        SleepMs(5);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static void *FirstCall(void *unused)
{
    (void)unused;
    aclrtSetDevice(0);
    return NULL;
}

static int DuringStart(void)
{
    pthread_t starter;
    int i;
    pthread_create(&starter, NULL, FirstCall, NULL);
    for (i = 0; i < 5; ++i) {
        pid_t pid;
        int status;
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
            aclError ret = aclrtSetDevice(0);
            _exit(ret == ACL_SUCCESS ? 0 : ret == ACL_ERROR_INTERNAL_ERROR ? 1 : 2);
        }
        status = Wait(pid);
        if (status < 0 || status > 1) {
            printf("FAIL child %d: %s %d\n", i, status < 0 ? "hung" : "exit status", status);
            return 1;
        }
        printf("child %d %d\n", i, status == 0 ? ACL_SUCCESS : ACL_ERROR_INTERNAL_ERROR);
        SleepMs(20 * i);
    }
    pthread_join(starter, NULL);
    printf("done\n");
    return 0;
}

int main(int argc, char **argv)
{
    pthread_t threads[THREADS];
    void *parentBlock = NULL;
    long total = 0;
    int i;
    if (argc == 2 && strcmp(argv[1], "during-start") == 0)
        return DuringStart();
    if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS
            || aclrtMalloc(&parentBlock, 1 << 20, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) {
        printf("FAIL setup\n");
        return 1;
    }
    for (i = 0; i < THREADS; ++i)
        pthread_create(&threads[i], NULL, Worker, (void *)(size_t)i);
    SleepMs(50);
    for (i = 0; i < FORKS; ++i) {
        pid_t pid;
        int status;
        fflush(stdout);
        pid = fork();
        if (pid < 0) {
            printf("FAIL fork %d\n", i);
            return 1;
        }
        if (pid == 0) {
            void *block = NULL;
            if (aclrtSetDevice(0) != ACL_SUCCESS)
                _exit(2);
            if (aclrtMalloc(&block, 1 << 16, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS)
                _exit(3);
            if (aclrtFree(block) != ACL_SUCCESS)
                _exit(4);
            _exit(0);
        }
        status = Wait(pid);
        if (status != 0) {
            printf("FAIL child %d: %s %d\n", i, status < 0 ? "hung" : "exit status", status);
            __atomic_store_n(&stopping, 1, __ATOMIC_RELAXED);
            return 1;
        }
        SleepMs(i % 3);
    }
    printf("forks %d ok\n", FORKS);
    {
        /* The parent's block, freed in a child: once without a current device, once
           after aclrtSetDevice. The child reports the codes through its exit status. */
        int codes[2];
        int variant;
        for (variant = 0; variant < 2; ++variant) {
            pid_t pid;
            fflush(stdout);
            pid = fork();
            if (pid == 0) {
                aclError ret;
                if (variant == 1 && aclrtSetDevice(0) != ACL_SUCCESS)
                    _exit(255);
                ret = aclrtFree(parentBlock);
                _exit(ret == ACL_ERROR_RT_CONTEXT_NULL ? 1
                      : ret == ACL_ERROR_RT_PARAM_INVALID ? 2 : ret == ACL_SUCCESS ? 3 : 4);
            }
            codes[variant] = Wait(pid);
        }
        printf("parent-pointer %d %d\n",
               codes[0] == 1 ? ACL_ERROR_RT_CONTEXT_NULL : codes[0] == 2
                   ? ACL_ERROR_RT_PARAM_INVALID : -codes[0],
               codes[1] == 1 ? ACL_ERROR_RT_CONTEXT_NULL : codes[1] == 2
                   ? ACL_ERROR_RT_PARAM_INVALID : -codes[1]);
    }
    __atomic_store_n(&stopping, 1, __ATOMIC_RELAXED);
    for (i = 0; i < THREADS; ++i) {
        pthread_join(threads[i], NULL);
        if (failures[i]) {
            printf("FAIL worker %d\n", i);
            return 1;
        }
        total += rounds[i];
    }
    printf("workers %ld ok\n", total);
    /* The parent's own block is still its own. */
    if (aclrtFree(parentBlock) != ACL_SUCCESS) {
        printf("FAIL parent free\n");
        return 1;
    }
    printf("done\n");
    return 0;
}
