"""Stream storage: an append-only log in segment files with a chunk index.

Layout, one directory per stream::

    00000000000000000000.seg   records, appended chunk by chunk
    00000000000000000000.idx   one entry per chunk: first offset, file position, timestamp

A record is ``offset (8) | timestamp ms (8) | length (4) | crc32 (4) | payload`` where the
payload is the exchange-and-routing-key short strings, the property bytes and the body.
Appends are buffered and written as one chunk by :meth:`SegmentLog.sync`, which fsyncs;
only synced records are visible to readers (``committed``). On open, a torn tail left by
a crash is cut off at the last whole record. Retention (``max_bytes``, ``max_age_ms``)
drops whole segments, oldest first, never the active one. Readers seek through the chunk
index and read what they need: no copy of the whole stream is held in memory."""

from __future__ import annotations

import bisect
import os
import struct
import time
import zlib
from pathlib import Path
from typing import BinaryIO

from leveret.store.segmented import SegmentedLog, segment_name

_REC = struct.Struct(">QqII")  # offset, timestamp ms, payload length, crc32
_IDX = struct.Struct(">QQq")  # first offset of chunk, file position, timestamp ms
_U32 = struct.Struct(">I")

Record = tuple[int, int, bytes, bytes, bytes]  # offset, ts ms, exchange+key, props, body


class _Segment:
    def __init__(self, directory: Path, base: int) -> None:
        self.base = base
        self.path = directory / f"{segment_name(base)}.seg"
        self.idx_path = directory / f"{segment_name(base)}.idx"
        self.chunks: list[tuple[int, int, int]] = []  # (first offset, position, ts)
        self.firsts: list[int] = []
        self.size = 0
        self.last_ts = 0
        self.end = base  # next offset after this segment's last record
        self._reader: BinaryIO | None = None

    def reader(self) -> BinaryIO:
        if self._reader is None:
            self._reader = open(self.path, "rb")  # noqa: SIM115 - cached for reads
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def add_chunk(self, first: int, pos: int, ts: int) -> None:
        self.chunks.append((first, pos, ts))
        self.firsts.append(first)


