"""The segment log on its own: order, chunks, torn tails, retention, bounded reads."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.store.streams import SegmentLog
from tests.support.tiers import examples

EXRK = b"\x00\x01q"
PROPS = b"\x00\x00"


def bodies(log: SegmentLog, start: int = 0, n: int = 10_000) -> list[bytes]:
    return [r[4] for r in log.read(start, n, max_bytes=1 << 30)]


def test_only_synced_records_are_visible(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path)
    assert log.append(EXRK, PROPS, b"a") == 0
    assert log.append(EXRK, PROPS, b"b") == 1
    assert log.read(0, 10) == []
    assert log.sync() is True
    assert log.sync() is False
    assert bodies(log) == [b"a", b"b"]
    assert (log.first, log.committed, log.last_chunk_start()) == (0, 2, 0)
    log.append(EXRK, PROPS, b"c")
    log.sync()
    assert log.last_chunk_start() == 2


@settings(max_examples=examples(30), deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=15), st.integers(200, 3000))
def test_reads_from_any_offset_across_segments(
    tmp_path_factory: object, chunks: list[int], segment_bytes: int
) -> None:
    directory = tmp_path_factory.mktemp("log")  # type: ignore[attr-defined]
    log = SegmentLog(directory, max_segment_bytes=segment_bytes)
    n = 0
    for size in chunks:
        for _ in range(size):
            log.append(EXRK, PROPS, f"m{n}".encode())
            n += 1
        log.sync()
    expected = [f"m{i}".encode() for i in range(n)]
    for start in range(0, n, max(1, n // 7)):
        assert bodies(log, start) == expected[start:]
    assert [r[0] for r in log.read(n // 2, 3)] == list(range(n // 2, min(n, n // 2 + 3)))
    log.close()
    again = SegmentLog(directory, max_segment_bytes=segment_bytes)
    assert bodies(again) == expected
    assert again.next_offset == n


def test_torn_tail_is_cut_and_appends_continue(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path)
    for i in range(5):
        log.append(EXRK, PROPS, f"m{i}".encode())
    log.sync()
    log.close()
    seg = next(tmp_path.glob("*.seg"))
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x05partial record")
    again = SegmentLog(tmp_path)
    assert again.committed == 5
    again.append(EXRK, PROPS, b"m5")
    again.sync()
    assert bodies(again) == [f"m{i}".encode() for i in range(6)]


def test_lost_index_entries_are_rebuilt(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path)
    for chunk in range(3):
        for i in range(4):
            log.append(EXRK, PROPS, f"{chunk}-{i}".encode())
        log.sync()
    log.close()
    idx = next(tmp_path.glob("*.idx"))
    idx.write_bytes(idx.read_bytes()[:24])  # only the first chunk's entry survives
    again = SegmentLog(tmp_path)
    assert again.committed == 12
    assert len(bodies(again)) == 12


def test_retention_drops_old_segments(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, max_segment_bytes=500, max_bytes=1200)
    for i in range(200):
        log.append(EXRK, PROPS, f"m{i:04d}".encode())
        if i % 5 == 4:
            log.sync()
    assert log.first > 0
    assert log.total_bytes <= 1200 + 500
    assert bodies(log)[-1] == b"m0199"
    assert bodies(log, 0)[0] == f"m{log.first:04d}".encode()  # reads start at the first


def test_age_retention(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, max_segment_bytes=100, max_age_ms=1000)
    for i in range(10):
        log.append(EXRK, PROPS, b"x" * 50, ts_ms=i)
        log.sync()
    assert len(log.segments) > 1
    for seg in log.segments[:-1]:
        seg.last_ts = 0
    log.apply_retention(now_ms=10_000)
    assert len(log.segments) == 1


def test_reads_are_bounded(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path)
    for _ in range(100):
        log.append(EXRK, PROPS, b"x" * 1000)
    log.sync()
    assert len(log.read(0, 1000, max_bytes=10_000)) <= 11
