"""Osiris chunks, the unit a stream stores and a Deliver frame carries.

A 48-byte header — magic and version (0x5, 0x0) in one byte, chunk type, entry count
(u16), record count (u32), timestamp ms (i64), epoch (u64), first offset (u64), CRC32 of
the data (u32), data length (u32), trailer length (u32), 4 reserved bytes — then the data
entries: a simple entry is ``0 | u31 size`` and its bytes; a sub-batch entry starts with
its top bit set (compression type, record count, sizes, then the batch)."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

HEADER = struct.Struct(">BBHIqQQIIII")
MAGIC_VERSION = 0x50  # magic 5, chunk format version 0 (osiris 1.3.1 in RabbitMQ 3.10.8)
CHUNK_USER = 0
_U32 = struct.Struct(">I")
_SUB = struct.Struct(">BHII")  # flag+compression, records, uncompressed size, size


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    chunk_type: int
    entries: int
    records: int
    timestamp: int
    epoch: int
    first_offset: int
    crc: int
    data_length: int
    trailer_length: int


def simple_entries(messages: list[bytes]) -> bytes:
    """Messages as contiguous simple entries."""
    pack = _U32.pack
    return b"".join(b for m in messages for b in (pack(len(m)), m))


def build(
    first_offset: int,
    timestamp: int,
    data: bytes,
    entries: int,
    records: int | None = None,
    epoch: int = 1,
) -> bytes:
    """A user chunk around ``data`` (``entries`` entries holding ``records`` records)."""
    head = HEADER.pack(
        MAGIC_VERSION,
        CHUNK_USER,
        entries,
        entries if records is None else records,
        timestamp,
        epoch,
        first_offset,
        zlib.crc32(data),
        len(data),
        0,
        0,
    )
    return head + data


def parse_header(raw: bytes | memoryview) -> ChunkHeader:
    magic, *fields, _reserved = HEADER.unpack_from(raw)
    if magic != MAGIC_VERSION:
        raise ValueError(f"not an osiris chunk (first byte {magic:#x})")
    return ChunkHeader(*fields)


def records(raw: bytes | memoryview) -> list[bytes]:
    """The records of a chunk's uncompressed entries, in order (sub-batches of compression
    type 0 are opened; compressed ones raise ValueError)."""
    head = parse_header(raw)
    pos = HEADER.size
    end = pos + head.data_length
    if zlib.crc32(raw[pos:end]) != head.crc:
        raise ValueError("chunk CRC does not match")
    out: list[bytes] = []
    for _ in range(head.entries):
        if raw[pos] & 0x80:
            flag, count, _uncompressed, size = _SUB.unpack_from(raw, pos)
            if (flag >> 4) & 0x7:
                raise ValueError("compressed sub-batch")
            pos += _SUB.size
            batch_end = pos + size
            for _ in range(count):
                (n,) = _U32.unpack_from(raw, pos)
                out.append(bytes(raw[pos + 4 : pos + 4 + n]))
                pos += 4 + n
            pos = batch_end
        else:
            (n,) = _U32.unpack_from(raw, pos)
            out.append(bytes(raw[pos + 4 : pos + 4 + n]))
            pos += 4 + n
    return out
