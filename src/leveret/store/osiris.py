"""A stream's log in osiris's on-disk format (RabbitMQ 3.10.8, osiris 1.3.1).

Layout, one directory per stream, as osiris lays it out::

    00000000000000000000.segment   "OSIL" + version 1, then whole chunks
    00000000000000000000.index     "OSII" + version 1, then one 29-byte record per chunk:
                                   first offset u64 | timestamp i64 | epoch u64 |
                                   file position u32 | chunk type u8

A chunk is in osiris's format (:mod:`leveret.protocol.stream.chunk`). A Deliver frame of
the stream protocol carries the header and data of a chunk exactly as stored, so readers
of that protocol are served straight from the file (:meth:`OsirisLog.chunk_at`).

Appends are buffered and written as one chunk by :meth:`OsirisLog.sync`, which fsyncs;
only synced chunks are visible to readers. On open, a torn tail left by a crash is cut at
the last whole chunk (its CRC checked), and chunks whose index record was lost are indexed
again. Retention (``max_bytes``, ``max_age_ms``) drops whole segments, oldest first, never
the active one. Readers seek through the in-memory copy of the index by offset or by
timestamp; no message is held in memory.

Consumers' stored offsets and named publishers' last publishing ids are kept in the log
as osiris keeps them (see :mod:`leveret.store.osiris_tracking`): in chunk trailers, in
tracking-delta chunks and in the tracking snapshot that starts each segment, and they are
recovered from there at open. The ``tracking.json`` an older Leveret kept beside the
chunks is taken in once (what the chunks lack is written as a snapshot chunk), then
removed."""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path

from leveret.broker.clock import wall_ms
from leveret.broker.ports import ChunkRef
from leveret.protocol.stream import bloom, chunk
from leveret.protocol.stream.chunk import (
    CHUNK_TRK_DELTA,
    CHUNK_TRK_SNAPSHOT,
    CHUNK_USER,
    EPOCH,
    HEADER,
    HEADER_SIZE,
    Reading,
)
from leveret.store.osiris_segment import IDX, Segment, create, load
from leveret.store.osiris_tracking import TRK_OFFSET, TRK_SEQUENCE, Tracking, read_tracking_json
from leveret.store.segmented import SegmentedLog

log = logging.getLogger(__name__)

MAX_SEGMENT_CHUNKS = 256_000  # osiris's default max_segment_size_chunks
# A chunk is cut at this many bytes of entries (a Deliver frame stays well within the
# 1 MiB frame size clients ask for), and at 65,535 entries (the header's entry count).
CHUNK_BYTES = 512 * 1024

Record = tuple[int, int, bytes]  # offset, chunk timestamp ms, AMQP 1.0 message


