"""A stream's log in osiris's on-disk format (RabbitMQ 3.10.8, osiris 1.3.1).

Layout, one directory per stream, as osiris lays it out::

    00000000000000000000.segment   "OSIL" + version 1, then whole chunks
    00000000000000000000.index     "OSII" + version 1, then one 29-byte record per chunk:
                                   first offset u64 | timestamp i64 | epoch u64 |
                                   file position u32 | chunk type u8

A chunk is osiris's 48-byte header (magic 5 and version 0 in one byte, chunk type, entry
count, record count, timestamp, epoch, first offset, CRC32 of the data, data length,
trailer length, reserved) and its data entries: each message is a simple entry
(``0 | u31 size`` and the AMQP 1.0-encoded message). A Deliver frame of the stream
protocol carries the header and data of a chunk exactly as stored, so readers of that
protocol are served straight from the file (:meth:`OsirisLog.chunk_at`).

Appends are buffered and written as one chunk by :meth:`OsirisLog.sync`, which fsyncs;
only synced chunks are visible to readers. On open, a torn tail left by a crash is cut at
the last whole chunk (its CRC checked), and chunks whose index record was lost are indexed
again. Retention (``max_bytes``, ``max_age_ms``) drops whole segments, oldest first, never
the active one. Readers seek through the in-memory copy of the index by offset or by
timestamp; no message is held in memory.

Consumers' stored offsets and named publishers' last publishing ids are kept beside the
chunks in ``tracking.json`` (osiris keeps them in tracking chunks; here they take no
offsets)."""

from __future__ import annotations

import bisect
import json
import logging
import os
import shutil
import struct
import zlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from leveret.broker.clock import wall_ms

log = logging.getLogger(__name__)

LOG_HEADER = b"OSIL\x00\x00\x00\x01"
IDX_HEADER = b"OSII\x00\x00\x00\x01"
MAGIC_VERSION = 0x50  # magic 5, chunk format version 0 (osiris 1.3.1, RabbitMQ 3.10.8)
CHUNK_USER = 0
CHUNK_TRK_DELTA = 1
CHUNK_TRK_SNAPSHOT = 2
HEADER = struct.Struct(">BBHIqQQIIII")
HEADER_SIZE = HEADER.size  # 48
_IDX = struct.Struct(">QqQIB")  # first offset, timestamp, epoch, file position, chunk type
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_SUB = struct.Struct(">BHII")  # sub-batch entry: flag and compression, records, sizes
GZIP = 1  # sub-batch compression types: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
TRK_SEQUENCE = 0
TRK_OFFSET = 1
MAX_SEGMENT_CHUNKS = 256_000  # osiris's default max_segment_size_chunks
# A chunk is cut at this many bytes of entries (a Deliver frame stays well within the
# 1 MiB frame size clients ask for), and at 65,535 entries (the header's entry count).
CHUNK_BYTES = 512 * 1024
EPOCH = 1

Record = tuple[int, int, bytes]  # offset, chunk timestamp ms, AMQP 1.0 message


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """Where a stored chunk is: ``fd`` (open for reading) at ``position``, ``size`` bytes
    of header and data (what a Deliver frame carries; a trailer is not sent)."""

    fd: int
    position: int
    size: int
    first: int
    records: int
    timestamp: int


def _name(base: int) -> str:
    return f"{base:020d}"


class _Segment:
    __slots__ = (
        "base",
        "dlens",
        "end",
        "fd",
        "firsts",
        "idx_path",
        "last_ts",
        "path",
        "positions",
        "records",
        "size",
        "timestamps",
        "types",
    )

    def __init__(self, directory: Path, base: int) -> None:
        self.base = base
        self.path = directory / f"{_name(base)}.segment"
        self.idx_path = directory / f"{_name(base)}.index"
        self.firsts = array("q")  # first offset of each chunk
        self.positions = array("q")  # its file position
        self.timestamps = array("q")
        self.records = array("l")  # its record count
        self.types = bytearray()
        self.dlens = array("q")  # data length of each chunk (-1: not read yet)
        self.size = len(LOG_HEADER)
        self.last_ts = 0
        self.end = base  # next offset after this segment's last chunk
        self.fd = -1

    def reader(self) -> int:
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDONLY)
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def add(self, first: int, pos: int, ts: int, records: int, kind: int, dlen: int = -1) -> None:
        self.dlens.append(dlen)
        self.firsts.append(first)
        self.positions.append(pos)
        self.timestamps.append(ts)
        self.records.append(records)
        self.types.append(kind)

    def send_size(self, i: int) -> int:
        """A chunk's header and data, without its trailer (what a Deliver frame sends)."""
        dlen = self.dlens[i]
        if dlen < 0:
            head = os.pread(self.reader(), HEADER_SIZE, self.positions[i])
            dlen = self.dlens[i] = HEADER.unpack(head)[8]
        return HEADER_SIZE + dlen

    def chunk_size(self, i: int) -> int:
        nxt = self.positions[i + 1] if i + 1 < len(self.positions) else self.size
        return nxt - self.positions[i]


