"""Making what is on disk durable: fsync by path, for a file just written or a directory
whose entries changed (a rename, a new file). No project imports: every layer, the log
system and the Spark source among them, may use it."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path | str) -> None:
    """fsync a file or a directory by its path (a directory after ``os.replace`` into it,
    so the rename survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
