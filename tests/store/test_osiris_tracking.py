"""Consumers' stored offsets and named publishers' sequences live in a stream's log as
osiris keeps them (trailers, tracking-delta chunks, a snapshot at the start of each
segment) and are recovered from it at open; an older Leveret's ``tracking.json`` is taken
in once and removed."""

from __future__ import annotations

import json
from pathlib import Path

from leveret.protocol.stream import chunk
from leveret.protocol.stream.chunk import HEADER
from leveret.store.osiris import OsirisLog
from leveret.store.osiris_tracking import (
    MAX_SEQUENCES,
    TRK_OFFSET,
    TRK_SEQUENCE,
    TRK_TIMESTAMP,
    Tracking,
    tracking_entry,
)

SEG0 = "00000000000000000000.segment"


def tracked(log: OsirisLog, *refs: str) -> list[tuple[int | None, int | None]]:
    return [(log.query_offset(r), log.writer_sequence(r)) for r in refs]


def chunk_types(directory: Path) -> list[list[int]]:
    """The chunk types of each segment, in order, read from the files."""
    out = []
    for path in sorted(directory.glob("*.segment")):
        data = path.read_bytes()
        pos, kinds = 8, []
        while pos < len(data):
            head = HEADER.unpack_from(data, pos)
            kinds.append(head[1])
            pos += HEADER.size + head[8] + head[9]
        out.append(kinds)
    return out


def test_trailers_and_deltas_are_read_back_in_log_order(tmp_path: Path) -> None:
    log = OsirisLog(tmp_path)
    log.append(b"m0")
    log.set_writer_sequence("w", 7)
    log.store_offset("r", 0)
    log.sync()  # one user chunk, both in its trailer
    log.store_offset("r", 1)
    log.sync()  # a delta chunk (offset 1)
    log.append(b"m2")
    log.set_writer_sequence("w", 9)
    log.store_offset("other", 2)
    log.sync()  # a trailer again
    log.store_offset("r", 2)
    log.set_writer_sequence("w2", 1)
    log.sync()  # a delta chunk with both
    log.close()
    assert not (tmp_path / "tracking.json").exists()
    assert chunk_types(tmp_path) == [[0, 1, 0, 1]]
    again = OsirisLog(tmp_path)
    assert tracked(again, "r", "w", "other", "w2", "none") == [
        (2, None),
        (None, 9),
        (2, None),
        (None, 1),
        (None, None),
    ]
    # a sequence knows the chunk it was written in (a snapshot carries it)
    assert again.tracking.sequences == {"w": (2, 9), "w2": (3, 1)}
    assert again.append(b"m4") == 4
    again.close()


def test_a_snapshot_keeps_tracking_after_retention_dropped_old_segments(tmp_path: Path) -> None:
    log = OsirisLog(tmp_path, max_segment_bytes=300, max_bytes=700)
    log.append(b"m0")
    log.set_writer_sequence("w", 3)
    log.store_offset("early", 0)
    log.store_offset("kept", 1000)  # ahead of the log: no snapshot drops it
    log.sync()
    for _ in range(30):
        log.append(b"x" * 60)
        log.sync()
    assert log.segment_count < 6  # old segments went
    first = log.first
    assert first > 0
    types = chunk_types(tmp_path)
    assert all(kinds[0] == 2 for kinds in types)  # each segment starts with a snapshot
    log.close()
    again = OsirisLog(tmp_path, max_segment_bytes=300, max_bytes=700)
    assert again.first == first
    assert again.query_offset("kept") == 1000
    # an offset below the first offset still stored was left out of the snapshots,
    # as osiris leaves it out; a publisher's sequence is kept
    assert tracked(again, "early", "w") == [(None, None), (None, 3)]
    again.close()


def test_recovery_reads_from_the_last_segment_that_starts_with_a_snapshot(
    tmp_path: Path,
) -> None:
    """A snapshot replaces the state: what older segments held and the snapshot dropped
    is not read back."""
    log = OsirisLog(tmp_path, max_segment_bytes=200)
    log.store_offset("gone", 0)
    log.sync()  # a delta chunk at offset 0
    for _ in range(12):
        log.append(b"y" * 50)
        log.sync()
    log.store_offset("late", 5)
    log.sync()
    assert log.segment_count > 2
    log.close()
    again = OsirisLog(tmp_path, max_segment_bytes=200)
    assert tracked(again, "gone", "late") == [(0, None), (5, None)]
    again.close()
    # the last segment's snapshot rewritten without "gone" (still in the first
    # segment's delta chunk): it is not revived
    last = sorted(tmp_path.glob("*.segment"))[-1]
    data = last.read_bytes()
    head = HEADER.unpack_from(data, 8)
    assert head[1] == 2
    end = 8 + 48 + head[8] + head[9]
    trk = Tracking()
    trk.load_snapshot(data[8 + 48 + 4 : 8 + 48 + head[8]])
    assert trk.offsets["gone"] == 0
    del trk.offsets["gone"]
    snapshot = chunk.build(head[6], head[4], chunk.entry(trk.snapshot(0, 0)), 1, chunk_type=2)
    last.write_bytes(data[:8] + snapshot + data[end:])
    last.with_suffix(".index").unlink()  # positions moved: indexed again at open
    third = OsirisLog(tmp_path, max_segment_bytes=200)
    assert tracked(third, "gone", "late") == [(None, None), (5, None)]
    third.close()


