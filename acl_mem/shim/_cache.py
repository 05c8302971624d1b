"""Where the drop-in libraries are cached, and why that place can be trusted.

Every C program linked against the drop-in loads code from the cache, so it is treated
like ``~/.ssh``: whoever can write any directory on the way to it can swap in their own
``libascendcl.so``. The checks, made before anything there is used:

- **The cache root** (``$XDG_CACHE_HOME/acl_mem/shim``) **and everything under it** that
  is used: not a symbolic link, owned by the user. A directory of ours that others may
  write (made under a umask of 002 by an older acl_mem) is closed to them; a file that
  others may write is refused (the build writes none).
- **Every directory above the cache root, up to /** (``$XDG_CACHE_HOME/acl_mem``,
  ``$XDG_CACHE_HOME``, ``$HOME``, ..., both as written and with links resolved): owned by
  the user or root, and not writable by group or others unless it has the sticky bit.
  With the sticky bit (``/tmp``) others cannot rename or remove our entries there, which
  is all a swap needs; which sticky directories a system has is its own business.

``XDG_CACHE_HOME`` is read like every path acl_mem takes from the environment
(acl_mem/_env.py ``secure_path``: ignored by a set-id process); a relative value is
ignored, as the XDG Base Directory specification says.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
from pathlib import Path

from .._env import secure_path

__all__ = ["CacheError", "cache_root", "check_tree", "prepare_root", "remove_stale"]


class CacheError(Exception):
    """The cache cannot be trusted or used; the message is one line naming the path."""


def _home() -> str:
    home = secure_path("HOME")
    if home is None or not os.path.isabs(home):
        home = pwd.getpwuid(os.geteuid()).pw_dir
    return home


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/acl_mem/shim`` (absolute values only), else ``~/.cache/...``."""
    base = secure_path("XDG_CACHE_HOME")
    if base is None or not os.path.isabs(base):
        base = os.path.join(_home(), ".cache")
    return Path(os.path.normpath(base)) / "acl_mem" / "shim"


def _refuse(path: Path, problem: str) -> CacheError:
    return CacheError(f"{path}: {problem}; the drop-in libraries will not be built or "
                      "loaded from there. Fix it, or set XDG_CACHE_HOME to a directory "
                      "of your own")


def _check_ancestor(path: Path) -> None:
    info = os.stat(path)
    if info.st_uid not in (0, os.geteuid()):
        raise _refuse(path, f"a directory above the cache belongs to another user (uid "
                            f"{info.st_uid})")
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise _refuse(path, "a directory above the cache is writable by others (mode "
                            f"{stat.S_IMODE(info.st_mode):o}, no sticky bit)")


def check_ancestors(root: Path) -> None:
    """Every directory above ``root``, as written and with links resolved."""
    seen: set[Path] = set()
    for start in (root, Path(os.path.realpath(root))):
        for parent in start.parents:
            if parent not in seen:
                seen.add(parent)
                _check_ancestor(parent)


def _check_own(path: Path) -> os.stat_result:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(path, "is a symbolic link")
    if info.st_uid != os.geteuid():
        raise _refuse(path, f"belongs to another user (uid {info.st_uid})")
    if info.st_mode & 0o022:
        if not stat.S_ISDIR(info.st_mode):
            raise _refuse(path, f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})")
        os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o022)
    return info


def check_tree(top: Path) -> None:
    """``top`` and everything under it: ours, no links, nobody else can write."""
    if not stat.S_ISDIR(_check_own(top).st_mode):
        raise _refuse(top, "is not a directory")
    for directory, subdirs, files in os.walk(top):
        for name in [*subdirs, *files]:
            _check_own(Path(directory) / name)


def prepare_root(root: Path) -> None:
    """Create the cache root if needed and check it and what is above it; a path that
    is a file, cannot be created or cannot be written is a CacheError."""
    try:
        # Each directory is checked before anything is made in it: none is created where
        # the checks then refuse to go.
        for directory in [*reversed(root.parents), root]:
            if not os.path.lexists(directory):
                _check_ancestor(directory.parent)
                # Another process (a second `acl-mem` started at the same moment) may
                # make it between the look and the mkdir; it is checked below like any.
                with contextlib.suppress(FileExistsError):
                    os.mkdir(directory, 0o700)
            if not os.path.isdir(directory):
                raise _refuse(directory, "is not a directory")
        check_ancestors(root)
        if not os.access(root, os.W_OK | os.X_OK):
            raise _refuse(root, "cannot be written")
        _check_own(root)
    except CacheError:
        raise
    except OSError as exc:
        raise _refuse(Path(exc.filename or root), exc.strerror or str(exc)) from None


def remove_stale(root: Path, prefix: str) -> None:
    """Remove the temporary directories ``prefix*`` of builds that died (SIGKILL, power
    loss). Called under the build lock of that key: nobody else is building there."""
    for entry in root.iterdir():
        if entry.name.startswith(prefix) and not entry.is_symlink() and entry.is_dir():
            # rmtree does not follow links inside the tree (it checks each one).
            shutil.rmtree(entry, ignore_errors=True)
