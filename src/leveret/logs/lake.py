"""The log lake on disk: which Parquet files the ingest committed, and removing the ones it
did not.

Spark's Parquet file sink writes each task's file straight into its partition directory
(``date=…/severity=…/part-….parquet``) and commits a micro-batch by writing one file of its
log, ``_spark_metadata/<batch>``, naming the files of every task that succeeded. A task
attempt that died after its file was complete (its executor killed) leaves that file behind,
never named; the retried attempt writes the same records into another file. Spark reads
through the log and sees each record once; pyarrow, pandas, DuckDB and the like list the
directory and would see the orphan's records twice.

:class:`SinkLog` reads the log incrementally (the batch files since the last read; a
compacted log, ``<batch>.compact``, names every file before it). :class:`Janitor` removes
the Parquet files that no committed batch names once no task can commit them any more:

- at start, before the query runs, every such file;
- after batch ``N`` is committed, every such file older than the log file of batch ``N``.
  The micro-batches run one after another: batch ``N+1``'s tasks create their files only
  after batch ``N``'s log file is written, so what is older than that log file and not in
  the log belongs to a batch that is over.

A directory lister can therefore see duplicates only from the moment a failed task's file
is complete until the next batch commits (one trigger and one batch), and the files of the
batch being written before it commits.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

log = logging.getLogger(__name__)

METADATA = "_spark_metadata"
#: Leveret's own files in a lake (the lock, the removals a compaction left to do)
STATE_DIR = "_leveret"


@contextlib.contextmanager
def lake_lock(
    lake: Path, wait: float | None = 60.0, name: str = "lock", shared: bool = False
) -> Iterator[bool]:
    """A lock file of the lake (``flock``; released when its holder dies, kill -9 too).
    ``lock``: held by a compaction from writing its new files to committing them, and by
    the janitor while it sweeps. ``ingest``: held (shared) by a running ingest, so that a
    compaction knows whether a sink may be writing the log. Yields False when it could not
    be had within ``wait`` seconds (``None``: do not wait at all)."""
    d = lake / STATE_DIR
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / name, os.O_RDWR | os.O_CREAT, 0o644)
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        deadline = time.monotonic() + (wait or 0.0)
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                got = True
                break
            except BlockingIOError:
                if wait is None or time.monotonic() >= deadline:
                    got = False
                    break
                time.sleep(0.05)
        try:
            yield got
        finally:
            if got:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def local_path(uri: str) -> str:
    """A path of the sink's log (``file:///…``, escaped as a URI) as a local path."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return uri


def log_batches(lake: Path) -> tuple[list[int], set[int]]:
    """The batch ids of the sink's log, sorted, and which of them are compacted logs."""
    ids: list[int] = []
    compacts: set[int] = set()
    meta = lake / METADATA
    if not meta.is_dir():
        return ids, compacts
    for p in meta.iterdir():
        name = p.name
        if name.endswith(".compact") and name[:-8].isdigit():
            compacts.add(int(name[:-8]))
            ids.append(int(name[:-8]))
        elif name.isdigit():
            ids.append(int(name))
    return sorted(ids), compacts


def log_file(lake: Path, batch: int, compact: bool) -> Path:
    return lake / METADATA / (f"{batch}.compact" if compact else str(batch))


# Spark writes each log file through Hadoop's CheckpointFileManager.createAtomic: a hidden
# temporary file ``.<name>.<uuid>.tmp`` (and its ``..<name>.<uuid>.tmp.crc``), renamed
# when complete, removed when the write fails (left behind by a kill -9).
_COMPACTING = re.compile(r"\.(\d+)\.compact\..+\.tmp")
_LOG_TEMP = re.compile(r"\.\.?\d+(\.compact)?\..+\.tmp(\.crc)?")


def sink_compacting(lake: Path) -> list[tuple[int, Path]]:
    """The compacted log files the sink is writing now, by batch: their temporary files.
    Spark 4's sink creates the file before it reads the log files it compacts (verified
    in 4.3.0: ``HDFSMetadataLog.write`` opens ``createAtomic`` and then the compaction
    streams the previous log files into it, ``CompactibleFileStreamLog.compact``), so a
    log file rewritten while no such file exists is read by the next log compaction as
    rewritten. Left by a sink killed -9 until :func:`remove_log_temps`."""
    out: list[tuple[int, Path]] = []
    with contextlib.suppress(FileNotFoundError):
        for e in os.scandir(lake / METADATA):
            m = _COMPACTING.fullmatch(e.name)
            if m:
                out.append((int(m.group(1)), Path(e.path)))
    return sorted(out)