def build_chunk(
    messages: list[bytes],
    first: int,
    ts: int,
    trailer: bytes = b"",
    kind: int = CHUNK_USER,
    epoch: int = EPOCH,
) -> bytes:
    """A chunk of simple entries (and a tracking trailer), as osiris writes it; the CRC
    covers the entries only."""
    pack = _U32.pack
    data = b"".join([b for m in messages for b in (pack(len(m)), m)])
    n = len(messages)
    head = HEADER.pack(
        MAGIC_VERSION, kind, n, n, ts, epoch, first, zlib.crc32(data), len(data), len(trailer), 0
    )
    return head + data + trailer


def build_framed_chunk(
    entries: list[bytes], records: int, first: int, ts: int, trailer: bytes = b""
) -> bytes:
    """A user chunk of entries already framed (simple or sub-batch)."""
    data = b"".join(entries)
    n = len(entries)
    head = HEADER.pack(
        MAGIC_VERSION,
        CHUNK_USER,
        n,
        records,
        ts,
        EPOCH,
        first,
        zlib.crc32(data),
        len(data),
        len(trailer),
        0,
    )
    return head + data + trailer


def tracking_entry(kind: int, reference: str, value: int, chunk_id: int | None = None) -> bytes:
    """One tracking record: type (0 sequence, 1 offset), the reference, then the value
    (in a snapshot, a sequence is preceded by the chunk id it was written in)."""
    ref = reference.encode()[:255]
    head = bytes((kind, len(ref))) + ref
    if chunk_id is not None:
        head += _U64.pack(chunk_id)
    return head + _U64.pack(value & 0xFFFFFFFFFFFFFFFF)


def chunk_records(
    chunk: bytes | memoryview, first: int, start: int = 0, limit: int = 1 << 62
) -> list[tuple[int, bytes]]:
    """The (offset, message) of a stored user chunk's entries from offset ``start`` on, at
    most ``limit``; sub-batches of compression type 0 are opened, a compressed one is one
    record of its raw batch (as osiris)."""
    out: list[tuple[int, bytes]] = []
    (_, _, entries, _, _, _, _, _, length, _, _) = HEADER.unpack_from(chunk)
    pos = HEADER_SIZE
    end = pos + length
    unpack = _U32.unpack_from
    offset = first
    while pos < end and entries and len(out) < limit:
        entries -= 1
        (size,) = unpack(chunk, pos)
        if size & 0x80000000:
            flag = chunk[pos]
            count = int.from_bytes(chunk[pos + 1 : pos + 3], "big")
            (blen,) = unpack(chunk, pos + 7)
            at = pos + 11
            batch: bytes | memoryview = chunk[at : at + blen]
            kind = (flag >> 4) & 0x7
            if kind == GZIP:
                try:
                    batch = zlib.decompress(batch, 16 + zlib.MAX_WBITS)
                except zlib.error:
                    kind = -1
            if kind not in (0, GZIP):  # as osiris: the batch as it is, one record
                out.append((offset, bytes(batch)))
                offset += count
            else:
                p = 0
                try:
                    for i in range(count):
                        (n,) = unpack(batch, p)
                        out.append((offset + i, bytes(batch[p + 4 : p + 4 + n])))
                        p += 4 + n
                except struct.error:  # records that do not add up: the rest as it is
                    out.append((offset + i, bytes(batch[p:])))
                offset += count
            pos = at + blen
        else:
            if offset >= start:
                out.append((offset, bytes(chunk[pos + 4 : pos + 4 + size])))
            offset += 1
            pos += 4 + size
    return [r for r in out if r[0] >= start] if start > first else out


