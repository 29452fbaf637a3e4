"""The log lake's numbers for the dashboard, live.

The same tables as ``leveret pipeline report`` (records per minute by severity and the error
rate per minute, over the records that are not ``_corrupt``; totals as its ``summary``),
computed from the lake as the ingest commits to it: the file sink's log
(``_spark_metadata``) names the Parquet files of each committed batch, and each new file is
read once (its ``ts``, ``_corrupt`` and ``offset`` columns; the severity is its partition).
A file is new when its modification time is past the newest one already read: a batch's files
are all written after the previous batch committed, so this also picks the new entries out
of a compacted log (``N.compact``) without keeping every path ever read. A compacted log
names every file of the batches before it, so when one is among the logs not read yet, the
batch logs before it are not read as well: each file is counted once, whichever logs name it.

Reading runs in a thread (``asyncio.to_thread``) so Parquet never blocks the event loop the
broker runs on, a bounded number of files per refresh, and only while someone asks. pyarrow
comes with the ``spark`` extra: without it the lake is reported as unavailable, with why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from leveret.logs.lake import METADATA, local_path, log_batches, log_file
from leveret.logs.record import ERROR_SEVERITIES, SEVERITIES

log = logging.getLogger(__name__)

KEEP_MINUTES = 24 * 60
FILES_PER_REFRESH = 200
REFRESH_SECONDS = 2.0


@dataclass
class _FileCounts:
    records: int = 0
    corrupt: int = 0
    errors: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    max_offset: int | None = None
    minutes: dict[int, int] = field(default_factory=dict)
    severity: str = ""


def _signature(lake: Path, batch: int, compact: bool) -> tuple[int, ...]:
    """A log file as it is on disk: ``leveret pipeline compact`` replaces it (a new inode,
    the same mtime) when it takes files out."""
    try:
        st = log_file(lake, batch, compact).stat()
    except FileNotFoundError:
        return ()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _partition(path: str, key: str) -> str | None:
    for part in path.split("/"):
        if part.startswith(key + "="):
            return unquote(part[len(key) + 1 :])
    return None


def read_file(path: str) -> _FileCounts:
    """What one Parquet file of the lake adds (blocking: call it from a thread)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    severity = _partition(path, "severity") or ""
    pf = pq.ParquetFile(path)
    names = set(pf.schema_arrow.names)
    columns = [c for c in ("ts", "_corrupt", "offset") if c in names]
    table = pf.read(columns=columns)
    out = _FileCounts(records=table.num_rows, severity=severity)
    if "offset" in names and table.num_rows:
        top = pc.max(table["offset"]).as_py()
        out.max_offset = int(top) if top is not None else None
    if "_corrupt" in names:
        good_mask = pc.is_null(table["_corrupt"])
        good = table.filter(good_mask)
        out.corrupt = table.num_rows - good.num_rows
    else:
        good = table
    if severity in ERROR_SEVERITIES:
        out.errors = good.num_rows
    if "ts" in names and good.num_rows:
        ts = good["ts"]
        ms = pc.cast(pc.cast(ts, _ms_type(ts.type), safe=False), "int64")
        lo, hi = pc.min(ms).as_py(), pc.max(ms).as_py()
        out.first_ms = int(lo) if lo is not None else None
        out.last_ms = int(hi) if hi is not None else None
        minutes = pc.divide(pc.drop_null(ms), 60_000)
        for item in pc.value_counts(minutes).to_pylist():
            out.minutes[int(item["values"])] = int(item["counts"])
    return out


def _ms_type(kind: Any) -> Any:
    import pyarrow as pa

    return pa.timestamp("ms", tz=getattr(kind, "tz", None))


