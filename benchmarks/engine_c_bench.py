"""acl_mem's fake libascendcl from C against libc, as ratios measured in one run.

Goals (the engine's move to C): a 4 KiB malloc+free pair <= 8x libc's; a 4 KiB malloc +
H2D + D2H + free round with host pointers checked <= 6x libc malloc + 2 memmove + free;
2 threads scale like libc's (each on its own device, and on one device).

    python benchmarks/engine_c_bench.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from acl_mem._fake.library import library_dir  # noqa: E402
from acl_mem.shim._csource import minimal_header  # noqa: E402


def _measure(program: str, tmp: Path, include: Path, lib: Path) -> dict[str, float]:
    """Compile benchmarks/c/<program> against the library and read its "key value" lines."""
    binary = tmp / Path(program).stem
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-std=c11", "-pthread",
                    f"-I{include}", str(HERE / "c" / program), f"-L{lib}", "-lascendcl",
                    f"-Wl,-rpath,{lib}", "-o", str(binary)], check=True)
    done = subprocess.run([str(binary)], capture_output=True, text=True, check=True,
                          env={k: v for k, v in os.environ.items()
                               if not k.startswith("ACL_MEM_")})
    return {key: float(value) for key, value in (line.split() for line in
                                                 done.stdout.splitlines())}


def main() -> int:
    lib = library_dir()
    with tempfile.TemporaryDirectory() as tmp:
        include = Path(tmp) / "include" / "acl"
        include.mkdir(parents=True)
        (include / "acl.h").write_text(minimal_header())
        ns = _measure("engine_rounds.c", Path(tmp), include.parent, lib)
        threads = _measure("engine_threads.c", Path(tmp), include.parent, lib)
    pair = ns["acl_pair"] / ns["libc_pair"]
    round_ = ns["acl_round"] / ns["libc_round"]
    print(f"4 KiB pair:  {ns['acl_pair']:.0f} ns vs libc {ns['libc_pair']:.0f} ns = "
          f"{pair:.1f}x (goal <= 8x)")
    print(f"4 KiB round: {ns['acl_round']:.0f} ns vs libc {ns['libc_round']:.0f} ns = "
          f"{round_:.1f}x (goal <= 6x)")
    print(f"2 threads vs 1, 4 KiB rounds: separate devices {threads['threads_separate']:.2f}x, "
          f"one device {threads['threads_same']:.2f}x, libc {threads['threads_libc']:.2f}x "
          f"(on {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
