"""acl_mem's fake libascendcl from C against libc, as ratios measured in one run.

Goals (the engine's move to C): a 4 KiB malloc+free pair <= 8x libc's; a 4 KiB malloc +
H2D + D2H + free round with host pointers checked <= 6x libc malloc + 2 memmove + free;
2 and 4 threads scale like libc's (each on its own device, and on one device).

    python benchmarks/engine_c_bench.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from acl_mem._fake.library import PREFIX, library_dir  # noqa: E402


def _measure(program: str, tmp: Path, include: Path, lib: Path,
             runs: int = 1) -> dict[str, float]:
    """Compile benchmarks/c/<program> against the library and read its "key value" lines
    (the median of ``runs`` fresh processes)."""
    binary = tmp / Path(program).stem
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-std=c11", "-pthread",
                    f"-I{include}", str(HERE / "c" / program), f"-L{lib}", "-lascendcl",
                    f"-Wl,-rpath,{lib}", "-o", str(binary)], check=True)
    seen: dict[str, list[float]] = {}
    for _ in range(runs):
        done = subprocess.run([str(binary)], capture_output=True, text=True, check=True,
                              env={k: v for k, v in os.environ.items()
                                   if not k.startswith("ACL_MEM_")})
        for key, value in (line.split() for line in done.stdout.splitlines()):
            seen.setdefault(key, []).append(float(value))
    return {key: statistics.median(values) for key, values in seen.items()}


def main() -> int:
    lib = library_dir()
    include = PREFIX / "include"
    with tempfile.TemporaryDirectory() as tmp:
        ns = _measure("engine_rounds.c", Path(tmp), include, lib)
        threads = _measure("engine_threads.c", Path(tmp), include, lib)
        first = _measure("engine_first_call.c", Path(tmp), include, lib, runs=21)
    pair = ns["acl_pair"] / ns["libc_pair"]
    round_ = ns["acl_round"] / ns["libc_round"]
    print(f"4 KiB pair:  {ns['acl_pair']:.0f} ns vs libc {ns['libc_pair']:.0f} ns = "
          f"{pair:.1f}x (goal <= 8x)")
    print(f"4 KiB round: {ns['acl_round']:.0f} ns vs libc {ns['libc_round']:.0f} ns = "
          f"{round_:.1f}x (goal <= 6x)")
    for n, key in ((2, "threads"), (4, "threads4")):
        print(f"{n} threads vs 1, 4 KiB rounds: separate devices "
              f"{threads[key + '_separate']:.2f}x, one device {threads[key + '_same']:.2f}x, "
              f"libc {threads[key + '_libc']:.2f}x (on {os.cpu_count()} CPUs)")
    print(f"first calls (aclInit, aclrtSetDevice, a 4 KiB pair), median of 21 processes: "
          f"{first['first_call_ns'] / 1e6:.2f} ms (goal <= 5 ms); libpython in the process: "
          f"{'yes' if first['libpython_mapped'] else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