def test_a_torn_tail_takes_its_tracking_with_it(tmp_path: Path) -> None:
    log = OsirisLog(tmp_path)
    log.append(b"m0")
    log.store_offset("r", 0)
    log.set_writer_sequence("w", 1)
    log.sync()
    whole = (tmp_path / SEG0).stat().st_size
    log.append(b"m1")
    log.store_offset("r", 1)
    log.set_writer_sequence("w", 2)
    log.sync()  # its trailer: r 1, w 2
    log.store_offset("r", 2)
    log.sync()  # a delta chunk
    log.close()
    seg = tmp_path / SEG0
    full = seg.read_bytes()
    # the delta chunk cut halfway: it goes, the chunk before it with its trailer stays
    delta_at = len(full) - (48 + 4 + len(tracking_entry(TRK_OFFSET, "r", 2)))
    seg.write_bytes(full[: delta_at + 30])
    again = OsirisLog(tmp_path)
    assert tracked(again, "r", "w") == [(1, None), (None, 2)]
    assert again.committed == 2
    again.close()
    # the second user chunk's data damaged (its CRC fails): its trailer goes with it
    data = bytearray(seg.read_bytes())
    data[whole + 48] ^= 0xFF
    seg.write_bytes(bytes(data))
    third = OsirisLog(tmp_path)
    assert tracked(third, "r", "w") == [(0, None), (None, 1)]
    assert third.committed == 1 and third.append(b"again") == 1
    third.close()


def test_an_old_tracking_json_is_taken_in_once(tmp_path: Path) -> None:
    """Written by a Leveret that kept tracking beside the chunks only: what the chunks
    lack becomes one snapshot chunk (it takes an offset), then the file goes."""
    log = OsirisLog(tmp_path)
    for i in range(3):
        log.append(f"m{i}".encode())
    log.sync()
    log.close()
    (tmp_path / "tracking.json").write_text(
        json.dumps({"offsets": {"r": 1, "gone-by": 0}, "sequences": {"w": 12}})
    )
    again = OsirisLog(tmp_path)
    assert not (tmp_path / "tracking.json").exists()
    assert tracked(again, "r", "gone-by", "w") == [(1, None), (0, None), (None, 12)]
    assert chunk_types(tmp_path) == [[0, 2]]
    assert again.committed == 4  # the snapshot took offset 3
    assert [o for o, _, _ in again.read(0, 10)] == [0, 1, 2]
    assert again.append(b"m4") == 4
    again.close()
    third = OsirisLog(tmp_path)
    assert tracked(third, "r", "gone-by", "w") == [(1, None), (0, None), (None, 12)]
    third.close()


def test_a_tracking_json_the_chunks_already_hold_is_only_removed(tmp_path: Path) -> None:
    """As the last Leveret that wrote both left it (the chunks newer where they differ, a
    crash having come between the two writes): nothing is written, the file goes."""
    log = OsirisLog(tmp_path)
    log.append(b"m0")
    log.store_offset("r", 0)
    log.set_writer_sequence("w", 5)
    log.sync()
    log.close()
    size = (tmp_path / SEG0).stat().st_size
    (tmp_path / "tracking.json").write_text(json.dumps({"offsets": {"r": 0}, "sequences": {}}))
    (tmp_path / "tracking.tmp").write_text("{")
    again = OsirisLog(tmp_path)
    assert tracked(again, "r", "w") == [(0, None), (None, 5)]
    assert (tmp_path / SEG0).stat().st_size == size
    assert not (tmp_path / "tracking.json").exists() and not (tmp_path / "tracking.tmp").exists()
    again.close()


def test_an_unreadable_tracking_json_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "tracking.json").write_text('{"offsets": ')
    log = OsirisLog(tmp_path)
    assert log.query_offset("r") is None and log.committed == 0
    log.close()
    assert (tmp_path / "tracking.json").read_text() == '{"offsets": '


def test_snapshot_records_and_what_a_snapshot_leaves_out() -> None:
    """A snapshot's sequence record holds its chunk id; offsets below the first offset,
    timestamps below the first timestamp and the oldest sequences beyond 255 are left out
    (osiris_tracking:snapshot/3); timestamps are signed."""
    trk = Tracking()
    for i in range(MAX_SEQUENCES + 2):
        trk.set(TRK_SEQUENCE, f"w{i}", i)
        assert trk.flush(chunk_id=100 + i)
    trk.set(TRK_OFFSET, "low", 4)
    trk.set(TRK_OFFSET, "high", 5)
    trk.set(TRK_TIMESTAMP, "t-old", -7)
    trk.set(TRK_TIMESTAMP, "t-new", 9)
    data = trk.snapshot(first_offset=5, first_timestamp=0)
    assert tracking_entry(TRK_SEQUENCE, "w256", 256, 356) in data
    assert b"\x00\x02w0" not in data and b"\x00\x02w1" not in data
    assert tracking_entry(TRK_OFFSET, "high", 5) in data and b"low" not in data
    assert tracking_entry(TRK_TIMESTAMP, "t-new", 9) in data and b"t-old" not in data
    again = Tracking()
    again.load_snapshot(data)
    assert (again.offsets, again.timestamps) == ({"high": 5}, {"t-new": 9})
    assert len(again.sequences) == MAX_SEQUENCES and again.sequences["w2"] == (102, 2)
    again.apply_trailer(7, tracking_entry(TRK_TIMESTAMP, "t-neg", -3) + b"\x01\x05cut")
    assert again.timestamps["t-neg"] == -3  # a record cut short ends the trailer
