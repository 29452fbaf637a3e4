"""One segment of a stream's osiris log and its index, as osiris lays them out (see
:mod:`leveret.store.osiris` for the whole log)::

    00000000000000000000.segment   "OSIL" + version 1, then whole chunks
    00000000000000000000.index     "OSII" + version 1, then one 29-byte record per chunk:
                                   first offset u64 | timestamp i64 | epoch u64 |
                                   file position u32 | chunk type u8

A stored chunk is its header, its Bloom filter (osiris 1.6 on; none: 0 bytes), its data
and its trailer (:mod:`leveret.protocol.stream.chunk`). Opening a segment reads its index,
checks the chunks from the last indexed one on (a torn tail is cut off at the last whole
chunk, its CRC checked) and indexes the chunks whose record was lost."""

from __future__ import annotations

import os
import struct
from array import array
from pathlib import Path

from leveret.broker.ports import ChunkRef
from leveret.protocol.stream import chunk
from leveret.protocol.stream.chunk import EPOCH, HEADER, HEADER_SIZE, MAGIC_VERSION
from leveret.store.segmented import segment_name

LOG_HEADER = b"OSIL\x00\x00\x00\x01"
IDX_HEADER = b"OSII\x00\x00\x00\x01"
IDX = struct.Struct(">QqQIB")  # first offset, timestamp, epoch, file position, chunk type


class Segment:
    __slots__ = (
        "base",
        "dlens",
        "end",
        "fd",
        "firsts",
        "fsizes",
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
        self.path = directory / f"{segment_name(base)}.segment"
        self.idx_path = directory / f"{segment_name(base)}.index"
        self.firsts = array("q")  # first offset of each chunk
        self.positions = array("q")  # its file position
        self.timestamps = array("q")
        self.records = array("l")  # its record count
        self.types = bytearray()
        self.dlens = array("q")  # data length of each chunk (-1: its header not read yet)
        self.fsizes = bytearray()  # its filter size (known once its data length is)
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

    def add(
        self, first: int, pos: int, ts: int, records: int, kind: int, dlen: int = -1, fsize: int = 0
    ) -> None:
        self.dlens.append(dlen)
        self.fsizes.append(fsize)
        self.firsts.append(first)
        self.positions.append(pos)
        self.timestamps.append(ts)
        self.records.append(records)
        self.types.append(kind)

    def header(self, i: int) -> tuple[int, int, int]:
        """Chunk ``i``'s data length, trailer length and filter size (its header read)."""
        head = HEADER.unpack(os.pread(self.reader(), HEADER_SIZE, self.positions[i]))
        self.dlens[i], self.fsizes[i] = head[8], head[10]
        return head[8], head[9], head[10]

    def ref(self, i: int) -> ChunkRef:
        """Chunk ``i`` as a Deliver frame sends it."""
        if self.dlens[i] < 0:
            self.header(i)
        return ChunkRef(
            self.reader(),
            self.positions[i],
            HEADER_SIZE + self.dlens[i],
            self.firsts[i],
            self.records[i],
            self.timestamps[i],
            self.fsizes[i],
        )


def create(seg: Segment) -> None:
    for path, head in ((seg.path, LOG_HEADER), (seg.idx_path, IDX_HEADER)):
        with open(path, "wb") as f:
            f.write(head)
            f.flush()
            os.fsync(f.fileno())


def load(seg: Segment) -> None:
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
    for i in range(len(IDX_HEADER), len(raw) - IDX.size + 1, IDX.size):
        first, ts, _epoch, pos, kind = IDX.unpack_from(raw, i)
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
            magic, kind, _, records, ts, _, first, crc, dlen, tlen, fsize = HEADER.unpack(head)
            if magic != MAGIC_VERSION or first != expect:
                break
            rest = f.read(fsize + dlen + tlen)
            if len(rest) < fsize + dlen + tlen or chunk.data_crc(rest, fsize, dlen) != crc:
                break
            seg.add(first, pos, ts, records, kind, dlen, fsize)
            seg.last_ts = ts
            expect = first + records
            pos += HEADER_SIZE + fsize + dlen + tlen
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
        rewrite_index(seg)
    seg.size = pos
    seg.end = expect


def rewrite_index(seg: Segment) -> None:
    tmp = seg.idx_path.with_suffix(".index.tmp")
    with open(tmp, "wb") as f:
        f.write(IDX_HEADER)
        for i in range(len(seg.firsts)):
            ts, pos = seg.timestamps[i], seg.positions[i]
            f.write(IDX.pack(seg.firsts[i], ts, EPOCH, pos, seg.types[i]))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, seg.idx_path)
