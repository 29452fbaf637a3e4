"""Keeping the lake healthy while the ingest writes it: compaction and retention, committed
through the sink's own log.

**Compaction** rewrites a partition's small files into large ones; **retention** drops the
partitions past an age. Both change the set of committed files the same way: one atomic
rename of the log file every reader starts from (the latest ``<batch>.compact``, or batch
``0`` before the first one), without the entries of the files that go and with entries for
the files that come. (Spark 4's sink log has no ``delete`` entries any more: a file is
committed while an entry names it.) So only files that base file names are changed at a
time; those of the batches since wait for the sink's next log compaction, which names them
in the next base. Spark's readers, the sink's next log compaction, ``leveret logs search``
and the dashboard all start from the base, so a reader sees either the old files or the
new ones: never both, never neither.

Why this is safe with the ingest running: the sink itself reads that base file only when it
writes its next compacted log (batch ``base + interval``, Spark's default interval is 10);
the batch before that one is a plain log file. The base is rewritten only while the sink's
newest batch is at least three batches short of that compaction, and checked again after
the rename; then the sink, which writes its batches one after another, reads the new base.
(When the check fails afterwards the change is undone before anything is removed.) When no
ingest holds the lake's ``ingest`` lock, no sink can read the base meanwhile. The rename
keeps the base file's modification time, which the janitor of :mod:`leveret.logs.lake` uses
as that batch's commit time.

The files that went are removed from the disk after a grace period (readers that listed the
old set may still be reading them; a directory lister sees them twice meanwhile), by this
run or, after a crash, by the next run or the ingest. A lock file (``_leveret/lock``) keeps
a compaction's new files from the janitor until they are committed. Every step is safe to
kill -9: a new file not yet in the log is removed by the janitor, a replaced file still on
the disk is removed by the next run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from leveret.durable import fsync_path
from leveret.logs.lake import (
    METADATA,
    STATE_DIR,
    SinkLog,
    data_dirs,
    lake_lock,
    local_path,
    log_batches,
    log_file,
    remove_file,
)

log = logging.getLogger(__name__)

PENDING_DIR = "removals"
DEFAULT_INTERVAL = 10  # spark.sql.streaming.fileSink.log.compactInterval
SAFETY = 3  # batches between the sink's newest batch and its next log compaction
DEFAULT_GRACE = 30.0
TARGET_BYTES = 128 << 20
ROWS_PER_GROUP = 256 * 1024
COMPACTED_PREFIX = "part-compacted-"


class CompactionError(RuntimeError):
    """The lake cannot be changed now (no sink log, the sink too close to its own log
    compaction, another compaction running)."""


# ------------------------------------------------------------------------ the log
def compact_interval(lake: Path) -> int:
    """The sink's log compaction interval, as its files show it (the default until the
    first compacted log)."""
    _, compacts = log_batches(lake)
    done = sorted(compacts)
    if len(done) >= 2:
        return done[-1] - done[-2]
    if len(done) == 1:
        return done[0] + 1
    return DEFAULT_INTERVAL


def _base(lake: Path) -> tuple[int, bool, int]:
    """The log file readers start from (id, is it compacted) and the newest batch."""
    ids, compacts = log_batches(lake)
    if not ids:
        raise CompactionError(f"{lake} has no sink log ({METADATA}): nothing to compact")
    base = max(compacts) if compacts else ids[0]
    return base, base in compacts, ids[-1]


def _room(lake: Path, idle: bool = False) -> tuple[int, bool] | None:
    """The base to rewrite, when the sink is far enough from reading it or no ingest runs
    (``idle``), else None."""
    base, compact, latest = _base(lake)
    if idle:
        return base, compact
    interval = compact_interval(lake)
    nxt = base + interval if compact else interval - 1
    if latest > nxt - SAFETY:
        return None
    return base, compact


def _entry(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {
        "path": path.resolve().as_uri(),
        "size": st.st_size,
        "isDir": False,
        "modificationTime": int(st.st_mtime * 1000),
        "blockReplication": 1,
        "blockSize": 33554432,
        "action": "add",
    }


def _rewrite_base(
    lake: Path, base: int, compact: bool, drop: set[str], extra: list[dict[str, Any]]
) -> bytes:
    """Rewrite the base log file without the entries of ``drop`` (local paths) and with
    ``extra`` entries at its end: atomically, keeping its mtime. Returns the old content."""
    target = log_file(lake, base, compact)
    st = target.stat()
    old = target.read_bytes()
    sink = SinkLog(lake)
    lines = old.rstrip(b"\n").split(b"\n")
    kept = [lines[0]]  # the version line
    for line in lines[1:]:
        if line.strip() and sink.here(local_path(json.loads(line)["path"])) in drop:
            continue
        kept.append(line)
    kept += [json.dumps(e, separators=(",", ":")).encode() for e in extra]
    _replace(target, b"\n".join(kept), st)
    return old


def _replace(target: Path, data: bytes, st: os.stat_result) -> None:
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, target)
    fsync_path(target.parent)


@dataclass
class Change:
    """What one commit did."""

    removed: list[str] = field(default_factory=list)  # committed files that went
    added: list[str] = field(default_factory=list)
    records: int = 0
    partitions: list[str] = field(default_factory=list)


def commit(
    lake: Path,
    remove: list[str],
    add: list[Path],
    wait: float = 60.0,
    pause: Any = None,
    spread: bool = False,
) -> bool:
    """Commit one change to the lake's files (see the module docstring): ``remove`` are
    committed files (local paths), ``add`` new complete files under the lake. Waits up to
    ``wait`` seconds for room (the sink away from its own log compaction). Returns False
    (and commits nothing) when there was none. Call it holding :func:`lake_lock`."""
    with lake_lock(lake, wait=None, name="ingest") as idle:
        # no ingest runs while this is held: no sink can read the base meanwhile
        if spread:
            return _drop(lake, remove, time.monotonic() + wait, idle)
        return _commit(lake, remove, add, time.monotonic() + wait, pause, idle)


def _drop(lake: Path, remove: list[str], deadline: float, idle: bool) -> bool:
    """Take files out of whichever log files name them (the retention: nothing is added,
    so a reader between two renames sees some of the expired files still, never a kept
    file missing). With the ingest running, the log files of its last two batches (which
    its sink may hold in memory) are left for the next run."""
    while _room(lake, idle) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    sink = SinkLog(lake)
    latest = sink.refresh()
    limit = latest if idle else latest - 2
    by_batch: dict[int, set[str]] = {}
    for p in remove:
        b = sink.batch_of.get(p)
        if b is not None and b <= limit:
            by_batch.setdefault(b, set()).add(p)
    if not by_batch:
        return True  # what expired is in the newest batches: the next run takes it
    _pending(lake, [p for ps in by_batch.values() for p in ps], [], -1)
    for b, paths in sorted(by_batch.items(), reverse=True):
        _rewrite_base(lake, b, b in sink.compacts, paths, [])
    return True


def _commit(
    lake: Path, remove: list[str], add: list[Path], deadline: float, pause: Any, idle: bool
) -> bool:
    while True:
        room = _room(lake, idle)
        if room is not None:
            break
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    base, compact = room
    sink = SinkLog(lake)
    sink.refresh()
    if not set(remove) <= sink.in_base:
        return False  # the base moved on (the sink compacted its log): plan again
    record = _pending(lake, remove, [str(p) for p in add], base)
    old = _rewrite_base(lake, base, compact, set(remove), [_entry(p) for p in add])
    if pause is not None:
        pause("committed")
    if not idle and not _sticks(lake, base, compact):
        # the sink reached its log compaction meanwhile: it may have read the old base;
        # undo (the new files are then removed as uncommitted, the old ones stay)
        log.warning("the ingest reached its log compaction during the commit: undone")
        target = log_file(lake, base, compact)
        _replace(target, old, target.stat())
        record.unlink(missing_ok=True)
        return False
    return True


def _sticks(lake: Path, base: int, compact: bool) -> bool:
    """Whether the sink has not yet started the log compaction that reads ``base``."""
    ids, _ = log_batches(lake)
    interval = compact_interval(lake)
    nxt = base + interval if compact else interval - 1
    return not ids or ids[-1] < nxt - 1


# --------------------------------------------------------------------- removals
def _pending(lake: Path, remove: list[str], add: list[str], base: int) -> Path:
    d = lake / STATE_DIR / PENDING_DIR
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"at": time.time(), "base": base, "remove": remove, "add": add}))
    os.replace(tmp, path)
    return path


def finish_removals(lake: Path, grace: float = DEFAULT_GRACE, now: float | None = None) -> int:
    """Remove from the disk the files earlier commits took out of the log, once ``grace``
    seconds have passed; returns how many. Files the log names again are kept."""
    d = lake / STATE_DIR / PENDING_DIR
    if not d.is_dir():
        return 0
    now = time.time() if now is None else now
    sink: SinkLog | None = None
    removed = 0
    for rec in sorted(d.glob("*.json")):
        try:
            doc = json.loads(rec.read_text())
        except (OSError, ValueError):
            rec.unlink(missing_ok=True)
            continue
        if now < float(doc["at"]) + grace:
            continue
        if sink is None:
            sink = SinkLog(lake)
            sink.refresh()
        for p in doc["remove"]:
            if p in sink.files:
                continue  # the log names it (again): it stays
            if remove_file(p):
                removed += 1
                _remove_empty_dirs(Path(p).parent, lake)
        rec.unlink(missing_ok=True)
    return removed


def _remove_empty_dirs(d: Path, lake: Path) -> None:
    while d != lake and lake in d.parents:
        try:
            d.rmdir()
        except OSError:
            return
        d = d.parent


# --------------------------------------------------------------------- compaction
def _partition_of(path: str, lake: Path) -> str:
    return os.path.relpath(os.path.dirname(path), lake)


def plan(lake: Path, target: int = TARGET_BYTES, min_files: int = 2) -> dict[str, list[str]]:
    """The partitions worth compacting and their small files: at least ``min_files`` files
    under half of ``target`` bytes."""
    sink = SinkLog(lake)
    sink.refresh()
    parts: dict[str, list[str]] = {}
    # in the log's order, which is the batches' order: the rows of a compacted file then
    # run in time order, so a time range skips whole row groups
    for p, f in sink.files.items():
        # a file the base log file names: one rename takes it out of the log (the files of
        # the batches since wait for the sink's next log compaction)
        if p not in sink.in_base or (f.size and f.size >= target // 2):
            continue
        parts.setdefault(_partition_of(p, lake), []).append(p)
    return {k: v for k, v in parts.items() if len(v) >= min_files}


def _micros(schema: Any) -> Any:
    import pyarrow as pa

    fields = [
        f.with_type(pa.timestamp("us", tz=f.type.tz)) if pa.types.is_timestamp(f.type) else f
        for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def _write_partition(files: list[str], out_dir: Path, target: int) -> tuple[list[Path], int]:
    """The files' rows in new files of about ``target`` bytes (hidden names until they
    are published)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    outs: list[Path] = []
    rows = 0
    writer: Any = None
    written = 0
    pending: list[Any] = []
    pending_rows = 0
    schema = None

    def flush() -> None:
        nonlocal pending, pending_rows, written
        if pending:
            table = pa.concat_tables(pending).combine_chunks()
            writer.write_table(table, row_group_size=ROWS_PER_GROUP)
            written = outs[-1].stat().st_size  # on the disk, as the plan measures files
            pending, pending_rows = [], 0

    try:
        for path in files:
            table = pq.ParquetFile(path).read()
            if schema is None:
                schema = table.schema
            if not table.schema.equals(_micros(schema)):
                table = table.cast(_micros(schema))
            if writer is None or written >= target:
                flush()
                if writer is not None:
                    writer.close()
                tmp = out_dir / f".compacting-{uuid.uuid4().hex}.parquet"
                outs.append(tmp)
                # timestamps as INT64 microseconds (Spark writes INT96, which has no
                # statistics): readers can skip row groups outside a time range
                writer = pq.ParquetWriter(
                    tmp, _micros(schema), compression="snappy", coerce_timestamps="us"
                )
                written = 0
            pending.append(table)
            pending_rows += table.num_rows
            rows += table.num_rows
            if pending_rows >= ROWS_PER_GROUP:
                flush()
        flush()
    except BaseException:
        if writer is not None:
            writer.close()
        for o in outs:
            o.unlink(missing_ok=True)
        raise
    if writer is not None:
        writer.close()
    for o in outs:
        with open(o, "rb") as f:
            os.fsync(f.fileno())
    return outs, rows