def remove_log_temps(lake: Path) -> list[str]:
    """Remove the temporary files of the sink's log: only while no query writes it (an
    ingest starting or stopped), when they are what a killed sink left."""
    removed: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        for e in os.scandir(lake / METADATA):
            if _LOG_TEMP.fullmatch(e.name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
                    removed.append(e.name)
    if removed:
        log.info("removed %d unfinished file(s) of the sink's log: %s", len(removed),
                 ", ".join(removed[:5]))  # fmt: skip
    return removed


def ingest_running(lake: Path) -> bool:
    """Whether an ingest holds the lake's ``ingest`` lock (one with a sink that may be
    writing the log); this process's own ingest counts."""
    with lake_lock(lake, wait=None, name="ingest") as idle:
        return not idle


def read_log_file(path: Path) -> list[dict[str, Any]]:
    """The entries of one file of the sink's log (its first line is the version, ``v1``)."""
    lines = path.read_bytes().split(b"\n")[1:]
    return [json.loads(line) for line in lines if line.strip()]


@dataclass(frozen=True, slots=True)
class LakeFile:
    """One committed file: its local path, size in bytes and modification time (ms)."""

    path: str
    size: int
    mtime_ms: int


class SinkLog:
    """The files the sink's log commits, read incrementally: :meth:`refresh` reads the log
    files written since the last call."""

    def __init__(self, lake: Path) -> None:
        self.lake = lake
        self.latest = -1
        #: the committed files (local paths under the lake), those a delete entry removed
        #: taken out
        self.files: dict[str, LakeFile] = {}
        #: the committed files' names: a file's name is unique in a lake (a random UUID in
        #: each), and comparing names does not depend on how the lake's path is spelled
        self.names: set[str] = set()
        #: files a delete entry names (replaced by a compaction, dropped by retention)
        self.deleted: set[str] = set()
        #: each file's path as the log spells it (a delete entry must spell it the same)
        self.raw: dict[str, str] = {}
        #: the files the base log file (the latest compacted one, or batch 0) names: what
        #: a compaction or the retention can take out of the log in one rename
        self.in_base: set[str] = set()
        #: the batch whose log file names each file (the base's for the files it names)
        self.batch_of: dict[str, int] = {}
        self.compacts: set[int] = set()
        self._adds: dict[str, LakeFile] = {}
        self._base: tuple[int, int, int, int] | None = None
        self._read: dict[int, tuple[int, int, int]] = {}  # the batch files after the base

    def refresh(self) -> int:
        """Read the new log files; the latest committed batch id (-1: none)."""
        for _ in range(5):  # Spark deletes old log files after a compaction: list again
            try:
                return self._refresh()
            except FileNotFoundError:
                continue
        return self._refresh()

    def _refresh(self) -> int:
        ids, compacts = log_batches(self.lake)
        if not ids:
            self._reset()
            return -1
        # What Spark reads: the latest compacted log (or batch 0) and the batches after it.
        # `leveret pipeline compact` rewrites those files in place (atomically): the base
        # (a compaction, the retention) and the batch files after it (the retention): when
        # one changed, everything is read again.
        base = max(compacts) if compacts else ids[0]
        self.compacts = compacts
        signature = (base, *_signature(log_file(self.lake, base, base in compacts)))
        if (
            signature != self._base
            or ids[-1] < self.latest
            or any(
                _signature(log_file(self.lake, b, b in compacts), missing=True) != sig
                for b, sig in self._read.items()
            )
        ):
            self._reset()
            self._base = signature
            todo = [b for b in ids if b >= base]
        else:
            todo = [b for b in ids if b > self.latest]
        if not todo:
            return self.latest
        changed = False
        for batch in todo:
            path = log_file(self.lake, batch, batch in compacts)
            if batch != base:
                self._read[batch] = _signature(path)  # before reading: a change is seen
            for entry in read_log_file(path):
                if entry.get("isDir"):
                    continue
                raw = str(entry["path"])
                local = self.here(local_path(raw))
                changed = True
                if entry.get("action", "add") == "delete":
                    self.deleted.add(local)
                else:
                    self._adds[local] = LakeFile(
                        local, int(entry.get("size", 0)), int(entry.get("modificationTime", 0))
                    )
                    self.raw[local] = raw
                    self.batch_of[local] = batch
                    if batch == base:
                        self.in_base.add(local)
        if changed:
            # as Spark's compactLogs: a deleted file is gone whichever entry added it
            self.files = {p: f for p, f in self._adds.items() if p not in self.deleted}
            self.names = {os.path.basename(p) for p in self.files}
        self.latest = todo[-1]
        return self.latest

    def _reset(self) -> None:
        self.latest = -1
        self.files = {}
        self.names = set()
        self.deleted = set()
        self.raw = {}
        self.in_base = set()
        self.batch_of = {}
        self._adds = {}
        self._base = None
        self._read = {}

    def here(self, path: str) -> str:
        """A file the log names, under this lake's directory: the log keeps the path the
        lake had when the file was written, and a lake copied or moved elsewhere (or named
        through a symlink) keeps its partition directories."""
        parts = path.split("/")
        for i, part in enumerate(parts):
            if "=" in part:
                return os.path.join(str(self.lake), *parts[i:])
        return os.path.join(str(self.lake), parts[-1])

    def batch_mtime_ns(self, batch: int) -> int | None:
        """When the log file of ``batch`` was written (None: it is gone)."""
        for compact in (False, True):
            with contextlib.suppress(FileNotFoundError):
                return log_file(self.lake, batch, compact).stat().st_mtime_ns
        return None


def _signature(path: Path, missing: bool = False) -> tuple[int, int, int]:
    """A log file as it is on disk (a rewrite replaces its inode, and keeps its mtime)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if not missing:
            raise
        return (-1, -1, -1)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def is_data_file(name: str) -> bool:
    """A file the sink writes (``part-…``); hidden and metadata files are not."""
    return name.startswith("part-") and not name.endswith(".crc")


def not_a_lake(path: Path) -> str | None:
    """Why ``path`` is not a log lake, in one line (None when it is one): a lake is a
    directory with the sink's log (``_spark_metadata``) or ``date=`` partitions. The data
    directory of ``leveret up`` (an easy slip for its ``lake`` below) is named as such."""
    if not path.is_dir():
        return f"no log lake at {path}"
    try:
        names = [e.name for e in os.scandir(path) if e.is_dir()]
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if METADATA in names or any(n.startswith("date=") for n in names):
        return None
    inside = [n for n in sorted(names) if (path / n / METADATA).is_dir()]
    if inside:
        return f"no log lake at {path}: the lake is {path / inside[0]} (--lake {path / inside[0]})"
    return f"no log lake at {path}"


def data_dirs(lake: Path) -> list[Path]:
    """The partition directories of a lake (every directory below it that is not hidden
    nor ``_``-prefixed)."""
    out: list[Path] = []
    stack = [lake]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except FileNotFoundError:
            continue
        for e in entries:
            if e.name.startswith(("_", ".")):
                continue
            if e.is_dir(follow_symlinks=False):
                out.append(Path(e.path))
                stack.append(Path(e.path))
    return out


def remove_file(path: str) -> bool:
    """Remove a data file and the checksum file Hadoop's local file system keeps beside it."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    head, name = os.path.split(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(head, f".{name}.crc"))
    return True


def _awaiting_removal(lake: Path) -> set[str]:
    """The names of the files a compaction or the retention took out of the log or put
    in it, which are settled after a grace period (``_leveret/removals``): they go then
    unless the log names them."""
    names: set[str] = set()
    d = lake / STATE_DIR / "removals"
    if d.is_dir():
        for rec in d.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                doc = json.loads(rec.read_text())
                names.update(os.path.basename(p) for p in doc["remove"] + doc.get("add", []))
    return names


class Janitor:
    """Removes the files under a lake that its sink's log never committed (see the module
    docstring). A directory is listed again only when it changed or kept a file last time,
    so a sweep after each batch costs a stat per partition directory."""

    def __init__(self, lake: Path) -> None:
        self.lake = lake
        self.log = SinkLog(lake)
        self._seen: dict[str, int] = {}  # directory -> mtime_ns when it was clean
        self.removed = 0

    def sweep(self, everything: bool = False) -> list[str]:
        """Remove the uncommitted files no task can commit any more: all of them with
        ``everything`` (no query runs), else those older than the latest batch's log file.
        Returns the paths removed."""
        if not (self.lake / METADATA).is_dir():
            return []  # no log: every file is the lake's (Spark then lists the directory)
        if everything:
            # no query runs: a temporary file of the log is what a killed sink left (a
            # compaction waits while the sink writes its compacted log)
            remove_log_temps(self.lake)
        # a compaction's new files are not committed yet while it holds the lock
        with lake_lock(self.lake, wait=60.0 if everything else None) as got:
            if not got:
                return []
            return self._sweep(everything)

    def _sweep(self, everything: bool) -> list[str]:
        latest = self.log.refresh()
        if latest < 0:
            return []  # no log: every file is the lake's (Spark then lists the directory)
        if everything:
            before: int | None = None
        else:
            if latest < 0:
                return []
            before = self.log.batch_mtime_ns(latest)
            if before is None:
                return []
        # a file a delete entry names was committed once: a compaction or the retention
        # removes it from the disk itself, once no reader can still be reading it
        committed = (
            self.log.names
            | {os.path.basename(p) for p in self.log.deleted}
            | _awaiting_removal(self.lake)
        )
        removed: list[str] = []
        for d in data_dirs(self.lake):
            key = str(d)
            try:
                mtime = d.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            if self._seen.get(key) == mtime:
                continue
            clean = True
            removed_here = False
            try:
                entries = list(os.scandir(d))
            except FileNotFoundError:
                continue
            for e in entries:
                if not is_data_file(e.name) or e.name in committed:
                    continue
                try:
                    if not e.is_file(follow_symlinks=False):
                        continue
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if before is not None and st.st_mtime_ns >= before:
                    clean = False  # may still be committed (the batch being written)
                    continue
                if remove_file(e.path):
                    removed.append(e.path)
                    removed_here = True
            # the mtime from before the listing: a file added meanwhile changes it again
            if clean and not removed_here:
                self._seen[key] = mtime
            else:
                self._seen.pop(key, None)
        if removed:
            self.removed += len(removed)
            log.warning(
                "removed %d file(s) under %s that the sink's log never committed "
                "(written by failed task attempts): %s",
                len(removed),
                self.lake,
                ", ".join(os.path.relpath(p, self.lake) for p in removed[:5]),
            )
        return removed
