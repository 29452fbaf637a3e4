"""Osiris chunks (osiris 1.3.1, RabbitMQ 3.10.8; osiris 1.10.3, RabbitMQ 4.2): the unit a
stream stores and a Deliver frame carries. The one owner of the layout: the store writes
and reads its segments with it, the server sends its chunks, the Spark reader and the
session read entries with it.

A chunk is a 48-byte header — magic 5 and version (0) in one byte, chunk type, entry
count (u16), record count (u32), timestamp ms (i64), epoch (u64), first offset (u64),
CRC32 of the data (u32), data length (u32), trailer length (u32), the size of its Bloom
filter (u8, 0 for none: osiris 1.3.1 wrote 0 there) and 3 reserved bytes — then its
filter (see :mod:`leveret.protocol.stream.bloom`), its data entries, then its trailer
(tracking records, see the store; the CRC covers the data only). A Deliver frame carries
the header as stored and the data, without the filter or the trailer: what follows a
delivered header is its data, whatever its filter size says.

An entry is either simple, ``0 | u31 size`` and one record (an AMQP 1.0 message, or a
tracking chunk's records), or a sub-batch, as a publisher sent it: ``1 | compression u3 |
reserved u4``, record count u16, uncompressed size u32, stored size u32, then the batch,
``u32 size | record`` for each record once opened. Compression types are the stream
protocol's: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

:func:`walk` is the one reader of entries: it hands each record to a callback as
``(buffer, start, end, offset)`` without copying it, so the per-record work is the
caller's alone. Compressed batches are opened by a table of decompressors, gzip here; a
reader that has another codec (the Spark reader: zstd through pyarrow) passes a table
that extends :data:`DECOMPRESSORS`. Nothing here imports beyond the standard library."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

HEADER = struct.Struct(">BBHIqQQIIIB3x")
HEADER_SIZE = HEADER.size  # 48
MAGIC = 0x5  # the first byte's high nibble; the low one is the format version
MAGIC_VERSION = 0x50  # magic 5, chunk format version 0 (what osiris 1.3.1 writes)
CHUNK_USER = 0  # chunk types: messages,
CHUNK_TRK_DELTA = 1  # tracking changes (one simple entry),
CHUNK_TRK_SNAPSHOT = 2  # the whole tracking state, at the start of a segment
EPOCH = 1  # the epoch a single-node stream writes
ENTRY = struct.Struct(">I")  # a simple entry's size (top bit clear)
SUB_BATCH = struct.Struct(">BHII")  # flag and compression, records, uncompressed, stored size
# sub-batch compression types
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
COMPRESSIONS = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
END = 1 << 64  # past any offset: "to the end of the chunk"

#: A record to its reader: the buffer it is in, where it starts and ends, its offset.
OnRecord = Callable[[bytes, int, int, int], object]
#: A compressed batch and its uncompressed size to its ``u32 size | record`` entries;
#: raises ValueError when the batch does not open.
Decompress = Callable[[bytes, int], bytes]


class ChunkError(ValueError):
    """A chunk or sub-batch that cannot be read as its header says."""


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
    filter_size: int = 0  # the Bloom filter's bytes between header and data, as stored


def _gunzip(data: bytes, size: int) -> bytes:
    try:
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    except zlib.error as exc:
        raise ValueError(str(exc)) from None


#: The decompressors every reader has, by compression type.
DECOMPRESSORS: Mapping[int, Decompress] = MappingProxyType({GZIP: _gunzip})


# ---------------------------------------------------------------------------- writing
def entry(record: bytes) -> bytes:
    """One simple entry."""
    return ENTRY.pack(len(record)) + record


def simple_entries(records: Iterable[bytes]) -> bytes:
    """Records as contiguous simple entries."""
    pack = ENTRY.pack
    return b"".join(b for m in records for b in (pack(len(m)), m))


def sub_batch(compression: int, records: int, uncompressed_size: int, data: bytes) -> bytes:
    """A sub-batch entry around a publisher's batch (``records`` records, as it came)."""
    return SUB_BATCH.pack(0x80 | (compression & 0x7) << 4, records, uncompressed_size,
                          len(data)) + data  # fmt: skip


def build(
    first_offset: int,
    timestamp: int,
    data: bytes,
    entries: int,
    records: int | None = None,
    epoch: int = EPOCH,
    trailer: bytes = b"",
    chunk_type: int = CHUNK_USER,
    bloom: bytes = b"",
) -> bytes:
    """A chunk around ``data`` (``entries`` entries holding ``records`` records, one each
    when None), its Bloom filter and a trailer, as osiris stores it."""
    head = HEADER.pack(
        MAGIC_VERSION,
        chunk_type,
        entries,
        entries if records is None else records,
        timestamp,
        epoch,
        first_offset,
        zlib.crc32(data),
        len(data),
        len(trailer),
        len(bloom),
    )
    return head + bloom + data + trailer


# ---------------------------------------------------------------------------- reading
def parse_header(raw: bytes | memoryview, at: int = 0) -> ChunkHeader:
    """The header at ``at``; ChunkError when it is not an osiris chunk's."""
    magic, *fields = HEADER.unpack_from(raw, at)
    if magic >> 4 != MAGIC:
        raise ChunkError(f"not an osiris chunk (first byte {magic:#x})")
    return ChunkHeader(*fields)


def data_crc(raw: bytes | memoryview, at: int, length: int) -> int:
    """The CRC32 of ``length`` bytes of data at ``at`` (what the header's CRC covers)."""
    return zlib.crc32(memoryview(raw)[at : at + length])