class Lake:
    """Incremental aggregates of one lake directory. ``refresh()`` blocks (a thread's work);
    ``state()`` may be called from the event loop at any time."""

    def __init__(self, path: Path | None) -> None:
        self.path = path or Path("leveret-data/lake")
        self._configured = path is not None
        self._lock = threading.Lock()
        self._batch = -1
        self._mtime = -1
        self._at_mtime: set[str] = set()
        self._pending: list[str] = []
        self._base: tuple[int, ...] | None = None
        self._read: dict[int, tuple[int, ...]] = {}  # the batch logs read after the base
        #: bytes and number of the committed files (as the sink's log gives their sizes)
        self.bytes = 0
        self.committed_files = 0
        self.files = 0
        self.records = 0
        self.corrupt = 0
        self.errors = 0
        self.first_ms: int | None = None
        self.last_ms: int | None = None
        self.max_offset: int | None = None
        self.batches = 0
        self.minutes: dict[int, dict[str, int]] = {}
        self.error: str | None = None
        self.refreshed: float | None = None
        self.unreadable = 0
        self.unreadable_error: str | None = None

    # ------------------------------------------------------------ the file sink log
    def _entries(self, batch: int, compact: bool, deleted: set[str]) -> list[dict[str, Any]]:
        """The entries of one log file that are new (see the module docstring), newest last;
        the paths its ``delete`` entries name are added to ``deleted``."""
        raw = log_file(self.path, batch, compact).read_bytes()
        lines = raw.split(b"\n")[1:]  # the first line is the log's version ("v1")
        out: list[dict[str, Any]] = []
        for line in reversed(lines):
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry.get("action") == "delete":
                deleted.add(str(entry.get("path")))
                continue
            mtime = int(entry.get("modificationTime", 0))
            if mtime < self._mtime:
                if compact:
                    break  # a compacted log keeps batch order: the rest is older still
                continue
            if mtime == self._mtime and entry.get("path") in self._at_mtime:
                continue
            if entry.get("action", "add") == "add" and not entry.get("isDir"):
                out.append(entry)
        out.reverse()
        return out

    def _base_signature(self, ids: list[int], compacts: set[int]) -> tuple[int, ...] | None:
        """The log file readers start from, as it is on disk: ``leveret pipeline compact``
        rewrites it in place (atomically) when it replaces files or drops partitions."""
        if not ids:
            return None
        base = max(compacts) if compacts else ids[0]
        try:
            st = log_file(self.path, base, base in compacts).stat()
        except FileNotFoundError:
            return None
        return (base, st.st_ino, st.st_size, st.st_mtime_ns)

    def _reset(self) -> None:
        """Forget what was read: the lake is read again from its base log file."""
        self._read = {}
        with self._lock:
            self._batch = -1
            self._mtime = -1
            self._at_mtime = set()
            self._pending = []
            self.files = self.records = self.corrupt = self.errors = 0
            self.bytes = self.committed_files = 0
            self.first_ms = self.last_ms = self.max_offset = None
            self.minutes = {}

    def _list_new(self) -> None:
        ids, compacts = log_batches(self.path)
        signature = self._base_signature(ids, compacts)
        base = max(compacts) if compacts else (ids[0] if ids else -1)
        # the batch logs before a new base are read from it (Spark deletes them later)
        self._read = {b: sig for b, sig in self._read.items() if b > base}
        if (self._base is not None and signature is not None and signature != self._base) or any(
            _signature(self.path, b, b in compacts) != sig for b, sig in self._read.items()
        ):
            # files were replaced (a compaction) or dropped (retention: from the base and
            # the batch logs after it): count again
            self._reset()
        self._base = signature
        new = [b for b in ids if b > self._batch]
        if not new:
            return
        # A compacted log names every file of the batches before it: when one is among the
        # new logs, the new batch logs before it are read from it, not a second time from
        # their own files (which counted those batches twice)
        pending = set(new)
        done = [b for b in compacts if b in pending]
        if done:
            new = [b for b in new if b >= max(done)]
        entries: list[dict[str, Any]] = []
        deleted: set[str] = set()
        for batch in new:
            if batch > base:  # before reading it: a rewrite after is seen
                self._read[batch] = _signature(self.path, batch, batch in compacts)
            with contextlib.suppress(FileNotFoundError):
                entries.extend(self._entries(batch, batch in compacts, deleted))
        seen: set[str] = set()
        for entry in entries:
            mtime = int(entry.get("modificationTime", 0))
            path = str(entry["path"])
            if path in seen or path in deleted:  # a file is one file, whichever logs name it
                continue
            seen.add(path)
            if mtime > self._mtime:
                self._mtime = mtime
                self._at_mtime = {path}
            elif mtime == self._mtime:
                self._at_mtime.add(path)
            self._pending.append(path)
            with self._lock:
                self.bytes += int(entry.get("size", 0))
                self.committed_files += 1
        self._batch = new[-1]
        with self._lock:
            self.batches = self._batch + 1

    # ------------------------------------------------------------------ refresh
    def refresh(self, budget: int = FILES_PER_REFRESH) -> None:
        """List the newly committed files and read up to ``budget`` of them."""
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            self.error = (
                "pyarrow is not installed: install the spark extra (pip install 'leveret[spark]')"
            )
            return
        if not self._configured:
            self.error = "the broker runs without a data directory: set LEVERET_LAKE"
            return
        if not (self.path / METADATA).is_dir():
            self.error = f"no log lake at {self.path} yet (leveret pipeline ingest writes it)"
            return
        try:
            self._list_new()
            while self._pending and budget > 0:
                path = self._pending.pop(0)
                budget -= 1
                try:
                    counts = read_file(local_path(path))
                except FileNotFoundError:
                    continue
                except Exception as exc:  # one unreadable file is skipped, and said
                    log.warning("lake file %s cannot be read: %s", path, exc)
                    with self._lock:
                        self.unreadable += 1
                        self.unreadable_error = f"{path}: {exc}"
                    continue
                self._merge(counts)
            self.error = None
        except (OSError, ValueError) as exc:
            self.error = f"cannot read the lake at {self.path}: {exc}"
        finally:
            self.refreshed = time.time()

    def _merge(self, c: _FileCounts) -> None:
        with self._lock:
            self.files += 1
            self.records += c.records
            self.corrupt += c.corrupt
            self.errors += c.errors
            if c.first_ms is not None:
                self.first_ms = (
                    c.first_ms if self.first_ms is None else min(self.first_ms, c.first_ms)
                )
            if c.last_ms is not None:
                self.last_ms = c.last_ms if self.last_ms is None else max(self.last_ms, c.last_ms)
            if c.max_offset is not None:
                self.max_offset = (
                    c.max_offset if self.max_offset is None else max(self.max_offset, c.max_offset)
                )
            severity = c.severity if c.severity in SEVERITIES else "other"
            for minute, n in c.minutes.items():
                counts = self.minutes.setdefault(minute, {})
                counts[severity] = counts.get(severity, 0) + n
            if self.minutes and len(self.minutes) > KEEP_MINUTES:
                newest = max(self.minutes)
                for minute in [m for m in self.minutes if m <= newest - KEEP_MINUTES]:
                    del self.minutes[minute]

    # -------------------------------------------------------------------- state
    def state(self, minutes: int = 60) -> dict[str, Any]:
        with self._lock:
            recent = sorted(self.minutes.items())[-minutes:]
            per_minute = []
            for minute, counts in recent:
                records = sum(counts.values())
                errors = sum(counts.get(s, 0) for s in ERROR_SEVERITIES)
                per_minute.append(
                    {
                        "minute": minute * 60_000,
                        "records": records,
                        "errors": errors,
                        "error_rate": errors / records if records else 0.0,
                        **counts,
                    }
                )
            return {
                "path": str(self.path),
                "available": self.error is None and self.refreshed is not None,
                "error": self.error,
                "batches": self.batches,
                "files": self.files,
                "committed_files": self.committed_files,
                "bytes": self.bytes,
                "files_pending": len(self._pending),
                "files_unreadable": self.unreadable,
                "unreadable_error": self.unreadable_error,
                "summary": {
                    "records": self.records,
                    "corrupt": self.corrupt,
                    "errors": self.errors,
                    "first": self.first_ms,
                    "last": self.last_ms,
                },
                "max_offset": self.max_offset,
                "per_minute": per_minute,
                "refreshed": int(self.refreshed * 1000) if self.refreshed else None,
            }


class LakeWatcher:
    """Refreshes a :class:`Lake` in a thread when asked, at most every ``REFRESH_SECONDS``."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self._task: asyncio.Task[None] | None = None
        self._last = 0.0

    async def snapshot(self, wait: float = 1.0) -> dict[str, Any]:
        busy = self._task is not None and not self._task.done()
        if not busy and time.monotonic() - self._last >= REFRESH_SECONDS:
            self._last = time.monotonic()
            self._task = asyncio.get_running_loop().create_task(
                asyncio.to_thread(self.lake.refresh)
            )
        if self._task is not None and not self._task.done():
            await asyncio.wait({self._task}, timeout=wait)
        return self.lake.state()

    async def close(self) -> None:
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
