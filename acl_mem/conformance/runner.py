"""acl-mem conformance: run the shipped checks, show progress, summarise by section.

Nothing is written to the current directory: Hypothesis keeps its example database
under cache_dir() and pytest's cache is off (conformance.ini).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .._env import secure_path

__all__ = ["cache_dir", "hypothesis_storage", "run_checks"]

HERE = Path(__file__).resolve().parent
_MISSING = ("acl-mem conformance: the checks need pytest and hypothesis, which are not "
            "installed; install them with: pip install \"acl_mem[conformance]\"")
#: pytest's exit status when nothing was selected.
_NO_TESTS_COLLECTED = 5


def cache_dir() -> Path:
    """Where the checks keep Hypothesis's examples between runs.

    ``$XDG_CACHE_HOME/acl_mem/hypothesis``, or ``~/.cache/acl_mem/hypothesis`` when
    XDG_CACHE_HOME is unset or not an absolute path (as the XDG specification says).
    """
    base = secure_path("XDG_CACHE_HOME") or ""
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "acl_mem" / "hypothesis"


@contextmanager
def hypothesis_storage(directory: Path) -> Iterator[Path]:
    """Point Hypothesis's storage (example database, Unicode tables) at ``directory``
    while the block runs, instead of ``.hypothesis`` in the current directory."""
    from hypothesis import configuration

    setter = getattr(configuration, "set_hypothesis_home_dir", None)
    if setter is None:  # pragma: no cover - Hypothesis releases without the setter
        saved = os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY")
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(directory)
        try:
            yield directory
        finally:
            if saved is None:
                del os.environ["HYPOTHESIS_STORAGE_DIRECTORY"]
            else:
                os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = saved
        return
    # Hypothesis remembers the directory once it has used it; put back what it had.
    previous = getattr(configuration, "__hypothesis_home_directory", None)
    setter(directory)
    try:
        yield directory
    finally:
        setter(previous)


@contextmanager
def usable_cache_dir() -> Iterator[Path]:
    """cache_dir(), created if needed; a temporary directory for this run if it cannot be."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        usable = os.access(directory, os.W_OK | os.X_OK)
        problem = "not writable"
    except (OSError, RuntimeError) as exc:  # RuntimeError: no home directory
        usable, problem = False, str(exc)
    if usable:
        yield directory
        return
    print(f"acl-mem conformance: cannot use the cache directory {directory} ({problem}); "
          "Hypothesis's examples are kept for this run only. Set XDG_CACHE_HOME to a "
          "writable directory to keep them between runs.", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="acl_mem_hypothesis_") as temporary:
        yield Path(temporary)


def _deliver(staged: Path, target: str) -> str | None:
    """Copy the staged report to ``target``; why it failed, or None. Opened without
    blocking, so a FIFO nobody reads is refused instead of hanging."""
    try:
        data = staged.read_bytes()
    except OSError:
        return "the checks did not produce a report"
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK
                             | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        view = memoryview(data)
        while view:
            written = os.write(descriptor, view)
            view = view[written:]
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        os.close(descriptor)
    return None


def run_checks(backend: str = "all", json_path: str | None = None,
               extra: Sequence[str] = (), *, verbose: bool = False,
               keyword: str | None = None, checks: str | os.PathLike[str] | None = None) -> int:
    """Run the checks on ``backend`` (fake, native or all); 0 when none failed.

    Prints one progress line per check file and a summary by runtime-model section;
    ``verbose`` adds every check's row. ``keyword`` selects checks like pytest's -k;
    ``checks`` is the folder of checks (default: the shipped ones).
    Exit status: 0 nothing failed, 1 a check failed, 2 nothing was run (missing
    dependencies, no check selected, interrupted), else pytest's own status.
    """
    # Only look for hypothesis: importing it before pytest starts defeats pytest's
    # assertion rewriting of its plugin.
    if importlib.util.find_spec("pytest") is None or importlib.util.find_spec("hypothesis") is None:
        print(_MISSING, file=sys.stderr)
        return 2
    import pytest

    folder = str(checks if checks is not None else HERE / "checks")
    with ExitStack() as stack:
        storage = stack.enter_context(usable_cache_dir())
        args = [
            folder, "-c", str(HERE / "conformance.ini"), "--rootdir", folder,
            "-p", "acl_mem.conformance.plugin", "-q", "--acl-summary",
            # No [100%] of pytest's own: the plugin writes the progress.
            "-o", "console_output_style=classic",
            f"--acl-backend={backend}", f"--acl-cache-dir={storage}",
        ]
        if verbose:
            args.append("--acl-report")
        if json_path:
            # The plugin writes a private file; the report is copied to json_path below,
            # so that a path that cannot take it makes the exit status non-zero.
            staged = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "report.json"
            args.append(f"--acl-json={staged}")
        if keyword:
            args += ["-k", keyword]
        status = int(pytest.main([*args, *extra]))
        if json_path and status != _NO_TESTS_COLLECTED:
            problem = _deliver(staged, json_path)
            if problem:
                print(f"acl-mem conformance: could not write the JSON report to {json_path}: "
                      f"{problem}; choose another --json FILE.", file=sys.stderr)
                return status or 2
    if status == _NO_TESTS_COLLECTED:
        selection = f" matched -k {keyword!r}" if keyword else " was collected"
        print(f"acl-mem conformance: no check{selection}. -k takes a pytest expression "
              f"over check names (e.g. -k 'malloc and not dvpp'); the checks are the "
              f"test_* functions in {folder}. Drop -k to run them all.", file=sys.stderr)
        return 2
    return status
