"""The shim's cost: a C aclrtMalloc+aclrtFree pair through the drop-in libascendcl.so
against the same pair from Python through acl_mem.raw, and the first call's cost.

    python benchmarks/shim_bench.py [--pairs N] [--blocks B] [--rounds R] [--json]

Builds the shim (cached: acl-mem shim --print-libdir) and a small C program against the
shim's minimal acl/acl.h. Each round runs the C program once, a fresh process: its first
call starts Python and imports acl_mem (the first-call figure), then it alternates a
block of C pairs with a block of the same pairs from Python through acl_mem.raw, run in
the interpreter the library started (same process, same fake, same thread). The pair
ratio is the median over neighbouring blocks, which see the same machine load. Last,
1 and then 4 pthreads each allocate, copy 64 KiB in and out, check and free, and the
rounds per second of 4 threads are reported against 1. Goals: pair ratio <= 1.2, first
call <= 150 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acl_mem.shim._build import compiler, libdir
from acl_mem.shim._csource import minimal_header

C_PROGRAM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "acl/acl.h"

typedef int (*gil_ensure_fn)(void);
typedef void (*gil_release_fn)(int);
typedef int (*run_fn)(const char *);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The same pairs from Python, in the interpreter the library started (its symbols are
   global once it runs): the same fake, the same thread, the same machine moment. */
static int python(const char *code)
{
    gil_ensure_fn ensure = (gil_ensure_fn)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    gil_release_fn release = (gil_release_fn)dlsym(RTLD_DEFAULT, "PyGILState_Release");
    run_fn run = (run_fn)dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    int state, rc;
    if (ensure == NULL || release == NULL || run == NULL)
        return -1;
    state = ensure();
    rc = run(code);
    release(state);
    fflush(stdout);
    return rc;
}

#define THREAD_BYTES (64 * 1024)

struct worker {
    pthread_t thread;
    long rounds;
    int ok;
};

/* One thread's share of the threads figure: malloc, copy in, copy out, check, free. */
static void *work(void *arg)
{
    struct worker *w = (struct worker *)arg;
    static __thread unsigned char in[THREAD_BYTES], out[THREAD_BYTES];
    void *block;
    long i;
    w->ok = aclrtSetDevice(0) == ACL_SUCCESS;
    for (i = 0; w->ok && i < w->rounds; ++i) {
        memset(in, (int)(i & 0xff), sizeof in);
        w->ok = aclrtMalloc(&block, THREAD_BYTES, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS
            && aclrtMemcpy(block, THREAD_BYTES, in, THREAD_BYTES,
                           ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS
            && aclrtMemcpy(out, THREAD_BYTES, block, THREAD_BYTES,
                           ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS
            && memcmp(in, out, sizeof in) == 0
            && aclrtFree(block) == ACL_SUCCESS;
    }
    return NULL;
}

/* Rounds per second of ``count`` threads together; negative if any went wrong. */
static double threads(int count, long rounds)
{
    struct worker workers[8];
    double start = now();
    int i, ok = 1;
    for (i = 0; i < count; ++i) {
        workers[i].rounds = rounds;
        pthread_create(&workers[i].thread, NULL, work, &workers[i]);
    }
    for (i = 0; i < count; ++i) {
        pthread_join(workers[i].thread, NULL);
        ok = ok && workers[i].ok;
    }
    return ok ? count * rounds / (now() - start) : -1.0;
}

int main(int argc, char **argv)
{
    long pairs = atol(argv[1]), blocks = atol(argv[2]), i, b;
    char code[512];
    void *p;
    double start = now(), first, loop;
    if (aclInit(NULL) != ACL_SUCCESS)  /* starts Python and imports acl_mem */
        return 1;
    first = now() - start;
    printf("first %.9f\n", first);
    if (aclrtSetDevice(0) != ACL_SUCCESS)
        return 1;
    if (python("import time\nimport acl_mem.raw as raw\n") != 0)
        return 2;
    snprintf(code, sizeof code,
             "t = time.perf_counter()\n"
             "for _ in range(%ld):\n"
             "    raw.aclrtFree(raw.aclrtMalloc(4096))\n"
             "print('py', (time.perf_counter() - t) / %ld, flush=True)\n", pairs, pairs);
    for (i = 0; i < 1000; ++i) {  /* warm up */
        aclrtMalloc(&p, 4096, ACL_MEM_MALLOC_HUGE_FIRST);
        aclrtFree(p);
    }
    for (b = 0; b < blocks; ++b) {
        loop = now();
        for (i = 0; i < pairs; ++i)
            if (aclrtMalloc(&p, 4096, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS
                    || aclrtFree(p) != ACL_SUCCESS)
                return 1;
        printf("c %.9f\n", (now() - loop) / pairs);
        fflush(stdout);
        if (python(code) != 0)
            return 2;
    }
    printf("threads1 %.3f\n", threads(1, pairs / 10));
    printf("threads4 %.3f\n", threads(4, pairs / 10));
    return 0;
}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20_000, help="pairs per block")
    parser.add_argument("--blocks", type=int, default=10,
                        help="alternating C and Python blocks per run")
    parser.add_argument("--rounds", type=int, default=5, help="runs (fresh processes)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    lib = libdir()
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib), ACL_MEM_BACKEND="fake")
    with tempfile.TemporaryDirectory() as work:
        include = Path(work) / "acl"
        include.mkdir()
        (include / "acl.h").write_text(minimal_header())
        (Path(work) / "bench.c").write_text(C_PROGRAM)
        binary = Path(work) / "bench"
        subprocess.run([*compiler(), "-O2", f"-I{work}", str(Path(work) / "bench.c"),
                        f"-L{lib}", "-lascendcl", "-ldl", "-pthread", "-o", str(binary)],
                       check=True)
        firsts: list[float] = []
        c_pairs: list[float] = []
        py_pairs: list[float] = []
        one: list[float] = []
        four: list[float] = []
        for _ in range(args.rounds):
            out = subprocess.run([str(binary), str(args.pairs), str(args.blocks)], env=env,
                                 cwd=work, capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                kind, value = line.split()
                {"first": firsts, "c": c_pairs, "py": py_pairs, "threads1": one,
                 "threads4": four}[kind].append(float(value))
    if min(one + four) < 0:
        print("a thread's malloc/copy/check/free went wrong", file=sys.stderr)
        return 1
    c_pair, py_pair = statistics.median(c_pairs), statistics.median(py_pairs)
    # Each C block against the Python block right after it (same process, same moment).
    ratios = sorted(c / p for c, p in zip(c_pairs, py_pairs, strict=True))
    quartiles = statistics.quantiles(ratios, n=4)
    result = {
        "pairs": args.pairs, "blocks": args.blocks, "rounds": args.rounds,
        "c_pair_us": round(c_pair * 1e6, 3), "python_raw_pair_us": round(py_pair * 1e6, 3),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_quartiles": [round(quartiles[0], 3), round(quartiles[2], 3)],
        "first_call_ms": round(statistics.median(firsts) * 1e3, 1),
        "first_call_ms_per_round": [round(f * 1e3, 1) for f in firsts],
        "threads_1_rounds_per_s": round(statistics.median(one)),
        "threads_4_rounds_per_s": round(statistics.median(four)),
        "threads_4_vs_1": round(statistics.median(f / o for f, o in zip(four, one,
                                                                       strict=True)), 3),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"malloc+free pair: C via shim {result['c_pair_us']} us, Python acl_mem.raw "
              f"{result['python_raw_pair_us']} us; ratio of neighbouring blocks: median "
              f"{result['ratio']}, quartiles {result['ratio_quartiles']} (goal <= 1.2)")
        print(f"first call (Python start + import acl_mem): {result['first_call_ms']} ms "
              f"(goal <= 150; per round {result['first_call_ms_per_round']})")
        print(f"4 threads x (malloc + copy in + copy out + check + free of 64 KiB) vs 1: "
              f"{result['threads_4_vs_1']}x the rounds per second "
              f"({result['threads_4_rounds_per_s']} vs {result['threads_1_rounds_per_s']}), "
              "every byte checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