class SegmentLog(SegmentedLog[_Segment]):
    def __init__(
        self,
        directory: Path,
        max_segment_bytes: int = 500_000_000,
        max_bytes: int | None = None,
        max_age_ms: int | None = None,
    ) -> None:
        super().__init__(directory, max_segment_bytes, max_bytes, max_age_ms)
        self._pending: list[bytes] = []
        self._pending_first = 0
        self._pending_ts = 0
        self._writer: BinaryIO | None = None
        self._idx_writer: BinaryIO | None = None
        self._open()
        self.next_offset = self.committed

    # ------------------------------------------------------------------ open
    def _open(self) -> None:
        bases = sorted(int(p.stem) for p in self.dir.glob("*.seg"))
        for base in bases:
            seg = _Segment(self.dir, base)
            self._load(seg)
            self.segments.append(seg)
        if not self.segments:
            self.segments.append(_Segment(self.dir, 0))
            self.segments[0].path.touch()

    def _load(self, seg: _Segment) -> None:
        """Read a segment's chunk index, then walk the records from the last indexed chunk
        on: records whose index entry was never written join that chunk, and a torn tail
        (short or corrupt record) is cut off."""
        if seg.idx_path.exists():
            raw = seg.idx_path.read_bytes()
            for i in range(0, len(raw) - len(raw) % _IDX.size, _IDX.size):
                seg.add_chunk(*_IDX.unpack_from(raw, i))
        size = seg.path.stat().st_size
        while seg.chunks and seg.chunks[-1][1] >= size:  # index written, data lost
            seg.chunks.pop()
            seg.firsts.pop()
        if seg.chunks:
            expect, pos, last_ts = seg.chunks[-1]
        else:
            expect, pos, last_ts = seg.base, 0, 0
        with open(seg.path, "rb") as f:
            f.seek(pos)
            while True:
                head = f.read(_REC.size)
                if len(head) < _REC.size:
                    break
                offset, ts, length, crc = _REC.unpack(head)
                payload = f.read(length)
                if offset != expect or len(payload) < length or zlib.crc32(payload) != crc:
                    break
                if not seg.chunks:
                    seg.add_chunk(offset, pos, ts)
                pos += _REC.size + length
                expect = offset + 1
                last_ts = ts
        if pos < size:
            with open(seg.path, "r+b") as f:
                f.truncate(pos)
        self._rewrite_index(seg)
        seg.size = pos
        seg.end = expect
        seg.last_ts = last_ts

    def _rewrite_index(self, seg: _Segment) -> None:
        with open(seg.idx_path, "wb") as f:
            for chunk in seg.chunks:
                f.write(_IDX.pack(*chunk))

    def last_chunk_start(self) -> int:
        for seg in reversed(self.segments):
            if seg.chunks:
                return seg.chunks[-1][0]
        return self.committed

    def chunk_end(self, offset: int) -> int:
        """One past the last offset of the chunk that holds ``offset`` (a reader that
        hands out whole chunks stops there)."""
        bases = [s.base for s in self.segments]
        seg = self.segments[max(0, bisect.bisect_right(bases, offset) - 1)]
        ci = bisect.bisect_right(seg.firsts, offset)
        return seg.chunks[ci][0] if ci < len(seg.chunks) else seg.end

    def offset_at(self, ts_ms: int) -> int:
        """The first offset of the first chunk written at or after ``ts_ms``."""
        for seg in self.segments:
            if seg.last_ts < ts_ms:
                continue
            for first, _pos, ts in seg.chunks:
                if ts >= ts_ms:
                    return first
        return self.committed

    # --------------------------------------------------------------- append
    def append(
        self, exchange_and_key: bytes, properties: bytes, body: bytes, ts_ms: int | None = None
    ) -> int:
        offset = self.next_offset
        self.next_offset = offset + 1
        ts = int(time.time() * 1000) if ts_ms is None else ts_ms
        if not self._pending:
            self._pending_first = offset
            self._pending_ts = ts
        payload = b"".join((exchange_and_key, _U32.pack(len(properties)), properties, body))
        self._pending.append(_REC.pack(offset, ts, len(payload), zlib.crc32(payload)) + payload)
        return offset

    def sync(self) -> bool:
        """Write what was appended as one chunk and fsync it. True if anything was new."""
        if not self._pending:
            return False
        seg = self.segments[-1]
        if self._writer is None:
            self._writer = open(seg.path, "ab")  # noqa: SIM115 - kept open for appends
            self._idx_writer = open(seg.idx_path, "ab")  # noqa: SIM115
        assert self._idx_writer is not None
        data = b"".join(self._pending)
        pos = seg.size
        self._writer.write(data)
        self._writer.flush()
        os.fsync(self._writer.fileno())
        self._idx_writer.write(_IDX.pack(self._pending_first, pos, self._pending_ts))
        self._idx_writer.flush()
        seg.add_chunk(self._pending_first, pos, self._pending_ts)
        seg.size = pos + len(data)
        seg.end = self.next_offset
        seg.last_ts = int(time.time() * 1000)
        self._pending.clear()
        if seg.size >= self.max_segment_bytes:
            self._roll()
        self.apply_retention()
        return True

    def _roll(self) -> None:
        self._close_writers()
        seg = _Segment(self.dir, self.next_offset)
        seg.path.touch()
        self.segments.append(seg)

    # ----------------------------------------------------------------- read
    def read(self, offset: int, max_count: int, max_bytes: int = 4 * 1024 * 1024) -> list[Record]:
        """Up to ``max_count`` committed records from ``offset`` on."""
        out: list[Record] = []
        offset = max(offset, self.first)
        committed = self.committed
        if offset >= committed or max_count <= 0:
            return out
        bases = [s.base for s in self.segments]
        si = max(0, bisect.bisect_right(bases, offset) - 1)
        size = 0
        while si < len(self.segments) and len(out) < max_count and size < max_bytes:
            seg = self.segments[si]
            si += 1
            if seg.end <= offset or not seg.chunks:
                continue
            ci = max(0, bisect.bisect_right(seg.firsts, offset) - 1)
            f = seg.reader()
            f.seek(seg.chunks[ci][1])
            limit = seg.size
            pos = seg.chunks[ci][1]
            while pos < limit and len(out) < max_count and size < max_bytes:
                head = f.read(_REC.size)
                if len(head) < _REC.size:
                    break
                rec_offset, ts, length, _crc = _REC.unpack(head)
                pos += _REC.size + length
                if rec_offset < offset:
                    f.seek(length, os.SEEK_CUR)
                    continue
                if rec_offset >= committed:
                    return out
                payload = f.read(length)
                elen = payload[0]
                rpos = 1 + elen
                kend = rpos + 1 + payload[rpos]
                (plen,) = _U32.unpack_from(payload, kend)
                pstart = kend + 4
                out.append(
                    (
                        rec_offset,
                        ts,
                        payload[:kend],
                        payload[pstart : pstart + plen],
                        payload[pstart + plen :],
                    )
                )
                size += length
                offset = rec_offset + 1
        return out

    def read_block(self, offset: int) -> tuple[int, int, bytes, int]:
        """The raw records (``offset | ts | length | crc | payload`` each) from ``offset``
        to the end of the stored chunk that holds it, in one read: (first offset, the
        chunk's timestamp, the chunk's bytes, where the record at ``offset`` starts in
        them). No bytes when nothing is committed from ``offset`` on."""
        offset = max(offset, self.first)
        if offset >= self.committed:
            return offset, 0, b"", 0
        bases = [s.base for s in self.segments]
        seg = self.segments[max(0, bisect.bisect_right(bases, offset) - 1)]
        ci = bisect.bisect_right(seg.firsts, offset) - 1
        if ci < 0:
            return offset, 0, b"", 0
        first, pos, ts = seg.chunks[ci]
        end = seg.chunks[ci + 1][1] if ci + 1 < len(seg.chunks) else seg.size
        f = seg.reader()
        f.seek(pos)
        data = f.read(end - pos)
        at = 0
        unpack = _U32.unpack_from
        while first < offset and at < len(data):  # skip to offset within the chunk
            at += _REC.size + unpack(data, at + 16)[0]
            first += 1
        return first, ts, data, at

    # ---------------------------------------------------------------- close
    def _close_writers(self) -> None:
        for f in (self._writer, self._idx_writer):
            if f is not None:
                f.close()
        self._writer = self._idx_writer = None

    def _drop_pending(self) -> None:
        self._pending.clear()