STALE_TEMP = 3600.0


def _remove_stale_temps(lake: Path, older: float = STALE_TEMP) -> None:
    """The half-written files of compactions killed before they published them (hidden:
    no reader lists them); an hour old, no running compaction still writes them."""
    now = time.time()
    for d in data_dirs(lake):
        with contextlib.suppress(FileNotFoundError):
            for e in os.scandir(d):
                if e.name.startswith(".compacting-"):
                    with contextlib.suppress(FileNotFoundError):
                        if now - e.stat().st_mtime > older:
                            os.unlink(e.path)


def compact(
    lake: Path,
    target: int = TARGET_BYTES,
    min_files: int = 2,
    wait: float = 120.0,
    pause: Any = None,
) -> Change:
    """Rewrite each partition's small committed files into large ones, one commit per
    partition. ``pause(step)`` is called between steps (tests kill the process there)."""
    change = Change()
    _remove_stale_temps(lake)
    todo = plan(lake, target, min_files)
    for part, files in todo.items():
        out_dir = lake / part
        tmps, rows = _write_partition(files, out_dir, target)
        if pause is not None:
            pause("written")
        with lake_lock(lake, wait=wait) as got:
            if not got:
                raise CompactionError("another compaction holds the lake's lock")
            published: list[Path] = []
            for tmp in tmps:
                final = out_dir / f"{COMPACTED_PREFIX}{uuid.uuid4()}.c000.snappy.parquet"
                os.replace(tmp, final)
                published.append(final)
            fsync_path(out_dir)
            if pause is not None:
                pause("published")
            # the files read must still be committed (a retention may have dropped them)
            sink = SinkLog(lake)
            sink.refresh()
            if any(f not in sink.files for f in files) or not commit(
                lake, files, published, wait=wait, pause=pause
            ):
                for p in published:
                    remove_file(str(p))
                continue
        change.removed += files
        change.added += [str(p) for p in published]
        change.records += rows
        change.partitions.append(part)
        log.info("compacted %s: %d files into %d (%d records)", part, len(files),
                 len(published), rows)  # fmt: skip
    return change


