"""Osiris chunks (:mod:`leveret.protocol.stream.chunk`): the one walker of entries against
a reference reading of the layout, its range, its strict and lenient readings of batches
that do not open, and the refusals' texts."""

from __future__ import annotations

import gzip
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.protocol.stream import chunk

_record = st.binary(max_size=12)
# an entry: a record, or a batch of records, stored plain or gzipped
_entry = st.one_of(
    _record.map(lambda r: ("simple", [r])),
    st.tuples(st.sampled_from([chunk.NONE, chunk.GZIP]), st.lists(_record, max_size=4)),
)


def _framed(entries: list[tuple[int | str, list[bytes]]]) -> tuple[bytes, int]:
    """The data of a chunk of ``entries`` and its record count."""
    data = b""
    for kind, records in entries:
        if kind == "simple":
            data += chunk.entry(records[0])
            continue
        inner = chunk.simple_entries(records)
        stored = gzip.compress(inner) if kind == chunk.GZIP else inner
        data += chunk.sub_batch(int(kind), len(records), len(inner), stored)
    return data, sum(len(r) for _, r in entries)


def _walked(raw: bytes, start: int = 0, end: int = chunk.END, **kw: Any) -> list[tuple[int, bytes]]:
    head = chunk.parse_header(raw)
    out: list[tuple[int, bytes]] = []
    reading = chunk.Reading(start, end, **kw)
    chunk.walk(raw, chunk.HEADER_SIZE, head.entries, head.first_offset,
               lambda b, s, e, o: out.append((o, bytes(b[s:e]))), reading)  # fmt: skip
    return out


@given(st.lists(_entry, max_size=6), st.integers(0, 30), st.integers(0, 30), st.integers(0, 99))
def test_the_walker_gives_each_record_in_range_with_its_offset(
    entries: list[tuple[int | str, list[bytes]]], start: int, span: int, first: int
) -> None:
    data, count = _framed(entries)
    raw = chunk.build(first, 7, data, len(entries), count)
    everything = [r for _, records in entries for r in records]
    expected = [(first + i, r) for i, r in enumerate(everything)]
    assert _walked(raw) == expected
    assert chunk.records(raw) == everything
    lo, hi = first + start, first + start + span
    assert _walked(raw, lo, hi) == [(o, r) for o, r in expected if lo <= o < hi]
    assert _walked(raw, lo, hi, lenient=True) == [(o, r) for o, r in expected if lo <= o < hi]


def test_the_header_round_trips() -> None:
    raw = chunk.build(10, 1234, chunk.simple_entries([b"ab", b"c"]), 2, trailer=b"tt",
                      chunk_type=chunk.CHUNK_TRK_DELTA)  # fmt: skip
    head = chunk.parse_header(raw)
    assert (head.chunk_type, head.entries, head.records, head.timestamp, head.epoch) == (
        chunk.CHUNK_TRK_DELTA, 2, 2, 1234, chunk.EPOCH)  # fmt: skip
    assert (head.first_offset, head.data_length, head.trailer_length) == (10, 11, 2)
    assert chunk.data_crc(raw, chunk.HEADER_SIZE, head.data_length) == head.crc
    assert raw.endswith(b"tt")
    with pytest.raises(chunk.ChunkError, match="not an osiris chunk"):
        chunk.parse_header(b"\x40" + raw[1:])


def _one_batch(compression: int, stored: bytes, records: int = 2, size: int = 10) -> bytes:
    return chunk.build(5, 0, chunk.sub_batch(compression, records, size, stored), 1, records)


def test_a_compression_without_a_decompressor_is_refused_naming_the_others() -> None:
    raw = _one_batch(chunk.SNAPPY, b"x" * 10)
    with pytest.raises(chunk.ChunkError) as got:
        _walked(raw)
    assert str(got.value) == (
        "chunk at offset 5: sub-entry batch compressed with type 2 (snappy, lz4 or zstd) "
        "is not supported; gzip is"
    )
    with_zstd = {**chunk.DECOMPRESSORS, chunk.ZSTD: lambda data, size: data}
    with pytest.raises(chunk.ChunkError) as got:
        _walked(raw, decompressors=with_zstd)
    assert str(got.value) == (
        "chunk at offset 5: sub-entry batch compressed with type 2 (snappy or lz4) "
        "is not supported; gzip and zstd are"
    )
    # lenient (the store, as osiris): the batch as it is stored, one record
    assert _walked(raw, lenient=True) == [(5, b"x" * 10)]
    # a batch outside the range is not opened
    assert _walked(raw, 7, 9) == []


def test_batches_that_do_not_open_or_do_not_add_up() -> None:
    bad_gzip = _one_batch(chunk.GZIP, b"not gzip")
    with pytest.raises(chunk.ChunkError, match="chunk at offset 5: a compressed sub-entry "
                       "batch does not open: Error -3"):  # fmt: skip
        _walked(bad_gzip)
    assert _walked(bad_gzip, lenient=True) == [(5, b"not gzip")]
    inner = chunk.simple_entries([b"a", b"b"])
    wrong_size = _one_batch(chunk.GZIP, gzip.compress(inner), size=99)
    with pytest.raises(chunk.ChunkError) as got:
        _walked(wrong_size)
    assert str(got.value) == (
        "chunk at offset 5: a sub-entry batch opened to 10 bytes, not the 99 its header says"
    )
    assert _walked(wrong_size, lenient=True) == [(5, b"a"), (6, b"b")]
    # the second record's size runs past the batch: strict refuses it, lenient keeps the
    # first and the rest as one record (as osiris reads a batch it cannot split)
    overrun = struct.pack(">I", 1) + b"a" + struct.pack(">I", 50) + b"bb"
    raw = chunk.build(0, 0, chunk.sub_batch(chunk.NONE, 2, 11, overrun) + chunk.entry(b"z"),
                      2, 3)  # fmt: skip
    with pytest.raises(chunk.ChunkError, match="overrun"):
        _walked(raw)
    assert _walked(raw, lenient=True) == [(0, b"a"), (1, struct.pack(">I", 50) + b"bb"),
                                          (2, b"z")]  # fmt: skip
    short = chunk.sub_batch(chunk.NONE, 2, 7, struct.pack(">I", 1) + b"a" + b"\x00\x00")
    with pytest.raises(chunk.ChunkError, match="overrun"):
        chunk.walk_batch(short, 11, len(short), (chunk.NONE, 2, 7), 0, lambda *a: None)
