"""Recorders: the queue the wrappers append to, a thread that ships it in batches to a
writer process, and what happens at fork and at exit (docs/trace-format.md).

The recording program pays for one tuple per call and, every 0.1 s, for pickling the
queued tuples onto a pipe; the writer process (``_lines.py``, standard library only)
turns them into JSON lines on another core. Where no writer process can be started the
same work is done by the shipping thread itself.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import fcntl
import io
import marshal
import os
import pickle
import re
import secrets
import select
import subprocess
import sys
import threading
import time
import weakref
from time import perf_counter_ns
from types import TracebackType
from typing import Any

from typing_extensions import Self

from .. import __version__, _backend, _env
from .._lifecycle import state
from ..enums import MemAttr
from ..errors import SettingError
from ..sizes import soc_padding
from . import _tap
from ._lines import BOXED, FRAME, MARSHAL, PICKLE, Consumer, has_calls
from ._open import open_new_trace_file, open_trace_file

__all__ = ["ENV_OWNER", "ENV_PATH", "ENV_STACK", "Recorder", "active", "flush", "record",
           "start_from_environment"]

ENV_PATH = "ACL_MEM_TRACE"
ENV_STACK = "ACL_MEM_TRACE_STACK"
#: Set by the process that records ``ACL_MEM_TRACE`` itself, to ``<pid>:<run>``; any other
#: process that inherits both variables (a forked, spawned or executed child) records to
#: ``<path>.<pid>``, with the header's ``run`` of the owner's.
ENV_OWNER = "ACL_MEM_TRACE_OWNER"
#: Seconds between two shipments of the queue.
SHIP_INTERVAL = 0.1
#: Items pickled per frame (bounds the memory one shipment takes).
_BATCH = 8192
#: Bytes the pipe to the writer process holds (Linux's default limit for a user).
_PIPE_SIZE = 1 << 20
#: Seconds stop() waits for the writer process to finish the file.
_WRITER_WAIT = 60.0
_WRITER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lines.py")
#: Set to False to format in the recording process (tests, or where processes cannot be
#: started).
use_writer_process = True

_recorders: weakref.WeakSet[Recorder] = weakref.WeakSet()


class _Pickler(pickle.Pickler):
    """Pickles only what the writer process can rebuild without acl_mem: int, float and
    str subclasses (IntEnum members) as their plain values, anything else as its repr."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type):
            return NotImplemented
        plain: Any
        for plain in (int, float, str, tuple, list, dict):
            if isinstance(obj, plain) and not isinstance(obj, bool):
                return plain, (plain(obj),)
        return str, (repr(obj),)


def _dumps(items: list[Any]) -> bytes:
    """A batch as the writer process reads it: marshal (fast) when everything in it is a
    plain value, else pickle restricted to plain values (``_Pickler``)."""
    try:
        return MARSHAL + marshal.dumps(items)
    except ValueError:
        buffer = io.BytesIO()
        buffer.write(PICKLE)
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(items)
        return buffer.getvalue()


def new_run() -> str:
    """The ``run`` of a recording's headers: its own file's and those of the processes it
    starts, so that a reader tells them from files an earlier run left beside them."""
    return secrets.token_hex(8)


