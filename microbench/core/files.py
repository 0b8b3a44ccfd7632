"""The one way a command opens a file it did not write, and checks a file it will replace: regular files only.

A FIFO with no writer blocks `open()` forever, `/dev/zero` never ends, a folder or a device is no input; run as
root, replacing `--json /dev/null` with a regular file would break the machine. So every input is opened
without blocking (`O_NONBLOCK`: a FIFO opens at once), checked with `fstat` on the descriptor it will be read
from (no window between the check and the read), and refused unless it is a regular file; every output path
that exists must be a regular file too. Every `OSError` on the way (`ENAMETOOLONG`, `EACCES`, `ELOOP`) is one
InputError line naming the path; names with control characters are escaped by InputError itself.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from microbench.core.errors import InputError

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_input(path: str | Path, what: str | None = None) -> BinaryIO:
    """A regular file opened for reading (binary), or one InputError line: missing, unreadable, a folder,
    a FIFO, a device, a name too long."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}", key=what) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(path, f"is {kind_of(mode)}, not a regular file", key=what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: str | Path, what: str | None = None, max_bytes: int | None = None) -> bytes:
    """The whole (regular) file; beyond `max_bytes`, one line instead of an unbounded read."""
    with open_input(path, what) as f:
        try:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
        except OSError as e:
            raise InputError(path, f"cannot read: {e.strerror or e}", key=what) from None
    if max_bytes is not None and len(data) > max_bytes:
        raise InputError(path, f"larger than {max_bytes:,} bytes: not an input of this kind", key=what)
    return data


def check_input(path: str | Path, what: str | None = None) -> Path:
    """For a reader that opens the file by name itself (SQLite, mlperf-logging): the same checks, then closed."""
    open_input(path, what).close()
    return Path(path)


def check_output(path: str | Path, what: str) -> os.stat_result | None:
    """An output path about to be written or replaced: absent (None), or a regular file (its stat). A device,
    a FIFO or a folder is never replaced, even by root."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise InputError(path, f"cannot use it: {e.strerror or e}", key=what) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, f"is {kind_of(st.st_mode)}: only a regular file is replaced; give a file name", key=what)
    return st


def is_folder(path: str | Path, what: str | None = None) -> bool:
    """True for a folder, False for anything else or nothing; a path the system refuses to look up (a name
    too long, a loop of links) is one line instead of Python's OSError (Path.is_dir raises it)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise InputError(path, f"cannot use it: {e.strerror or e}", key=what) from None


def exists(path: str | Path, what: str | None = None) -> bool:
    """Something (of any kind) is there; the same one line as is_folder for a path that cannot be looked up."""
    try:
        os.stat(path)
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise InputError(path, f"cannot use it: {e.strerror or e}", key=what) from None
