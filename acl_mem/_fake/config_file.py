"""aclInit's configuration file, read as the runtime reads it (docs/runtime-model.md §3.1.1).

The runtime reads the file twice: first its raw bytes (whose hash must match the very first
successful aclInit's), then as JSON through a checker that wants a regular file of at most
10 MiB whose brackets nest at most 10 deep. Each step has its own code, so the order of
:func:`check_config` is the order of the runtime's steps.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat

from . import codes

__all__ = ["MAX_CONFIG_BYTES", "MAX_NESTING", "check_config", "read_config"]

#: The JSON checker's size limit; a larger file is 100003.
MAX_CONFIG_BYTES = 10 << 20
#: Deepest nesting of '{' (and, separately, '[') the JSON checker allows; deeper is 100006.
MAX_NESTING = 10
_BOM = b"\xef\xbb\xbf"


class ConfigFile:
    """What aclInit read: the content's digest, or the code reading it failed with."""

    __slots__ = ("content", "digest", "regular", "size")

    def __init__(self, content: bytes, regular: bool, size: int) -> None:
        self.content = content
        self.digest = hashlib.sha256(content).hexdigest()
        self.regular = regular
        self.size = size


def read_config(path: str | None) -> ConfigFile | int:
    """The first step: NULL and "" are an empty file; a path that cannot be opened is 100003.

    Only regular files are read. The runtime would also open a FIFO or a device and block or
    read for ever; the fake answers 100003 at once, the code the runtime's JSON checker gives
    anything that is not a regular file (docs/fidelity.md).
    """
    if not path:
        return ConfigFile(b"", regular=True, size=0)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return codes.INVALID_FILE
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            # A directory reads as empty, then fails the regular-file check.
            return ConfigFile(b"", regular=False, size=0) if stat.S_ISDIR(info.st_mode) \
                else codes.INVALID_FILE
        if info.st_size > MAX_CONFIG_BYTES:
            # Too big to pass the checker, so unlike any accepted file's content: a digest
            # no content has (not hexadecimal) says so without reading it.
            too_big = ConfigFile(b"", regular=True, size=info.st_size)
            too_big.digest = f"over {MAX_CONFIG_BYTES} bytes"
            return too_big
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            content = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return codes.INVALID_FILE
    finally:
        os.close(descriptor)
    return ConfigFile(content, regular=True, size=len(content))


def _nesting(text: bytes) -> tuple[int, int]:
    """Deepest '{' and '[' nesting, counted like the runtime: every bracket up to the first
    NUL, inside strings too."""
    objects = arrays = deepest_object = deepest_array = 0
    for byte in text:
        if byte == 0x7B:
            objects += 1
            deepest_object = max(deepest_object, objects)
        elif byte == 0x7D:
            objects = max(objects - 1, 0)
        elif byte == 0x5B:
            arrays += 1
            deepest_array = max(deepest_array, arrays)
        elif byte == 0x5D:
            arrays = max(arrays - 1, 0)
    return deepest_object, deepest_array


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"{text} does not fit a double")  # nlohmann's parser refuses it
    return number


def _integer(text: str) -> int:
    # Past 64 bits the parser reads an integer as a double, and past a double's range it
    # refuses the number.
    _finite(text)
    return int(text)


def _strings_are_utf8(document: object) -> bool:
    """No lone surrogate escapes ("\\ud800"): nlohmann's parser refuses them."""
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def check_config(config: ConfigFile) -> int:
    """The JSON steps after the hash check: 100003, 100006 or the err_msg_mode 100000."""
    if not config.regular or config.size > MAX_CONFIG_BYTES:
        return codes.INVALID_FILE
    text = config.content.split(b"\0", 1)[0]
    if not text:
        return codes.SUCCESS
    if max(_nesting(text)) > MAX_NESTING:
        return codes.PARSE_FILE
    text = text.removeprefix(_BOM)
    try:
        document = json.loads(text.decode("utf-8"), parse_constant=_refuse_constant,
                              parse_float=_finite, parse_int=_integer)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return codes.PARSE_FILE
    if not _strings_are_utf8(document):
        return codes.PARSE_FILE
    if isinstance(document, dict) and "err_msg_mode" in document and \
            document["err_msg_mode"] not in ("0", "1"):
        return codes.INVALID_PARAM
    return codes.SUCCESS
