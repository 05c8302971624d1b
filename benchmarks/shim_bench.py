"""The shim's cost: a C aclrtMalloc+aclrtFree pair through the drop-in libascendcl.so
against the same pair from Python through acl_mem.raw, and the first call's cost.

    python benchmarks/shim_bench.py [--pairs N] [--rounds R] [--json]

Builds the shim (cached: acl-mem shim --print-libdir) and a small C program against the
shim's minimal acl/acl.h. Each round runs the C program once (a fresh process: its
first call starts Python and imports acl_mem) and then the Python loop in a fresh
interpreter; the figures are the medians over the rounds, so that both sides see the
same machine load. Goals of step 1: pair ratio <= 1.2, first call <= 150 ms.
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
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "acl/acl.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long pairs = atol(argv[1]), i;
    void *p;
    double start = now(), first, loop;
    if (aclInit(NULL) != ACL_SUCCESS)  /* starts Python and imports acl_mem */
        return 1;
    first = now() - start;
    if (aclrtSetDevice(0) != ACL_SUCCESS)
        return 1;
    for (i = 0; i < 1000; ++i) {  /* warm up */
        aclrtMalloc(&p, 4096, ACL_MEM_MALLOC_HUGE_FIRST);
        aclrtFree(p);
    }
    loop = now();
    for (i = 0; i < pairs; ++i)
        if (aclrtMalloc(&p, 4096, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS
                || aclrtFree(p) != ACL_SUCCESS)
            return 1;
    printf("%.9f %.9f\n", first, (now() - loop) / pairs);
    return 0;
}
"""

PY_PROGRAM = """
import sys, time
import acl_mem.raw as raw
pairs = int(sys.argv[1])
raw.aclrtSetDevice(0)
for _ in range(1000):
    raw.aclrtFree(raw.aclrtMalloc(4096))
start = time.perf_counter()
for _ in range(pairs):
    raw.aclrtFree(raw.aclrtMalloc(4096))
print((time.perf_counter() - start) / pairs)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=100_000, help="pairs per run")
    parser.add_argument("--rounds", type=int, default=5, help="C and Python runs each")
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
                        f"-L{lib}", "-lascendcl", "-o", str(binary)], check=True)
        firsts, c_pairs, py_pairs = [], [], []
        for _ in range(args.rounds):
            out = subprocess.run([str(binary), str(args.pairs)], env=env, cwd=work,
                                 capture_output=True, text=True, check=True).stdout.split()
            firsts.append(float(out[0]))
            c_pairs.append(float(out[1]))
            py = subprocess.run([sys.executable, "-c", PY_PROGRAM, str(args.pairs)], env=env,
                                capture_output=True, text=True, check=True).stdout
            py_pairs.append(float(py))
    c_pair, py_pair = statistics.median(c_pairs), statistics.median(py_pairs)
    ratios = [c / p for c, p in zip(c_pairs, py_pairs, strict=True)]
    result = {
        "pairs": args.pairs, "rounds": args.rounds,
        "c_pair_us": round(c_pair * 1e6, 3), "python_raw_pair_us": round(py_pair * 1e6, 3),
        "ratio": round(c_pair / py_pair, 3),
        "ratio_per_round": [round(r, 3) for r in ratios],
        "first_call_ms": round(statistics.median(firsts) * 1e3, 1),
        "first_call_ms_per_round": [round(f * 1e3, 1) for f in firsts],
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"malloc+free pair: C via shim {result['c_pair_us']} us, Python acl_mem.raw "
              f"{result['python_raw_pair_us']} us, ratio {result['ratio']} (goal <= 1.2; "
              f"per round {result['ratio_per_round']})")
        print(f"first call (Python start + import acl_mem): {result['first_call_ms']} ms "
              f"(goal <= 150; per round {result['first_call_ms_per_round']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
