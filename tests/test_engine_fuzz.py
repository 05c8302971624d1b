"""The fuzz target over the C library's ABI (tests/fuzz/engine_fuzz.c), briefly: every
seed in tests/fuzz/corpus, then a few seconds of random programs with a fixed seed, and
every saved finding in tests/fuzz/crashes on its own, through the gcc-only driver
(tests/fuzz/driver.c) linked against the library under test (ACL_MEM_FAKE_LIBRARY_DIR
picks another build). The driver gets ACL_MEM_ENGINE_CFLAGS, the flags that build was
made with: with a sanitizer build (as in .ci/run's sanitizer leg) the findings that only
a sanitizer sees show here too. Without them the test stays quick; long runs and the
libFuzzer binaries are tests/fuzz/build.sh's.

An input that aborts (a broken invariant) or crashes fails its test; the bytes are in
the driver's last-input file (printed in hex), and ``FUZZ_TRACE=1 driver FILE`` shows
its calls. Skipped without a C compiler.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from acl_mem._fake.library import library_dir
from acl_mem._fake.versions import DEFAULT_CANN

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "tests" / "fuzz"
SOURCE = ROOT / "acl_mem" / "_fake"
#: Seconds of random inputs after the seeds, and the seed that makes them the same.
SECONDS = 3
SEED = 20240611
CRASHES = sorted(p for p in (FUZZ / "crashes").iterdir()
                 if p.is_file() and not p.name.startswith("."))


def _compiler() -> str | None:
    env = os.environ.get("CC")
    return env or next((found for n in ("cc", "gcc", "clang") if (found := shutil.which(n))),
                       None)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = _compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    libdir = library_dir(DEFAULT_CANN)  # the harness plays every release through it
    binary = tmp_path_factory.mktemp("engine_fuzz") / "driver"
    command = [compiler, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g",
               *shlex.split(os.environ.get("ACL_MEM_ENGINE_CFLAGS", "")),
               f"-I{SOURCE / 'src'}", f"-I{SOURCE / 'include'}",
               str(FUZZ / "engine_fuzz.c"), str(FUZZ / "driver.c"), f"-L{libdir}",
               "-lascendcl", "-lacl_dvpp", "-lacl_dvpp_mpi", f"-Wl,-rpath,{libdir}", "-lm",
               "-o", str(binary)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return binary


def _run(binary: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # Nothing of Python or of the test's settings reaches the program.
    clean = {key: value for key, value in os.environ.items()
             if not key.startswith(("PYTHON", "VIRTUAL_ENV", "ACL_MEM_", "LD_PRELOAD",
                                    "FUZZ_"))}
    clean["FUZZ_LAST_INPUT"] = str(cwd / "last-input")
    return subprocess.run([str(binary), *args], env={**clean, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _passed(done: subprocess.CompletedProcess[str], cwd: Path) -> str:
    """The driver's summary line, once it exited 0."""
    last = cwd / "last-input"
    report = "\n".join(line for line in done.stderr.splitlines()
                       if not line.startswith("acl_mem: hazard"))
    assert done.returncode == 0, (
        f"exit {done.returncode}; the input: {last.read_bytes().hex()}\n{report[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


def test_the_seeds_then_random_programs(driver: Path, tmp_path: Path) -> None:
    corpus = [p for p in (FUZZ / "corpus").iterdir() if p.is_file()]
    assert len(corpus) >= 10, "the seed corpus is missing"
    done = _run(driver, "-t", str(SECONDS), "-s", str(SEED), "-T", "60",
                str(FUZZ / "corpus"), cwd=tmp_path)
    summary = _passed(done, tmp_path)
    assert summary.startswith(f"driver: seed {SEED}: ran "), done.stdout
    assert f"({len(corpus)} files, " in summary, summary
    random_inputs = int(summary.split(" files, ")[1].split()[0])
    assert random_inputs > 100, summary  # the time budget ran programs, not nothing


@pytest.mark.parametrize("finding", CRASHES, ids=[p.name for p in CRASHES])
def test_a_saved_finding_runs_clean(driver: Path, tmp_path: Path, finding: Path) -> None:
    """Each input that once crashed or broke an invariant (tests/fuzz/crashes)."""
    summary = _passed(_run(driver, "-T", "60", str(finding), cwd=tmp_path), tmp_path)
    assert "(1 files, 0 random)" in summary, summary


def _standalone(tmp_path: Path, target: str, source: str, corpus: str) -> list[Path]:
    """Build tests/fuzz/``target`` with the library's ``source`` alone (no engine), run
    every seed of tests/fuzz/``corpus`` then two seconds of random inputs; the seeds."""
    compiler = _compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    binary = tmp_path / Path(target).stem
    done = subprocess.run(
        [compiler, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g",
         *shlex.split(os.environ.get("ACL_MEM_ENGINE_CFLAGS", "")),
         f"-I{SOURCE / 'src'}", f"-I{SOURCE / 'include'}", str(FUZZ / target),
         str(SOURCE / "src" / source), str(FUZZ / "driver.c"), "-o", str(binary)],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    seeds = [p for p in (FUZZ / corpus).iterdir() if p.is_file()]
    summary = _passed(_run(binary, "-t", "2", "-s", str(SEED), str(FUZZ / corpus),
                           cwd=tmp_path), tmp_path)
    assert f"({len(seeds)} files, " in summary, summary
    return seeds


def test_the_share_record_reader_on_seeds_then_random_bytes(tmp_path: Path) -> None:
    """tests/fuzz/record_fuzz.c: the record reader never crashes, accepts only what it
    can write back the same, and says why it refuses (compiled with that file alone)."""
    seeds = _standalone(tmp_path, "record_fuzz.c", "share_record.c", "record_corpus")
    assert any(p.name == "valid.json" for p in seeds)


def test_the_trace_line_formatter_on_seeds_then_random_bytes(tmp_path: Path) -> None:
    """tests/fuzz/lines_fuzz.c: the formatter of captured records (what acl_mem's trace
    writer runs) never crashes or reads past the records, writes one whole ASCII line per
    record it takes and always gets further (compiled with that file alone)."""
    seeds = _standalone(tmp_path, "lines_fuzz.c", "trace_lines.c", "lines_corpus")
    assert len(seeds) >= 2


def test_the_checkers_segments_on_seeds_then_random_programs(tmp_path: Path) -> None:
    """tests/fuzz/checker_fuzz.c: segments declared anywhere, blocks freed under them,
    copies across them and writes into freed pinned memory, with the checker on: only
    documented codes, no crash."""
    compiler = _compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    libdir = library_dir(DEFAULT_CANN)
    binary = tmp_path / "checker"
    done = subprocess.run(
        [compiler, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g",
         *shlex.split(os.environ.get("ACL_MEM_ENGINE_CFLAGS", "")),
         f"-I{SOURCE / 'src'}", f"-I{SOURCE / 'include'}", str(FUZZ / "checker_fuzz.c"),
         str(FUZZ / "driver.c"), f"-L{libdir}", "-lascendcl", f"-Wl,-rpath,{libdir}", "-o",
         str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    seeds = [p for p in (FUZZ / "checker_corpus").iterdir() if p.is_file()]
    summary = _passed(_run(binary, "-t", "2", "-s", str(SEED), str(FUZZ / "checker_corpus"),
                           cwd=tmp_path), tmp_path)
    assert f"({len(seeds)} files, " in summary, summary
