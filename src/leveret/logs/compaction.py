"""Keeping the lake healthy while the ingest writes it: compaction and retention, committed
through the sink's own log, whatever the ingest is doing (writing batches, quiet for hours,
catching up on a backfill, stopped).

**Compaction** rewrites a partition's small files into large ones; **retention** drops the
partitions past an age. Both change the set of committed files by rewriting files of the
sink's log, each in one atomic rename that keeps its modification time (the janitor of
:mod:`leveret.logs.lake` takes it as that batch's commit time). (Spark 4's sink log has no
``delete`` entries any more: a file is committed while an entry names it.) Readers (Spark,
``leveret logs search``, the report, the dashboard) read the latest compacted log
(``<batch>.compact``, or batch ``0`` before the first one), the *base*, and the batch files
after it:

- a compaction rewrites the base only, without the entries of its small files and with
  entries for the large files that replace them, so a reader sees either the old files or
  the new ones, never both, never neither. Only files the base names are compacted at a
  time; those of the batches since are named by the base after the sink's next log
  compaction (every tenth batch), and compacted by the run after that;
- the retention takes the expired files out of whichever log files name them (the base and
  the batch files after it: a backfill's old records are in the newest batches), one
  rename each, newest first: nothing is added, so between two renames a reader sees some
  expired files still, never a kept file missing nor one twice.

**Beside a running ingest.** The sink reads the log files it wrote before only when it
writes its next compacted log: it creates that file under a temporary name
(``.<batch>.compact.<uuid>.tmp``, Hadoop's atomic write) *before* it reads them, and
renames it when done (verified in Spark 4.3.0: ``HDFSMetadataLog.write`` and
``CompactibleFileStreamLog.compact``; ``tests/spark/test_compaction.py`` pins it). So a
commit waits while such a file exists (milliseconds, once every ten batches), rewrites,
and looks again: if no compacted log was begun before the rewrite was done, the sink will
read the rewritten files. If one was, the commit waits for it and reads it: when it was
read from the files before the rewrite it names the old files, and the commit is made
again on it (the retention drops again what it names again). Nothing else is asked of the
ingest: it is never paused nor restarted, a quiet ingest (no data, no batch, however close
to its next log compaction) is no obstacle, and an ingest killed -9 in the middle of its
log compaction leaves a temporary file that only counts while an ingest holds the lake's
``ingest`` lock (the next ingest removes it before its query starts). With no ingest
holding that lock, none can start during a commit.

**Files leave the disk** once nothing can read them (:mod:`leveret.logs.removals`): each
commit first records the files it takes out of the log and those it puts in; after a grace
period (for readers that listed the old set: a directory lister sees replaced files beside
their replacement meanwhile), and never while the sink writes a compacted log, the
recorded files the log does not name are removed (the replaced ones, and new ones of a
commit that did not last), by this run, the next one or the ingest. Until then the janitor
keeps them, and keeps a compaction's new files while it holds the lake's ``lock``
(``_leveret/lock``) until they are recorded. Every step is safe to kill -9: a hidden,
half-written file goes an hour later, a recorded one after the grace unless the log names
it, a replaced file after the grace unless the log still names it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from leveret.durable import fsync_path
from leveret.logs.lake import (
    METADATA,
    SinkLog,
    data_dirs,
    lake_lock,
    local_path,
    log_batches,
    log_file,
    remove_file,
    sink_compacting,
)
from leveret.logs.removals import DEFAULT_GRACE as DEFAULT_GRACE
from leveret.logs.removals import finish_removals as finish_removals
from leveret.logs.removals import record as _record

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 10  # spark.sql.streaming.fileSink.log.compactInterval
TARGET_BYTES = 128 << 20
ROWS_PER_GROUP = 256 * 1024
COMPACTED_PREFIX = "part-compacted-"
#: commits made again after the sink's log compaction read the log from before them
ATTEMPTS = 3

Step = Callable[[str], object]


class CompactionError(RuntimeError):
    """The lake cannot be changed now (no sink log, the sink writing its compacted log for
    too long, another compaction holding the lake's lock)."""


def _nothing(step: str) -> None:
    pass


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


def _base(lake: Path) -> tuple[int, bool]:
    """The log file readers start from: its batch, and whether it is a compacted log."""
    ids, compacts = log_batches(lake)
    if not ids:
        raise CompactionError(f"{lake} has no sink log ({METADATA}): nothing to compact")
    base = max(compacts) if compacts else ids[0]
    return base, base in compacts


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


def _rewrite(
    lake: Path, batch: int, compact: bool, drop: set[str], extra: list[dict[str, Any]]
) -> None:
    """Rewrite one log file without the entries of ``drop`` (local paths) and with
    ``extra`` entries at its end: atomically, keeping its mtime."""
    target = log_file(lake, batch, compact)
    st = target.stat()
    sink = SinkLog(lake)
    lines = target.read_bytes().rstrip(b"\n").split(b"\n")
    kept = [lines[0]]  # the version line
    for line in lines[1:]:
        if line.strip() and sink.here(local_path(json.loads(line)["path"])) in drop:
            continue
        kept.append(line)
    kept += [json.dumps(e, separators=(",", ":")).encode() for e in extra]
    # Hadoop's checksum of the old content: no reader may verify the new one against it
    with contextlib.suppress(FileNotFoundError):
        os.unlink(target.with_name(f".{target.name}.crc"))
    _replace(target, b"\n".join(kept), st)


def _replace(target: Path, data: bytes, st: os.stat_result) -> None:
    # not Hadoop's temporary name (.<name>.<uuid>.tmp): that is how the sink's own writes
    # are told apart (see leveret.logs.lake.sink_compacting)
    tmp = target.with_name(f".leveret-{target.name}-{uuid.uuid4().hex}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, target)
    fsync_path(target.parent)


@dataclass
class Change:
    """What one run did."""

    removed: list[str] = field(default_factory=list)  # committed files that went
    added: list[str] = field(default_factory=list)
    records: int = 0
    partitions: list[str] = field(default_factory=list)
    #: small files named after the base, compacted once the sink's next log compaction
    #: (batch ``next_log_compaction``) names them in the base
    waiting: int = 0
    next_log_compaction: int = 0


# --------------------------------------------------------------------- committing
@contextlib.contextmanager
def _changing(lake: Path, wait: float) -> Iterator[bool]:
    """Hold the lake's ``lock`` (the janitor and other compactions keep off) and, when no
    ingest holds the ``ingest`` lock, that one too (none starts meanwhile). Yields whether
    an ingest runs."""
    with lake_lock(lake, wait=wait) as got:
        if not got:
            raise CompactionError(f"another compaction of {lake} held its lock for {wait:.0f} s")
        with lake_lock(lake, wait=None, name="ingest") as idle:
            yield not idle


class _Compacting(Exception):
    """The sink went on writing a compacted log until the deadline."""

    def __init__(self, batch: int, path: Path, waited: float) -> None:
        super().__init__(batch)
        self.batch = batch
        self.waited = waited
        self.name = path.name
        try:
            self.idle = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            self.idle = 0.0

    def text(self) -> str:
        # a file a killed ingest left is removed when the ingest starts again
        return (
            f"the ingest has been writing its log compaction (batch {self.batch}) for "
            f"{self.waited:.0f} s or more ({METADATA}/{self.name}, last written "
            f"{self.idle:.0f} s ago)"
        )


def _settled(lake: Path, base: int, running: bool, deadline: float) -> bool:
    """Wait until the sink writes no compacted log after ``base`` (it reads the log files
    a commit rewrites); then whether it wrote one (the base moved). Raises _Compacting at
    the deadline."""
    started = time.monotonic()
    while True:
        writing = [(b, p) for b, p in sink_compacting(lake) if b > base] if running else []
        _, compacts = log_batches(lake)  # after the listing: a rename between is seen here
        moved = max(compacts, default=-1) > base
        if not writing:
            return moved
        if time.monotonic() >= deadline:
            raise _Compacting(*writing[0], time.monotonic() - started)
        time.sleep(0.05)


def _ready(lake: Path, running: bool, deadline: float) -> tuple[SinkLog, int, bool]:
    """The log once the sink writes no compacted log: read, with its base."""
    base, _ = _base(lake)
    try:
        _settled(lake, base, running, deadline)
    except _Compacting as exc:
        raise CompactionError(f"{exc.text()}: nothing changed; try again") from None
    sink = SinkLog(lake)
    sink.refresh()
    base, compact = _base(lake)
    return sink, base, compact


def _after(lake: Path, base: int, running: bool, deadline: float) -> bool:
    """After a rewrite: whether the sink wrote a compacted log since ``base`` (it may have
    read the log files from before the rewrite)."""
    try:
        return _settled(lake, base, running, deadline)
    except _Compacting as exc:
        # the change is made; the files the sink's compacted log will name stay, the
        # recorded others go after the grace
        log.warning(
            "%s since this commit: its compacted log may undo the commit (then the new "
            "files go after the grace)", exc.text()
        )  # fmt: skip
        return False


def _commit(
    lake: Path,
    remove: list[str],
    add: list[Path],
    running: bool,
    deadline: float,
    step: Step,
    records: list[Path],
    publish: Callable[[], object],
) -> bool:
    """Replace the committed files ``remove``, which the base names, with the new files
    ``add`` (``publish()`` makes them complete under those names, once the first record
    names them): one rename of the base. False when the log no longer names them all (a
    retention took some out) or the commit did not last ``ATTEMPTS`` times. Appends each
    record it writes to ``records`` (its new files are then settled after the grace)."""
    for _ in range(ATTEMPTS):
        sink, base, compact = _ready(lake, running, deadline)
        if not set(remove) <= sink.in_base:
            return False
        records.append(_record(lake, remove, [str(p) for p in add], base))
        step("recorded")
        if len(records) == 1:
            publish()
            step("published")
        _rewrite(lake, base, compact, set(remove), [_entry(p) for p in add])
        step("committed")
        if not _after(lake, base, running, deadline):
            return True
        sink = SinkLog(lake)
        sink.refresh()
        if {p.name for p in add} <= sink.names:
            return True  # the sink read the rewritten base
        log.info("the ingest's log compaction read the log from before a commit: made again")
    return False


def _drop(lake: Path, remove: list[str], running: bool, deadline: float, step: Step) -> list[str]:
    """Take the committed files ``remove`` out of whichever log files name them; returns
    those the log still names (a log compaction of the sink that read the log files from
    before the renames ``ATTEMPTS`` times over)."""
    todo = set(remove)
    for _ in range(ATTEMPTS):
        sink, base, _ = _ready(lake, running, deadline)
        todo &= set(sink.files)
        if not todo:
            return []
        by_file: dict[int, set[str]] = {}
        for p in todo:
            by_file.setdefault(sink.batch_of[p], set()).add(p)
        _record(lake, sorted(todo), [], base)
        step("recorded")
        for batch in sorted(by_file, reverse=True):
            _rewrite(lake, batch, batch in sink.compacts, by_file[batch], [])
            step("dropped")
        if not _after(lake, base, running, deadline):
            return []
        # what the sink's compacted log names again goes from it on the next round
    sink = SinkLog(lake)
    sink.refresh()
    return sorted(todo & set(sink.files))


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


def _waiting(lake: Path, target: int) -> tuple[int, int]:
    """The small committed files the base does not name, and the batch of the sink's next
    log compaction (which names them in the base)."""
    sink = SinkLog(lake)
    if sink.refresh() < 0:
        return 0, 0  # no log yet (the ingest starting)
    small = [p for p, f in sink.files.items() if p not in sink.in_base and f.size < target // 2]
    base, compact = _base(lake)
    interval = compact_interval(lake)
    return len(small), base + interval if compact else interval - 1


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
    step: Step = _nothing,
) -> Change:
    """Rewrite each partition's small committed files (those the base names) into large
    ones, one commit per partition. ``wait``: how long a commit may wait for the lake's
    lock and for the sink to finish a compacted log. ``step(name)`` is called between
    steps (tests kill the process there)."""
    change = Change()
    _remove_stale_temps(lake)
    todo = plan(lake, target, min_files)
    change.waiting, change.next_log_compaction = _waiting(lake, target)
    for part, files in todo.items():
        out_dir = lake / part
        tmps, rows = _write_partition(files, out_dir, target)
        step("written")
        finals = [out_dir / f"{COMPACTED_PREFIX}{uuid.uuid4()}.c000.snappy.parquet" for _ in tmps]

        def publish(tmps: list[Path] = tmps, finals: list[Path] = finals) -> None:
            for tmp, final in zip(tmps, finals, strict=True):
                os.replace(tmp, final)
            fsync_path(finals[0].parent)

        records: list[Path] = []
        committed = False
        try:
            with _changing(lake, wait) as running:
                deadline = time.monotonic() + wait
                committed = _commit(lake, files, finals, running, deadline, step, records, publish)
        finally:
            for p in tmps:  # not published (once recorded, the record settles the rest)
                remove_file(str(p))
        if not committed:
            continue  # a retention dropped some meanwhile, or it did not last: plan again
        change.removed += files
        change.added += [str(p) for p in finals]
        change.records += rows
        change.partitions.append(part)
        log.info("compacted %s: %d files into %d (%d records)", part, len(files),
                 len(finals), rows)  # fmt: skip
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


def drop_expired(
    lake: Path, days: int, today: date | None = None, wait: float = 120.0, step: Step = _nothing
) -> Change:
    """Take the partitions older than ``days`` days out of the log (their files are removed
    after the grace period by :func:`finish_removals`), from whichever log files name
    them. ``wait`` and ``step`` as :func:`compact`'s."""
    change = Change()
    todo = expired(lake, days, today)
    if not todo:
        return change
    files = [f for fs in todo.values() for f in fs]
    with _changing(lake, wait) as running:
        left = set(_drop(lake, files, running, time.monotonic() + wait, step))
    change.removed = [f for f in files if f not in left]
    change.partitions = sorted(p for p, fs in todo.items() if not left.intersection(fs))
    if left:
        log.warning(
            "retention: %d expired file(s) named again by the ingest's log compactions "
            "(they read the log from before the commits %d times): the next run drops them",
            len(left), ATTEMPTS,
        )  # fmt: skip
    log.info("retention: dropped %d partition(s), %d file(s)", len(change.partitions),
             len(change.removed))  # fmt: skip
    return change