@dataclass(frozen=True, slots=True)
class Reading:
    """What a walk hands out, and how it opens batches: the records whose offsets are in
    ``[start, end)``; compressed batches opened by ``decompressors``. A batch that does
    not open (a compression without a decompressor, bad bytes, another size than its
    header says) or whose records overrun it raises ChunkError, or, ``lenient`` (as
    osiris reads one), is one record of its stored bytes at its first offset, and records
    that overrun it end it with one record of what is left."""

    start: int = 0
    end: int = END
    decompressors: Mapping[int, Decompress] = field(default_factory=lambda: DECOMPRESSORS)
    lenient: bool = False


EVERY = Reading()  # every record, strictly, gzip opened
LENIENT = Reading(lenient=True)


def walk(
    buf: bytes, pos: int, entries: int, first: int, on_record: OnRecord, reading: Reading = EVERY
) -> None:
    """Each record of the ``entries`` entries at ``pos`` (the first holding offset
    ``first``) that ``reading`` takes to ``on_record``, in order; the walk stops at the
    first record past its range, and batches wholly outside it are not opened."""
    start, end = reading.start, reading.end
    unpack = ENTRY.unpack_from
    offset = first
    for _ in range(entries):
        (n,) = unpack(buf, pos)
        if n & 0x80000000:
            flag, count, size, length = SUB_BATCH.unpack_from(buf, pos)
            p = pos + SUB_BATCH.size
            pos = p + length
            if offset + count > start:
                batch = (flag >> 4) & 0x7, count, size
                walk_batch(buf, p, pos, batch, offset, on_record, reading, first)
            offset += count
            if offset >= end:
                return
        elif offset < start:
            pos += 4 + n
            offset += 1
        elif offset < end:
            q = pos + 4 + n
            on_record(buf, pos + 4, q, offset)
            pos = q
            offset += 1
        else:
            return


def walk_batch(
    buf: bytes,
    pos: int,
    stop: int,
    batch: tuple[int, int, int],
    offset: int,
    on_record: OnRecord,
    reading: Reading = EVERY,
    chunk: int | None = None,
) -> None:
    """The records of the sub-batch stored in ``buf[pos:stop]`` (``batch``: its
    compression, record count and uncompressed size; its first record at ``offset``)
    that ``reading`` takes, to ``on_record``. Errors name the chunk at offset ``chunk``
    (None: ``offset``)."""
    compression, count, size = batch
    where = offset if chunk is None else chunk
    start, end = reading.start, reading.end
    data = buf
    if compression:
        try:
            data = _opened(buf[pos:stop], compression, size, reading, where)
        except ValueError:
            if not reading.lenient:
                raise
            if start <= offset < end:
                on_record(buf, pos, stop, offset)
            return
        pos, stop = 0, len(data)
    unpack = ENTRY.unpack_from
    try:
        for _ in range(count):
            (n,) = unpack(data, pos)
            q = pos + 4 + n
            if q > stop:
                break
            if offset >= start:
                if offset >= end:
                    return
                on_record(data, pos + 4, q, offset)
            pos = q
            offset += 1
        else:
            return
    except struct.error:
        pass
    # the records overrun the batch
    if not reading.lenient:
        raise ChunkError(f"chunk at offset {where}: the records of a sub-entry batch overrun it")
    if start <= offset < end:
        on_record(data, pos, stop, offset)


def _opened(stored: bytes, compression: int, size: int, reading: Reading, where: int) -> bytes:
    """A compressed batch's entries; ChunkError when it does not open (lenient: any size)."""
    opener = reading.decompressors.get(compression)
    if opener is None:
        raise ChunkError(_unsupported(where, compression, reading.decompressors))
    try:
        data = opener(stored, size)
    except ValueError as exc:
        raise ChunkError(
            f"chunk at offset {where}: a compressed sub-entry batch does not open: {exc}"
        ) from None
    if len(data) != size and not reading.lenient:
        raise ChunkError(
            f"chunk at offset {where}: a sub-entry batch opened to {len(data)} bytes, "
            f"not the {size} its header says"
        )
    return data


def _unsupported(where: int, kind: int, decompressors: Mapping[int, Decompress]) -> str:
    """The refusal of a compression without a decompressor, naming those there are."""
    others = [name for k, name in COMPRESSIONS.items() if k not in decompressors]
    known = [name for k, name in COMPRESSIONS.items() if k in decompressors]
    which = f" ({_listed(others, 'or')})" if others else ""
    return (
        f"chunk at offset {where}: sub-entry batch compressed with type {kind}{which} is not "
        f"supported; {_listed(known, 'and')} {'are' if len(known) > 1 else 'is'}"
    )


def _listed(names: list[str], word: str) -> str:
    return names[-1] if len(names) < 2 else f"{', '.join(names[:-1])} {word} {names[-1]}"


def records(raw: bytes, at: int = 0, stored: bool = False) -> list[bytes]:
    """The records of the chunk at ``at`` as a Deliver frame carries it (``stored``: as a
    segment holds it, its filter between header and data), in order, its CRC checked
    (ChunkError)."""
    head = parse_header(raw, at)
    pos = at + HEADER_SIZE + (head.filter_size if stored else 0)
    if data_crc(raw, pos, head.data_length) != head.crc:
        raise ChunkError("chunk CRC does not match")
    out: list[bytes] = []
    walk(raw, pos, head.entries, head.first_offset,
         lambda b, s, e, _o: out.append(bytes(b[s:e])))  # fmt: skip
    return out
