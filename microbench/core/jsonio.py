"""Reading JSON inputs we did not write (profiler traces, other machines' results): plain or gzip, decided by
the file's first bytes, never by its name. Every way such a file can be broken (missing, empty, not gzip
after all, a truncated gzip stream, not UTF-8, not JSON, cut short) becomes one InputError naming the file.
Nothing is evaluated or unpickled: the parsers are the standard library's JSON decoder (results files) and
msgspec's (traces, microbench/trace/kineto.py), which take the bytes of `read_bytes`."""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from microbench.core.errors import InputError
from microbench.core.files import open_input

GZIP_MAGIC = b"\x1f\x8b"


def open_text(path: str | Path) -> TextIO:
    """A text stream over the (decompressed) file. Errors while reading later surface as the exceptions
    `read_errors` translates."""
    path = Path(path)
    raw = open_input(path)  # a regular file only: a FIFO or /dev/zero is one line, not a hang
    head = raw.read(2)
    raw.seek(0)
    if not head:
        raw.close()
        raise InputError(path, "empty file")
    stream = gzip.GzipFile(fileobj=raw, mode="rb") if head == GZIP_MAGIC else raw
    return io.TextIOWrapper(stream, encoding="utf-8", errors="strict")


@contextmanager
def _reading(path):
    """Every decompression or decoding failure while reading -> one InputError naming the file."""
    try:
        yield
    except EOFError:
        raise InputError(path, "truncated gzip stream: the compressed data ends early") from None
    except (gzip.BadGzipFile, zlib.error) as e:
        raise InputError(path, f"corrupt gzip data: {e}") from None
    except UnicodeDecodeError:
        raise InputError(path, "not UTF-8 text: not a JSON file") from None
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None


def read_chunks(path: str | Path, chunk_chars: int) -> Iterator[str]:
    """The decompressed text in chunks; every decompression or decoding failure is an InputError."""
    f = open_text(path)
    try:
        while True:
            with _reading(path):
                chunk = f.read(chunk_chars)
            if not chunk:
                return
            yield chunk
    finally:
        f.close()


def json_error(path, text: str, e: json.JSONDecodeError, at_eof: bool = True) -> InputError:
    """Tell a file that was cut short from one that is not JSON."""
    rest = text[e.pos :].strip()
    if at_eof and (not rest or e.msg.startswith("Unterminated string")):
        return InputError(path, f"truncated JSON: the file ends early (line {e.lineno}, column {e.colno}: {e.msg})")
    return InputError(path, f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}")


def load_json(path: str | Path, max_chars: int = 256 * 2**20):
    """A whole (small) JSON document: results files, not traces (those are streamed, microbench.trace.cli)."""
    parts, n = [], 0
    for chunk in read_chunks(path, 1 << 20):
        parts.append(chunk)
        n += len(chunk)
        if n > max_chars:
            raise InputError(path, f"larger than {max_chars >> 20} Mi characters: not a results file")
    text = "".join(parts)
    if not text.strip():
        raise InputError(path, "empty file (only whitespace)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise json_error(path, text, e) from None
    except RecursionError:
        raise InputError(path, "JSON nested too deeply") from None


def clean(v):
    """JSON has no nan or inf: every non-finite float becomes null (numpy scalars become Python numbers)."""
    if hasattr(v, "item") and type(v).__module__ == "numpy":
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return v


def dumps(doc, indent: int | None = 1, default=None) -> str:
    """The one JSON writer of our outputs: cleaned, and refusing (ValueError) anything that is still nan or
    inf, so no output file ever holds a value other JSON readers reject. `default` as in json.dumps."""
    return json.dumps(clean(doc), indent=indent, allow_nan=False, default=default)


def read_byte_chunks(path: str | Path, chunk_bytes: int) -> Iterator[bytes]:
    """The decompressed bytes in chunks, for a parser that takes bytes (msgspec); the same one-line errors as
    `read_chunks`."""
    f = open_text(path).detach()  # the binary stream under the text one: gzip or the file itself
    try:
        while True:
            with _reading(path):
                chunk = f.read(chunk_bytes)
            if not chunk:
                return
            yield chunk
    finally:
        f.close()


def read_bytes(path: str | Path) -> bytearray:
    """The whole decompressed file at once (`read_byte_chunks` joined)."""
    out = bytearray()
    for chunk in read_byte_chunks(path, 1 << 20):
        out += chunk
    return out


# Typed reading of a JSON input we did not write: each value checked where it is read, one line naming the file,
# the key and the value otherwise (results files, trace reports).
MAX_READ_VALUE = 1e15  # any time, rate, count or percentage read: beyond it a value is corrupt, and ratios overflow


def number(v, path, key: str, maximum: float = MAX_READ_VALUE):
    """null or absent -> None; else a finite number from 0 to `maximum`."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(path, "expected a number or null", key=key, value=v)
    if not math.isfinite(v) or v < 0 or v > maximum:
        raise InputError(path, f"expected a finite number from 0 to {maximum:g}", key=key, value=v)
    return v


def text(v, path, key: str, optional: bool = True):
    """A string (null allowed where optional)."""
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise InputError(path, "expected a string" + (" or null" if optional else ""), key=key, value=v)
    return v


def of_type(v, kind: type, path, key: str, default=None):
    """An object (dict) or array (list) where one is expected; absent or null -> `default`."""
    if v is None and default is not None:
        return default
    if not isinstance(v, kind):
        raise InputError(
            path,
            f"expected {'an object' if kind is dict else 'an array'}",
            key=key,
            value=v if not isinstance(v, (dict, list)) else type(v).__name__,
        )
    return v
