"""Shared pieces of the CODES output parsers: located errors, (gzip-)transparent opening, tailing.

Every parser reports a malformed or truncated line as :class:`CodesParseError` naming the file and the 1-based line
number, and every deliberate refusal/skip of known-bad CODES output as a :class:`CodesWarning` (collected by the
importer, never silently dropped).
"""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import io
import os
import stat
import warnings
import zlib
from pathlib import Path
from typing import Iterator


class CodesParseError(ValueError):
    """A CODES output file could not be parsed. ``path`` and ``line`` (1-based, or None) locate the problem."""

    def __init__(self, path, line: int | None, message: str):
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class CodesWarning(UserWarning):
    """Known-bad or incomplete CODES output that was refused or skipped on purpose."""


#: (folder, the name messages give it) while :func:`shown_as` is active
_SHOWN: "contextvars.ContextVar[tuple[str, str] | None]" = contextvars.ContextVar("codes_shown_as", default=None)


@contextlib.contextmanager
def shown_as(folder: str | os.PathLike, name: str):
    """Inside the block, warnings name paths under ``folder`` as under ``name``: a CODES run imported from a
    run directory's temporary staging folder (``.OUTDIR.*.partial``, moved into place when the run completes) is
    named by its place in the run directory (``codes/...``), which stays true after the move."""
    token = _SHOWN.set((str(folder), str(name)))
    try:
        yield
    finally:
        _SHOWN.reset(token)


def shown(message: str) -> str:
    """``message`` with the folder of the active :func:`shown_as` block replaced by its name."""
    alias = _SHOWN.get()
    if alias is None:
        return message
    folder, name = alias
    for real in dict.fromkeys((os.path.abspath(folder), folder)):  # as given, and absolute
        message = message.replace(real, name)
    return message


def warn(message: str, sink: list | None = None) -> None:
    """Record a warning in ``sink`` (if given) and emit it through :mod:`warnings` (paths as :func:`shown_as` names
    them)."""
    message = shown(message)
    if sink is not None:
        sink.append(message)
    warnings.warn(message, CodesWarning, stacklevel=3)


def find_file(path: str | os.PathLike) -> Path | None:
    """``path`` if it exists, else ``path.gz`` if that exists, else None."""
    p = Path(path)
    if p.is_file():
        return p
    gz = p.with_name(p.name + ".gz")
    if gz.is_file():
        return gz
    if p.suffix == ".gz" and p.with_suffix("").is_file():
        return p.with_suffix("")
    return None


def open_regular(path: str | os.PathLike):
    """``path`` opened for binary reading if it is a regular file (symbolic links followed); a FIFO, device, socket
    or folder raises :class:`CodesParseError` without blocking (opening a FIFO for reading waits for a writer)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise _unreadable(p, exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else
                    "a socket" if stat.S_ISSOCK(mode) else "a device")
            raise CodesParseError(p, None, f"not a regular file ({kind}); only regular files are read")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_text(path: str | os.PathLike):
    """Open a regular text file (:func:`open_regular`), transparently gunzipping ``*.gz``."""
    p = Path(path)
    raw = open_regular(p)
    if p.suffix == ".gz":
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw, mode="rb"), encoding="utf-8", errors="replace",
                                newline="")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


#: what reading a damaged file raises: I/O errors, a truncated (EOFError) or corrupt (zlib.error) gzip stream
READ_ERRORS = (OSError, EOFError, zlib.error)


def _unreadable(path, exc: BaseException, after_line: int | None = None) -> CodesParseError:
    if isinstance(exc, EOFError):
        why = "compressed data ends early (truncated .gz file)"
    elif isinstance(exc, (zlib.error, gzip.BadGzipFile)):
        why = f"corrupt compressed data ({exc})"
    else:
        why = f"cannot read ({getattr(exc, 'strerror', None) or exc})"
    if after_line is not None:
        why = f"after line {after_line}: {why}"
    return CodesParseError(path, None, why)


def read_bytes(path: str | os.PathLike) -> bytes:
    """The whole file (gunzipped if ``*.gz``); a damaged file raises :class:`CodesParseError` naming it."""
    p = Path(path)
    try:
        with open_regular(p) as raw:
            if p.suffix == ".gz":
                with gzip.GzipFile(fileobj=raw, mode="rb") as fh:
                    return fh.read()
            return raw.read()
    except READ_ERRORS as exc:
        raise _unreadable(p, exc) from None


def read_text(path: str | os.PathLike) -> str:
    """The whole file as text (gunzipped if ``*.gz``; undecodable bytes replaced); a damaged file raises
    :class:`CodesParseError` naming it."""
    return read_bytes(path).decode("utf-8", errors="replace")


def numbered_lines(path: str | os.PathLike, complete_only: bool = False) -> Iterator[tuple[int, str]]:
    """``(line_no, line)`` without the newline. With ``complete_only`` a last line lacking its newline raises
    (a truncated file). A damaged file raises :class:`CodesParseError` naming it and the last good line."""
    n = 0
    try:
        with open_text(path) as fh:
            for n, raw in enumerate(fh, 1):
                if raw.endswith("\n"):
                    yield n, raw.rstrip("\r\n")
                else:
                    if complete_only:
                        raise CodesParseError(path, n, f"truncated last line (no newline): {raw[:80]!r}")
                    yield n, raw.rstrip("\r")
    except READ_ERRORS as exc:
        raise _unreadable(path, exc, after_line=n) from None


class IncrementalReader:
    """Tail a text file that another process (CODES) is still writing.

    :meth:`read_new` returns the complete lines appended since the last call as ``(line_no, text)`` and keeps a
    partial last line until its newline arrives. :meth:`finish` returns the leftover partial line (or None) once the
    writer is done. A missing file reads as empty (CODES may not have created it yet); a file that shrinks raises.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._pos = 0
        self._partial = b""
        self._line_no = 0

    @property
    def line_no(self) -> int:
        """Number of complete lines returned so far."""
        return self._line_no

    def read_new(self) -> list[tuple[int, str]]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self._pos:
            raise CodesParseError(self.path, self._line_no, f"file shrank from {self._pos} to {size} bytes while tailing")
        if size == self._pos:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self._pos)
            chunk = fh.read(size - self._pos)
        self._pos += len(chunk)
        data = self._partial + chunk
        parts = data.split(b"\n")
        self._partial = parts.pop()
        out = []
        for raw in parts:
            self._line_no += 1
            out.append((self._line_no, raw.decode("utf-8", errors="replace").rstrip("\r")))
        return out

    def finish(self) -> tuple[int, str] | None:
        """Read what is left; return the final line that had no newline (or None)."""
        self.read_new()
        if not self._partial:
            return None
        self._line_no += 1
        out = (self._line_no, self._partial.decode("utf-8", errors="replace").rstrip("\r"))
        self._partial = b""
        return out