class OsirisLog:
    def __init__(
        self,
        directory: Path,
        max_segment_bytes: int = 500_000_000,
        max_bytes: int | None = None,
        max_age_ms: int | None = None,
        convert: Callable[[Path], None] | None = None,
        start: int = 0,
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        if convert is not None and any(self.dir.glob("*.seg")):
            convert(self.dir)  # a stream written in an older layout
        self.max_segment_bytes = max_segment_bytes
        self.max_bytes = max_bytes
        self.max_age_ms = max_age_ms
        self.segments: list[_Segment] = []
        self._pending: list[bytes] = []
        # sub-batch entries among them (stored as they came): index -> record count
        self._pending_batches: dict[int, int] = {}
        self._writer = -1
        self._idx_writer = -1
        self._open(start)
        self.next_offset = self.committed
        self._tracking_path = self.dir / "tracking.json"
        self.offsets: dict[str, int] = {}
        self.sequences: dict[str, int] = {}
        self._seq_chunks: dict[str, int] = {}  # the chunk each sequence was written in
        self._pending_trk: dict[tuple[int, str], int] = {}
        self._tracking_dirty = False
        self._load_tracking()

    # ------------------------------------------------------------------ open
    def _open(self, start: int) -> None:
        bases = sorted(int(p.stem) for p in self.dir.glob("*.segment"))
        for base in bases:
            seg = _Segment(self.dir, base)
            self._load(seg)
            if seg.firsts or base == bases[-1]:
                self.segments.append(seg)
            else:  # a segment a crash left with no whole chunk
                seg.path.unlink(missing_ok=True)
                seg.idx_path.unlink(missing_ok=True)
        if not self.segments:
            seg = _Segment(self.dir, start)
            _create(seg)
            self.segments.append(seg)

    def _load(self, seg: _Segment) -> None:
        """The segment's index, then its chunks from the last indexed one on: chunks whose
        index record was never written are indexed, and a torn tail (a short chunk, a bad
        header or CRC) is cut off."""
        try:
            raw = seg.idx_path.read_bytes()
        except FileNotFoundError:
            raw = b""
        index_ok = raw.startswith(IDX_HEADER)
        if not index_ok:
            raw = IDX_HEADER
        size = seg.path.stat().st_size
        entries = []
        for i in range(len(IDX_HEADER), len(raw) - _IDX.size + 1, _IDX.size):
            first, ts, _epoch, pos, kind = _IDX.unpack_from(raw, i)
            if pos + HEADER_SIZE > size:
                break
            entries.append((first, ts, pos, kind))
        with open(seg.path, "rb") as f:
            header_ok = f.read(len(LOG_HEADER)) == LOG_HEADER
            if not header_ok:
                entries = []
            pos = len(LOG_HEADER)
            expect = seg.base
            # indexed chunks but the last are taken as indexed (osiris checks the last):
            # each holds the offsets up to the next one's first
            for i in range(len(entries) - 1):
                first, ts, cpos, kind = entries[i]
                nxt = entries[i + 1]
                if first != expect or nxt[0] <= first or nxt[2] <= cpos:
                    break
                seg.add(first, cpos, ts, nxt[0] - first, kind)
                seg.last_ts = ts
                expect = nxt[0]
                pos = nxt[2]
            while True:  # the last indexed chunk and any chunk after it, checked
                f.seek(pos)
                head = f.read(HEADER_SIZE)
                if len(head) < HEADER_SIZE:
                    break
                magic, kind, _, records, ts, _, first, crc, dlen, tlen, _ = HEADER.unpack(head)
                if magic != MAGIC_VERSION or first != expect:
                    break
                data = f.read(dlen + tlen)
                if len(data) < dlen + tlen or zlib.crc32(data[:dlen]) != crc:
                    break
                seg.add(first, pos, ts, records, kind, dlen)
                seg.last_ts = ts
                expect = first + records
                pos += HEADER_SIZE + dlen + tlen
        if not seg.firsts:
            pos = len(LOG_HEADER)
            expect = seg.base
        if not header_ok:
            pos = len(LOG_HEADER)
        if pos < size or not header_ok:
            with open(seg.path, "r+b") as f:
                if not header_ok:
                    f.write(LOG_HEADER)
                f.truncate(pos)
        if len(seg.firsts) != len(entries) or not index_ok:
            self._rewrite_index(seg)
        seg.size = pos
        seg.end = expect

    def _rewrite_index(self, seg: _Segment) -> None:
        tmp = seg.idx_path.with_suffix(".index.tmp")
        with open(tmp, "wb") as f:
            f.write(IDX_HEADER)
            for i in range(len(seg.firsts)):
                f.write(
                    _IDX.pack(
                        seg.firsts[i], seg.timestamps[i], EPOCH, seg.positions[i], seg.types[i]
                    )
                )
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, seg.idx_path)

    # ------------------------------------------------------------- tracking
    def _load_tracking(self) -> None:
        try:
            data = json.loads(self._tracking_path.read_text())
        except (OSError, ValueError):
            return
        self.offsets = {str(k): int(v) for k, v in data.get("offsets", {}).items()}
        self.sequences = {str(k): int(v) for k, v in data.get("sequences", {}).items()}

    def store_offset(self, reference: str, offset: int) -> None:
        """A consumer's offset, written at the next sync: in the trailer of the chunk
        then written, or, when no message waits, in a tracking chunk of its own, which
        takes an offset (as osiris's writer does it)."""
        self.offsets[reference] = offset
        self._pending_trk[(TRK_OFFSET, reference)] = offset
        self._tracking_dirty = True

    def query_offset(self, reference: str) -> int | None:
        return self.offsets.get(reference)

    def writer_sequence(self, reference: str) -> int | None:
        return self.sequences.get(reference)

    def set_writer_sequence(self, reference: str, sequence: int) -> None:
        if self.sequences.get(reference) == sequence:
            return
        self.sequences[reference] = sequence
        self._pending_trk[(TRK_SEQUENCE, reference)] = sequence
        self._tracking_dirty = True

    def _save_tracking(self) -> None:
        if not self._tracking_dirty:
            return
        self._tracking_dirty = False
        tmp = self._tracking_path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"offsets": self.offsets, "sequences": self.sequences}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._tracking_path)

    # ---------------------------------------------------------------- state
    @property
    def first(self) -> int:
        """The oldest offset still stored."""
        for seg in self.segments:
            if seg.end > seg.base:
                return seg.base
        return self.segments[-1].base

    @property
    def committed(self) -> int:
        """One past the last offset on disk: readers see offsets below it."""
        return self.segments[-1].end

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def segment_count(self) -> int:
        return len(self.segments)

    @property
    def chunk_count(self) -> int:
        return sum(len(s.firsts) for s in self.segments)

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
    def append(self, message: bytes) -> int:
        """An AMQP 1.0-encoded message, readable after the next sync; the offset it is
        to take (one more if a new segment's tracking snapshot goes before it)."""
        offset = self.next_offset
        self.next_offset = offset + 1
        self._pending.append(message)
        return offset

    def append_batch(
        self, compression: int, records: int, uncompressed_size: int, data: bytes
    ) -> int:
        """A sub-entry batch as a publisher sent it (``records`` messages, compressed or
        not), stored as one sub-batch entry the way osiris stores it; its first offset."""
        offset = self.next_offset
        self.next_offset = offset + records
        head = _SUB.pack(0x80 | (compression & 0x7) << 4, records, uncompressed_size, len(data))
        self._pending_batches[len(self._pending)] = records
        self._pending.append(head + data)
        return offset

    def sync(self, ts_ms: int | None = None) -> bool:
        """Write what was appended as chunks (stamped now, or ``ts_ms``) and fsync them.
        True if anything was written. Tracking that changed goes in the last chunk's
        trailer, or in a tracking chunk when no message waits; ``tracking.json`` is written
        too, after the chunks it may refer to."""
        if not self._pending and not self._pending_trk:
            if self._tracking_dirty and self.dir.exists():
                self._save_tracking()
            return False
        ts = wall_ms() if ts_ms is None else ts_ms  # the broker's clock
        seg = self.segments[-1]
        chunks: list[bytes] = []
        index: list[bytes] = []
        pos = seg.size
        first = seg.end

        def add(chunk: bytes, records: int, kind: int, dlen: int) -> None:
            nonlocal pos, first
            chunks.append(chunk)
            index.append(_IDX.pack(first, ts, EPOCH, pos, kind))
            seg.add(first, pos, ts, records, kind, dlen)
            pos += len(chunk)
            first += records

        if seg.firsts and (
            seg.size >= self.max_segment_bytes or len(seg.firsts) >= MAX_SEGMENT_CHUNKS
        ):
            self._roll()
            seg = self.segments[-1]
            pos, first = seg.size, seg.end
            snapshot = self._snapshot()
            if snapshot:  # a new segment starts with the tracking state, as osiris's
                add(build_chunk([snapshot], first, ts, kind=CHUNK_TRK_SNAPSHOT), 1, 2, -1)
        trailer = b"".join(
            tracking_entry(kind, ref, value) for (kind, ref), value in self._pending_trk.items()
        )
        pending = self._pending
        self._pending = []
        batches = self._pending_batches
        self._pending_batches = {}
        # entries framed (a simple entry is ``u32 size | message``; a sub-batch came framed)
        if batches:
            entries = [m if i in batches else _U32.pack(len(m)) + m for i, m in enumerate(pending)]
            counts = [batches.get(i, 1) for i in range(len(pending))]
        else:
            pack = _U32.pack
            entries = [pack(len(m)) + m for m in pending]
        i = 0
        while i < len(entries):  # chunks of at most CHUNK_BYTES (one entry at least)
            j, size = i, 0
            while j < len(entries) and j - i < 65535 and (j == i or size < CHUNK_BYTES):
                size += len(entries[j])
                j += 1
            records = sum(counts[i:j]) if batches else j - i
            tail = trailer if j == len(entries) else b""
            add(build_framed_chunk(entries[i:j], records, first, ts, tail), records, 0, size)
            i = j
        if pending:
            for kind, ref in self._pending_trk:
                if kind == TRK_SEQUENCE:
                    self._seq_chunks[ref] = seg.firsts[-1]
        else:  # tracking alone: a chunk of its own, one entry, one offset
            add(build_chunk([trailer], first, ts, kind=CHUNK_TRK_DELTA), 1, CHUNK_TRK_DELTA, -1)
        self._pending_trk.clear()
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
        self._save_tracking()
        self.apply_retention()
        return True

    def _snapshot(self) -> bytes:
        """The tracking state as osiris's snapshot chunk holds it (offsets below the first
        offset still stored are dropped, as osiris drops them)."""
        low = self.first
        self.offsets = {ref: o for ref, o in self.offsets.items() if o >= low}
        return b"".join(
            [
                tracking_entry(TRK_SEQUENCE, ref, seq, self._seq_chunks.get(ref, 0))
                for ref, seq in self.sequences.items()
            ]
            + [tracking_entry(TRK_OFFSET, ref, o) for ref, o in self.offsets.items()]
        )

    def _roll(self) -> None:
        self._close_writers()
        seg = _Segment(self.dir, self.segments[-1].end)
        _create(seg)
        self.segments.append(seg)

    def set_retention(
        self, max_bytes: int | None, max_age_ms: int | None, max_segment_bytes: int
    ) -> None:
        """New limits (a policy changed): applied now and at every chunk from now on."""
        self.max_bytes = max_bytes
        self.max_age_ms = max_age_ms
        self.max_segment_bytes = max_segment_bytes
        self.apply_retention()

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Drop whole old segments beyond the length or age limit; how many went."""
        dropped = 0
        now = wall_ms() if now_ms is None else now_ms
        while len(self.segments) > 1:
            oldest = self.segments[0]
            too_big = self.max_bytes is not None and self.total_bytes > self.max_bytes
            too_old = self.max_age_ms is not None and oldest.last_ts < now - self.max_age_ms
            if not (too_big or too_old):
                break
            oldest.close()
            oldest.path.unlink(missing_ok=True)
            oldest.idx_path.unlink(missing_ok=True)
            self.segments.pop(0)
            dropped += 1
        return dropped

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
                    return ChunkRef(
                        seg.reader(),
                        seg.positions[ci],
                        seg.send_size(ci),
                        seg.firsts[ci],
                        seg.records[ci],
                        seg.timestamps[ci],
                    )
                ci += 1
            si += 1
            ci = 0
        return None

    def read_chunk(self, ref: ChunkRef) -> bytes:
        """A chunk's header and data."""
        return os.pread(ref.fd, ref.size, ref.position)

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
            want = max_count - len(out)
            for rec_offset, message in chunk_records(self.read_chunk(ref), ref.first, offset, want):
                out.append((rec_offset, ref.timestamp, message))
                size += len(message)
                offset = rec_offset + 1
                if len(out) >= max_count or size >= max_bytes:
                    whole = False
                    break
            if whole:
                offset = max(offset, ref.first + ref.records)
        return out

    # ---------------------------------------------------------------- close
    def _close_writers(self) -> None:
        for fd in (self._writer, self._idx_writer):
            if fd >= 0:
                os.close(fd)
        self._writer = self._idx_writer = -1

    def close(self) -> None:
        self.sync()
        self._close_writers()
        for seg in self.segments:
            seg.close()

    def delete(self) -> None:
        self._pending.clear()
        self._pending_batches.clear()
        self._tracking_dirty = False
        self._close_writers()
        for seg in self.segments:
            seg.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _create(seg: _Segment) -> None:
    for path, head in ((seg.path, LOG_HEADER), (seg.idx_path, IDX_HEADER)):
        with open(path, "wb") as f:
            f.write(head)
            f.flush()
            os.fsync(f.fileno())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