class OsirisLog(SegmentedLog[Segment]):
    def __init__(
        self,
        directory: Path,
        max_segment_bytes: int = 500_000_000,
        max_bytes: int | None = None,
        max_age_ms: int | None = None,
        convert: Callable[[Path], None] | None = None,
        start: int = 0,
    ) -> None:
        super().__init__(directory, max_segment_bytes, max_bytes, max_age_ms)
        if convert is not None and any(self.dir.glob("*.seg")):
            convert(self.dir)  # a stream written in an older layout
        self._pending: list[bytes] = []
        # the filter values of the pending messages that have one, by index (RabbitMQ 3.13)
        self._pending_filters: dict[int, bytes] = {}
        self.filter_size = bloom.DEFAULT_SIZE  # x-stream-filter-size-bytes
        # sub-batch entries among them (stored as they came): index -> record count
        self._pending_batches: dict[int, int] = {}
        self._writer = -1
        self._idx_writer = -1
        self._open(start)
        self.next_offset = self.committed
        self.tracking = Tracking()
        self._snapshot: bytes | None = None  # a snapshot chunk to write at the next sync
        self._recover_tracking()
        self._take_in_tracking_json()

    # ------------------------------------------------------------------ open
    def _open(self, start: int) -> None:
        bases = sorted(int(p.stem) for p in self.dir.glob("*.segment"))
        for base in bases:
            seg = Segment(self.dir, base)
            load(seg)
            if seg.firsts or base == bases[-1]:
                self.segments.append(seg)
            else:  # a segment a crash left with no whole chunk
                seg.path.unlink(missing_ok=True)
                seg.idx_path.unlink(missing_ok=True)
        if not self.segments:
            seg = Segment(self.dir, start)
            create(seg)
            self.segments.append(seg)

    # ------------------------------------------------------------- tracking
    def _recover_tracking(self) -> None:
        """The tracking state from the chunks, in log order, from the last segment that
        starts with a snapshot (osiris reads its last segment, which starts with one
        whenever the state was not empty when it was opened)."""
        segs = self.segments
        start = 0
        for si in range(len(segs) - 1, -1, -1):
            if segs[si].types[:1] == bytes((CHUNK_TRK_SNAPSHOT,)):
                start = si
                break
        trk = self.tracking
        for seg in segs[start:]:
            fd = seg.reader()
            for i in range(len(seg.firsts)):
                kind, chunk_id = seg.types[i], seg.firsts[i]
                dlen, tlen, fsize = seg.header(i)
                data_at = seg.positions[i] + HEADER_SIZE + fsize
                if kind == CHUNK_USER:
                    if tlen:
                        trk.apply_trailer(chunk_id, os.pread(fd, tlen, data_at + dlen))
                    continue
                entry = _only_record(os.pread(fd, dlen, data_at))
                if kind == CHUNK_TRK_SNAPSHOT:
                    trk.load_snapshot(entry)
                else:
                    trk.apply_trailer(chunk_id, entry)

    def _take_in_tracking_json(self) -> None:
        """The ``tracking.json`` an older Leveret wrote: what the chunks do not hold of it
        is written in a snapshot chunk of the whole state, then the file goes."""
        path = self.dir / "tracking.json"
        try:
            offsets, sequences = read_tracking_json(path)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("%s: tracking.json left as it is, it cannot be read: %s", path, exc)
            return
        trk = self.tracking
        missing = {r: o for r, o in offsets.items() if r not in trk.offsets}
        missing_seqs = {r: q for r, q in sequences.items() if r not in trk.sequences}
        if missing or missing_seqs:
            trk.offsets.update(missing)
            trk.sequences.update({r: (self.next_offset, q) for r, q in missing_seqs.items()})
            # kept whole (osiris's snapshot at the next segment drops offsets it left behind)
            self._snapshot = trk.snapshot(0, -(1 << 63))
            self.sync()
            log.info(
                "%s: %d stored offsets and %d publisher sequences taken in from tracking.json",
                self.dir,
                len(missing),
                len(missing_seqs),
            )
        path.unlink()
        with contextlib.suppress(FileNotFoundError):
            path.with_suffix(".tmp").unlink()

    def store_offset(self, reference: str, offset: int) -> None:
        """A consumer's offset, written at the next sync: in the trailer of the chunk
        then written, or, when no message waits, in a tracking chunk of its own, which
        takes an offset (as osiris's writer does it)."""
        self.tracking.set(TRK_OFFSET, reference, offset)

    def query_offset(self, reference: str) -> int | None:
        return self.tracking.offsets.get(reference)

    def writer_sequence(self, reference: str) -> int | None:
        return self.tracking.sequence(reference)

    def set_writer_sequence(self, reference: str, sequence: int) -> None:
        if self.tracking.sequence(reference) != sequence:
            self.tracking.set(TRK_SEQUENCE, reference, sequence)

    # ---------------------------------------------------------------- state
    @property
    def chunk_count(self) -> int:
        return sum(len(s.firsts) for s in self.segments)

    def chunk_ids(self) -> tuple[int, int]:
        """The ids (first offsets) of the first and the last chunk stored, of any type;
        -1 each when there is none (osiris's first_chunk_id and last_chunk_id)."""
        firsts = [s.firsts for s in self.segments if s.firsts]
        if not firsts:
            return -1, -1
        return firsts[0][0], firsts[-1][-1]

    def last_chunk_start(self) -> int:
        for seg in reversed(self.segments):
            for i in range(len(seg.firsts) - 1, -1, -1):
                if seg.types[i] == CHUNK_USER:
                    return seg.firsts[i]
        return self.committed

    def _locate(self, offset: int) -> tuple[int, int]:
        """(segment index, chunk index) of the chunk holding ``offset`` (chunk -1: none)."""
        segs = self.segments
        lo, hi = 0, len(segs)
        while lo < hi:  # the last segment whose base <= offset
            mid = (lo + hi) // 2
            if segs[mid].base <= offset:
                lo = mid + 1
            else:
                hi = mid
        si = max(0, lo - 1)
        return si, bisect.bisect_right(segs[si].firsts, offset) - 1

    def chunk_end(self, offset: int) -> int:
        """One past the last offset of the chunk that holds ``offset``."""
        si, ci = self._locate(offset)
        seg = self.segments[si]
        if ci < 0:
            return seg.firsts[0] if seg.firsts else seg.end
        return seg.firsts[ci] + seg.records[ci]

    def offset_at(self, ts_ms: int) -> int:
        """The first offset of the first chunk written at or after ``ts_ms``."""
        for seg in self.segments:
            if seg.last_ts < ts_ms:
                continue
            i = bisect.bisect_left(seg.timestamps, ts_ms)
            if i < len(seg.firsts):
                return seg.firsts[i]
        return self.committed

    # --------------------------------------------------------------- append
    def append(self, message: bytes, filter_value: bytes | None = None) -> int:
        """An AMQP 1.0-encoded message, readable after the next sync; the offset it is
        to take (one more if a new segment's tracking snapshot goes before it). A message
        with a ``filter_value`` sets its bits in its chunk's Bloom filter."""
        offset = self.next_offset
        self.next_offset = offset + 1
        if filter_value:
            self._pending_filters[len(self._pending)] = filter_value
        self._pending.append(message)
        return offset

    def append_batch(
        self, compression: int, records: int, uncompressed_size: int, data: bytes
    ) -> int:
        """A sub-entry batch as a publisher sent it (``records`` messages, compressed or
        not), stored as one sub-batch entry the way osiris stores it; its first offset."""
        offset = self.next_offset
        self.next_offset = offset + records
        self._pending_batches[len(self._pending)] = records
        self._pending.append(chunk.sub_batch(compression, records, uncompressed_size, data))
        return offset

    def sync(self, ts_ms: int | None = None) -> bool:
        """Write what was appended as chunks (stamped now, or ``ts_ms``) and fsync them.
        True if anything was written. Tracking that changed goes in the last chunk's
        trailer, or in a tracking chunk when no message waits; a new segment starts with a
        snapshot of the tracking state (unless it is empty), as osiris's writer does."""
        trk = self.tracking
        if not self._pending and not trk.pending and self._snapshot is None:
            return False
        ts = wall_ms() if ts_ms is None else ts_ms  # the broker's clock
        seg = self.segments[-1]
        chunks: list[bytes] = []
        index: list[bytes] = []
        pos = seg.size
        first = seg.end

        def add(chunk: bytes, records: int, kind: int, dlen: int, fsize: int = 0) -> None:
            nonlocal pos, first
            chunks.append(chunk)
            index.append(IDX.pack(first, ts, EPOCH, pos, kind))
            seg.add(first, pos, ts, records, kind, dlen, fsize)
            pos += len(chunk)
            first += records

        if seg.firsts and (
            seg.size >= self.max_segment_bytes or len(seg.firsts) >= MAX_SEGMENT_CHUNKS
        ):
            self._roll()
            seg = self.segments[-1]
            pos, first = seg.size, seg.end
            if not trk.is_empty():  # offsets and timestamps from the first chunk on
                first_ts = self.segments[0].timestamps[0] if self.segments[0].firsts else 0
                self._snapshot = trk.snapshot(self.first, first_ts)
        if self._snapshot is not None:
            snapshot, self._snapshot = self._snapshot, None
            add(_tracking_chunk(snapshot, first, ts, CHUNK_TRK_SNAPSHOT), 1, 2, -1)
        pending = self._pending
        self._pending = []
        batches = self._pending_batches
        self._pending_batches = {}
        filters = self._pending_filters
        self._pending_filters = {}
        # entries framed (a simple entry is ``u32 size | message``; a sub-batch came framed)
        pack = chunk.ENTRY.pack
        if batches:
            entries = [m if i in batches else pack(len(m)) + m for i, m in enumerate(pending)]
            counts = [batches.get(i, 1) for i in range(len(pending))]
        else:
            entries = [pack(len(m)) + m for m in pending]
        i = 0
        while i < len(entries):  # chunks of at most CHUNK_BYTES (one entry at least)
            j, size = i, 0
            while j < len(entries) and j - i < 65535 and (j == i or size < CHUNK_BYTES):
                size += len(entries[j])
                j += 1
            records = sum(counts[i:j]) if batches else j - i
            tail = trk.flush(first) if j == len(entries) and trk.pending else b""
            data = b"".join(entries[i:j])
            # a filter only when some message of the chunk has a value, as osiris's
            bits = bloom.build([filters.get(k) for k in range(i, j)], self.filter_size)
            if not filters or not bits:
                bits = b""
            built = chunk.build(first, ts, data, j - i, records, trailer=tail, bloom=bits)
            add(built, records, 0, size, len(bits))
            i = j
        if trk.pending:  # tracking alone: a chunk of its own, one entry, one offset
            delta = _tracking_chunk(trk.flush(first), first, ts, CHUNK_TRK_DELTA)
            add(delta, 1, CHUNK_TRK_DELTA, -1)
        self.next_offset = first
        if self._writer < 0:
            self._writer = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
            self._idx_writer = os.open(seg.idx_path, os.O_WRONLY | os.O_APPEND)
        _write_all(self._writer, b"".join(chunks))
        os.fsync(self._writer)
        _write_all(self._idx_writer, b"".join(index))
        seg.size = pos
        seg.end = first
        seg.last_ts = ts
        self.apply_retention()
        return True

    def _roll(self) -> None:
        self._close_writers()
        seg = Segment(self.dir, self.segments[-1].end)
        create(seg)
        self.segments.append(seg)

    # ----------------------------------------------------------------- read
    def chunk_at(self, offset: int) -> ChunkRef | None:
        """The stored user chunk holding ``offset`` (or the first one after it), as a
        Deliver frame sends it; None when nothing is committed from ``offset`` on."""
        offset = max(offset, self.first)
        if offset >= self.committed:
            return None
        si, ci = self._locate(offset)
        segs = self.segments
        ci = max(ci, 0)
        while si < len(segs):
            seg = segs[si]
            while ci < len(seg.firsts):
                if seg.types[ci] == CHUNK_USER:
                    return seg.ref(ci)
                ci += 1
            si += 1
            ci = 0
        return None

    def read_chunk(self, ref: ChunkRef) -> bytes:
        """A chunk's header and data (as a Deliver frame carries them)."""
        return ref.read()

    def read(self, offset: int, max_count: int, max_bytes: int = 4 * 1024 * 1024) -> list[Record]:
        """Up to ``max_count`` committed messages from ``offset`` on (whole chunks read,
        records before ``offset`` skipped)."""
        out: list[Record] = []
        size = 0
        while len(out) < max_count and size < max_bytes:
            ref = self.chunk_at(offset)
            if ref is None:
                break
            whole = True
            records = self._records(ref, offset, offset + max_count - len(out))
            for rec_offset, message in records:
                out.append((rec_offset, ref.timestamp, message))
                size += len(message)
                offset = rec_offset + 1
                if len(out) >= max_count or size >= max_bytes:
                    whole = False
                    break
            if whole:
                offset = max(offset, ref.first + ref.records)
        return out

    def _records(self, ref: ChunkRef, start: int, end: int) -> list[tuple[int, bytes]]:
        """The (offset, message) of a stored user chunk's records in ``[start, end)``; a
        sub-batch that does not open is one record of its bytes, as osiris reads it."""
        raw = self.read_chunk(ref)
        out: list[tuple[int, bytes]] = []
        add = out.append
        reading = Reading(start, end, lenient=True)
        with contextlib.suppress(struct.error):  # a chunk cut short: the records it holds
            entries = HEADER.unpack_from(raw)[2]
            chunk.walk(raw, HEADER_SIZE, entries, ref.first, lambda b, s, e, o: add((o, b[s:e])),
                       reading)  # fmt: skip
        return out

    # ---------------------------------------------------------------- close
    def _close_writers(self) -> None:
        for fd in (self._writer, self._idx_writer):
            if fd >= 0:
                os.close(fd)
        self._writer = self._idx_writer = -1

    def _drop_pending(self) -> None:
        self._pending.clear()
        self._pending_batches.clear()
        self._pending_filters.clear()
        self.tracking.pending.clear()
        self._snapshot = None


def _tracking_chunk(record: bytes, first: int, ts: int, kind: int) -> bytes:
    """A tracking chunk: one simple entry holding tracking records, one offset."""
    return chunk.build(first, ts, chunk.entry(record), 1, chunk_type=kind)


def _only_record(data: bytes) -> bytes:
    """The record of a tracking chunk's data (its one simple entry; none: empty)."""
    got: list[bytes] = []
    with contextlib.suppress(struct.error):
        chunk.walk(data, 0, 1, 0, lambda b, s, e, _o: got.append(b[s:e]), chunk.LENIENT)
    return got[0] if got else b""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
