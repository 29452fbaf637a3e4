"""Compaction and retention with the real ingest running: ``leveret pipeline ingest`` (a
process of its own, local[2]) writes the lake a small batch at a time while compactions
rewrite its partitions and the retention drops the old ones, through the sink's log. The
ingest is killed -9 and restarted once, a compaction is killed -9 once (right after its
commit). Throughout, every reader of the log (Spark, the search) sees each record at most
once and never loses one it saw; at the end Spark, the search and a directory lister
(pyarrow) see each record exactly once, the expired ones in none.

Then the cases a quiet ingest makes: a backfill of old records ends the ingest's work just
short of its next log compaction, and ``leveret pipeline compact --retention`` drops them
and compacts, the ingest untouched; and what that relies on, pinned on Spark's own sink
log: its log compaction creates its file before it reads the log files it compacts."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pika
import pytest
from pyspark.sql import SparkSession

from leveret.logs import compaction
from leveret.logs.lake import Janitor, SinkLog, sink_compacting
from leveret.logs.search import Filters, LakeSearch
from tests.spark.conftest import declare_stream, delete_queue
from tests.spark.test_ingest import _ingest, _kill_after_batches
from tests.support.brokers import BrokerUnderTest

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 12_000
OLD = range(0, 12_000, 6)  # two thousand records of 40 days ago: the retention drops them

pytestmark = pytest.mark.timeout(1800)


def _emit(url: str, stream: str) -> None:
    now = datetime.now(UTC)
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    props = pika.BasicProperties(content_type="application/json")
    for i in range(RECORDS):
        ts = now - timedelta(days=40 if i % 6 == 0 else 0, seconds=RECORDS - i)
        doc = {
            "ts": ts.isoformat(timespec="microseconds")[:-6] + "Z",
            "severity": ("info", "warning", "error")[i % 3],
            "facility": "user", "host": f"h{i % 2}", "app": "a", "pid": 1,
            "message": f"record {i}",
        }  # fmt: skip
        p = pika.BasicProperties(content_type=props.content_type, message_id=str(i))
        ch.basic_publish("", stream, json.dumps(doc).encode(), p)
    conn.close()


def _by_search(lake: Path) -> Counter[int]:
    page = LakeSearch(lake).search(Filters(), limit=None)
    return Counter(int(r["message_id"]) for r in page.records)


def _by_spark(spark: SparkSession, lake: Path) -> Counter[int]:
    return Counter(int(r.message_id) for r in spark.read.parquet(str(lake)).collect())


def _by_lister(lake: Path) -> Counter[int]:
    import pyarrow.dataset as ds

    t = ds.dataset(str(lake), format="parquet", partitioning="hive").to_table(
        columns=["message_id"]
    )
    return Counter(int(v) for v in t.column("message_id").to_pylist())


def _committed(lake: Path) -> int:
    return SinkLog(lake).refresh()


def _latest_compact(lake: Path) -> int:
    """The batch of the sink log's latest compact file, -1 before the first."""
    files = (lake / "_spark_metadata").glob("*.compact")
    return max((int(f.name.split(".")[0]) for f in files), default=-1)


