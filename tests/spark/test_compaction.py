"""Compaction and retention with the real ingest running: ``leveret pipeline ingest`` (a
process of its own, local[2]) writes the lake a small batch at a time while compactions
rewrite its partitions and the retention drops the old ones, through the sink's log. The
ingest is killed -9 and restarted once, a compaction is killed -9 once (right after its
commit). Throughout, every reader of the log (Spark, the search) sees each record at most
once and never loses one it saw; at the end Spark, the search and a directory lister
(pyarrow) see each record exactly once, the expired ones in none."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pika
import pytest
from pyspark.sql import SparkSession

from leveret.logs import compaction
from leveret.logs.lake import Janitor, SinkLog
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
        f"compaction.compact(Path({str(lake)!r}), wait=60, pause=pause)\n"
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
        # the retention waits while the ingest is near its own log compaction
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