# ---------------------------------------------------------------------- retention
_AGE = {"d": 1, "day": 1, "days": 1, "w": 7, "week": 7, "weeks": 7}


def parse_retention(text: str) -> int:
    """``30d``, ``4w``, ``30 days`` as a number of days (at least 1)."""
    import re

    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    unit = (m.group(2) or "d") if m else ""
    if m is None or unit not in _AGE or int(m.group(1)) * _AGE[unit] < 1:
        raise ValueError(f"invalid retention {text!r}: use a number of days or weeks (30d, 4w)")
    return int(m.group(1)) * _AGE[unit]


def expired(lake: Path, days: int, today: date | None = None) -> dict[str, list[str]]:
    """The committed files of ``date=`` partitions older than ``days`` days, by partition."""
    today = today or datetime.now(UTC).date()
    cutoff = today - timedelta(days=days)
    sink = SinkLog(lake)
    sink.refresh()
    out: dict[str, list[str]] = {}
    for p in sorted(sink.files):
        part = _partition_of(p, lake)
        day = next((seg[5:] for seg in part.split(os.sep) if seg.startswith("date=")), None)
        try:
            if day is None or date.fromisoformat(day) >= cutoff:
                continue
        except ValueError:
            continue
        out.setdefault(part, []).append(p)
    return out


def drop_expired(lake: Path, days: int, today: date | None = None, wait: float = 120.0) -> Change:
    """Take the partitions older than ``days`` days out of the log in one commit (their
    files are removed after the grace period by :func:`finish_removals`)."""
    change = Change()
    todo = expired(lake, days, today)
    if not todo:
        return change
    files = [f for fs in todo.values() for f in fs]
    with lake_lock(lake, wait=wait) as got:
        if not got:
            raise CompactionError("a compaction holds the lake's lock")
        if not commit(lake, files, [], wait=wait):
            raise CompactionError("the ingest stayed at its own log compaction: try again")
    change.removed = files
    change.partitions = sorted(todo)
    log.info("retention: dropped %d partition(s), %d file(s)", len(todo), len(files))
    return change