def _compact_killed_after_commit(lake: Path) -> int:
    script = (
        "import os; from pathlib import Path; from leveret.logs import compaction\n"
        "def pause(s):\n"
        "    if s == 'committed': os.kill(os.getpid(), 9)\n"
        f"compaction.compact(Path({str(lake)!r}), wait=60, step=pause)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    run = subprocess.run([sys.executable, "-c", script], env=env, timeout=300)
    return run.returncode


def test_compaction_and_retention_while_the_ingest_runs(
    spark: SparkSession, leveret: BrokerUnderTest, tmp_path: Path
) -> None:
    stream = f"spark-compact-{uuid.uuid4().hex[:8]}"
    declare_stream(leveret, stream)
    _emit(leveret.url, stream)
    lake = tmp_path / "lake"
    source = ("--stream", stream)
    seen: Counter[int] = Counter()
    compactions = 0

    def check(counts: Counter[int]) -> None:
        nonlocal seen
        assert [i for i, n in counts.items() if n > 1] == [], "a record seen twice"
        lost = set(seen) - set(counts) - set(OLD)
        assert not lost, f"{len(lost)} records seen before are gone"
        seen = counts

    def compact_once() -> None:
        nonlocal compactions
        change = compaction.compact(lake, wait=30)
        compactions += bool(change.partitions)
        compaction.finish_removals(lake, grace=1)

    def drop_old(deadline: float) -> compaction.Change:
        # the retention waits while the ingest writes its own log compaction
        while True:
            try:
                return compaction.drop_expired(lake, days=30, wait=20)
            except compaction.CompactionError:
                assert time.monotonic() < deadline, "the retention never had room"

    # first run: killed -9 mid-way, with compactions between its batches
    proc = _ingest(leveret.url, tmp_path, *source, trigger="300ms", per_trigger=200, lake=lake)
    try:
        deadline = time.monotonic() + 600
        while _committed(lake) < 12:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for _ in range(2):
            compact_once()
            check(_by_search(lake))
        check(_by_spark(spark, lake))
        # Compaction takes only files named in the sink log's latest compact file: after the
        # two above, new files become compactable when Spark compacts its log again (every
        # ten batches). Without that wait, a slow ingest left nothing to compact and the
        # compaction to be killed finished cleanly (measured under load).
        base = _latest_compact(lake)
        while _latest_compact(lake) <= base:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline + 600
            time.sleep(0.2)
        assert _compact_killed_after_commit(lake) == -signal.SIGKILL
        check(_by_search(lake))
        _kill_after_batches(proc, lake, _committed(lake) + 3)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    assert _committed(lake) * 200 < RECORDS, "the ingest was killed too late"
    check(_by_search(lake))

    # second run: compactions and the retention while it catches up, then it drains
    proc = _ingest(leveret.url, tmp_path, *source, trigger="300ms", per_trigger=200, lake=lake)
    try:
        start = _committed(lake)
        deadline = time.monotonic() + 600
        while _committed(lake) < start + 3 and sum(_by_search(lake).values()) < RECORDS:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        dropped = drop_old(deadline)
        assert dropped.partitions
        check(_by_search(lake))
        compact_once()
        check(_by_spark(spark, lake))
        old = set(OLD)
        while len([i for i in _by_search(lake) if i not in old]) < RECORDS - len(OLD):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the ingest did not catch up"
            drop_old(deadline)  # old records keep arriving
            compact_once()
            check(_by_search(lake))
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    # the expired records of the last batches: no ingest runs now, every log file can go
    compaction.drop_expired(lake, days=30)
    assert not _has_old(lake)
    compact_once()
    assert compactions >= 1  # besides the one killed after its commit
    want = Counter(i for i in range(RECORDS) if i not in set(OLD))
    assert _by_search(lake) == want
    assert _by_spark(spark, lake) == want
    Janitor(lake).sweep(everything=True)
    compaction.finish_removals(lake, grace=0)
    assert _by_lister(lake) == want
    log = SinkLog(lake)
    log.refresh()
    assert len(log.files) < _committed(lake)  # fewer files than batches
    delete_queue(leveret, stream)


def _has_old(lake: Path) -> bool:
    cutoff = (datetime.now(UTC) - timedelta(days=30)).date()
    return bool(
        LakeSearch(lake).files(Filters(until=datetime.combine(cutoff, datetime.min.time(), UTC)))
    )


def test_the_sinks_log_compaction_creates_its_file_before_it_reads_the_log(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What a commit beside the ingest relies on (leveret.logs.lake.sink_compacting): when
    Spark's sink log opens a log file to compact it, its compacted log's temporary file
    exists already. The log file is a FIFO: opening it for writing waits for that reader."""
    meta = tmp_path / "lake" / "_spark_metadata"
    meta.mkdir(parents=True)

    def entry(name: str) -> str:
        return json.dumps({"path": (tmp_path / "lake" / "date=2026-11-26" / name).as_uri(),
                           "size": 1, "isDir": False, "modificationTime": 1,
                           "blockReplication": 1, "blockSize": 1, "action": "add"})  # fmt: skip

    os.mkfifo(meta / "0")
    for b in range(1, 9):
        (meta / str(b)).write_text(f"v1\n{entry(f'part-{b}.parquet')}")
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    assert jvm is not None and gateway is not None
    streaming = jvm.org.apache.spark.sql.execution.streaming
    none = getattr(getattr(jvm.scala, "None$"), "MODULE$")
    sink = streaming.sinks.FileStreamSinkLog(1, spark._jsparkSession, str(meta), none)
    added = gateway.new_array(streaming.sinks.SinkFileStatus, 1)
    added[0] = streaming.sinks.SinkFileStatus(
        (tmp_path / "lake" / "date=2026-11-26" / "part-9.parquet").as_uri(),
        1, False, 1, 1, 1, "add",
    )  # fmt: skip
    seen: dict[str, list[int]] = {}

    def feed() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:  # succeeds once the sink has opened batch 0 to read it
                fd = os.open(meta / "0", os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                assert exc.errno == errno.ENXIO
                time.sleep(0.01)
                continue
            seen["compacting"] = [b for b, _ in sink_compacting(tmp_path / "lake")]
            os.write(fd, f"v1\n{entry('part-0.parquet')}".encode())
            os.close(fd)
            return

    feeder = threading.Thread(target=feed)
    feeder.start()
    assert sink.add(9, added)  # batch 9: a log compaction (Spark's interval is 10)
    feeder.join()
    assert seen["compacting"] == [9]  # its file was there when it began to read
    compacted = (meta / "9.compact").read_text()
    assert all(f"part-{b}.parquet" in compacted for b in range(10))  # batch 0 read then
    assert not list(meta.glob(".9.compact.*.tmp"))


def _emit_backfill(url: str, stream: str, current: range, old: range) -> None:
    """Records of now, then a backfill of records of 40 days ago (published last)."""
    now = datetime.now(UTC)
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in [*current, *old]:
        ts = now - timedelta(days=40 if i in old else 0, seconds=len(current) - i)
        doc = {
            "ts": ts.isoformat(timespec="microseconds")[:-6] + "Z",
            "severity": ("info", "warning", "error")[i % 3],
            "facility": "user", "host": "h", "app": "a", "pid": 1, "message": f"record {i}",
        }  # fmt: skip
        props = pika.BasicProperties(content_type="application/json", message_id=str(i))
        ch.basic_publish("", stream, json.dumps(doc).encode(), props)
    conn.close()


def _records(lake: Path) -> int:
    """The records the lake's log commits (none before its first batch: the search lists
    the directory of a lake without a committed batch)."""
    return sum(_by_search(lake).values()) if _committed(lake) >= 0 else 0


def _by_search_cli(lake: Path) -> Counter[int]:
    """The records ``leveret logs search`` prints, by the number in their message."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    run = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "logs", "search", "--lake", str(lake),
         "--limit", "0", "--json"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return Counter(int(json.loads(line)["message"].split()[1]) for line in run.stdout.splitlines())


def test_retention_after_a_backfill_beside_a_quiet_ingest(
    spark: SparkSession, leveret: BrokerUnderTest, tmp_path: Path
) -> None:
    """900 records in 18 batches of 50, the last six a backfill of 40-day-old ones, then
    nothing: the ingest sits two batches short of its next log compaction (batch 19), the
    expired files in its newest batches, after its last compacted log (batch 9). The
    command drops them and compacts the files of batches 0-9 while the ingest runs; then
    the ingest goes on (its log compaction reads the rewritten log files) and every reader
    sees every kept record once."""
    stream = f"spark-backfill-{uuid.uuid4().hex[:8]}"
    declare_stream(leveret, stream)
    current, old = range(600), range(600, 900)
    _emit_backfill(leveret.url, stream, current, old)
    lake = tmp_path / "lake"
    proc = _ingest(leveret.url, tmp_path, "--stream", stream, trigger="200ms", per_trigger=50,
                   lake=lake)  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while _records(lake) < 900:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the ingest did not take the records"
            time.sleep(0.2)
        assert _committed(lake) == 17 and _latest_compact(lake) == 9
        day = (datetime.now(UTC) - timedelta(days=40)).date()
        assert (lake / f"date={day}").is_dir()
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
        run = subprocess.run(
            [sys.executable, "-m", "leveret.cli.main", "pipeline", "compact", "--lake",
             str(lake), "--retention", "30d", "--grace", "0s"],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        lines = run.stdout.splitlines()
        # a file a severity in each of batches 12-17; the files of batches 0-9, 500 records
        assert lines[0] == "Retention: dropped 3 partition(s) (18 files) older than 30 days"
        assert lines[1] == "Compacted 3 partition(s): 30 files into 3 (500 records)", lines
        assert not (lake / f"date={day}").exists()
        kept = Counter(current)
        assert _by_spark(spark, lake) == kept
        assert _by_search_cli(lake) == kept
        assert proc.poll() is None  # the ingest was left alone
        # the ingest goes on: batch 19, its log compaction, reads the rewritten log files
        _emit_backfill(leveret.url, stream, range(900, 1100), range(0))
        while _records(lake) < 800:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the ingest did not go on"
            time.sleep(0.2)
        assert _latest_compact(lake) == 19
        want = Counter([*current, *range(900, 1100)])
        assert _by_search(lake) == want
        assert _by_spark(spark, lake) == want
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    compaction.finish_removals(lake, grace=0)
    assert _by_lister(lake) == want and _by_search_cli(lake) == want
    delete_queue(leveret, stream)
