"""osiris's chunk format (osiris 1.3.1, RabbitMQ 3.10.8).

A chunk is a 48-byte header (magic 5 and version 0 in one byte, chunk type, entry count,
record count, timestamp, epoch, first offset, CRC32 of the data, data length, trailer
length, reserved), its data entries, then its trailer. A message is a simple entry
(``0 | u31 size`` and the AMQP 1.0-encoded message); a publisher's sub-entry batch is one
sub-batch entry (``1 | compression u3 | reserved u4``, record count u16, uncompressed and
stored sizes u32, the batch). Chunk types: user (messages), tracking delta and tracking
snapshot (one simple entry of tracking records each, see
:mod:`leveret.store.osiris_tracking`)."""

from __future__ import annotations

import struct
import zlib

MAGIC_VERSION = 0x50  # magic 5, chunk format version 0 (osiris 1.3.1, RabbitMQ 3.10.8)
CHUNK_USER = 0
CHUNK_TRK_DELTA = 1
CHUNK_TRK_SNAPSHOT = 2
HEADER = struct.Struct(">BBHIqQQIIII")
HEADER_SIZE = HEADER.size  # 48
GZIP = 1  # sub-batch compression types: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
EPOCH = 1
U32 = struct.Struct(">I")


def build_chunk(
    messages: list[bytes],
    first: int,
    ts: int,
    trailer: bytes = b"",
    kind: int = CHUNK_USER,
    epoch: int = EPOCH,
) -> bytes:
    """A chunk of simple entries (and a tracking trailer), as osiris writes it."""
    pack = U32.pack
    entries = [pack(len(m)) + m for m in messages]
    return build_framed_chunk(entries, len(messages), first, ts, trailer, kind, epoch)


def build_framed_chunk(
    entries: list[bytes],
    records: int,
    first: int,
    ts: int,
    trailer: bytes = b"",
    kind: int = CHUNK_USER,
    epoch: int = EPOCH,
) -> bytes:
    """A chunk of entries already framed (simple or sub-batch) and a trailer; the CRC
    covers the entries only."""
    data = b"".join(entries)
    n = len(entries)
    crc = zlib.crc32(data)
    head = HEADER.pack(
        MAGIC_VERSION, kind, n, records, ts, epoch, first, crc, len(data), len(trailer), 0
    )
    return head + data + trailer


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
    unpack = U32.unpack_from
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
