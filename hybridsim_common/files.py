"""Reading a file a user named: regular files only, and never more than a bound.

A FIFO, a character device (``/dev/zero``, ``/dev/urandom``), a socket or a folder is refused when it is opened,
without blocking (opening a FIFO for reading would wait for a writer; a device never ends). What is read is bounded:
:func:`read_bytes` reads at most ``max_bytes + 1`` bytes; :func:`text_lines` yields lines of at most ``max_line``
characters and, for a gzip file (``*.gz``), stops once ``max_bytes`` decompressed bytes have come out, so a compressed
bomb ends in a clear error instead of exhausting memory or time.

The errors are :class:`FileRefused`, an :class:`OSError` (``strerror`` is the reason, ``filename`` the path), so a
caller that already reports unreadable files reports these the same way.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import zlib
from pathlib import Path
from typing import Iterator


class FileRefused(OSError):
    """A path that is not a regular file, or whose content goes past a bound."""

    def __init__(self, path, why: str, code: int = errno.EINVAL):
        super().__init__(code, why, str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device")


def check_regular(path: str | os.PathLike) -> None:
    """Raise :class:`FileRefused` unless ``path`` is a regular file (symbolic links followed); a missing path raises
    :class:`FileNotFoundError`. Nothing is opened."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise FileRefused(path, f"not a regular file ({_kind(mode)}); only regular files are read")


def open_regular(path: str | os.PathLike):
    """``path`` opened for binary reading if it is a regular file (symbolic links followed); anything else raises
    :class:`FileRefused` without blocking. Other errors are the :class:`OSError` of ``open``."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused(path, f"not a regular file ({_kind(mode)}); only regular files are read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The content of the regular file ``path``; :class:`FileRefused` (``EFBIG``) past ``max_bytes``."""
    with open_regular(path) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileRefused(path, f"larger than {max_bytes:,} bytes", errno.EFBIG)
    return data


class _Bounded(io.RawIOBase):
    """A readable stream that raises :class:`FileRefused` once more than ``limit`` bytes have come out of ``inner``."""

    def __init__(self, inner, limit: int, path, what: str):
        self.inner, self.left, self.limit, self.path, self.what = inner, limit, limit, path, what

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.inner.readinto(b)
        self.left -= n
        if self.left < 0:
            raise FileRefused(self.path, f"more than {self.limit:,} bytes {self.what}", errno.EFBIG)
        return n


def text_lines(path: str | os.PathLike, *, max_bytes: int, max_line: int, encoding: str = "utf-8",
               errors: str = "strict") -> Iterator[str]:
    """The lines of the regular text file ``path`` (gunzipped when it ends in ``.gz``), each at most ``max_line``
    characters, at most ``max_bytes`` bytes in all (decompressed, for a ``.gz``). Past a bound, or for a corrupt or
    truncated gzip stream, :class:`FileRefused`; a decoding error is the codec's ``UnicodeDecodeError``."""
    p = Path(path)
    raw = open_regular(p)
    try:
        inner = gzip.GzipFile(fileobj=raw, mode="rb") if p.suffix == ".gz" else raw
        what = "once decompressed" if p.suffix == ".gz" else "in the file"
        stream = io.TextIOWrapper(io.BufferedReader(_Bounded(inner, max_bytes, p, what), 1 << 16),
                                  encoding=encoding, errors=errors, newline=None)
        lineno = 0
        while True:
            try:
                line = stream.readline(max_line + 1)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                why = ("compressed data ends early (truncated .gz file)" if isinstance(exc, EOFError)
                       else f"corrupt compressed data ({exc})")
                raise FileRefused(p, why) from None
            if not line:
                return
            lineno += 1
            if len(line) > max_line and not line.endswith("\n"):
                raise FileRefused(p, f"line {lineno} is longer than {max_line:,} characters")
            yield line
    finally:
        raw.close()
