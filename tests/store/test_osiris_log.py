"""A stream's log in osiris's layout: the bytes on disk, order, chunks, seeks by offset and
timestamp, torn tails after a crash, retention, and the conversion of the old layout."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.broker.queues.stream_amqp091 import to_amqp091
from leveret.broker.queues.stream_amqp10 import to_amqp10
from leveret.broker.queues.stream_properties import as_stored_in_a_stream
from leveret.protocol.stream import bloom, chunk
from leveret.protocol.stream.chunk import HEADER
from leveret.store.osiris import CHUNK_BYTES, OsirisLog
from leveret.store.stream_layout import convert
from leveret.store.streams import SegmentLog
from tests.support.tiers import examples


def messages(log: OsirisLog, start: int = 0, n: int = 1_000_000) -> list[bytes]:
    return [m for _, _, m in log.read(start, n, max_bytes=1 << 40)]


def test_files_are_osiris_segments_and_indexes(tmp_path: Path) -> None:
    log = OsirisLog(tmp_path)
    assert log.append(b"ab") == 0
    assert log.append(b"c") == 1
    assert messages(log) == []  # not synced: not visible
    assert log.sync(ts_ms=1234) is True
    assert log.sync() is False
    seg = (tmp_path / "00000000000000000000.segment").read_bytes()
    idx = (tmp_path / "00000000000000000000.index").read_bytes()
    assert seg[:8] == b"OSIL\x00\x00\x00\x01"
    assert idx[:8] == b"OSII\x00\x00\x00\x01"
    data = b"\x00\x00\x00\x02ab\x00\x00\x00\x01c"
    assert (
        seg[8:] == HEADER.pack(0x50, 0, 2, 2, 1234, 1, 0, zlib.crc32(data), len(data), 0, 0) + data
    )
    # offset, timestamp, epoch, file position, chunk type
    assert idx[8:] == struct.pack(">QqQIB", 0, 1234, 1, 8, 0)
    assert chunk.records(seg[8:]) == [b"ab", b"c"]
    ref = log.chunk_at(1)
    assert ref is not None
    assert (ref.position, ref.size, ref.first, ref.records) == (8, 48 + len(data), 0, 2)
    assert os.pread(ref.fd, ref.size, ref.position) == seg[8:]
    assert log.chunk_at(2) is None
    assert messages(log, 1) == [b"c"]
    assert (log.first, log.committed, log.last_chunk_start()) == (0, 2, 0)
    log.close()


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=15), st.integers(200, 3000))
def test_reads_from_any_offset_across_segments(
    tmp_path_factory: object, chunks: list[int], segment_bytes: int
) -> None:
    directory = tmp_path_factory.mktemp("log")  # type: ignore[attr-defined]
    log = OsirisLog(directory, max_segment_bytes=segment_bytes)
    n = 0
    for size in chunks:
        for _ in range(size):
            log.append(f"m{n}".encode())
            n += 1
        log.sync()
    expected = [f"m{i}".encode() for i in range(n)]
    for start in range(0, n, max(1, n // 7)):
        assert messages(log, start) == expected[start:]
        ref = log.chunk_at(start)
        assert ref is not None and ref.first <= start < ref.first + ref.records
        assert log.chunk_end(start) == ref.first + ref.records
    assert [r[0] for r in log.read(n // 2, 3)] == list(range(n // 2, min(n, n // 2 + 3)))
    log.close()
    again = OsirisLog(directory, max_segment_bytes=segment_bytes)
    assert messages(again) == expected
    assert again.next_offset == n
    assert again.chunk_count == len(chunks)
    again.close()


def test_a_big_append_is_cut_into_chunks(tmp_path: Path) -> None:
    log = OsirisLog(tmp_path)
    body = b"x" * 1000
    n = 3 * CHUNK_BYTES // 1000
    for _ in range(n):
        log.append(body)
    log.sync()
    assert log.chunk_count >= 3
    sizes = []
    offset = 0
    while (ref := log.chunk_at(offset)) is not None:
        assert ref.first == offset
        sizes.append(ref.size)
        offset += ref.records
    assert offset == n and max(sizes) < CHUNK_BYTES + 2000
    log.close()


def test_seek_by_timestamp(tmp_path: Path) -> None:
    log = OsirisLog(tmp_path)
    for ts in (1000, 2000, 3000):
        log.append(b"a")
        log.append(b"b")
        log.sync(ts_ms=ts)
    assert [log.offset_at(t) for t in (0, 1000, 1500, 2000, 3000, 3001)] == [0, 0, 2, 2, 4, 6]
    log.close()


def test_torn_tails_are_cut_at_the_last_whole_chunk(tmp_path: Path) -> None:
    log = OsirisLog(tmp_path)
    for i in range(4):
        log.append(f"m{i}".encode())
        log.sync()
    log.close()
    seg = tmp_path / "00000000000000000000.segment"
    idx = tmp_path / "00000000000000000000.index"
    whole = seg.stat().st_size
    # a chunk written halfway, and its index record
    with open(seg, "ab") as f:
        f.write(HEADER.pack(0x50, 0, 1, 1, 5, 1, 4, 0, 100, 0, 0) + b"\x00" * 10)
    with open(idx, "ab") as f:
        f.write(struct.pack(">QqQIB", 4, 5, 1, whole, 0))
    again = OsirisLog(tmp_path)
    assert messages(again) == [b"m0", b"m1", b"m2", b"m3"]
    assert seg.stat().st_size == whole
    assert again.append(b"m4") == 4
    again.sync()
    again.close()
    # the last chunk's data damaged: its CRC fails, it goes; an index record lost: found
    data = bytearray(seg.read_bytes())
    data[-1] ^= 0xFF
    seg.write_bytes(bytes(data))
    idx.write_bytes(idx.read_bytes()[: 8 + 29 * 2])
    third = OsirisLog(tmp_path)
    assert messages(third) == [b"m0", b"m1", b"m2", b"m3"]
    assert len(idx.read_bytes()) == 8 + 29 * 4
    third.close()


def test_retention_drops_whole_old_segments(tmp_path: Path) -> None:
    log = OsirisLog(tmp_path, max_segment_bytes=500, max_bytes=1200)
    for i in range(60):
        log.append(b"x" * 40)
        if i % 5 == 4:
            log.sync()
    assert log.total_bytes <= 1200 + 500 + 300
    assert log.first > 0
    assert messages(log)[0] == b"x" * 40
    assert len(messages(log)) == 60 - log.first
    log.close()
    aged = OsirisLog(tmp_path / "aged", max_segment_bytes=100, max_age_ms=1000)
    for _ in range(5):
        aged.append(b"y" * 80)
        aged.sync(ts_ms=1)
    aged.apply_retention()
    assert aged.segment_count == 1
    aged.close()


_PROPS = (
    b"\xf8\x00"  # content-type, content-encoding, headers, delivery-mode, priority
    b"\x10application/json\x04gzip"
    + struct.pack(">I", 19)
    + b"\x01nI\x00\x00\x00\x07\x01sS\x00\x00\x00\x01v\x01bt\x01"
    + b"\x02\x03"
)


def test_the_old_layout_is_converted_at_start(tmp_path: Path) -> None:
    """A stream written by Leveret's old record log (AMQP 0-9-1 records, and one that
    came over the stream protocol) is converted to osiris chunks of AMQP 1.0 messages:
    same offsets, same chunks and timestamps, tracking kept, the old files gone."""
    old = SegmentLog(tmp_path, max_segment_bytes=200)
    amqp10 = to_amqp10("", "s", b"\x00\x00", b"from-stream-protocol")
    for i in range(12):
        if i == 5:
            old.append(b"\x00\x00", b"\xff\xff", amqp10, ts_ms=5000)
        else:
            old.append(b"\x02ex\x02rk", _PROPS, f"b{i}".encode(), ts_ms=1000 * i)
        if i % 3 == 2:
            old.sync()
    old.sync()
    old.close()
    # the tracking the old layout kept beside its records
    (tmp_path / "tracking.json").write_text(
        json.dumps({"offsets": {"consumer": 7}, "sequences": {"writer": 41}})
    )
    old_chunks = [c for s in SegmentLog(tmp_path).segments for c in s.chunks]
    assert list(tmp_path.glob("*.seg"))

    log = OsirisLog(tmp_path, convert=lambda d: convert(d, "stream 's' in vhost '/'"))
    assert not list(tmp_path.glob("*.seg")) and not list(tmp_path.glob("*.idx"))
    assert not (tmp_path / "converting").exists()
    stored = log.read(0, 100)
    assert [o for o, _, _ in stored] == list(range(12))
    assert stored[5][2] == amqp10
    for offset, _ts, message in stored:
        if offset == 5:
            continue
        exchange_and_key, props, body = to_amqp091(message, "s")
        assert (exchange_and_key, body) == (b"\x02ex\x02rk", f"b{offset}".encode())
        assert props == as_stored_in_a_stream(_PROPS)
    assert log.chunk_count == len(old_chunks)
    assert [log.chunk_at(first).timestamp for first, _, _ in old_chunks] == [  # type: ignore[union-attr]
        ts for _, _, ts in old_chunks
    ]
    assert (log.query_offset("consumer"), log.writer_sequence("writer")) == (7, 41)
    assert not (tmp_path / "tracking.json").exists()  # in the last chunk's trailer now
    assert log.append(b"new") == 12
    log.sync()
    log.close()
    again = OsirisLog(tmp_path)
    assert messages(again)[-1] == b"new"
    assert (again.query_offset("consumer"), again.writer_sequence("writer")) == (7, 41)
    again.close()


def test_a_conversion_cut_short_is_done_again(tmp_path: Path) -> None:
    old = SegmentLog(tmp_path)
    for i in range(3):
        old.append(b"\x00\x01s", b"\x00\x00", f"b{i}".encode())
    old.sync()
    old.close()
    # a crash after part of a conversion was written, before it was marked done
    (tmp_path / "converting").mkdir()
    (tmp_path / "converting" / "00000000000000000000.segment").write_bytes(b"OSIL")
    (tmp_path / "00000000000000000000.segment").write_bytes(b"junk")
    log = OsirisLog(tmp_path, convert=lambda d: convert(d, "s"))
    assert [to_amqp091(m, "s")[2] for m in messages(log)] == [b"b0", b"b1", b"b2"]
    log.close()


def test_tracking_goes_in_trailers_delta_chunks_and_snapshots(tmp_path: Path) -> None:
    """As osiris's writer: tracking written with messages rides in the chunk's trailer
    (not sent to readers), alone it is a tracking-delta chunk that takes an offset, and
    a new segment starts with a tracking snapshot chunk."""
    log = OsirisLog(tmp_path, max_segment_bytes=300)
    log.append(b"m0")
    log.set_writer_sequence("w", 7)
    log.sync(ts_ms=1)
    seg = (tmp_path / "00000000000000000000.segment").read_bytes()
    head = HEADER.unpack_from(seg, 8)
    trailer = b"\x00\x01w" + struct.pack(">Q", 7)
    assert (head[1], head[3], head[9]) == (0, 1, len(trailer))  # user chunk, 1 record
    assert seg.endswith(trailer)
    ref = log.chunk_at(0)
    assert ref is not None and ref.size == 48 + 6  # header and data: no trailer
    log.store_offset("r", 0)
    assert log.sync(ts_ms=2) is True
    assert log.committed == 2 and log.next_offset == 2
    delta = (tmp_path / "00000000000000000000.segment").read_bytes()[len(seg) :]
    entry = b"\x01\x01r" + struct.pack(">Q", 0)
    assert delta == chunk.build(1, 2, chunk.entry(entry), 1, chunk_type=chunk.CHUNK_TRK_DELTA)
    assert log.chunk_at(1) is None  # readers skip tracking chunks
    assert log.append(b"m2") == 2
    log.sync()
    assert [o for o, _, _ in log.read(0, 10)] == [0, 2]
    assert log.last_chunk_start() == 2
    for _ in range(20):  # past the segment size: a snapshot starts the next segment
        log.append(b"x" * 40)
        log.sync()
    assert log.segment_count > 1
    second = log.segments[1]
    assert second.types[0] == 2 and second.records[0] == 1
    log.close()
    again = OsirisLog(tmp_path, max_segment_bytes=300)
    assert (again.query_offset("r"), again.writer_sequence("w")) == (0, 7)
    assert again.committed == log.committed
    again.close()


def test_sub_batches_are_stored_as_they_came(tmp_path: Path) -> None:
    """A publisher's sub-entry batch is one sub-batch entry (osiris's header: flag and
    compression, record count, uncompressed and stored sizes), its records taking their
    offsets; readers of single messages get them one by one, gzip opened."""
    import gzip

    plain = b"".join(struct.pack(">I", len(m)) + m for m in (b"r0", b"r1"))
    zipped = gzip.compress(b"".join(struct.pack(">I", len(m)) + m for m in (b"g0", b"g1", b"g2")))
    log = OsirisLog(tmp_path)
    assert log.append(b"m0") == 0
    assert log.append_batch(0, 2, len(plain), plain) == 1
    assert log.append_batch(1, 3, 18, zipped) == 3
    assert log.append(b"m6") == 6
    log.sync()
    ref = log.chunk_at(0)
    assert ref is not None and (ref.first, ref.records) == (0, 7)
    raw = os.pread(ref.fd, ref.size, ref.position)
    assert HEADER.unpack_from(raw)[2:4] == (4, 7)  # 4 entries, 7 records
    assert raw[48 + 6 : 48 + 6 + 11] == struct.pack(">BHII", 0x80, 2, len(plain), len(plain))
    assert [m for _, _, m in log.read(0, 100)] == [b"m0", b"r0", b"r1", b"g0", b"g1", b"g2", b"m6"]
    assert [o for o, _, _ in log.read(4, 100)] == [4, 5, 6]
    log.close()


def test_a_read_after_a_sub_batch_gives_as_many_records_as_asked(tmp_path: Path) -> None:
    """Records after a sub-batch of the same chunk count from the read's position: a
    read of five from inside the batch gives five."""
    batch = b"".join(struct.pack(">I", 2) + b"b%d" % i for i in range(10))
    log = OsirisLog(tmp_path)
    log.append_batch(0, 10, len(batch), batch)
    for i in range(5):
        log.append(b"m%d" % i)
    log.sync()
    assert [o for o, _, _ in log.read(8, 5)] == [8, 9, 10, 11, 12]
    assert [m for _, _, m in log.read(9, 2)] == [b"b9", b"m0"]
    log.close()


def test_a_chunk_with_filter_values_stores_its_bloom_filter(tmp_path: Path) -> None:
    """RabbitMQ 3.13's layout: the filter between header and data, its size in the header
    (x-stream-filter-size-bytes); read back after a restart, a torn tail cut as before."""
    log = OsirisLog(tmp_path)
    log.filter_size = 32
    log.append(b"m1", b"apple")
    log.append(b"m2")
    log.sync()
    log.append(b"m3")
    log.sync()
    log.close()
    raw = (tmp_path / "00000000000000000000.segment").read_bytes()[8:]
    head = chunk.parse_header(raw)
    assert head.filter_size == 32
    assert raw[chunk.HEADER_SIZE : chunk.HEADER_SIZE + 32] == bloom.build([b"apple", None], 32)
    assert chunk.records(raw, stored=True) == [b"m1", b"m2"]
    reopened = OsirisLog(tmp_path)
    assert reopened.committed == 3
    first = reopened.chunk_at(0)
    assert first is not None and first.filter_size == 32
    assert first.read_filter() == bloom.build([b"apple", None], 32)
    assert chunk.records(first.read()) == [b"m1", b"m2"]
    second = reopened.chunk_at(2)
    assert second is not None and second.filter_size == 0 and second.read_filter() == b""
    assert [m for _, _, m in reopened.read(0, 10)] == [b"m1", b"m2", b"m3"]
    assert reopened.chunk_ids() == (0, 2)
    reopened.close()