def _utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def _query(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception:
        return None


def describe_backend(backend: _backend.Backend) -> dict[str, object]:
    """What the header (or a backend line) says about ``backend``: asked with calls that
    change nothing, none of them recorded."""
    soc = _query(backend.soc_name) or ""
    release = _query(backend.aclsysGetVersionStr, "runtime")
    cann = release[1] if isinstance(release, tuple) and release[0] == 0 else ""
    version = _query(backend.aclrtGetVersion)
    acl = ".".join(map(str, version[1:])) if isinstance(version, tuple) and version[0] == 0 \
        else None
    count = _query(backend.aclrtGetDeviceCount)
    device_count = count[1] if isinstance(count, tuple) and count[0] == 0 else None
    details = _query(backend.describe)
    details = details if isinstance(details, dict) else {}
    memory: str | None = None
    capacity = details.get("capacity_per_device")
    current = state.current_device()
    if current is not None:
        # Asked only where this thread has a device: the query needs a context.
        info = _tap.original(backend, "aclrtGetMemInfo")
        for attr, kind in ((MemAttr.HBM_MEM, "HBM"), (MemAttr.DDR_MEM, "DDR")):
            answer = _query(info, int(attr))
            if isinstance(answer, tuple) and answer[0] == 0 and answer[2]:
                memory, capacity = kind, answer[2]
                break
    counts = {str(d): state.set_count(d) for d in range(min(device_count or 0, 64))
              if state.set_count(d) > 0}
    return {
        "backend": backend.name, "soc": soc, "cann": cann, "acl": acl,
        "padding": soc_padding(soc, cann), "device_count": device_count,
        "memory": memory, "capacity": capacity if isinstance(capacity, int) else None,
        "set_counts": counts, "current_device": current, "details": details,
    }


def _wait_for_end(answers: int, timeout: float) -> bool:
    """Read the writer's answers until they end (it closed the file and exited); False
    when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([answers], [], [], left)[0]:
                return False
            if not os.read(answers, 4096):
                return True
    except (OSError, ValueError):
        return True


class Recorder:
    """One trace file being written; made by :func:`record`, and a context manager.

    ``stop()`` (or the end of the ``with`` block, or the end of the process) writes what
    is queued and the ``end`` line, and closes the file.
    """

    def __init__(self, path: str | os.PathLike[str], *, stack_depth: int = 0) -> None:
        if type(stack_depth) is not int or stack_depth < 0:
            raise ValueError(f"acl_mem.trace.record: stack_depth must be an int >= 0, got "
                             f"{stack_depth!r}")
        self._base_path = os.path.abspath(os.fspath(path))
        self._path = self._base_path
        self.stack_depth = stack_depth
        #: The recorded values, flat (see _lines.py); the list object never changes, so a
        #: wrapper can never add to a list already shipped.
        self._buffer: list[Any] = []
        #: What the wrappers call: the list's own extend, nothing else on the hot path.
        self.extend = self._buffer.extend
        self._ship_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._wake = threading.Event()
        self._shipper: threading.Thread | None = None
        self._active = False
        #: Values held back until the first call (a forked child makes no file before).
        self._pending: list[Any] = []
        self._names: dict[int, str] = {}
        self._backends: list[weakref.ref[Any]] = []
        self._backend_info: dict[str, object] | None = None
        # Where batches go: a writer process (its pipe), or a Consumer in this process.
        self._writer: subprocess.Popen[bytes] | None = None
        self._pipe: int | None = None
        #: The writer process's answers to #sync (its standard output).
        self._answers: int | None = None
        self._consumer: Consumer | None = None
        self._broken = False
        self._lost = 0
        #: The process's count of calls whose recording failed, when this one started
        #: (those before are other recordings').
        self._tap_lost_before = _tap.lost()
        #: The checked file, until the writer (process or Consumer) takes it over.
        self._fd: int | None = None
        #: ``<path>.<pid>`` files (a child's) must be new ones.
        self._exclusive = False
        self._pid = os.getpid()
        self._parent_pid: int | None = None
        #: Shared with the children, forked (kept over fork) or started (ENV_OWNER).
        self.run: str | None = new_run()

    # -- public ------------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        """The file being written (``<path>.<pid>`` in a forked child)."""
        return self._path

    @property
    def active(self) -> bool:
        """True until stop()."""
        return self._active

    @property
    def lost(self) -> int:
        """Batches or calls that could not be recorded (the calls themselves were not
        affected); the ``end`` line reports the final count."""
        return self._lost + _tap.lost() - self._tap_lost_before

    def flush(self) -> None:
        """Ship everything recorded so far to the writer (done every 0.1 s anyway); the
        file has it once the writer gets to it: see :meth:`sync`."""
        self._ship()

    def sync(self, timeout: float = 30.0) -> bool:
        """Ship everything recorded so far and wait until the file has it; False if the
        writer did not confirm within ``timeout`` seconds."""
        with self._sync_lock:
            answers = self._answers
            if answers is not None:
                with contextlib.suppress(OSError, ValueError):
                    while select.select([answers], [], [], 0)[0]:  # late answers of a
                        if not os.read(answers, 64):                # sync that timed out
                            break
            self._ship(sync=True)
            if answers is None:  # written in this process: already done
                return True
            try:
                ready, _, _ = select.select([answers], [], [], timeout)
                return bool(ready) and os.read(answers, 1) == b"\x01"
            except (OSError, ValueError):
                return False

    def stop(self) -> None:
        """Stop recording, write the rest and the ``end`` line, close the file. A second
        call does nothing."""
        if not self._active:
            return
        self._active = False
        _tap.detach(self)
        _recorders.discard(self)
        self._wake.set()
        shipper = self._shipper
        if shipper is not None and shipper is not threading.current_thread():
            shipper.join(timeout=5)
        self._ship(end=True)
        with self._ship_lock:
            self._close_writer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        status = "recording" if self._active else "stopped"
        return f"<acl_mem.trace.Recorder {self._path!r} {status}>"

    # -- start -------------------------------------------------------------------------------------
    def _process_item(self, t0: int) -> tuple[str, int, dict[str, object]]:
        return ("#process", t0, {
            "t0": t0, "acl_mem": __version__, "pid": os.getpid(),
            "parent_pid": self._parent_pid, "run": self.run, "argv": list(sys.argv),
            "started": _utc_now(), "stack_depth": self.stack_depth})

    def _start(self) -> None:
        # Opened here, so that a path that cannot or must not be written fails the call
        # to record().
        self._open_file()
        self._pending += (BOXED, self._process_item(perf_counter_ns()))
        self._connect()
        self._active = True
        _recorders.add(self)
        _register_exit()
        _register_worker_exit(self)
        try:
            backend = _tap.attach(self)
        except BaseException:
            self._active = False
            _recorders.discard(self)
            self._close_writer()
            raise
        if backend is not None:
            self.backend_added(backend, first=True)
        self._start_shipper()

    def _start_shipper(self) -> None:
        self._shipper = threading.Thread(target=self._ship_loop, daemon=True,
                                         name="acl_mem.trace shipper")
        self._shipper.start()

    def _open_file(self) -> None:
        """Open the file (checked: docs/trace-format.md); the writer gets the descriptor,
        so the file written is the one checked, whatever the path names later."""
        if self._exclusive:
            # A child's: FILE.<pid>.<n> when an earlier run left FILE.<pid> (pid reuse).
            self._fd, self._path = open_new_trace_file(self._path)
        else:
            self._fd = open_trace_file(self._path, exclusive=False)

    def _connect(self) -> None:
        """Start the writer process (or, failing that, an in-process writer)."""
        fd, self._fd = self._fd, None
        assert fd is not None
        if use_writer_process and sys.executable:
            read_end, write_end = os.pipe()
            # Room for a shipment or more: a write that must wait for the writer to read
            # (a 64 KiB pipe) stalls the program for the writer's scheduling delay.
            with contextlib.suppress(OSError, AttributeError):
                fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
            try:
                # The writer detaches (it forks and its first process exits at once,
                # reaped here): the recorded program's own wait() for any child must
                # never see it, or a program reaping its children waits for it for ever.
                # Its end shows as the end of its answers pipe.
                starter = subprocess.Popen(
                    [sys.executable, "-I", "-S", _WRITER_SCRIPT, self._path, str(fd),
                     "detach"],
                    stdin=read_end, stdout=subprocess.PIPE, start_new_session=True,
                    pass_fds=(fd,))
                starter.wait()
                self._pipe = write_end
                assert starter.stdout is not None
                self._writer = starter
                self._answers = starter.stdout.fileno()
                os.close(fd)
                return
            except (OSError, ValueError, subprocess.SubprocessError):
                os.close(write_end)
            finally:
                os.close(read_end)
        self._consumer = Consumer(self._path, fd)

    # -- what the tap calls ------------------------------------------------------------------------
    def backend_added(self, backend: _backend.Backend, *, first: bool = False) -> None:
        """``backend`` is recorded from now on: described in the header, or in a
        ``backend`` line once the header is written. ``first``: the one active at the
        start, described before any call (other threads' calls may reach the buffer
        already)."""
        if any(ref() is backend for ref in self._backends):
            return
        self._backends = [ref for ref in self._backends if ref() is not None]
        self._backends.append(weakref.ref(backend))
        self._backend_info = describe_backend(backend)
        item = (BOXED, ("#backend", perf_counter_ns(), self._backend_info))
        if first:
            with self._ship_lock:
                self._pending += item
        else:
            self.extend(item)

    # -- shipping ----------------------------------------------------------------------------------
    def _ship_loop(self) -> None:
        while self._active:
            self._wake.wait(SHIP_INTERVAL)
            self._wake.clear()
            with contextlib.suppress(Exception):
                self._ship()

    def _ship(self, end: bool = False, sync: bool = False) -> None:
        if not self._active and not end:
            # Stopped: the file is complete. (A call still in a wrapper at stop() may
            # add to the buffer: it ended after the recording did.)
            return
        _tap.drain()  # what the library captured joins the buffers first
        with self._ship_lock:
            buffer = self._buffer
            count = len(buffer)
            batch = buffer[:count]
            del buffer[:count]  # only what was copied: a wrapper may be adding more now
            if self._pending:
                batch[:0] = self._pending
                self._pending = []
            if end:
                batch += (BOXED, ("#end", perf_counter_ns(), self.lost))
            if sync and (self._pipe is not None or self._consumer is not None):
                batch += (BOXED, ("#sync", 0, 0))
            if not batch:
                return
            if self._pipe is None and self._consumer is None:
                # A forked child: no writer (and no file) before its first call.
                if not has_calls(batch):
                    if not end:
                        self._pending = batch
                    return
                if self._broken:
                    return
                try:
                    self._open_file()
                except OSError as exc:
                    self._broken = True  # said once; the child runs unrecorded
                    print(f"acl_mem.trace: cannot record into {self._path}: "
                          f"{exc.strerror or exc}", file=sys.stderr)
                    return
                self._connect()
            names = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
            new = {ident: name for ident, name in names.items()
                   if self._names.get(ident) != name}
            if new:
                self._names.update(new)
                batch[:0] = (BOXED, ("#threads", 0, new))
            self._send(batch)

    def _send(self, batch: list[Any]) -> None:
        if self._consumer is not None:
            self._consumer.feed(batch)
            return
        if self._pipe is None or self._broken:
            self._lost += 1
            return
        try:
            payload = _dumps(batch)
        except Exception:
            self._lost += 1  # (a whole batch: not expected, _Pickler takes anything)
            return
        try:
            for part in (FRAME.pack(len(payload)), payload):
                view = memoryview(part)
                while view:
                    view = view[os.write(self._pipe, view):]
        except OSError:
            self._broken = True  # the writer process is gone; the file ends here
            self._lost += 1
            print(f"acl_mem.trace: the writer of {self._path} stopped; calls from now on "
                  "are not recorded", file=sys.stderr)

    def _close_writer(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                os.close(self._pipe)
            self._pipe = None
        writer, self._writer = self._writer, None
        answers, self._answers = self._answers, None
        if writer is not None and answers is not None:
            if not _wait_for_end(answers, _WRITER_WAIT):
                print(f"acl_mem.trace: the writer of {self._path} is still busy; it finishes "
                      "the file in the background", file=sys.stderr)
            if writer.stdout is not None:
                writer.stdout.close()

    # -- fork --------------------------------------------------------------------------------------
    def _after_fork_in_child(self) -> None:
        """The child keeps recording, into ``<path>.<pid>``, made when the child records
        its first call; what the parent had queued is the parent's to write."""
        self._ship_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._wake = threading.Event()
        self._buffer.clear()
        self._pending = []
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                os.close(self._pipe)  # the parent's writer: not ours to write to
        self._pipe = None
        self._answers = None
        self._writer = None
        self._consumer = None
        self._broken = False
        self._names = {}
        self._lost = 0
        self._tap_lost_before = _tap.lost()
        self._parent_pid, self._pid = self._pid, os.getpid()
        self._path = f"{self._base_path}.{self._pid}"
        self._exclusive = True
        self._fd = None
        self._pending += (BOXED, self._process_item(perf_counter_ns()))
        if self._backend_info is not None:
            # A forked child holds no device (docs/runtime-model.md §3.2).
            info = {**self._backend_info, "set_counts": {}, "current_device": None}
            self._pending += (BOXED, ("#backend", perf_counter_ns(), info))
        self._start_shipper()


def _after_fork_in_child() -> None:
    for recorder in list(_recorders):
        with contextlib.suppress(Exception):
            recorder._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _stop_at_worker_exit(recorder: Recorder) -> None:
    """In a process multiprocessing forked, which ends with os._exit (skipping atexit):
    stop the recorder in the worker's exit handling instead."""
    import multiprocessing.util

    multiprocessing.util.Finalize(recorder, recorder.stop, exitpriority=100)


def _register_worker_exit(recorder: Recorder) -> None:
    with contextlib.suppress(Exception):
        import multiprocessing.util

        multiprocessing.util.register_after_fork(recorder, _stop_at_worker_exit)


_exit_registered = False


def _register_exit() -> None:
    global _exit_registered
    if not _exit_registered:
        _exit_registered = True
        atexit.register(stop_all)


def stop_all() -> None:
    """Stop every recorder of this process (at exit)."""
    for recorder in list(_recorders):
        with contextlib.suppress(Exception):
            recorder.stop()


def active() -> list[Recorder]:
    """The recorders of this process that are recording."""
    return [r for r in list(_recorders) if r.active]


def flush() -> None:
    """Ship what every active recorder has queued to its writer."""
    for recorder in active():
        recorder.flush()


def record(path: str | os.PathLike[str], *, stack_depth: int = 0) -> Recorder:
    """Record the memory calls of the active backend (and of any backend made active
    while recording) into ``path``, from now until ``stop()``.

    Use as ``with acl_mem.trace.record("run.jsonl"):`` or keep the recorder and call its
    ``stop()``. ``stack_depth`` > 0 records that many frames of the caller's stack
    (outside acl_mem) with each call. The file is JSON Lines (docs/trace-format.md).
    """
    recorder = Recorder(path, stack_depth=stack_depth)
    recorder._start()
    return recorder


#: What a recording's ``run`` is (``Recorder.run``): 16 hexadecimal digits.
_RUN = re.compile(r"[0-9a-f]{16}")


def start_from_environment() -> Recorder | None:
    """``ACL_MEM_TRACE=FILE``: record this whole process (called by ``import acl_mem``).

    The first process writes FILE; processes started from it that inherit the variable
    write ``FILE.<pid>``, a new file. A problem (a bad setting, a path that must not be
    written) is reported on standard error in one line, never raised.
    """
    try:
        path = _env.secure_path(ENV_PATH)
        if path is None:
            return None
        depth = _env.whole_number(ENV_STACK, 0)
    except SettingError as exc:
        print(f"acl_mem: not recording: {exc}", file=sys.stderr)
        return None
    pid = str(os.getpid())
    owner, _, run = (os.environ.get(ENV_OWNER) or "").partition(":")
    if not _RUN.fullmatch(run):
        run = ""  # not a run this acl_mem wrote (an older one's, or garbage)
    # Any owner means another recording came first, also one with this very pid: the
    # owner sets the variable only after it started, so the same pid here is a program
    # it exec'd, which must not empty the file that recording wrote.
    child = bool(owner)
    if child:
        path = f"{path}.{pid}"
    try:
        recorder = Recorder(path, stack_depth=depth)
        if child:
            recorder.run = run or None  # (None: an owner of an older acl_mem)
        else:
            os.environ[ENV_OWNER] = f"{pid}:{recorder.run}"
            # Children started in another directory write beside this file, not beside
            # a relative name there.
            os.environ[ENV_PATH] = os.path.abspath(path)
        recorder._exclusive = child
        recorder._start()
        return recorder
    except (OSError, ValueError, TypeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"acl_mem: {ENV_PATH}={os.environ.get(ENV_PATH)!r}: not recording into "
              f"{path}: {reason}", file=sys.stderr)
        return None
