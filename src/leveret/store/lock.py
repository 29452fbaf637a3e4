"""One broker per data directory: an exclusive ``flock`` on ``<data-dir>/leveret.lock``,
held for as long as the broker's storage is open.

Two brokers on one directory would destroy each other's data (each empties the paging
area at start and appends to the same message segments). The kernel releases a ``flock``
when its holder dies, however it dies, so a lock left by ``kill -9`` never blocks the next
start; the file keeps the holder's pid only to name it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_FILE = "leveret.lock"


class DataDirInUse(Exception):
    """Another process (a broker) holds the data directory."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        self.data_dir = data_dir
        self.pid = pid
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"the data directory {data_dir} is in use by another Leveret broker ({holder}); "
            "stop it first, or give this one another --data-dir"
        )


class DataDirLock:
    """The held lock of one data directory; :meth:`release` (or the process's end) frees it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataDirInUse(self.data_dir, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            # the pid goes first, while the lock is still held: nobody reads a stale one
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the only descriptor releases the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
