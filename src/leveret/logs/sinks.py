"""Where a receiver puts records: a JSON-lines file that rotates, or a terminal.

A sink buffers writes; ``flush()`` pushes them out and raises OSError if that fails (a
full disk). The receiver acks a delivery only after the flush that carried it returned.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Protocol

from leveret.logs.reading import Entry, Malformed


class Sink(Protocol):
    def write(self, entry: Entry) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class FileSink:
    """Appends one JSON line per record to ``path``. When ``max_bytes`` is set, a file that
    would grow past it is rotated first: ``path`` -> ``path.1`` -> ... -> ``path.N``
    (``backups`` files kept), as ``logging.handlers.RotatingFileHandler`` does."""

    def __init__(
        self, path: Path, max_bytes: int = 0, backups: int = 5, fsync: bool = False
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.fsync = fsync
        self._file = self._open()

    def _open(self) -> BinaryIO:
        f = open(self.path, "ab", buffering=1 << 20)  # noqa: SIM115 - closed in close()
        try:
            self._size = os.fstat(f.fileno()).st_size
        except OSError:
            self._size = 0
        return f

    def write(self, entry: Entry) -> None:
        # a malformed body is kept whole, as the lake keeps it: {"ts", "_corrupt"}
        line = entry.to_json() + b"\n"
        if self.max_bytes and self._size and self._size + len(line) > self.max_bytes:
            self._rotate()
        self._file.write(line)
        self._size += len(line)

    def _rotate(self) -> None:
        self.flush()
        self._file.close()
        if self.backups > 0:
            for i in range(self.backups - 1, 0, -1):
                src = self.path.with_name(f"{self.path.name}.{i}")
                if src.exists():
                    src.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)
        self._file = self._open()

    def flush(self) -> None:
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._file.close()


# Whole-line colours by severity (ANSI SGR); info stays in the terminal's own colour.
_COLOURS = {
    "debug": b"\x1b[2m",
    "warning": b"\x1b[33m",
    "error": b"\x1b[31m",
    "critical": b"\x1b[1;97;41m",
    "malformed": b"\x1b[35m",
}
_RESET = b"\x1b[0m"


def format_line(entry: Entry) -> str:
    """``ts SEVERITY facility app[pid] logger: message`` (parts a record lacks are left
    out), then the exception text, if any, on the lines after; a malformed body is
    ``ts MALFORMED`` and the body as it came (or ``base64:`` and its base64)."""
    if isinstance(entry, Malformed):
        return f"{entry.ts} MALFORMED {entry.body}"
    record = entry
    who = f"{record.app}[{record.pid}]" if record.app and record.pid else record.app
    parts = [record.ts, f"{record.severity.upper():<8}", record.facility]
    if record.host:
        parts.append(record.host)
    if who:
        parts.append(who)
    head = " ".join(parts)
    if record.logger:
        head = f"{head} {record.logger}"
    text = f"{head}: {record.message}"
    if record.exc:
        text = f"{text}\n{record.exc}"
    return text


class TerminalSink:
    """Human-readable lines on a stream, coloured by severity when ``colour`` is set."""

    def __init__(self, stream: BinaryIO, colour: bool) -> None:
        self._stream = stream
        self._colour = colour

    def write(self, entry: Entry) -> None:
        line = format_line(entry).encode("utf-8", "replace")
        kind = "malformed" if isinstance(entry, Malformed) else entry.severity
        code = _COLOURS.get(kind) if self._colour else None
        if code:
            self._stream.write(code + line + _RESET + b"\n")
        else:
            self._stream.write(line + b"\n")

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self.flush()
